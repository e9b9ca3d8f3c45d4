"""Closed forms the results must meet at both fidelities: the wire header at FLOW fidelity, an ideal
completion a PACKET run can reach, and "idle" meaning an uplink that carried nothing.

Measured before: FLOW moved payload at the link rate (busbw above the payload rate: 99.4 Gb/s on a
100 Gb/s link with 4 KiB payloads); the PACKET ideal rounded each route's store-and-forward term up
to a whole ns, so a ring's ideal came out 9 ns above its completion (VS_IDEAL 0.99995); and
`share_idle` counted uplinks below 20% utilisation, busy ones among them.
"""

from __future__ import annotations

import math

import pytest

from services.simulator.runner import run_simulation
from tests.simulator.fabrics import fat_tree, leaf_spine, point_to_point_spec

GBPS_100 = 100_000_000_000
MTU = 4096


def _ns(wire_bytes: float, rate_bps: int = GBPS_100) -> float:
    return wire_bytes * 8e9 / rate_bps


@pytest.mark.parametrize(
    ("settings", "header"),
    [({}, 82), ({"transport": "INFINIBAND"}, 26), ({"header_bytes": 50}, 50)],
    ids=["rocev2", "infiniband", "header_bytes"],
)
def test_a_flow_run_moves_the_wire_header_with_the_payload(settings, header):
    fabric = leaf_spine(2, 1, 2, rate_bps=GBPS_100)
    packets = 64
    spec = point_to_point_spec(fabric, [(0, 2, packets * MTU)], fidelity="FLOW", **settings)
    job = run_simulation(spec, fabric).jobs[0]
    # host -> leaf -> spine -> leaf -> host: four 500 ns links; every byte of the wire at 100 Gb/s.
    assert job.completion_ns == math.ceil(_ns(packets * (MTU + header)) + 4 * 500)
    assert job.ideal_completion_ns == job.completion_ns
    assert job.busbw_gbps <= 100 * MTU / (MTU + header)


def test_a_flow_ring_never_reports_busbw_above_the_payload_rate():
    fabric = leaf_spine(4, 4, 4, rate_bps=GBPS_100, latency_ns=0)
    job = {"collective": "ALL_REDUCE", "size_bytes": 64 << 20, "rank_count": 16, "placement": "SCATTERED"}
    spec = {"fabric": "f", "jobs": [job], "load_balancing": {"mode": "ADAPTIVE"}}
    outcome = run_simulation(spec, fabric)
    payload_rate = 100 * MTU / (MTU + 82)
    assert outcome.jobs[0].busbw_gbps <= payload_rate
    assert outcome.jobs[0].busbw_gbps == pytest.approx(payload_rate, rel=1e-3)
    # Channels count wire bytes, as at PACKET fidelity: a rank sends 2(n-1) steps of S/n payload.
    uplinks = [i for i, name in enumerate(outcome.channels.display_names) if name.startswith("host-")]
    step_packets = (64 << 20) // 16 // MTU
    assert outcome.channels.bytes[uplinks].tolist() == [30 * step_packets * (MTU + 82)] * 16


def test_a_packet_ring_reaches_its_ideal_exactly_when_nothing_contends():
    # Eight ranks packed on two leaves: six ring hops inside a leaf (two links), two across a spine
    # (four links). Each hop costs its links' latency plus one packet's store-and-forward per link
    # after the first; the ring's 14 steps cross 10 local and 4 remote hops at worst.
    fabric = leaf_spine(4, 4, 4, rate_bps=GBPS_100)
    size, n = 1 << 20, 8
    job = {"collective": "ALL_REDUCE", "size_bytes": size, "rank_count": n, "placement": "PACKED"}
    spec = {"fabric": "f", "fidelity": "PACKET", "jobs": [job], "load_balancing": {"mode": "ADAPTIVE"}}
    result = run_simulation(spec, fabric).jobs[0]
    packet_ns = _ns(MTU + 82)
    local, remote = 2 * 500 + packet_ns, 4 * 500 + 3 * packet_ns
    steps = 2 * (n - 1)
    closed_form = steps * _ns(size // n // MTU * (MTU + 82)) + 10 * local + 4 * remote
    assert result.ideal_completion_ns == math.ceil(closed_form)
    assert result.ideal_completion_ns <= result.completion_ns  # VS_IDEAL never below 1.00
    assert result.ideal_completion_ns == result.completion_ns


@pytest.mark.parametrize("packets", [1, 10, 256])
def test_a_packet_flow_across_a_fat_tree_reaches_its_ideal(packets):
    fabric = fat_tree(4, rate_bps=GBPS_100)
    spec = point_to_point_spec(fabric, [(0, 15, packets * MTU)])
    result = run_simulation(spec, fabric).jobs[0]
    # Six links across the core: five store-and-forward packets after the first link.
    closed_form = _ns(packets * (MTU + 82)) + 6 * 500 + 5 * _ns(MTU + 82)
    assert result.ideal_completion_ns == math.ceil(closed_form)
    assert result.ideal_completion_ns <= result.completion_ns


def test_idle_uplinks_carried_nothing_and_cold_ones_ran_below_a_fifth():
    # Two leaves of four uplinks each; one flow leaves each leaf (ECMP: one uplink each), both far
    # below 20% of their uplink over the run: the capped one at 5 Gb/s, the other briefly.
    fabric = leaf_spine(2, 4, 2, rate_bps=GBPS_100)
    spec = point_to_point_spec(fabric, [(0, 2, 1 << 20), (3, 1, 1 << 20)], fidelity="FLOW")
    spec["jobs"][0]["flows"][1]["rate_gbps"] = 5.0
    skew = run_simulation(spec, fabric).uplink_skew
    assert skew.links == 8
    assert skew.share_idle == 6 / 8
    assert skew.share_cold == 8 / 8
    assert skew.share_hot == 0.0
