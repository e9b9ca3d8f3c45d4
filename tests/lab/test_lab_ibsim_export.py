"""The `ibsim` export on the real tools: ibsim 0.10 brings every link up at the twin's width x speed,
and what ibnetdiscover reads back imports as the same links at the same rates, with the same GUIDs.

Each fabric is exported with `export_ibsim`, served by `ibsim -s`, read back with `ibsim-run
ibnetdiscover` (once straight after ibsim links the ports, once after an OpenSM sweep, which could
renegotiate them) and imported with the ibnetdiscover importer. Skipped, with the reason, where ibsim
cannot run (no root, a missing package); the real dumps skip where ../shared/testdata is absent.
"""

from __future__ import annotations

import collections
import os
import pathlib
import re

import pytest

from services.topology.fabric import Fabric, LinkState
from services.topology.formats import import_fabric
from services.topology.formats.ibnetdiscover import import_ibnetdiscover
from services.topology.formats.ibnetdiscover_export import export_guids
from services.topology.formats.ibsim import export_ibsim
from services.topology.generators import leaf_spine
from services.topology.lfts_dump import parse_lfts_dump, write_lfts_dump
from services.topology.routing import engine_named
from tests.lab.ib_opensm import _ibsim, _run_bounded, run_opensm
from tests.topology.formats.shared_data import read_shared
from tests.topology.formats.test_ibsim_export import mixed_rate_fabric

pytestmark = pytest.mark.lab

DUMPS = ["ibtopotool-1", "ibtopotool-2", "ibtopotool-3", "ibtopotool-4"]
SWEEPS = ["linked", "after-opensm"]


def bring_up(net_text: str, workdir: pathlib.Path, tag: str, sweep: str) -> tuple[str, str]:
    """(ibnetdiscover's output, ibsim's log) for `net_text` served by ibsim, read as it links the
    ports (`linked`) or after one OpenSM sweep (`after-opensm`)."""
    run_dir = workdir / f"{tag}-{sweep}"
    run_dir.mkdir()
    if sweep == "after-opensm":
        run = run_opensm(net_text, "minhop", run_dir)
        (log,) = run_dir.glob("*/*.ibsim.log")
        return run.ibnetdiscover, log.read_text(errors="replace")
    netfile = run_dir / "fabric.net"
    netfile.write_text(net_text)
    env = dict(os.environ, IBSIM_SOCKNAME=f"fabrictwin-{os.getpid()}-{tag}-{sweep}")
    with _ibsim(netfile, env, timeout_s=10.0):
        topology = _run_bounded("ibnetdiscover", ["ibsim-run", "ibnetdiscover"], env, 60.0)
    return topology, netfile.with_suffix(".ibsim.log").read_text(errors="replace")


def cables(fabric: Fabric) -> dict[tuple, int]:
    """{((name, port), (name, port)): rate in bit/s} of the cabled (not DOWN) links, ends in name order."""
    out: dict[tuple, int] = {}
    names = fabric.node_names
    for i in (fabric.link_state != LinkState.DOWN).nonzero()[0].tolist():
        a = (names[fabric.link_a[i]], int(fabric.link_port_a[i]))
        b = (names[fabric.link_b[i]], int(fabric.link_port_b[i]))
        out[tuple(sorted([a, b]))] = int(fabric.link_rate_bps[i])
    return out


def ibsim_warnings(log: str) -> list[str]:
    return [line for line in log.splitlines() if line.startswith("ibwarn")]


@pytest.mark.parametrize("sweep", SWEEPS)
def test_a_mixed_rate_fabric_comes_back_from_ibsim_with_the_same_links_at_the_same_rates(workdir, sweep):
    fabric = mixed_rate_fabric()  # 4xQDR and 4xDDR, parallel cables, a few other rates, a name with `=`
    topology, log = bring_up(export_ibsim(fabric), workdir, "mixed", sweep)
    back = import_fabric("ibnetdiscover", topology)
    assert sorted(back.node_names) == sorted(fabric.node_names)
    assert cables(back) == cables(fabric)
    assert ibsim_warnings(log) == []
    rates = collections.Counter(cables(back).values())
    assert rates[40_000_000_000] > 0 and rates[20_000_000_000] > 0
    for name, guid in zip(fabric.node_names, export_guids(fabric).tolist(), strict=True):
        assert int(back.node_guid[back.node_index(name)]) == guid


@pytest.mark.parametrize("sweep", SWEEPS)
@pytest.mark.parametrize("dump", DUMPS)
def test_a_real_dump_exported_to_ibsim_comes_back_with_the_same_links_speeds_and_guids(workdir, dump, sweep):
    """ibtopotool-1 (the man page's) has two links whose ends disagree on width x speed; a link in
    ibsim runs at what both ends enable, so it is imported at the slower end, as ibsim brings it up.
    ibtopotool-3 has port-to-port loopback cables on one switch: ibsim cables and reports them too."""
    text = read_shared(f"ibnetdiscover/{dump}.topo")
    original = import_ibnetdiscover(text, rate_mismatch="slower")
    topology, log = bring_up(export_ibsim(original), workdir, dump, sweep)
    back = import_fabric("ibnetdiscover", topology)
    assert sorted(back.node_names) == sorted(original.node_names)
    assert cables(back) == cables(original)
    assert ibsim_warnings(log) == []
    for name, guid in zip(original.node_names, original.node_guid.tolist(), strict=True):
        assert int(back.node_guid[back.node_index(name)]) == guid


def test_opensms_lft_dump_of_a_generated_fabric_names_switches_and_ca_ports_as_the_twins_dump_does(workdir):
    fabric = leaf_spine(4, 2, 4, parallel_links=2)
    run_dir = workdir / "lft-guids"
    run_dir.mkdir()
    run = run_opensm(export_ibsim(fabric), "minhop", run_dir)
    ours = write_lfts_dump(fabric, engine_named("minhop").compute(fabric).lft_ports)

    def guids_by_name(dump: str) -> dict[str, int]:
        found = {t.name: t.guid for t in parse_lfts_dump(dump).switches}
        for guid, name in re.findall(r"Channel Adapter portguid 0x([0-9a-f]+): '([^']*)'", dump):
            found[name] = int(guid, 16)
        return found

    theirs = guids_by_name(run.lfts_dump)
    assert len(theirs) == fabric.num_nodes and 0 not in theirs.values()
    assert theirs == guids_by_name(ours)


def test_a_rate_beyond_ibsim_0_10_is_never_brought_up_silently(workdir):
    """ibsim 0.10 knows speeds up to HDR: an NDR link comes up at SDR with its width, and ibsim warns
    for each such port (a later ibsim that reads NDR brings it up at NDR)."""
    fabric = leaf_spine(1, 1, 1, link_speed_gbps=400.0, host_link_speed_gbps=40.0)
    text = export_ibsim(fabric)
    assert text.splitlines()[1].startswith("# 4xNDR: beyond ibsim 0.10")
    topology, log = bring_up(text, workdir, "ndr", "linked")
    back = cables(import_fabric("ibnetdiscover", topology))
    uplink = (("leaf-0", 2), ("spine-0", 1))
    assert back[(("host-0", 1), ("leaf-0", 1))] == 40_000_000_000
    if back[uplink] != 400_000_000_000:
        assert back[uplink] == 10_000_000_000  # 4xSDR
        assert sum("cannot parse speed" in line for line in ibsim_warnings(log)) == 2  # both ends
