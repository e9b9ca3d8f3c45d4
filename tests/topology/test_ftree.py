import collections

import numpy as np
import pytest

from services.topology.fabric import LinkState
from services.topology.generators import fat_tree
from services.topology.routing import engine_named
from services.topology.routing.routes import entry_signatures

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
