"""Edge cases of link failures found in review, each once a wrong result or a crash: a queue of
credits discarded at once, a flap shorter than a packet, reactions finishing out of order, flowlets
on a dead port, overlapping faults, PortXmitWait across an outage, packets larger than the credit
encoding, late jobs against the stall watchdog."""

from __future__ import annotations

import numpy as np
import pytest

from services.common.errors import InvalidArgument
from services.simulator.packet.link_faults import down_sets
from services.simulator.runner import run_simulation
from services.simulator.spec import SimulationSpec
from tests.simulator.fabrics import fat_tree, leaf_spine, point_to_point_spec, with_links_down

GBPS = 1_000_000_000


def run(fabric, data):
    spec = SimulationSpec.from_dict(data)
    what_if = {down: (with_links_down(fabric, down), 0.004) for down in down_sets(spec, fabric)}
    return run_simulation(data, fabric, what_if=what_if)


def down(link: str, start: int, end: int = 0, reroute: str = "FAST_RECOVERY", delay: int = 0) -> dict:
    return {
        "link": link,
        "kind": "LINK_DOWN",
        "start_ns": start,
        "end_ns": end,
        "reroute": reroute,
        "reroute_delay_ns": delay,
    }


def test_a_link_down_discarding_a_deep_credit_queue_grows_the_event_heap_first():
    fabric = leaf_spine(1, 1, 16, rate_bps=200 * GBPS)
    data = point_to_point_spec(
        fabric,
        [(s, 0, 8 << 20) for s in range(1, 16)],
        transport="INFINIBAND",
        vl_buffer_bytes=16 << 20,
        window_bytes=16 << 20,
        faults=[down("host-0<->leaf-0", 150_000, 400_000)],
    )
    outcome = run(fabric, data)  # once a heap overflow: memory corruption and an abort
    assert outcome.packets.delivered_bytes == 15 * (8 << 20)
    assert outcome.packets.counters["xmit_discards"] > 1000


@pytest.mark.parametrize("flap_ns", [100, 300, 2_000])
def test_a_port_never_sends_faster_than_its_line_rate_after_a_flap(flap_ns):
    fabric = leaf_spine(1, 1, 3, rate_bps=100 * GBPS)
    base = point_to_point_spec(
        fabric, [(1, 0, 1 << 20), (2, 0, 1 << 20)], window_bytes=1 << 20, buffer_bytes=4 << 20
    )
    outcome = run(
        fabric,
        {**base, "sample_interval_ns": 1000, "faults": [down("host-0<->leaf-0", 20_000, 20_000 + flap_ns)]},
    )
    i = list(outcome.series.channels).index(
        outcome.channels.channels[outcome.channels.display_names.index("leaf-0->host-0")]
    )
    assert outcome.series.bytes[i].max() <= 100e9 / 8 * 1e-6 * 1.01  # bytes per 1 us interval
    assert outcome.packets.delivered_bytes == 2 << 20


def test_a_slow_reaction_to_an_early_failure_does_not_undo_a_fast_one_to_a_later_failure():
    fabric = fat_tree(4, rate_bps=100 * GBPS)
    base = point_to_point_spec(fabric, [(0, 15, 16 << 20)], window_bytes=256 * 1024)
    healthy = run(fabric, base)
    flows = healthy.flows
    path = flows.path_links[flows.path_offsets[flows.route[0]] : flows.path_offsets[flows.route[0] + 1]]
    first = int(path[1])
    rerouted = run_simulation(base, with_links_down(fabric, (first,)))
    flows = rerouted.flows
    path = flows.path_links[flows.path_offsets[flows.route[0]] : flows.path_offsets[flows.route[0] + 1]]
    second = int(path[2])
    faults = [
        down(fabric.link_names[first], 50_000, reroute="ROUTING_PROTOCOL", delay=5_000_000),
        down(fabric.link_names[second], 100_000),
    ]
    outcome = run(fabric, {**base, "faults": faults})  # once "no usable path": the old routes came back
    assert outcome.packets.delivered_bytes == 16 << 20
    assert outcome.makespan_ns < 5_000_000  # the fast reaction (with both links down) is kept


@pytest.mark.parametrize("gap_ns", [2_000, 200_000])
def test_flowlets_leave_a_dead_port(gap_ns):
    fabric = fat_tree(4, rate_bps=100 * GBPS)
    lb = {"mode": "FLOWLET", "flowlet_gap_ns": gap_ns}
    base = point_to_point_spec(
        fabric, [(0, 15, 4 << 20), (5, 10, 4 << 20)], window_bytes=256 * 1024, load_balancing=lb
    )
    for link in ("leaf-0<->spine-0", "leaf-0<->spine-1"):
        outcome = run(fabric, {**base, "faults": [down(link, 50_000, reroute="ROUTING_PROTOCOL")]})
        assert outcome.packets.delivered_bytes == 8 << 20, link
        assert outcome.makespan_ns < 1_000_000_000, link  # the switch left the dead port before the protocol


def test_overlapping_faults_keep_the_link_down_until_the_last_one_ends():
    fabric = fat_tree(4, rate_bps=100 * GBPS)
    base = point_to_point_spec(fabric, [(0, 15, 4 << 20)], window_bytes=256 * 1024)
    faults = [down("host-0<->leaf-0", 50_000, 1_000_000), down("host-0<->leaf-0", 500_000, 5_000_000)]
    outcome = run(fabric, {**base, "faults": faults})
    assert outcome.makespan_ns > 5_000_000
    i = outcome.channels.display_names.index("host-0->leaf-0")
    assert outcome.channels.counters["link_downed"][i] == 1  # one outage, not two


def test_port_xmit_wait_stops_while_the_link_is_down():
    fabric = leaf_spine(2, 1, 4, rate_bps=200 * GBPS)
    base = point_to_point_spec(
        fabric,
        [(1, 0, 2 << 20), (2, 0, 2 << 20), (4, 0, 2 << 20)],
        transport="INFINIBAND",
        vl_buffer_bytes=32 * 1024,
    )
    healthy = run(fabric, base)
    outage = run(fabric, {**base, "faults": [down("leaf-0<->spine-0", 30_000, 2_030_000)]})
    name = "spine-0->leaf-0"
    wait = outage.channels.counters["xmit_wait_ns"][outage.channels.display_names.index(name)]
    before = healthy.channels.counters["xmit_wait_ns"][healthy.channels.display_names.index(name)]
    assert wait < before + 1_000_000  # not the 2 ms outage on top


def test_a_packet_larger_than_the_engine_carries_or_than_the_credits_is_refused():
    fabric = leaf_spine(1, 1, 2)
    base = point_to_point_spec(fabric, [(1, 0, 1 << 20)], transport="INFINIBAND")
    with pytest.raises(InvalidArgument) as caught:
        run(fabric, {**base, "mtu_bytes": 70_000})
    assert caught.value.field == "mtu_bytes"
    with pytest.raises(InvalidArgument, match="the default") as caught:
        run(fabric, {**base, "mtu_bytes": 65_520})  # 65,546 wire bytes > 64 KiB
    assert caught.value.field == "infiniband.vl_buffer_bytes"


def test_a_job_starting_late_is_not_a_stall():
    fabric = leaf_spine(1, 1, 2)
    data = point_to_point_spec(
        fabric, [(1, 0, 1 << 20, 0), (0, 1, 1 << 20, 1_500_000_000)], window_bytes=256 * 1024
    )
    outcome = run(fabric, data)
    assert outcome.packets.delivered_bytes == 2 << 20
    assert np.all(outcome.flows.finish_ns > 0)


def test_faults_that_abut_on_one_link_are_one_outage():
    fabric = fat_tree(4, rate_bps=100 * GBPS)
    base = point_to_point_spec(fabric, [(0, 15, 4 << 20)], window_bytes=256 * 1024)
    faults = [down("host-0<->leaf-0", 50_000, 100_000), down("host-0<->leaf-0", 100_000, 5_000_000)]
    outcome = run(fabric, {**base, "faults": faults})
    i = outcome.channels.display_names.index("host-0->leaf-0")
    assert outcome.channels.counters["link_downed"][i] == 1
    assert outcome.makespan_ns > 5_000_000
