"""A running OpenSM 3.3.23 on ibsim rerouting after a cable goes down: the lab's oracle for reroutes.

OpenSM routes a generated fat-tree and keeps running; ibsim's console takes an edge-aggregation
cable down (trap 128); OpenSM sweeps and writes its tables again, keeping the entries still valid.
Skipped, with the reason, where ibsim cannot run (no root, a missing package).
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable

import pytest

from services.topology.formats import import_fabric
from services.topology.formats.ibsim import export_ibsim
from services.topology.generators import fat_tree
from services.topology.lfts_dump import parse_lfts_dump
from tests.lab.ib_live import (
    EntryChanges,
    IbLabError,
    LiveRun,
    LiveSweep,
    ReLink,
    Resweep,
    Unlink,
    cable,
    host_entries,
    lab_processes,
    net_records,
    net_without_cable,
    run_live_opensm,
)
from tests.lab.ib_opensm import dump_fts_tables, run_opensm

pytestmark = pytest.mark.lab

K8 = export_ibsim(fat_tree(8))
K4 = export_ibsim(fat_tree(4))
LINK = ("pod0-edge0", "pod0-agg0")  # the SM's host hangs off pod0-edge0 (the first CA record)


def unlinked(workdir: pathlib.Path, engine: str) -> LiveRun:
    edge, port, _, _ = cable(K8, *LINK)
    return run_live_opensm(K8, engine, workdir, [Unlink(edge.node_id, port)])


def assert_held_and_not_using(sweep: LiveSweep, ends: list[tuple[int, int]]) -> None:
    """The switches hold what the sweep's dump says, and no entry of an end uses its cable's port."""
    held = dump_fts_tables(sweep.dump_fts)
    for block in parse_lfts_dump(sweep.lfts_dump).switches:
        table = held[block.guid]
        assert {lid: table.get(lid) for lid in block.lids} == dict(zip(block.lids, block.ports, strict=True))
    for guid, port in ends:
        block = next(b for b in parse_lfts_dump(sweep.lfts_dump).switches if b.guid == guid)
        assert port not in block.ports
        assert port not in held[guid].values()


def reroute(run: LiveRun) -> EntryChanges:
    first, after = run.sweeps
    return EntryChanges.between(
        host_entries(first.ibnetdiscover, first.lfts_dump), host_entries(after.ibnetdiscover, after.lfts_dump)
    )


def still_shortest(ibnetdiscover: str) -> Callable[[tuple[str, str], int], bool]:
    """Whether an entry (switch, host) -> port is on a shortest path to the host in this fabric."""
    fabric = import_fabric("ibnetdiscover", ibnetdiscover)
    names = fabric.node_names
    peer: dict[tuple[str, int], str] = {}  # (node, port) -> the node at the cable's other end
    ends = (fabric.link_a, fabric.link_port_a, fabric.link_b, fabric.link_port_b)
    for a, pa, b, pb in zip(*(x.tolist() for x in ends), strict=True):
        peer[names[a], pa], peer[names[b], pb] = names[b], names[a]
    neighbours: dict[str, list[str]] = {}
    for (node, _), other in peer.items():
        neighbours.setdefault(node, []).append(other)
    hops: dict[str, dict[str, int]] = {}  # host -> node -> hops to it (breadth first)
    for host in (names[n] for n in fabric.host_nodes.tolist()):
        seen, frontier = {host: 0}, [host]
        while frontier:
            reached = []
            for n in frontier:
                for m in neighbours[n]:
                    if m not in seen:
                        seen[m] = seen[n] + 1
                        reached.append(m)
            frontier = reached
        hops[host] = seen

    def check(entry: tuple[str, str], port: int) -> bool:
        switch, host = entry
        nxt = peer.get((switch, port))
        return nxt is not None and hops[host].get(nxt, -1) == hops[host][switch] - 1

    return check


def assert_kept_exactly_the_valid_entries(run: LiveRun) -> None:
    """minhop keeps an entry whose port is still on a shortest path and moves every other one."""
    first, after = run.sweeps
    before = host_entries(first.ibnetdiscover, first.lfts_dump)
    now = host_entries(after.ibnetdiscover, after.lfts_dump)
    valid = still_shortest(after.ibnetdiscover)
    moved = {key for key, port in before.items() if now.get(key) != port}
    assert moved == {key for key, port in before.items() if not valid(key, port)}
    assert all(valid(key, port) for key, port in now.items())


@pytest.mark.parametrize("engine", ["minhop", "updn"])
def test_after_an_unlink_the_running_opensm_keeps_the_entries_still_valid(workdir, engine):
    run = unlinked(workdir, engine)
    edge, port, agg, agg_port = cable(K8, *LINK)
    first, after = run.sweeps
    assert (first.engine, after.engine) == (engine, engine)
    assert first.errors == after.errors == []
    assert 128 in after.traps and first.traps == []
    before = import_fabric("ibnetdiscover", first.ibnetdiscover)
    assert import_fabric("ibnetdiscover", after.ibnetdiscover).num_links == before.num_links - 1
    assert_held_and_not_using(after, [(edge.guid, port), (agg.guid, agg_port)])

    # A fresh routing of the fabric without the cable (opensm -o) moves far more entries.
    fresh = run_opensm(net_without_cable(K8, edge.node_id, port), engine, workdir)
    live = reroute(run)
    afresh = EntryChanges.between(
        host_entries(first.ibnetdiscover, first.lfts_dump), host_entries(fresh.ibnetdiscover, fresh.lfts_dump)
    )
    print(f"\n{engine} k=8 {LINK}: running OpenSM {live}, fresh routing {afresh}")
    assert 0 < live.changed < afresh.changed
    assert live.dropped == afresh.dropped  # the same destinations became unreachable (updn: up/down)
    if engine == "minhop":  # updn's shortest paths are up/down ones
        assert_kept_exactly_the_valid_entries(run)


def test_ftree_falls_back_to_minhop_after_an_unlink_keeping_ftrees_valid_entries(workdir):
    run = unlinked(workdir, "ftree")
    edge, port, agg, agg_port = cable(K8, *LINK)
    first, after = run.sweeps
    assert first.engine == "ftree" and first.errors == []
    assert after.configured == ["minhop"]
    assert any("ERR AB0D" in line and "hasn't been identified as FatTree" in line for line in after.errors)
    assert_held_and_not_using(after, [(edge.guid, port), (agg.guid, agg_port)])
    live = reroute(run)
    print(f"\nftree k=8 {LINK}: running OpenSM (minhop fallback) {live}")
    assert live.changed > 0 and live.dropped == 0
    assert_kept_exactly_the_valid_entries(run)


def test_relink_routes_afresh_and_a_resweep_without_a_change_moves_nothing(workdir):
    """ReLink brings ports up in INIT: OpenSM ignores the existing LFTs and routes the fabric as it
    did first; a heavy sweep on SIGHUP with nothing changed keeps every entry."""
    edge, port, _, _ = cable(K4, "pod1-edge1", "pod1-agg1")
    run = run_live_opensm(
        K4, "minhop", workdir, [Unlink(edge.node_id, port), ReLink(edge.node_id, port), Resweep()]
    )
    assert [s.engine for s in run.sweeps] == ["minhop"] * 4
    tables = [host_entries(s.ibnetdiscover, s.lfts_dump) for s in run.sweeps]
    assert EntryChanges.between(tables[0], tables[1]).changed > 0
    assert tables[2] == tables[0]
    assert tables[3] == tables[2]
    assert run.sweeps[3].traps == [] and run.sweeps[2].traps
    assert run.sweeps[3].lfts_dump == run.sweeps[2].lfts_dump


def test_roots_reach_opensm_as_its_root_guid_file(workdir):
    """updn rooted at the cores routes as updn's own choice of roots; rooted at core-0 alone, not
    (pod-to-pod paths through the other cores would go down and up again)."""
    records = net_records(K4)
    cores = [r.guid for name, r in records.items() if name.startswith("core-")]
    own = run_opensm(K4, "updn", workdir)
    at_cores = run_opensm(K4, "updn", workdir, roots=cores)
    at_core0 = run_live_opensm(K4, "updn", workdir, [], roots=[records["core-0"].guid])
    assert (at_core0.run_dir / "root-guids.txt").read_text() == f"0x{records['core-0'].guid:016x}\n"
    assert "Root Guid File:" in (at_core0.run_dir / "opensm.out").read_text()
    assert [s.errors for s in at_core0.sweeps] == [[]]
    own_tables = host_entries(own.ibnetdiscover, own.lfts_dump)
    assert host_entries(at_cores.ibnetdiscover, at_cores.lfts_dump) == own_tables
    first = at_core0.sweeps[0]
    assert EntryChanges.between(own_tables, host_entries(first.ibnetdiscover, first.lfts_dump)).changed > 0


def test_a_step_ibsim_refuses_is_an_error_naming_it_and_nothing_is_left_running(workdir):
    with pytest.raises(IbLabError, match=r'step 1 \(Unlink "S-nowhere"\[1\]\): ibsim refused .*not found'):
        run_live_opensm(K4, "minhop", workdir, [Unlink("S-nowhere", 1)], timeout_s=30)
    assert lab_processes() == []


def test_no_sweep_in_time_is_an_error_quoting_ibsim_and_nothing_is_left_running(workdir):
    """A trap travels to the SM along the switches' tables: with the SM's own cable down, the edge
    switch's trap has no route (the CA end sends none), OpenSM never hears of it and does not sweep."""
    sm_host = net_records(K4)["pod0-edge0-h0"]  # the first CA record: where ibsim-run attaches OpenSM
    with pytest.raises(IbLabError, match=r"step 1 .*did not sweep within 5 s.*send_trap: routing failed"):
        run_live_opensm(K4, "minhop", workdir, [Unlink(sm_host.node_id, 1)], timeout_s=5)
    assert lab_processes() == []
