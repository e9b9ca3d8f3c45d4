import dataclasses
import itertools

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.common.errors import InvalidArgument
from services.topology.fabric import LinkState, NodeKind
from services.topology.generators import fat_tree, leaf_spine
from services.topology.routing import engine_named
from services.topology.routing.balance import node_guid_keys
from services.topology.routing.graph import ChannelGraph, RowLayout
from services.topology.routing.routes import entry_signatures
from services.topology.routing.updn import check_roots_reach, rank_switches, ranking_from, root_nodes
from services.topology.superpod import superpod
from tests.fabric_edits import edited

from .walks import Groups, channel_target, ecmp_channel_paths


def ranking_of(fabric, routes=None):
    """The updn ranking of `fabric`: OpenSM's detected roots, or the roots `routes` were made with."""
    graph = ChannelGraph.of(fabric)
    layout = RowLayout.of(fabric, graph)
    if routes is None:
        return rank_switches(fabric, graph, layout)
    return ranking_from(fabric, graph, layout, routes.roots, routes.roots_source)


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
    assert routes.engine_used == routes.engine, routes.fallback_reason
    dependencies, climbs = turns(fabric, routes, ranking_of(fabric, routes))
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
        routes = engine_named(engine).compute(fabric)
        if routes.engine_used == "minhop":  # OpenSM refuses it (no root, no fat-tree) and falls back
            assert routes.fallback_reason
            continue
        assert_deadlock_free(fabric, routes)


def test_roots_are_what_opensm_detects_whatever_tiers_an_importer_inferred():
    fabric = fat_tree(4)
    cores = np.flatnonzero(fabric.node_tier == 3)
    assert sorted(ranking_of(fabric).roots.tolist()) == cores.tolist()
    fabric.node_tier[:] = 0  # tiers unknown: every core sees every host at the same distance
    assert sorted(ranking_of(fabric).roots.tolist()) == cores.tolist()
    fabric.node_tier[fabric.node_index("pod0-edge0")] = 9  # tiers that say otherwise change nothing
    assert sorted(ranking_of(fabric).roots.tolist()) == cores.tolist()
    spine_leaf = leaf_spine(4, 2, 3)
    spines = [spine_leaf.node_index("spine-0"), spine_leaf.node_index("spine-1")]
    assert sorted(ranking_of(spine_leaf).roots.tolist()) == spines
    routes = engine_named("updn").compute(spine_leaf)
    assert sorted(routes.roots.tolist()) == spines and routes.roots_source == "detected"


def test_a_lone_switch_above_the_spines_is_no_root_unless_opensm_would_find_it():
    """A leaf-spine with one more switch above the spines, with two management hosts on it: its tier
    says 3, alone at the top; OpenSM's detection takes the spines, which see every host at one
    distance, and not the top switch, which sees 9% of the hosts at another."""
    fabric = edited(
        leaf_spine(4, 2, 5),
        nodes=[{"name": "top", "kind": "SWITCH", "tier": 3}]
        + [{"name": f"mgmt-{i}", "kind": "HOST"} for i in range(2)],
        links=[
            ("top", 1, "spine-0", 9),
            ("top", 2, "spine-1", 9),
            ("top", 3, "mgmt-0", 1),
            ("top", 4, "mgmt-1", 1),
        ],
    )
    assert fabric.node_tier[fabric.node_index("top")] == 3
    routes = engine_named("updn").compute(fabric)
    assert sorted(fabric.node_names[n] for n in routes.roots.tolist()) == ["spine-0", "spine-1"]
    given = engine_named("updn", roots=[int(node_guid_keys(fabric)[fabric.node_index("top")])]).compute(
        fabric
    )
    assert [fabric.node_names[n] for n in given.roots.tolist()] == ["top"] and given.roots_source == "given"
    assert given.unreachable_pairs == 0
    assert_deadlock_free(fabric, given)


def test_root_guids_that_are_no_switch_of_the_fabric_are_refused_naming_them():
    fabric = leaf_spine(2, 2, 1)
    guids = node_guid_keys(fabric)
    with pytest.raises(InvalidArgument) as err:
        engine_named("updn", roots=[int(guids[fabric.node_index("spine-0")]), 0x1234]).compute(fabric)
    assert err.value.field == "routing_roots[1]" and "0x0000000000001234" in str(err.value)
    with pytest.raises(InvalidArgument, match=r"host-0, a CA") as err:
        engine_named("updn", roots=[int(guids[fabric.node_index("host-0")])]).compute(fabric)
    with pytest.raises(InvalidArgument, match="only updn and ftree"):
        engine_named("minhop", roots=[int(guids[fabric.node_index("spine-0")])])


def test_a_root_list_that_leaves_a_switch_unreachable_is_refused_naming_the_switch():
    fabric = leaf_spine(2, 1, 1)
    island = edited(fabric, nodes=[{"name": "island", "kind": "SWITCH"}])
    roots = root_nodes(island, [int(node_guid_keys(island)[island.node_index("spine-0")])])
    with pytest.raises(InvalidArgument, match="no root reaches switch island"):
        check_roots_reach(island, roots)
    check_roots_reach(fabric, root_nodes(fabric, [int(node_guid_keys(fabric)[fabric.node_index("spine-0")])]))


def test_at_equal_rank_the_channel_toward_the_lower_guid_climbs_and_between_roots_none_does():
    fabric = edited(leaf_spine(2, 2, 1), links=[("leaf-0", 9, "leaf-1", 9), ("spine-0", 9, "spine-1", 9)])
    leaf0, leaf1 = fabric.node_index("leaf-0"), fabric.node_index("leaf-1")
    spine0, spine1 = fabric.node_index("spine-0"), fabric.node_index("spine-1")
    fabric.node_guid[leaf0], fabric.node_guid[leaf1] = 0x200, 0x100  # leaf-1 has the lower GUID
    ranking = ranking_of(fabric)
    assert sorted(ranking.roots.tolist()) == sorted([spine0, spine1])
    up = ranking.is_up(np.array([leaf0, leaf1, spine0, spine1]), np.array([leaf1, leaf0, spine1, spine0]))
    assert up.tolist() == [True, False, False, False]


def test_a_fabric_with_no_root_to_find_falls_back_to_minhop_as_opensm_does_and_says_so():
    fabric = leaf_spine(2, 1, 2)
    # A chain leaf-0 - spine-0 - leaf-1 with hosts on both leaves: the spine sees all hosts at one
    # distance, so it is found; cutting it off leaves no switch that does. OpenSM then logs "disabling
    # UPDN algorithm, no root nodes were found" and routes with minhop.
    fabric.link_state[fabric.node_kind[fabric.link_b] == NodeKind.SWITCH] = LinkState.DOWN
    routes = engine_named("updn").compute(fabric)
    assert routes.engine == "updn" and routes.engine_used == "minhop"
    assert "no root" in routes.fallback_reason
    minhop = engine_named("minhop").compute(fabric)
    np.testing.assert_array_equal(routes.table.lft_ports, minhop.table.lft_ports)


def test_channel_target_helper_agrees_with_the_link_ends():
    fabric = fat_tree(2)
    assert channel_target(fabric, 0) == fabric.link_b[0] and channel_target(fabric, 1) == fabric.link_a[0]
