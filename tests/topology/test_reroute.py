import dataclasses
import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from services.topology.fabric import LinkState, NodeKind
from services.topology.generators import fat_tree, leaf_spine
from services.topology.routing import diff_routes, engine_named
from services.topology.routing.routes import entry_signatures

from .walks import Groups, ecmp_channel_paths, host_pairs_connected, lft_path, physical_graph

FABRICS = {
    "fat-tree k=4": fat_tree(4),
    "fat-tree k=6": fat_tree(6),
    "leaf-spine 4x3x3": leaf_spine(4, 3, 3),
    "leaf-spine 3x2x2, 2 cables": leaf_spine(3, 2, 2, parallel_links=2),
}


def with_link(fabric, link, state, ber=0.0):
    states, bers = fabric.link_state.copy(), fabric.link_ber.copy()
    states[link], bers[link] = state, ber
    return dataclasses.replace(fabric, link_state=states, link_ber=bers)


def assert_same_routes(fabric, got, want):
    """Every (node, host) entry has the same LFT channel and equal-cost set; the counts agree."""
    rows = np.arange(got.table.group_ids.shape[0])
    got_sets, got_lft = entry_signatures(fabric, got, rows)
    want_sets, want_lft = entry_signatures(fabric, want, rows)
    np.testing.assert_array_equal(got_lft, want_lft, err_msg="LFT choices differ")
    np.testing.assert_array_equal(got_sets, want_sets, err_msg="equal-cost groups differ")
    got_groups, want_groups = Groups(fabric, got), Groups(fabric, want)
    for node in range(fabric.num_nodes):
        for host in range(fabric.num_hosts):
            a, b = got_groups(node, host), want_groups(node, host)
            assert a[:1] == b[:1] and sorted(a) == sorted(b), (fabric.node_names[node], host)
    assert got.unreachable_pairs == want.unreachable_pairs


changes = st.tuples(
    st.integers(0, 10_000), st.sampled_from([LinkState.DOWN, LinkState.UP, LinkState.DEGRADED])
)


@settings(max_examples=120, deadline=None)
@given(
    name=st.sampled_from(sorted(FABRICS)),
    engine=st.sampled_from(["minhop", "updn", "ftree"]),
    steps=st.lists(changes, min_size=1, max_size=4),
)
def test_an_incremental_reroute_equals_a_full_recomputation(name, engine, steps):
    fabric = FABRICS[name]
    router = engine_named(engine)
    routes = router.compute(fabric)
    for pick, state in steps:
        link = pick % fabric.num_links
        changed = with_link(fabric, link, state, 1e-6 if state == LinkState.DEGRADED else 0.0)
        rerouted = router.reroute(changed, routes)
        assert_same_routes(changed, rerouted, router.compute(changed))
        entries, _ = diff_routes(fabric, routes, changed, rerouted, rerouted.changed_rows)
        full_entries, _ = diff_routes(fabric, routes, changed, rerouted)
        assert entries == full_entries, "rows left out of the recomputation changed"
        fabric, routes = changed, rerouted


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(sorted(set(FABRICS) - {"fat-tree k=6"})),
    engine=st.sampled_from(["minhop", "updn", "ftree"]),
    pick=st.integers(0, 10_000),
)
def test_after_any_single_link_failure_every_connected_pair_has_a_loop_free_route(name, engine, pick):
    healthy = FABRICS[name]
    router = engine_named(engine)
    link = pick % healthy.num_links
    fabric = with_link(healthy, link, LinkState.DOWN)
    routes = router.reroute(fabric, router.compute(healthy))
    graph, groups = physical_graph(fabric), Groups(fabric, routes)
    unconnected = 0
    for source, destination in itertools.permutations(range(fabric.num_hosts), 2):
        src, dst = int(fabric.host_nodes[source]), int(fabric.host_nodes[destination])
        if not host_pairs_connected(fabric, src, dst, graph):
            unconnected += 1
            assert groups(src, destination) == []
            continue
        channels = lft_path(fabric, routes, source, destination, groups)  # ends at the host, no loop
        assert all(fabric.link_state[c // 2] != LinkState.DOWN for c in channels)
        paths = ecmp_channel_paths(fabric, routes, src, destination, groups)
        assert paths and all(len(set(p)) == len(p) for p in paths)
    assert routes.unreachable_pairs == unconnected


def test_a_link_that_fails_and_recovers_gives_back_the_original_tables():
    fabric = fat_tree(8)
    router = engine_named("minhop")
    healthy = router.compute(fabric)
    link = fabric.link_index("pod2-agg1/p3<->pod2-edge2/p6")
    broken = with_link(fabric, link, LinkState.DOWN)
    down = router.reroute(broken, healthy)
    up = router.reroute(fabric, down)
    assert down.incremental and up.incremental
    assert diff_routes(fabric, healthy, fabric, up) == (0, 0)
    assert_same_routes(fabric, up, healthy)


def test_a_failure_recomputes_only_the_rows_whose_routes_used_the_link():
    fabric = fat_tree(8)
    router = engine_named("minhop")
    healthy = router.compute(fabric)
    link = fabric.link_index("core-5/p3<->pod2-agg1/p6")
    rerouted = router.reroute(with_link(fabric, link, LinkState.DOWN), healthy)
    switches = int((fabric.node_kind == NodeKind.SWITCH).sum())
    # The two ends of the link, and the aggregations of the other pods that reached pod 2 through
    # that core; edges, the other cores and the other aggregations keep their tables.
    nodes = np.flatnonzero(np.isin(rerouted.table.node_row, rerouted.changed_rows))
    changed = sorted(fabric.node_names[n] for n in nodes)
    assert len(changed) < switches
    assert changed == sorted(["core-5", *(f"pod{p}-agg1" for p in range(8))])
    assert rerouted.incremental


def test_a_degraded_link_keeps_carrying_routes():
    fabric = fat_tree(4)
    router = engine_named("updn")
    healthy = router.compute(fabric)
    degraded = with_link(fabric, 20, LinkState.DEGRADED, 1e-5)
    rerouted = router.reroute(degraded, healthy)
    assert rerouted.changed_rows.size == 0
    assert diff_routes(fabric, healthy, degraded, rerouted) == (0, 0)
