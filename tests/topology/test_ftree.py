import collections
import dataclasses

import numpy as np
import pytest

from services.topology.fabric import LinkState, NodeKind
from services.topology.generators import fat_tree, leaf_spine
from services.topology.routing import engine_named
from services.topology.routing.ftree_check import check_fat_tree
from services.topology.routing.ftree_indexing import FullFatTree
from services.topology.routing.ftree_walk import FtreeWalk
from services.topology.routing.graph import ChannelGraph
from services.topology.routing.routes import entry_signatures
from tests.fabric_edits import edited, without
from tests.real_like import quasi_fat_tree

from .walks import Groups, lft_path


def shared_channels(fabric, routes, shift):
    """Channels that two flows of the permutation host i -> host i+shift cross (LFT semantics)."""
    hosts, groups = fabric.num_hosts, Groups(fabric, routes)
    load = collections.Counter(
        channel for i in range(hosts) for channel in lft_path(fabric, routes, i, (i + shift) % hosts, groups)
    )
    return [channel for channel, flows in load.items() if flows > 1]


@pytest.mark.parametrize("k", [4, 6, 8])
def test_ftree_gives_every_shift_permutation_one_distinct_path_per_destination(k):
    fabric = fat_tree(k)
    routes = engine_named("ftree").compute(fabric)
    hosts = fabric.num_hosts
    for shift in sorted({1, 2, k // 2, k // 2 + 1, k * k // 4, hosts // 2, hosts - 1}):
        assert shared_channels(fabric, routes, shift) == [], f"shift {shift}"


def test_minhop_balancing_alone_does_not_make_shifts_contention_free():
    fabric = fat_tree(8)
    routes = engine_named("minhop").compute(fabric)
    assert any(shared_channels(fabric, routes, shift) for shift in (1, 4, 16, 64))


def test_ftree_groups_are_the_equal_cost_groups_and_its_choices_spread_evenly():
    fabric = fat_tree(8)
    ftree, minhop = engine_named("ftree").compute(fabric), engine_named("minhop").compute(fabric)
    rows = np.arange(ftree.table.group_ids.shape[0])
    np.testing.assert_array_equal(
        entry_signatures(fabric, ftree, rows)[0], entry_signatures(fabric, minhop, rows)[0]
    )
    edge = fabric.node_index("pod3-edge2")
    uplinks = ftree.lft_ports(edge)[fabric.node_group[fabric.host_nodes] != 3]
    assert np.bincount(uplinks)[5:].tolist() == [len(uplinks) // 4] * 4


def test_ftree_routes_around_a_failed_link_and_still_reaches_everyone():
    fabric = fat_tree(6)
    fabric.link_state[fabric.link_index("core-4/p2<->pod1-agg1/p5")] = LinkState.DOWN
    routes = engine_named("ftree").compute(fabric)
    assert routes.unreachable_pairs == 0
    for shift in (1, 7):
        for i in range(fabric.num_hosts):
            lft_path(fabric, routes, i, (i + shift) % fabric.num_hosts)


def shuffled_guids(fabric, seed):
    """`fabric` with GUIDs handed out in a seeded random node order (as the lab's shuffled fabrics)."""
    order = np.random.default_rng(seed).permutation(fabric.num_nodes)
    guid = np.empty(fabric.num_nodes, dtype=np.uint64)
    guid[order] = np.uint64(0x0002_C903_0000_0000) + (np.arange(fabric.num_nodes, dtype=np.uint64) << 4)
    fabric.node_guid[:] = guid
    return fabric


def test_ftree_indexes_a_k4_fat_tree_with_the_tuples_opensm_logs():
    # OpenSM 3.3.23's "Switch index" lines (-D 0x4f) for this fabric brought up in ibsim.
    logged = {
        "core-0": (0, 0, 0), "core-2": (0, 0, 1), "core-1": (0, 1, 0), "core-3": (0, 1, 1),
        "pod0-agg0": (1, 0, 0), "pod0-agg1": (1, 0, 1), "pod1-agg0": (1, 1, 0), "pod1-agg1": (1, 1, 1),
        "pod2-agg0": (1, 2, 0), "pod2-agg1": (1, 2, 1), "pod3-agg0": (1, 3, 0), "pod3-agg1": (1, 3, 1),
        "pod0-edge0": (2, 0, 0), "pod0-edge1": (2, 0, 1), "pod1-edge0": (2, 1, 0), "pod1-edge1": (2, 1, 1),
        "pod2-edge0": (2, 2, 0), "pod2-edge1": (2, 2, 1), "pod3-edge0": (2, 3, 0), "pod3-edge1": (2, 3, 1),
    }  # fmt: skip
    fabric = fat_tree(4)
    full = FullFatTree.of(fabric, ChannelGraph.of(fabric))
    assert {fabric.node_names[s]: t for s, t in full.tuples.items()} == logged


FTREE_FABRICS = {
    "fat-tree k=4": lambda: fat_tree(4),
    "fat-tree k=6": lambda: fat_tree(6),
    "fat-tree k=8": lambda: fat_tree(8),
    "fat-tree k=8, hosts missing": lambda: without(
        fat_tree(8), {"pod0-edge0-h1", "pod2-edge1-h0", "pod7-edge3-h3"}
    ),
    "leaf-spine 6x4x3": lambda: leaf_spine(6, 4, 3),
    "leaf-spine 4x2x4, 2 cables": lambda: leaf_spine(4, 2, 4, parallel_links=2),
    "leaf-spine 5x3x7, 3 cables, hosts missing": lambda: without(
        leaf_spine(5, 3, 7, parallel_links=3), {"host-1", "host-9", "host-10"}
    ),
}


@pytest.mark.parametrize("seed", [None, 1, 13])
@pytest.mark.parametrize("name", sorted(FTREE_FABRICS))
def test_ftree_equals_opensms_ftree_walked_step_by_step(name, seed):
    fabric = FTREE_FABRICS[name]()
    if seed is not None:
        fabric = shuffled_guids(fabric, seed)
    assert FullFatTree.of(fabric, ChannelGraph.of(fabric)) is not None
    routes = engine_named("ftree").compute(fabric)
    graph = ChannelGraph.of(fabric)
    walked = FtreeWalk(fabric, graph, check_fat_tree(fabric, graph).rank)
    differences = [
        (fabric.node_names[switch], host, int(routes.lft_ports(switch)[host]), port)
        for switch, table in walked.lft.items()
        for host, port in table.items()
        if routes.lft_ports(switch)[host] != port
    ]
    assert sum(len(t) for t in walked.lft.values()) > 0
    assert differences == [], differences[:5]


@pytest.mark.parametrize("k", [4, 6, 8])
def test_ftree_shifts_in_its_routing_order_are_contention_free_whatever_the_guids(k):
    fabric = shuffled_guids(fat_tree(k), seed=k)
    routes = engine_named("ftree").compute(fabric)
    order = FullFatTree.of(fabric, ChannelGraph.of(fabric)).routing_order.tolist()
    assert order != list(range(fabric.num_hosts))  # the shuffle moved OpenSM's order off host order
    hosts, groups = fabric.num_hosts, Groups(fabric, routes)
    for shift in sorted({1, 2, k // 2, k // 2 + 1, k * k // 4, hosts // 2, hosts - 1}):
        load = collections.Counter(
            channel
            for i in range(hosts)
            for channel in lft_path(fabric, routes, order[i], order[(i + shift) % hosts], groups)
        )
        assert max(load.values()) == 1, f"shift {shift}"


def test_a_leaf_missing_a_spine_is_no_fat_tree_to_opensm_and_ftree_falls_back_to_minhop_saying_why():
    partial = edited(leaf_spine(4, 2, 2), drop_links=[("leaf-0", "spine-1")])
    routes = engine_named("ftree").compute(partial)
    assert (routes.engine, routes.engine_used) == ("ftree", "minhop")
    assert "AB0D" in routes.fallback_reason and (
        "AB09" in routes.fallback_reason or "AB0A" in routes.fallback_reason
    )
    np.testing.assert_array_equal(
        routes.table.lft_ports, engine_named("minhop").compute(partial).table.lft_ports
    )


@pytest.mark.parametrize(
    ("change", "code"),
    [
        # a storage host on a spine: its switch is not at the leaf rank
        (dict(nodes=[{"name": "storage", "kind": "HOST"}], links=[("spine-0", 9, "storage", 1)]), "AB26"),
        # two hosts cabled to each other
        (dict(links=[("host-0", 2, "host-1", 2)]), "AB0F"),
        # the spines cabled together only through a leaf-level switch of their own: no single root rank
        (dict(drop=["spine-0", "spine-1"], links=[("leaf-0", 9, "leaf-1", 9)]), "AB2B"),
    ],
)
def test_ftree_refuses_what_opensm_refuses_with_its_error_code(change, code):
    fabric = edited(leaf_spine(3, 2, 2), **change)
    routes = engine_named("ftree").compute(fabric)
    assert routes.engine_used == "minhop"
    assert f"ERR {code}" in routes.fallback_reason, routes.fallback_reason


@pytest.mark.parametrize(
    ("fabric", "said"),
    [
        (leaf_spine(1, 1, 2), "Failed to find leaf switches - topology is not fat-tree"),
        (edited(leaf_spine(2, 1, 1), drop=["host-1"]), "Fabric has 4 nodes (3 switches) - topology is not"),
        (edited(leaf_spine(2, 1, 1), drop=["spine-0", "leaf-1"]), "Fabric has 1 switches"),
    ],
)
def test_a_single_leaf_a_single_host_or_a_single_switch_is_no_fat_tree(fabric, said):
    routes = engine_named("ftree").compute(fabric)
    assert routes.engine_used == "minhop" and said in routes.fallback_reason, routes.fallback_reason


def test_a_fat_tree_opensm_accepts_without_a_closed_form_is_routed_by_opensms_walk():
    fabric = quasi_fat_tree()
    graph = ChannelGraph.of(fabric)
    assert FullFatTree.of(fabric, graph) is None
    routes = engine_named("ftree").compute(fabric)
    assert routes.engine_used == "ftree" and routes.unreachable_pairs == 0
    walked = FtreeWalk(fabric, graph, check_fat_tree(fabric, graph).rank)
    for switch, table in walked.lft.items():
        for host, port in table.items():
            assert routes.lft_ports(switch)[host] == port, (fabric.node_names[switch], host)


def test_a_host_whose_cable_is_down_is_routed_as_if_it_were_not_there():
    """OpenSM drops a CA it no longer reaches; its ftree then routes the leaf with one CA fewer (a
    dummy in its place), exactly as a fabric imported without it (checked on ibsim with a running
    OpenSM: tests/lab)."""
    fabric = fat_tree(8)
    states = fabric.link_state.copy()
    states[fabric.link_index("pod3-edge1/p1<->pod3-edge1-h0/p1")] = LinkState.DOWN
    cut = engine_named("ftree").compute(dataclasses.replace(fabric, link_state=states))
    absent_fabric = without(fat_tree(8), {"pod3-edge1-h0"})
    absent = engine_named("ftree").compute(absent_fabric)
    for node in np.flatnonzero(fabric.node_kind == NodeKind.SWITCH).tolist():
        other = absent_fabric.node_index(fabric.node_names[node])
        for h in range(fabric.num_hosts):
            name = fabric.node_names[fabric.host_nodes[h]]
            if name != "pod3-edge1-h0":
                assert (
                    cut.lft_ports(node)[h]
                    == absent.lft_ports(other)[absent_fabric.node_host[absent_fabric.node_index(name)]]
                )
