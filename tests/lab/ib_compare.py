"""The twin's forwarding tables against OpenSM's, entry for entry, on fabrics brought up in ibsim.

A lab fabric is a generated twin fabric written as an ibsim net file (the `ibsim` export format),
either as generated (records in cabling order, GUIDs in node order) or *shuffled*: records in a
seeded random order and GUIDs handed out in that order, as ibsim itself numbers nodes by record.
OpenSM routes it (ib_opensm.run_opensm); the twin imports the real ibnetdiscover output and routes
that with the same engine; every (switch, destination host) entry is compared, hosts by node name.
"""

from __future__ import annotations

import dataclasses
import pathlib
import time

import numpy as np

from services.topology.fabric import Fabric, NodeKind
from services.topology.formats import import_fabric
from services.topology.formats.ibsim import export_ibsim
from services.topology.generators import fat_tree, leaf_spine
from services.topology.lfts_dump import parse_lfts_dump, resolve_lfts
from services.topology.routing import engine_named
from tests.lab.ib_opensm import OpenSMRun, dump_fts_tables, run_opensm

__all__ = ["LAB_FABRICS", "Agreement", "compare_engine", "lab_fabric", "lab_net_file"]

# name -> generated fabric; each also runs shuffled ("<name>-shuffled").
LAB_FABRICS = {
    "fat-tree-k4": lambda: fat_tree(4),
    "fat-tree-k8": lambda: fat_tree(8),
    "leaf-spine-4x2": lambda: leaf_spine(4, 2, 4),
    "leaf-spine-4x2-parallel2": lambda: leaf_spine(4, 2, 4, parallel_links=2),
}
SHUFFLE_SEED = 13


def lab_fabric(name: str) -> tuple[Fabric, np.ndarray]:
    """(fabric, record order) for a lab fabric name, `<base>` or `<base>-shuffled`."""
    base = name.removesuffix("-shuffled")
    fabric = LAB_FABRICS[base]()
    order = np.arange(fabric.num_nodes)
    if name.endswith("-shuffled"):
        order = np.random.default_rng(SHUFFLE_SEED).permutation(fabric.num_nodes)
        guid = np.empty(fabric.num_nodes, dtype=np.uint64)
        guid[order] = np.uint64(0x0002_C903_0000_0000) + (np.arange(fabric.num_nodes, dtype=np.uint64) << 4)
        fabric.node_guid[:] = guid
    return fabric, order


def lab_net_file(name: str) -> str:
    fabric, order = lab_fabric(name)
    return export_ibsim(fabric, order=order)


@dataclasses.dataclass
class Agreement:
    """How the twin's tables compare with OpenSM's for one fabric and engine."""

    fabric: str
    engine: str
    entries: int  # (switch, host) entries OpenSM wrote
    equal: int
    dump_fts_equal: bool  # the switches hold what opensm-lfts.dump says
    first_differences: list[str]
    seconds: dict[str, float]

    @property
    def fraction(self) -> float:
        return self.equal / self.entries if self.entries else 1.0

    def as_dict(self) -> dict:
        return {
            "fabric": self.fabric,
            "engine": self.engine,
            "entries": self.entries,
            "equal": self.equal,
            "agreement": round(self.fraction, 4),
            "dump_fts_equal": self.dump_fts_equal,
            "first_differences": self.first_differences,
            "seconds": {k: round(v, 3) for k, v in self.seconds.items()},
        }


def opensm_tables(fabric: Fabric, run: OpenSMRun) -> tuple[np.ndarray, np.ndarray]:
    """(switch nodes [K], ports [K, H]) of OpenSM's dump over the imported fabric."""
    return resolve_lfts(fabric, parse_lfts_dump(run.lfts_dump))


def _dump_fts_matches(fabric: Fabric, switches: np.ndarray, ports: np.ndarray, run: OpenSMRun) -> bool:
    held = dump_fts_tables(run.dump_fts)
    lids = fabric.node_lid[fabric.host_nodes].tolist()
    for row, node in enumerate(switches.tolist()):
        table = held.get(int(fabric.node_guid[node]))
        if table is None:
            return False
        if [table.get(lid, 0) for lid in lids] != ports[row].tolist():
            return False
    return True


def compare_engine(name: str, engine: str, workdir: pathlib.Path, run: OpenSMRun | None = None) -> Agreement:
    """Run OpenSM's `engine` on lab fabric `name` (or reuse `run`) and compare the twin's tables.

    `engine` "file" compares the twin's file engine fed OpenSM's own dump of a minhop run.
    """
    osm_engine = "minhop" if engine == "file" else engine
    if run is None:
        run = run_opensm(lab_net_file(name), osm_engine, workdir)
    seconds = dict(run.seconds)
    t = time.monotonic()
    fabric = import_fabric("ibnetdiscover", run.ibnetdiscover)
    switches, theirs = opensm_tables(fabric, run)
    twin = engine_named(engine, lfts_dump=run.lfts_dump if engine == "file" else None)
    routes = twin.compute(fabric)
    ours = np.stack([routes.lft_ports(node) for node in switches.tolist()]) if switches.size else theirs
    seconds["twin_s"] = time.monotonic() - t
    written = theirs > 0
    same = (ours == theirs) & written
    differences = []
    for row, h in zip(*np.nonzero(written & ~same), strict=True):
        if len(differences) == 5:
            break
        differences.append(
            f"{fabric.node_names[switches[row]]} -> {fabric.node_names[fabric.host_nodes[h]]}: "
            f"twin port {ours[row, h]}, OpenSM port {theirs[row, h]}"
        )
    assert (fabric.node_kind[switches] == NodeKind.SWITCH).all()
    return Agreement(
        fabric=name,
        engine=engine,
        entries=int(written.sum()),
        equal=int(same.sum()),
        dump_fts_equal=_dump_fts_matches(fabric, switches, theirs, run),
        first_differences=differences,
        seconds=seconds,
    )
