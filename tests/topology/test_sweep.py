"""A running subnet manager's sweep (routing/sweep.py): after a failure, every LFT entry still valid stays.

The figures are real OpenSM 3.3.23's, measured on ibsim with a running OpenSM and ibsim's `Unlink`
(tests/lab/test_lab_opensm.py compares every entry): on the generated k=8 fat-tree with the
pod0-edge0 - pod0-agg0 cable down, minhop changes 66 host entries where a fresh routing changes 281.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.topology.fabric import LinkState, NodeKind
from services.topology.generators import fat_tree, leaf_spine
from services.topology.routing import engine_named
from services.topology.routing.sweep import reroute, sweep
from tests.real_like import cluster_like


def switch_lfts(fabric, routes):
    switches = np.flatnonzero(fabric.node_kind == NodeKind.SWITCH)
    return routes.table.lft_ports[routes.table.node_row[switches]].astype(np.int64)


def with_states(fabric, changes):
    """`fabric` with links (by index or name) in the given states."""
    states = fabric.link_state.copy()
    for link, state in changes.items():
        index = fabric.link_index(link) if isinstance(link, str) else link
        assert index is not None, link
        states[index] = state
    return dataclasses.replace(fabric, link_state=states)


def group_ports(fabric, routes):
    """{(switch, host): set of ports of its equal-cost group} over switches."""
    out = {}
    port = fabric.channel_port()
    for node in np.flatnonzero(fabric.node_kind == NodeKind.SWITCH).tolist():
        for h in range(fabric.num_hosts):
            out[node, h] = {int(port[c]) for c in routes.group(fabric, node, h)}
    return out


def test_one_edge_aggregation_cable_down_on_k8_moves_66_entries_as_opensm_not_281():
    fabric = fat_tree(8)
    engine = engine_named("minhop")
    before = engine.compute(fabric)
    down = with_states(fabric, {"pod0-agg0/p1<->pod0-edge0/p5": LinkState.DOWN})
    swept, fresh = sweep(engine, down, before), engine.reroute(down, before)
    old = switch_lfts(fabric, before)
    assert int((switch_lfts(down, swept) != old).sum()) == 66
    assert int((switch_lfts(down, fresh) != old).sum()) == 281
    assert swept.kept_entries and swept.incremental
    assert reroute(engine, down, before, "fresh").table.lft_ports.tolist() == fresh.table.lft_ports.tolist()


@settings(max_examples=20, deadline=None)
@given(
    name=st.sampled_from(["k4", "leaf-spine", "cluster-like"]),
    engine=st.sampled_from(["minhop", "updn"]),
    data=st.data(),
)
def test_a_sweep_keeps_exactly_the_entries_whose_port_is_still_in_their_group(name, engine, data):
    fabric = {"k4": lambda: fat_tree(4), "leaf-spine": lambda: leaf_spine(4, 3, 2, parallel_links=2),
              "cluster-like": lambda: cluster_like(3)}[name]()  # fmt: skip
    router = engine_named(engine)
    before = router.compute(fabric)
    cut = data.draw(st.sets(st.integers(0, fabric.num_links - 1), min_size=1, max_size=3))
    down = with_states(fabric, dict.fromkeys(cut, LinkState.DOWN))
    swept = sweep(router, down, before)
    if swept.engine_used != engine:  # OpenSM itself would fall back (updn lost its roots)
        return
    old, new = switch_lfts(fabric, before), switch_lfts(down, swept)
    groups = group_ports(down, swept)
    switches = np.flatnonzero(fabric.node_kind == NodeKind.SWITCH).tolist()
    for row, node in enumerate(switches):
        for h in range(fabric.num_hosts):
            valid = old[row, h] in groups[node, h]
            if valid:
                assert new[row, h] == old[row, h], (fabric.node_names[node], h)
            elif groups[node, h]:
                assert new[row, h] in groups[node, h]


def test_a_sweep_balances_the_entries_it_moves_counting_the_ones_it_keeps():
    """Each moved entry takes the least-used port of its group at that point of the routing order:
    the busiest port of a moved entry's group never carries two more routes than the port it got."""
    fabric = fat_tree(8)
    engine = engine_named("minhop")
    before = engine.compute(fabric)
    down = with_states(fabric, {"core-0/p1<->pod0-agg0/p5": LinkState.DOWN})
    swept = sweep(engine, down, before)
    new = switch_lfts(down, swept)
    moved = np.argwhere(new != switch_lfts(fabric, before))
    assert moved.size
    switches = np.flatnonzero(fabric.node_kind == NodeKind.SWITCH)
    for row, h in moved.tolist():
        node = int(switches[row])
        ports = {int(down.channel_port()[c]) for c in swept.group(down, node, h)}
        load = {p: int((new[row] == p).sum()) for p in ports}
        assert load[int(new[row, h])] <= min(load.values()) + 1


def test_a_host_cut_off_loses_its_entries_everywhere_and_nothing_else_moves():
    """OpenSM drops the LID of a CA it no longer reaches: every switch's entry toward it goes to no
    port, and every other entry stays (each is still valid)."""
    fabric = fat_tree(8)
    engine = engine_named("minhop")
    before = engine.compute(fabric)
    down = with_states(fabric, {"pod7-edge2/p3<->pod7-edge2-h2/p1": LinkState.DOWN})
    swept = sweep(engine, down, before)
    host = int(fabric.node_host[fabric.node_index("pod7-edge2-h2")])
    old, new = switch_lfts(fabric, before), switch_lfts(down, swept)
    assert (new[:, host] == 0).all() and (old[:, host] > 0).all()
    others = np.arange(fabric.num_hosts) != host
    np.testing.assert_array_equal(new[:, others], old[:, others])


def test_a_cable_that_comes_back_up_is_routed_afresh_as_opensm_does_for_ports_in_init():
    fabric = fat_tree(4)
    engine = engine_named("minhop")
    before = engine.compute(fabric)
    down = with_states(fabric, {"pod0-agg0/p1<->pod0-edge0/p3": LinkState.DOWN})
    swept = sweep(engine, down, before)
    back = sweep(engine, fabric, swept)
    assert swept.kept_entries and not back.kept_entries
    np.testing.assert_array_equal(back.table.lft_ports, before.table.lft_ports)


def test_ftree_rewrites_its_tables_and_its_minhop_fallback_keeps_what_it_can_of_them():
    fabric = fat_tree(4)
    engine = engine_named("ftree")
    before = engine.compute(fabric)
    still = sweep(engine, with_states(fabric, {"pod1-edge0/p1<->pod1-edge0-h0/p1": LinkState.DOWN}), before)
    assert still.engine_used == "ftree" and not still.kept_entries  # a host fewer: still a fat-tree
    broken = with_states(fabric, {"pod0-agg0/p1<->pod0-edge0/p3": LinkState.DOWN})
    swept = sweep(engine, broken, before)
    assert swept.engine_used == "minhop" and "AB0D" in swept.fallback_reason
    fresh_minhop = engine_named("minhop").compute(broken)
    old = switch_lfts(fabric, before)
    assert (switch_lfts(broken, swept) != old).sum() < (switch_lfts(broken, fresh_minhop) != old).sum()


def test_sweeps_in_a_row_then_a_fresh_reroute_equal_a_fresh_routing():
    fabric = fat_tree(4)
    engine = engine_named("updn")
    routes = engine.compute(fabric)
    states = {}
    for name in ("pod0-agg0/p1<->pod0-edge0/p3", "core-1/p2<->pod1-agg0/p4"):
        states[name] = LinkState.DOWN
        fabric_now = with_states(fabric, states)
        routes = sweep(engine, fabric_now, routes)
    fresh = reroute(engine, fabric_now, routes, "fresh")
    np.testing.assert_array_equal(fresh.table.lft_ports, engine.compute(fabric_now).table.lft_ports)
    assert not fresh.kept_entries


@pytest.mark.parametrize("mode", ["incremental", "fresh"])
def test_nothing_changed_changes_nothing(mode):
    fabric = leaf_spine(3, 2, 2)
    engine = engine_named("minhop")
    routes = engine.compute(fabric)
    again = reroute(engine, fabric, routes, mode)
    np.testing.assert_array_equal(again.table.lft_ports, routes.table.lft_ports)
