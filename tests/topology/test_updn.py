import dataclasses
import itertools

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.common.errors import FailedPrecondition
from services.topology.fabric import LinkState, NodeKind
from services.topology.generators import fat_tree, leaf_spine
from services.topology.routing import engine_named
from services.topology.routing.graph import ChannelGraph, RowLayout
from services.topology.routing.routes import entry_signatures
from services.topology.routing.updn import rank_switches
from services.topology.superpod import superpod

from .walks import Groups, channel_target, ecmp_channel_paths


def ranking_of(fabric):
    graph = ChannelGraph.of(fabric)
    return rank_switches(fabric, graph, RowLayout.of(fabric, graph))


def turns(fabric, routes, ranking):
    """Every channel-to-channel step the routes take (the channel dependency graph), with whether
    each channel climbs."""
    dependencies, climbs, groups = set(), {}, Groups(fabric, routes)
    switches = np.flatnonzero(fabric.node_kind == NodeKind.SWITCH)
    for h in range(fabric.num_hosts):
        for start in [*fabric.host_nodes.tolist(), *switches.tolist()]:
            for path in ecmp_channel_paths(fabric, routes, start, h, groups):
                for c in path:
                    a, b = (fabric.link_a, fabric.link_b) if c % 2 == 0 else (fabric.link_b, fabric.link_a)
                    source, target = int(a[c // 2]), int(b[c // 2])
                    climbs[c] = fabric.node_kind[source] == NodeKind.HOST or bool(
                        ranking.is_up(np.array([source]), np.array([target]))[0]
                    )
                dependencies.update(itertools.pairwise(path))
    return dependencies, climbs


def assert_deadlock_free(fabric, routes):
    dependencies, climbs = turns(fabric, routes, ranking_of(fabric))
    assert not [(a, b) for a, b in dependencies if not climbs[a] and climbs[b]], "a route goes down then up"
    assert nx.is_directed_acyclic_graph(nx.DiGraph(list(dependencies))), "the channel dependencies cycle"


@pytest.mark.parametrize(
    "fabric",
    [fat_tree(4), leaf_spine(3, 2, 2, parallel_links=2), superpod(1, nodes_per_su=4, gpus_per_node=2)],
)
def test_updn_routes_every_pair_of_a_healthy_fabric_without_a_down_up_turn(fabric):
    routes = engine_named("updn").compute(fabric)
    assert routes.unreachable_pairs == 0
    assert_deadlock_free(fabric, routes)


def test_on_a_healthy_fat_tree_updn_offers_the_same_equal_cost_groups_as_minhop():
    fabric = fat_tree(6)
    updn, minhop = engine_named("updn").compute(fabric), engine_named("minhop").compute(fabric)
    rows = np.arange(updn.table.group_ids.shape[0])
    updn, _ = entry_signatures(fabric, updn, rows)
    minhop, _ = entry_signatures(fabric, minhop, rows)
    np.testing.assert_array_equal(updn, minhop)


def test_after_a_failure_minhop_turns_down_then_up_and_updn_does_not():
    fabric = fat_tree(4)
    fabric.link_state[fabric.link_index("pod0-agg0/p1<->pod0-edge0/p3")] = LinkState.DOWN
    fabric.link_state[fabric.link_index("core-1/p1<->pod0-agg0/p4")] = LinkState.DOWN
    ranking = ranking_of(fabric)
    minhop, climbs = turns(fabric, engine_named("minhop").compute(fabric), ranking)
    assert [(a, b) for a, b in minhop if not climbs[a] and climbs[b]], "minhop should take a valley here"
    assert_deadlock_free(fabric, engine_named("updn").compute(fabric))


@settings(max_examples=25, deadline=None)
@given(
    fabric=st.sampled_from([fat_tree(4), leaf_spine(4, 3, 2), leaf_spine(3, 2, 1, parallel_links=2)]),
    data=st.data(),
)
def test_updn_stays_deadlock_free_whatever_links_fail(fabric, data):
    down = data.draw(st.sets(st.integers(0, fabric.num_links - 1), max_size=3))
    states = fabric.link_state.copy()
    states[list(down)] = LinkState.DOWN
    fabric = dataclasses.replace(fabric, link_state=states)
    for engine in ("updn", "ftree"):
        assert_deadlock_free(fabric, engine_named(engine).compute(fabric))


def test_roots_are_the_top_tier_or_what_opensm_would_detect_without_tiers():
    fabric = fat_tree(4)
    cores = np.flatnonzero(fabric.node_tier == 3)
    assert sorted(ranking_of(fabric).roots.tolist()) == cores.tolist()
    fabric.node_tier[:] = 0  # tiers unknown: every core sees every host at the same distance
    assert sorted(ranking_of(fabric).roots.tolist()) == cores.tolist()
    spine_leaf = leaf_spine(4, 2, 3)
    spine_leaf.node_tier[:] = 0
    spines = [spine_leaf.node_index("spine-0"), spine_leaf.node_index("spine-1")]
    assert sorted(ranking_of(spine_leaf).roots.tolist()) == spines


def test_a_fabric_with_no_root_to_find_is_refused_rather_than_routed_some_other_way():
    fabric = leaf_spine(2, 1, 2)
    fabric.node_tier[:] = 0
    # A chain leaf-0 - spine-0 - leaf-1 with hosts on both leaves: the spine sees all hosts at one
    # distance, so it is found; cutting it off leaves no switch that does.
    fabric.link_state[fabric.node_kind[fabric.link_b] == NodeKind.SWITCH] = LinkState.DOWN
    with pytest.raises(FailedPrecondition, match="root"):
        engine_named("updn").compute(fabric)


def test_channel_target_helper_agrees_with_the_link_ends():
    fabric = fat_tree(2)
    assert channel_target(fabric, 0) == fabric.link_b[0] and channel_target(fabric, 1) == fabric.link_a[0]
