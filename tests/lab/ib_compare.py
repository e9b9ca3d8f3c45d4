"""The twin's forwarding tables against OpenSM's, entry for entry, on fabrics brought up in ibsim.

A lab fabric is a generated twin fabric written as an ibsim net file (the `ibsim` export format),
either as generated (records in cabling order, GUIDs in node order) or *shuffled*: records in a
seeded random order and GUIDs handed out in that order, as ibsim itself numbers nodes by record.
OpenSM routes it (ib_opensm.run_opensm); the twin imports the real ibnetdiscover output and routes
that with the same engine; every (switch, destination host) entry is compared, hosts by node name.
"""

from __future__ import annotations

import dataclasses
import functools
import pathlib
import time

import numpy as np

from services.topology.fabric import Fabric, NodeKind
from services.topology.formats import import_fabric
from services.topology.formats.ibsim import export_ibsim
from services.topology.generators import fat_tree, leaf_spine
from services.topology.lfts_dump import parse_lfts_dump, resolve_lfts
from services.topology.routing import engine_named
from services.topology.routing.balance import node_guid_keys
from services.topology.routing.ftree_indexing import FullFatTree
from services.topology.routing.graph import ChannelGraph
from tests.fabric_edits import without
from tests.lab.ib_opensm import OpenSMRun, dump_fts_tables, run_opensm
from tests.lab.ib_shifts import contention_free_shifts
from tests.real_like import cluster_like, quasi_fat_tree

__all__ = [
    "DUMPS",
    "KNOWN_GAPS",
    "LAB_FABRICS",
    "LIVE_CASES",
    "MULTI_PORT_CAS",
    "TESTDATA",
    "Agreement",
    "compare_engine",
    "lab_fabric",
    "lab_net_file",
    "real_dump",
    "shift_counts",
]


# name -> generated fabric; each also runs shuffled ("<name>-shuffled").
LAB_FABRICS = {
    "fat-tree-k4": lambda: fat_tree(4),
    "fat-tree-k8": lambda: fat_tree(8),
    # leaves with fewer hosts than others: OpenSM's ftree routes "dummy" destinations in their place
    "fat-tree-k8-sparse": lambda: without(fat_tree(8), {"pod0-edge0-h1", "pod2-edge1-h0", "pod5-edge3-h3"}),
    "leaf-spine-4x2": lambda: leaf_spine(4, 2, 4),
    "leaf-spine-4x2-parallel2": lambda: leaf_spine(4, 2, 4, parallel_links=2),
    # grown, not generated (tests/real_like.py): OpenSM's ftree refuses most (AB26, AB0C), its updn
    # finds its own roots or none (and falls back), and the twin must say the same
    **{f"cluster-like-{seed}": functools.partial(cluster_like, seed) for seed in (1, 2, 3, 4, 7)},
    "quasi-fat-tree": quasi_fat_tree,  # a fat-tree to OpenSM's ftree, with no closed form
}
TESTDATA = pathlib.Path(__file__).resolve().parents[3] / "shared" / "testdata"
DUMPS = sorted(TESTDATA.glob("ibnetdiscover/*.topo")) + sorted(TESTDATA.glob("ibsim/net*"))
# Dumps whose CAs have several ports on the fabric: OpenSM routes every port's LID as a destination of
# its own; the twin models a CA as one node with one LID (its lowest port's) reachable over all its
# cables, so its tables have no entry to compare for the other LIDs.
MULTI_PORT_CAS = {"ibtopotool-1.topo", "net.2sw2path4hca2port"}


def real_dump(path: pathlib.Path) -> str:
    """The dump as an ibsim net file (imported as the twin imports it, exported with its rates)."""
    fabric = import_fabric("ibnetdiscover", path.read_text(), take_slower_end_on_speed_mismatch=True)
    return export_ibsim(fabric)


LIVE_CASES = {
    "fat-tree-k8 edge-aggregation": (lambda: export_ibsim(fat_tree(8)), ("pod3-edge2", "pod3-agg1")),
    "fat-tree-k8 aggregation-core": (lambda: export_ibsim(fat_tree(8)), ("pod5-agg2", "core-9")),
    "fat-tree-k8 a host's cable": (lambda: export_ibsim(fat_tree(8)), ("pod3-edge1", "pod3-edge1-h0")),
    "cluster-like-2 one of parallel cables": (lambda: export_ibsim(cluster_like(2)), ("spine-0", "leaf-1")),
    "ibsim net.2sw2path one of two cables": (
        lambda: real_dump(TESTDATA / "ibsim" / "net.2sw2path"),
        ("Switch1", "Switch2"),
    ),
}

SHUFFLE_SEED = 13

# (fabric, engine) -> why the twin does not agree yet. The unicast manager's routing order
# (services/topology/routing/balance.py) takes switches in numeric GUID order; OpenSM's switch table
# is keyed by the GUID in network byte order (as ftree_indexing.net_order_keys): with that order
# minhop and updn measure 100% here too. Only shows where leaves differ in CA count and GUIDs
# are shuffled.
# (fabric, engine) -> why the twin cannot agree with OpenSM there; empty: it agrees everywhere.
KNOWN_GAPS: dict[tuple[str, str], str] = {}


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
    opensm_engine: str  # the engine that configured OpenSM's tables (the one asked for, or minhop)
    twin_engine: str  # the engine the twin's routes were made by
    opensm_errors: list[str]  # OpenSM's ERR lines (why it fell back)
    twin_reason: str  # why the twin fell back
    dump_fts_equal: bool  # the switches hold what opensm-lfts.dump says
    first_differences: list[str]
    seconds: dict[str, float]
    # contention-free shift permutations, of `hosts - 1`, by (tables, host order); see shift_counts
    shifts: dict[str, int] = dataclasses.field(default_factory=dict)
    opensm_log: str = dataclasses.field(default="", repr=False)

    @property
    def fraction(self) -> float:
        return self.equal / self.entries if self.entries else 1.0

    def as_dict(self) -> dict:
        return {
            "fabric": self.fabric,
            "engine": self.engine,
            "entries": self.entries,
            "equal": self.equal,
            "opensm_engine": self.opensm_engine,
            "twin_engine": self.twin_engine,
            "agreement": round(self.fraction, 4),
            "dump_fts_equal": self.dump_fts_equal,
            "first_differences": self.first_differences,
            "seconds": {k: round(v, 3) for k, v in self.seconds.items()},
            **({"contention_free_shifts": self.shifts} if self.shifts else {}),
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


def shift_counts(
    name: str, fabric: Fabric, switches: np.ndarray, ours: np.ndarray, theirs: np.ndarray
) -> dict:
    """How many shift permutations OpenSM's tables and the twin's carry without contention, with
    hosts in name order (as generated: pod by pod, edge by edge) and in ftree's routing order (OpenSM's
    tuple order, as the twin reproduces it; omitted where the fabric is no full fat-tree)."""
    generated, _ = lab_fabric(name)
    index = {fabric.node_names[n]: h for h, n in enumerate(fabric.host_nodes.tolist())}
    orders = {"name_order": np.array([index[generated.node_names[n]] for n in generated.host_nodes.tolist()])}
    full = FullFatTree.of(fabric, ChannelGraph.of(fabric))
    if full is not None:
        orders["ftree_order"] = full.routing_order
    out = {"of": int(fabric.num_hosts - 1)}
    for label, order in orders.items():
        for tables, ports in (("opensm", theirs), ("twin", ours)):
            out[f"{tables}_{label}"] = len(contention_free_shifts(fabric, switches, ports, order))
    return out


def compare_engine(
    name: str, engine: str, workdir: pathlib.Path, run: OpenSMRun | None = None, *, shifts: bool = False
) -> Agreement:
    """Run OpenSM's `engine` on lab fabric `name` (or reuse `run`) and compare the twin's tables;
    with `shifts`, also count contention-free shift permutations under both (`shift_counts`).

    `engine` "file" compares the twin's file engine fed OpenSM's own dump of a minhop run.
    """
    osm_engine = "minhop" if engine == "file" else engine
    if run is None:
        run = run_opensm(lab_net_file(name), osm_engine, workdir, fallback_ok=True)
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
    counted = shift_counts(name, fabric, switches, ours, theirs) if shifts else {}
    return Agreement(
        fabric=name,
        engine=engine,
        entries=int(written.sum()),
        equal=int(same.sum()),
        opensm_engine=run.engine_used or run.engine,
        twin_engine=routes.engine_used,
        opensm_errors=list(run.errors),
        twin_reason=routes.fallback_reason,
        opensm_log=run.opensm_log,
        dump_fts_equal=_dump_fts_matches(fabric, switches, theirs, run),
        first_differences=differences,
        seconds=seconds,
        shifts=counted,
    )


@dataclasses.dataclass
class SweepAgreement:
    """The twin's tables against a running OpenSM's after one step (or its first routing)."""

    step: str
    opensm_engine: str  # the engine that configured OpenSM's tables in this sweep
    twin_engine: str  # the engine the twin's routes were made by (its fallback included)
    entries: int  # (switch, host) entries compared, routed or not
    equal: int
    opensm_changed: int  # entries whose port differs from the sweep before (0 for the first)
    twin_changed: int
    first_differences: list[str]

    @property
    def fraction(self) -> float:
        return self.equal / self.entries if self.entries else 1.0

    def as_dict(self) -> dict:
        return {**dataclasses.asdict(self), "agreement": round(self.fraction, 4)}


def _step_link(fabric: Fabric, records: dict, step: object) -> int:
    """The twin's link index of the cable an Unlink / ReLink step names (by the end's GUID and port)."""
    by_id = {record.node_id: record for record in records.values()}
    record = by_id[step.node_id]  # type: ignore[attr-defined]
    node = int(np.flatnonzero(node_guid_keys(fabric) == np.uint64(record.guid))[0])
    port = step.port  # type: ignore[attr-defined]
    hit = np.flatnonzero(
        ((fabric.link_a == node) & (fabric.link_port_a == port))
        | ((fabric.link_b == node) & (fabric.link_port_b == port))
    )
    return int(hit[0])


def compare_live(
    net_text: str,
    engine: str,
    workdir: pathlib.Path,
    steps: list,
    *,
    roots: list[int] | None = None,
) -> list[SweepAgreement]:
    """A running OpenSM (`engine`) through `steps` (ib_live) against the twin: the first routing
    against `compute`, every later sweep against the twin's incremental reroute (routing/sweep.py) of
    the same link state change, entry for entry over every (switch, host), routed or not."""
    from services.topology.fabric import LinkState
    from services.topology.routing.sweep import sweep
    from tests.lab.ib_live import ReLink, Unlink, net_records, run_live_opensm

    run = run_live_opensm(net_text, engine, workdir, steps, roots=roots)
    fabric = import_fabric("ibnetdiscover", run.sweeps[0].ibnetdiscover)
    records = net_records(net_text)
    router = engine_named(engine, roots=roots or ())
    routes = router.compute(fabric)
    out: list[SweepAgreement] = []
    previous_theirs = previous_ours = None
    for live in run.sweeps:
        if isinstance(live.step, Unlink | ReLink):
            states = fabric.link_state.copy()
            states[_step_link(fabric, records, live.step)] = (
                LinkState.DOWN if isinstance(live.step, Unlink) else LinkState.UP
            )
            fabric = dataclasses.replace(fabric, link_state=states)
            routes = sweep(router, fabric, routes)
        elif live.step is not None:  # a sweep with nothing changed
            routes = sweep(router, fabric, routes)
        switches, theirs = resolve_lfts(fabric, parse_lfts_dump(live.lfts_dump))
        ours = np.stack([routes.lft_ports(node) for node in switches.tolist()])
        differences = [
            f"{fabric.node_names[switches[row]]} -> {fabric.node_names[fabric.host_nodes[h]]}: "
            f"twin port {ours[row, h]}, OpenSM port {theirs[row, h]}"
            for row, h in zip(*np.nonzero(ours != theirs), strict=True)
        ][:5]
        out.append(
            SweepAgreement(
                step="first routing" if live.step is None else str(live.step),
                opensm_engine=live.engine,
                twin_engine=routes.engine_used,
                entries=int(theirs.size),
                equal=int((ours == theirs).sum()),
                opensm_changed=0 if previous_theirs is None else int((theirs != previous_theirs).sum()),
                twin_changed=0 if previous_ours is None else int((ours != previous_ours).sum()),
                first_differences=differences,
            )
        )
        previous_theirs, previous_ours = theirs, ours
    return out
