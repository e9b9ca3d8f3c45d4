"""PACKET fidelity against theory: the closed-form ring, balls into bins, conservation, reordering."""

from __future__ import annotations

import numpy as np
import pytest

from services.common.errors import InvalidArgument
from services.simulator.cancel import Cancelled
from services.simulator.runner import run_simulation
from tests.simulator.fabrics import fat_tree, leaf_spine

FAT_TREE = fat_tree(4, rate_bps=100_000_000_000)


def packet_spec(jobs, mode="SPRAY", **extra):
    lb = {"mode": mode, **extra.pop("lb", {})}
    return {"fabric": "fabrics/test", "fidelity": "PACKET", "jobs": jobs, "load_balancing": lb, **extra}


def ring(n, size, placement="SCATTERED", **job):
    return {"collective": "ALL_REDUCE", "size_bytes": size, "rank_count": n, "placement": placement, **job}


def uplink_bytes(outcome, snapshot, leaf_tier=1):
    source, target = snapshot.channel_source(), snapshot.channel_target()
    tier = snapshot.node_tier
    sent = dict(zip(outcome.channels.channels.tolist(), outcome.channels.bytes.tolist(), strict=True))
    ups = np.flatnonzero((tier[source] == leaf_tier) & (tier[target] == leaf_tier + 1))
    return ups, np.array([sent.get(int(c), 0) for c in ups])


@pytest.mark.parametrize("mode", ["ADAPTIVE", "SPRAY"])
def test_a_ring_allreduce_on_a_non_blocking_fat_tree_meets_the_closed_form(mode):
    # 16 ranks on every host of a k=4 fat-tree, scattered: every ring hop leaves its leaf.
    outcome = run_simulation(packet_spec([ring(16, 8 << 20)], mode, switch_latency_ns=300), FAT_TREE)
    job = outcome.jobs[0]
    # Closed form: 2(n-1)/n * S over the payload rate, plus per step one hop latency and the
    # store-and-forward of one packet on every hop after the first.
    assert job.completion_ns == pytest.approx(job.ideal_completion_ns, rel=0.03)
    payload_rate = 100e9 * 4096 / (4096 + 82)
    assert job.ideal_completion_ns > 2 * 15 / 16 * (8 << 20) * 8 / payload_rate * 1e9
    assert outcome.uplink_skew.max_over_mean < 1.1


def test_a_packed_ring_sends_one_flow_per_uplink_and_ecmp_meets_the_closed_form_too():
    outcome = run_simulation(packet_spec([ring(16, 4 << 20, "PACKED")], "ECMP"), FAT_TREE)
    job = outcome.jobs[0]
    assert job.completion_ns == pytest.approx(job.ideal_completion_ns, rel=0.01)
    assert outcome.packets.dropped == 0


def test_a_scattered_ring_is_slower_under_ecmp_with_hot_and_idle_uplinks_at_once():
    fabric = fat_tree(8, rate_bps=100_000_000_000)
    results = {
        mode: run_simulation(packet_spec([ring(128, 16 << 20)], mode, seed=3, lb={"seed": 1}), fabric)
        for mode in ("ECMP", "ADAPTIVE", "SPRAY")
    }
    ecmp, adaptive, spray = (results[m] for m in ("ECMP", "ADAPTIVE", "SPRAY"))
    assert ecmp.jobs[0].completion_ns > 1.2 * adaptive.jobs[0].completion_ns
    assert ecmp.uplink_skew.share_hot > 0 and ecmp.uplink_skew.share_idle > 0
    for balanced in (adaptive, spray):
        assert balanced.uplink_skew.max_over_mean < 1.1
        assert balanced.uplink_skew.share_idle == 0


def test_ecmp_leaves_the_balls_into_bins_share_of_uplinks_idle():
    # n flows from the n hosts of leaf 0 to the n hosts of leaf 1, hashed onto leaf 0's n uplinks.
    n, runs = 8, 120
    fabric = leaf_spine(2, n, n, rate_bps=100_000_000_000)
    hosts = [fabric.node_names[h] for h in fabric.host_nodes]
    flows = [{"source": hosts[i], "destination": hosts[n + i], "size_bytes": 8192} for i in range(n)]
    idle = []
    for seed in range(runs):
        spec = packet_spec(
            [{"collective": "POINT_TO_POINT", "flows": flows}], "ECMP", seed=seed, lb={"seed": seed}
        )
        outcome = run_simulation(spec, fabric)
        _, sent = uplink_bytes(outcome, fabric)
        idle.append(int((sent[:n] == 0).sum()))  # leaf 0's uplinks come first
    expected = n * (1 - 1 / n) ** n
    standard_error = np.std(idle, ddof=1) / np.sqrt(runs)
    assert abs(np.mean(idle) - expected) < 3 * standard_error + 0.05


@pytest.mark.parametrize("mode", ["ECMP", "ADAPTIVE", "SPRAY", "FLOWLET"])
def test_every_packet_sent_is_delivered_or_counted_as_dropped(mode):
    # Shallow buffers and a scattered ring under ECMP collisions: some packets must be dropped.
    fabric = fat_tree(8, rate_bps=100_000_000_000)
    spec = packet_spec(
        [ring(128, 4 << 20)],
        mode,
        buffer_bytes=16 * 4178,
        lb={"seed": 1, **({"flowlet_gap_ns": 1000} if mode == "FLOWLET" else {})},
    )
    outcome = run_simulation(spec, fabric)
    stats = outcome.packets
    assert stats.injected == stats.delivered + stats.dropped
    total = int(outcome.flows.size_bytes.sum())
    assert stats.delivered_bytes <= total
    if stats.dropped == 0:
        assert stats.delivered_bytes == total
    assert stats.dropped == int(outcome.channels.drops.sum())
    assert (outcome.flows.finish_ns >= 0).all()  # every flow accounted for
    if mode == "ECMP":
        assert stats.dropped > 0
        assert any("dropped" in note for note in outcome.model_notes)


def test_a_run_is_deterministic_for_a_seed():
    spec = packet_spec([ring(16, 1 << 20, "RANDOM")], "SPRAY", seed=5, lb={"spray_random": True})
    first, second = run_simulation(spec, FAT_TREE), run_simulation(spec, FAT_TREE)
    assert first.makespan_ns == second.makespan_ns
    assert np.array_equal(first.series.bytes, second.series.bytes)
    assert first.packets.out_of_order == second.packets.out_of_order


def test_spraying_reorders_and_the_nic_reorder_buffer_is_reported_while_ecmp_keeps_order():
    spec = packet_spec([ring(16, 2 << 20, "RANDOM")], "SPRAY", seed=2, lb={"spray_random": True})
    sprayed = run_simulation(spec, FAT_TREE)
    assert sprayed.packets.out_of_order > 0
    assert sprayed.packets.reorder_peak_bytes > 0
    assert sum(sprayed.packets.reorder_histogram) == sprayed.packets.delivered
    pinned = run_simulation({**spec, "load_balancing": {"mode": "ECMP"}}, FAT_TREE)
    assert pinned.packets.out_of_order == 0
    assert pinned.packets.reorder_peak_bytes == 0


def test_flowlets_with_a_long_gap_never_move_a_flow_and_a_zero_gap_behaves_per_packet():
    spec = packet_spec([ring(16, 2 << 20, "RANDOM")], "FLOWLET", seed=2, lb={"flowlet_gap_ns": 10**12})
    held = run_simulation(spec, FAT_TREE)
    assert held.packets.out_of_order == 0
    spec["load_balancing"]["flowlet_gap_ns"] = 1  # every pause is a new flowlet
    moving = run_simulation(spec, FAT_TREE)
    assert moving.packets.out_of_order > 0


def test_series_carry_bytes_queues_and_drops_that_add_up_to_the_totals():
    fabric = fat_tree(8, rate_bps=100_000_000_000)
    spec = packet_spec([ring(128, 2 << 20)], "ECMP", buffer_bytes=16 * 4178, lb={"seed": 1})
    outcome = run_simulation(spec, fabric)
    series = outcome.series
    assert np.allclose(series.bytes.sum(axis=1), outcome.channels.bytes, atol=series.bytes.shape[1])
    assert np.array_equal(series.drops.sum(axis=1), outcome.channels.drops)
    assert np.array_equal(series.peak_queue_bytes.max(axis=1), outcome.channels.peak_queue_bytes)
    assert (series.mean_queue_bytes <= series.peak_queue_bytes + 1e-6).all()
    assert series.bytes.shape[1] <= 512


def test_memory_follows_the_packets_in_flight_not_the_packets_of_the_run():
    outcome = run_simulation(packet_spec([ring(16, 16 << 20)], "SPRAY"), FAT_TREE)
    assert outcome.packets.peak_in_flight < outcome.packets.delivered / 20


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"mtu_bytes": 0}, "mtu_bytes"),
        ({"buffer_bytes": 1000}, "buffer_bytes"),
        ({"sample_interval_ns": 1, "jobs": [ring(16, 256 << 20)]}, "sample_interval_ns"),
        ({"jobs": [ring(16, 1 << 20, hosts=["host-0", "nowhere"], rank_count=0)]}, "nowhere"),
    ],
)
def test_bad_input_is_refused_before_any_work_naming_the_field(changes, field):
    with pytest.raises(InvalidArgument, match=field):
        run_simulation({**packet_spec([ring(16, 1 << 20)]), **changes}, FAT_TREE)


def test_a_cancelled_run_stops():
    calls = []

    def progress(fraction: float) -> bool:
        calls.append(fraction)
        return False

    with pytest.raises(Cancelled):
        run_simulation(packet_spec([ring(16, 64 << 20)]), FAT_TREE, progress)
    assert calls


def test_transport_settings_in_a_request_reach_the_domain_spec():
    from fabrictwin.v1 import simulation_pb2

    from services.simulator.convert import spec_from_proto

    message = simulation_pb2.SimulationSpec(
        fabric="fabrics/x",
        roce=simulation_pb2.RoceConfig(dcqcn=True, ecn_kmin_bytes=1000, min_rate_mbps=10.0),
        infiniband=simulation_pb2.InfinibandConfig(virtual_lanes=1, vl_buffer_bytes=8192),
        faults=[
            simulation_pb2.Fault(
                link="3",
                kind=simulation_pb2.FAULT_KIND_LINK_DOWN,
                reroute=simulation_pb2.REROUTE_MODEL_FAST_RECOVERY,
                reroute_delay_ns=7,
            )
        ],
    )
    spec = spec_from_proto(message)
    assert (spec.dcqcn, spec.ecn_kmin_bytes, spec.min_rate_mbps) == (True, 1000, 10.0)
    assert (spec.virtual_lanes, spec.vl_buffer_bytes) == (1, 8192)
    assert (spec.faults[0].reroute.value, spec.faults[0].reroute_delay_ns) == ("FAST_RECOVERY", 7)


def switch_balance(outcome, snapshot):
    """Per switch: packets in, packets out plus drops (a completed run has nothing in flight)."""
    packets = np.zeros(snapshot.num_channels, dtype=np.int64)
    drops = np.zeros(snapshot.num_channels, dtype=np.int64)
    bytes_by_channel = dict(
        zip(outcome.channels.channels.tolist(), outcome.channels.bytes.tolist(), strict=True)
    )
    for i, c in enumerate(outcome.channels.channels):
        drops[c] = outcome.channels.drops[i]
    source, target = snapshot.channel_source(), snapshot.channel_target()
    # wire bytes / packet size is exact when every packet is full-size
    for c, b in bytes_by_channel.items():
        packets[c] = b // (4096 + 82)
    switches = np.flatnonzero(snapshot.node_kind == 2)
    into = np.array([packets[target == s].sum() for s in switches])
    out = np.array([packets[source == s].sum() + drops[source == s].sum() for s in switches])
    return into, out


@pytest.mark.parametrize("mode", ["ECMP", "ADAPTIVE", "SPRAY", "FLOWLET"])
def test_every_switch_forwards_or_drops_every_packet_it_receives(mode):
    lb = {"seed": 2, **({"flowlet_gap_ns": 500} if mode == "FLOWLET" else {})}
    spec = packet_spec(
        [ring(16, 4 << 20, "RANDOM", qps_per_connection=2)], mode, buffer_bytes=8 * 4178, lb=lb
    )
    outcome = run_simulation(spec, FAT_TREE)
    into, out = switch_balance(outcome, FAT_TREE)
    assert np.array_equal(into, out)


def test_drops_do_not_leave_gaps_in_the_reorder_window():
    # ECMP never reorders; an incast with a shallow buffer drops, and the receiver stops waiting
    # for what was dropped instead of counting every later packet as out of order.
    hosts = [FAT_TREE.node_names[h] for h in FAT_TREE.host_nodes]
    flows = [{"source": hosts[i], "destination": hosts[15], "size_bytes": 1 << 20} for i in (0, 4, 8)]
    spec = packet_spec([{"collective": "POINT_TO_POINT", "flows": flows}], "ECMP", buffer_bytes=64 * 4178)
    outcome = run_simulation(spec, FAT_TREE)
    assert outcome.packets.dropped > 0
    assert outcome.packets.out_of_order == 0
    assert outcome.packets.reorder_peak_bytes == 0
    assert outcome.packets.reorder_overflow == 0


def test_a_fixed_sample_interval_is_kept_however_long_the_run():
    hosts = [FAT_TREE.node_names[h] for h in FAT_TREE.host_nodes]
    jobs = [
        {
            "collective": "POINT_TO_POINT",
            "flows": [{"source": hosts[0], "destination": hosts[5], "size_bytes": 1 << 20}],
        }
        for _ in range(3)
    ]
    outcome = run_simulation(packet_spec(jobs, "SPRAY", sample_interval_ns=1000), FAT_TREE)
    assert outcome.sample_interval_ns == 1000
    assert outcome.series.bytes.shape[1] * 1000 >= outcome.makespan_ns
    assert np.allclose(
        outcome.series.bytes.sum(axis=1), outcome.channels.bytes, atol=outcome.series.bytes.shape[1]
    )


def test_the_chosen_interval_is_whole_nanoseconds_and_covers_the_run():
    outcome = run_simulation(packet_spec([ring(16, 3 << 20)], "ADAPTIVE"), FAT_TREE)
    bins = outcome.series.bytes.shape[1]
    assert (bins - 1) * outcome.sample_interval_ns < outcome.makespan_ns <= bins * outcome.sample_interval_ns
    assert outcome.series.utilisation.max() <= 1.0


def test_a_time_limited_run_accounts_for_the_packets_still_in_flight():
    spec = packet_spec([ring(16, 8 << 20)], "SPRAY", time_limit_ns=200_000)
    outcome = run_simulation(spec, FAT_TREE)
    stats = outcome.packets
    assert outcome.makespan_ns == 200_000
    assert stats.in_flight > 0
    assert stats.injected == stats.delivered + stats.dropped + stats.in_flight
    assert any("time_limit_ns" in note for note in outcome.model_notes)


@pytest.mark.parametrize(
    ("lb", "field"),
    [
        ({"mode": "FLOWLET"}, "flowlet_gap_ns"),
        ({"mode": "FLOWLET", "flowlet_gap_ns": -5}, "flowlet_gap_ns"),
        ({"mode": "ECMP", "flowlet_gap_ns": 100}, "flowlet_gap_ns"),
        ({"mode": "ECMP", "spray_random": True}, "spray_random"),
    ],
)
def test_options_that_would_change_nothing_or_something_else_are_refused(lb, field):
    with pytest.raises(InvalidArgument, match=field):
        run_simulation({**packet_spec([ring(16, 1 << 20)]), "load_balancing": lb}, FAT_TREE)


def test_flows_smaller_than_a_packet_never_finish_before_their_ideal():
    hosts = [FAT_TREE.node_names[h] for h in FAT_TREE.host_nodes]
    flows = [{"source": hosts[i], "destination": hosts[15 - i], "size_bytes": 5} for i in range(8)]
    outcome = run_simulation(
        packet_spec([{"collective": "POINT_TO_POINT", "flows": flows}], "ECMP"), FAT_TREE
    )
    job = outcome.jobs[0]
    assert job.ideal_completion_ns <= job.completion_ns <= 1.05 * job.ideal_completion_ns
