"""Every format gives back what it can hold: import(export(f)) against f, real dumps and random fabrics."""

from __future__ import annotations

import json

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.topology.fabric import Fabric, LinkState
from services.topology.formats import export_fabric, import_fabric
from services.topology.formats.ibnetdiscover import import_ibnetdiscover
from services.topology.formats.ibnetdiscover_export import SYNTHETIC_GUID_BASE
from services.topology.formats.link_speeds import LANE_GBPS
from services.topology.generators import fat_tree, leaf_spine

IB_GBPS = sorted({w * lane for w in (1, 4, 12) for lane in LANE_GBPS.values()})


@st.composite
def fabrics(draw) -> Fabric:
    """Random leaf-spine or fat-tree fabrics with InfiniBand rates, GUIDs, and some DOWN/DEGRADED links."""
    if draw(st.booleans()):
        fabric = leaf_spine(
            draw(st.integers(1, 6)),
            draw(st.integers(1, 4)),
            draw(st.integers(1, 5)),
            parallel_links=draw(st.integers(1, 2)),
            link_speed_gbps=draw(st.sampled_from(IB_GBPS)),
            host_link_speed_gbps=draw(st.sampled_from(IB_GBPS)),
            link_latency_ns=draw(st.integers(0, 10_000)),
        )
    else:
        fabric = fat_tree(draw(st.sampled_from([2, 4, 6])), link_speed_gbps=draw(st.sampled_from(IB_GBPS)))
    if draw(st.booleans()):
        guids = draw(
            st.lists(st.integers(1, 2**56), min_size=fabric.num_nodes, max_size=fabric.num_nodes, unique=True)
        )
        fabric.node_guid = np.asarray(guids, dtype=np.uint64)
    states = draw(
        st.lists(st.sampled_from([LinkState.UP, LinkState.DOWN, LinkState.DEGRADED]),
                 min_size=fabric.num_links, max_size=fabric.num_links)
    )  # fmt: skip
    fabric.link_state = np.asarray(states, dtype=np.int8)
    degraded = fabric.link_state == LinkState.DEGRADED
    fabric.link_ber = np.where(degraded, draw(st.floats(1e-12, 1e-4)), 0.0)
    return fabric


def _link_set(fabric: Fabric) -> list[tuple]:
    """Links as (a name, a port, b name, b port, rate), each with its ends in a fixed order."""
    names = fabric.node_names
    rows = []
    for a, pa, b, pb, rate in zip(
        fabric.link_a.tolist(), fabric.link_port_a.tolist(), fabric.link_b.tolist(),
        fabric.link_port_b.tolist(), fabric.link_rate_bps.tolist(), strict=True,
    ):  # fmt: skip
        ends = sorted([(names[a], pa), (names[b], pb)])
        rows.append((*ends[0], *ends[1], rate))
    return sorted(rows)


def _assert_same_nodes(got: Fabric, want: Fabric) -> None:
    assert got.node_names == want.node_names
    assert got.node_kind.tolist() == want.node_kind.tolist()
    assert got.node_radix.tolist() == want.node_radix.tolist()
    assert got.node_lid.tolist() == want.node_lid.tolist()


@settings(max_examples=40, deadline=None)
@given(fabric=fabrics())
def test_ibnetdiscover_round_trip_keeps_names_guids_lids_ports_and_speeds(fabric):
    back = import_fabric("ibnetdiscover", export_fabric(fabric, "ibnetdiscover"))
    _assert_same_nodes(back, fabric)
    known = fabric.node_guid != 0
    assert back.node_guid[known].tolist() == fabric.node_guid[known].tolist()
    assert (back.node_guid[~known] >= SYNTHETIC_GUID_BASE).all()
    assert back.node_tier.tolist() == fabric.node_tier.tolist()
    assert _link_set(back) == _link_set(fabric)
    # The format has no state: every link comes back UP.
    assert (back.link_state == LinkState.UP).all()


@settings(max_examples=40, deadline=None)
@given(fabric=fabrics())
def test_json_round_trip_is_exact(fabric):
    back = import_fabric("json", export_fabric(fabric, "json"))
    for name in ("node_kind", "node_tier", "node_radix", "node_group", "node_rail", "node_guid", "node_lid",
                 "node_ip", "link_a", "link_port_a", "link_b", "link_port_b", "link_rate_bps",
                 "link_latency_ns", "link_state", "link_ber"):  # fmt: skip
        assert getattr(back, name).tolist() == getattr(fabric, name).tolist(), name
    assert back.node_names == fabric.node_names
    assert back.link_names == fabric.link_names


@settings(max_examples=40, deadline=None)
@given(fabric=fabrics())
def test_ns3_hpcc_round_trip_keeps_kinds_link_ends_rates_latencies_and_states(fabric):
    back = import_fabric("ns3_hpcc", export_fabric(fabric, "ns3_hpcc"))
    assert back.node_kind.tolist() == fabric.node_kind.tolist()
    assert back.link_a.tolist() == fabric.link_a.tolist()
    assert back.link_b.tolist() == fabric.link_b.tolist()
    assert back.link_rate_bps.tolist() == fabric.link_rate_bps.tolist()
    assert back.link_latency_ns.tolist() == fabric.link_latency_ns.tolist()
    assert back.link_state.tolist() == fabric.link_state.tolist()
    np.testing.assert_allclose(back.link_ber, fabric.link_ber, rtol=1e-6)
    assert back.node_tier.tolist() == fabric.node_tier.tolist()


@settings(max_examples=20, deadline=None)
@given(fabric=fabrics())
def test_node_link_json_loads_back_into_networkx_with_the_same_counts(fabric):
    graph = nx.node_link_graph(json.loads(export_fabric(fabric, "node_link_json")))
    assert graph.is_multigraph() and not graph.is_directed()
    assert graph.number_of_nodes() == fabric.num_nodes
    assert graph.number_of_edges() == fabric.num_links
    first = fabric.link_names[0]
    attributes = next(data for _, _, data in graph.edges(data=True) if data["name"] == first)
    assert attributes["a_port"] == int(fabric.link_port_a[0])
    assert attributes["speed_gbps"] * 1e9 == fabric.link_rate_bps[0]


@pytest.mark.parametrize(
    "path",
    ["ibnetdiscover/ibtopotool-2.topo", "ibnetdiscover/ibtopotool-3.topo", "ibnetdiscover/ibtopotool-4.topo",
     "ibsim/net.2sw2path4hca2port"],
)  # fmt: skip
def test_a_real_dump_survives_export_and_import(shared_text, path):
    original = import_fabric("ibnetdiscover", shared_text(path))
    back = import_fabric("ibnetdiscover", export_fabric(original, "ibnetdiscover"))
    _assert_same_nodes(back, original)
    if original.node_guid.any():
        assert back.node_guid.tolist() == original.node_guid.tolist()
    assert _link_set(back) == _link_set(original)


def test_the_man_page_example_round_trips_once_its_disagreements_are_resolved(shared_text):
    original = import_ibnetdiscover(shared_text("ibnetdiscover/ibtopotool-1.topo"), rate_mismatch="slower")
    back = import_fabric("ibnetdiscover", export_fabric(original, "ibnetdiscover"))
    _assert_same_nodes(back, original)
    assert _link_set(back) == _link_set(original)
