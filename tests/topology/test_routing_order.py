"""minhop and updn balance destinations in OpenSM's routing order (switch GUIDs and end-port loads),
not in LID order; OpenSM 3.3.23 on ibsim agrees entry for entry (tests/lab/test_lab_opensm.py)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from services.topology.fabric import LinkState, NodeKind
from services.topology.generators import fat_tree, leaf_spine
from services.topology.routing import engine_named
from services.topology.routing.balance import routing_order
from services.topology.routing.graph import ChannelGraph
from tests.topology.opensm_order import opensm_destination_order, opensm_greedy_lft


def scrambled(fabric, seed):
    """The fabric with GUIDs and LIDs each in an unrelated random order (as after a re-cabling)."""
    rng = np.random.default_rng(seed)
    fabric.node_guid[:] = (0x0002_C903_0000_0000 + 16 * rng.permutation(fabric.num_nodes)).astype(np.uint64)
    fabric.node_lid[:] = 1 + rng.permutation(fabric.num_nodes)
    return fabric


HOST_CABLE = "pod2-edge1/p1<->pod2-edge1-h0/p1"


def switches(fabric):
    return np.flatnonzero(fabric.node_kind == NodeKind.SWITCH).tolist()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_routing_order_is_switches_by_load_then_guid_then_port(seed):
    fabric = scrambled(leaf_spine(3, 2, 3), seed)
    fabric.link_state[fabric.link_index("leaf-1/p1<->host-3/p1")] = LinkState.DOWN  # leaf-1: fewer CAs
    order = routing_order(fabric, ChannelGraph.of(fabric)).tolist()
    assert order == opensm_destination_order(fabric)
    names = [fabric.node_names[fabric.host_nodes[h]] for h in order]
    assert names[-3:] == ["host-4", "host-5", "host-3"]  # leaf-1 last, its unplugged host after all


@pytest.mark.parametrize("engine", ["minhop", "updn"])
@pytest.mark.parametrize("seed", [4, 5])
def test_the_lft_follows_opensm_order_when_guids_and_lids_disagree(engine, seed):
    fabric = scrambled(fat_tree(6), seed)
    routes = engine_named(engine).compute(fabric)
    lid_order = np.argsort(fabric.node_lid[fabric.host_nodes], kind="stable").tolist()
    assert lid_order != opensm_destination_order(fabric)  # the case the old LID-order balancing got wrong
    for node in switches(fabric):
        np.testing.assert_array_equal(routes.lft_ports(node), opensm_greedy_lft(fabric, routes, node))


@pytest.mark.parametrize("engine", ["minhop", "updn"])
def test_a_host_cable_going_down_and_up_reorders_and_reroutes_like_a_full_computation(engine):
    fabric = scrambled(fat_tree(4), 6)
    router = engine_named(engine)
    routes = router.compute(fabric)
    for state in (LinkState.DOWN, LinkState.UP):
        states = fabric.link_state.copy()
        states[fabric.link_index(HOST_CABLE)] = state
        fabric = dataclasses.replace(fabric, link_state=states)
        rerouted = router.reroute(fabric, routes)
        full = router.compute(fabric)
        for node in switches(fabric):
            np.testing.assert_array_equal(rerouted.lft_ports(node), full.lft_ports(node))
            np.testing.assert_array_equal(full.lft_ports(node), opensm_greedy_lft(fabric, full, node))
        routes = rerouted
