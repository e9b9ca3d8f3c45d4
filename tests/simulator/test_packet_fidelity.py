"""PACKET fidelity against closed forms: InfiniBand credit timing, per-flow drops."""

from __future__ import annotations

import pytest

from services.simulator.convert import result_to_proto
from services.simulator.runner import run_simulation
from tests.simulator.fabrics import leaf_spine, point_to_point_spec

GBPS = 1_000_000_000
LINK_NS = 500
# host-0 and host-1 on leaf-0: host-0 -> leaf-0 -> host-1, 100 Gb/s, 500 ns per link.
FABRIC = leaf_spine(2, 1, 2, rate_bps=100 * GBPS, latency_ns=LINK_NS)
MTU, IB_HEADER = 4096, 26


def infiniband_finish_ns(packets: int, switch_latency_ns: int) -> int:
    """When host-1 has every byte of a flow of `packets` full packets from host-0, under credits for
    one packet in leaf-0's input buffer (and a window far too large to bind)."""
    spec = point_to_point_spec(
        FABRIC,
        [(0, 1, packets * MTU)],
        transport="INFINIBAND",
        vl_buffer_bytes=MTU + IB_HEADER,
        window_bytes=1 << 30,
        switch_latency_ns=switch_latency_ns,
    )
    return int(run_simulation(spec, FABRIC).flows.finish_ns[0])


@pytest.mark.parametrize("switch_latency_ns", [0, 250, 1000])
def test_one_packet_of_credit_paces_a_flow_at_serialisation_plus_the_credit_loop(switch_latency_ns):
    # Each packet waits for the credit of the one before: it is serialised onto the host's link,
    # crosses it (link delay), goes through the switch (switch latency) and leaves leaf-0's input
    # buffer as leaf-0 starts sending it on; the credit is back at host-0 one link delay later.
    serialisation_ns = (MTU + IB_HEADER) * 8 / 100
    cycle_ns = serialisation_ns + LINK_NS + switch_latency_ns + LINK_NS
    extra = 100  # packets: the finish times differ by 100 cycles (fill and drain cancel out)
    per_packet = (
        infiniband_finish_ns(20 + extra, switch_latency_ns) - infiniband_finish_ns(20, switch_latency_ns)
    ) / extra
    assert per_packet == pytest.approx(cycle_ns, abs=0.05)


# Three senders on leaf-1 into host-0 through one spine: leaf-0's port to host-0 overflows. host-3
# sends to host-2 on its own leaf, crossing no congested port.
INCAST_FABRIC = leaf_spine(2, 1, 4, rate_bps=100 * GBPS)
INCAST = [(4, 0, 64 * MTU), (5, 0, 64 * MTU), (6, 0, 64 * MTU), (3, 2, 64 * MTU)]


def test_each_flow_reports_the_packets_of_its_own_that_full_buffers_dropped():
    spec = point_to_point_spec(INCAST_FABRIC, INCAST, buffer_bytes=16 * (MTU + 82))
    outcome = run_simulation(spec, INCAST_FABRIC)
    dropped = outcome.flows.counters["dropped_packets"]
    assert dropped.sum() == outcome.packets.dropped > 0  # every drop is some flow's
    assert dropped[3] == 0  # the flow that crossed no full buffer
    assert (dropped[:3] > 0).all()
    # Without a reliable transport a dropped packet is a lost one (every packet here is a full MTU).
    assert outcome.packets.delivered_bytes == 4 * 64 * MTU - dropped.sum() * MTU
    result = result_to_proto(outcome, with_flows=True)
    assert [flow.dropped_packets for flow in result.flows] == dropped.tolist()


def test_flow_fidelity_reports_no_per_flow_drops():
    spec = point_to_point_spec(INCAST_FABRIC, INCAST, fidelity="FLOW")
    result = result_to_proto(run_simulation(spec, INCAST_FABRIC), with_flows=True)
    assert [flow.dropped_packets for flow in result.flows] == [0, 0, 0, 0]
