"""ECN marking and DCQCN at PACKET fidelity: senders of an incast converge to a fair share with a
short queue, CNP counters match on both ends, and bad settings are refused before the run."""

from __future__ import annotations

import numpy as np
import pytest

from services.common.errors import InvalidArgument
from services.simulator.runner import run_simulation
from tests.simulator.fabrics import leaf_spine, point_to_point_spec

GBPS = 1_000_000_000
FABRIC = leaf_spine(2, 1, 4, rate_bps=100 * GBPS)
HOSTS = [FABRIC.node_names[h] for h in FABRIC.host_nodes]
SIZE = 4 << 20
# Four senders on leaf-1 into host-0 on leaf-0: the bottleneck is the one uplink leaf-1 -> spine-0.
INCAST = [(4, 0), (5, 0), (6, 0), (7, 0)]


def run(dcqcn: bool, flows=INCAST, **settings):
    defaults = {"buffer_bytes": 4 << 20, "pfc": True, "window_bytes": 1 << 20, "dcqcn": dcqcn}
    spec = point_to_point_spec(FABRIC, [(s, d, SIZE) for s, d in flows], **{**defaults, **settings})
    return run_simulation(spec, FABRIC)


def counter(outcome, name: str, link: str) -> int:
    i = outcome.channels.display_names.index(link)
    return int(outcome.channels.counters[name][i])


@pytest.fixture(scope="module")
def pfc_only():
    return run(dcqcn=False)


@pytest.fixture(scope="module")
def with_dcqcn():
    return run(dcqcn=True)


def mean_queue(outcome, link: str) -> float:
    series = outcome.series
    channel = outcome.channels.channels[outcome.channels.display_names.index(link)]
    return float(series.mean_queue_bytes[list(series.channels).index(channel)].mean())


def test_dcqcn_keeps_the_bottleneck_queue_short_where_pfc_alone_lets_it_fill(pfc_only, with_dcqcn):
    bottleneck = "leaf-1->spine-0"
    assert mean_queue(with_dcqcn, bottleneck) < 0.5 * mean_queue(pfc_only, bottleneck)
    # ...and the pauses that spread congestion upstream mostly disappear.
    assert with_dcqcn.channels.pause_frames.sum() < 0.5 * pfc_only.channels.pause_frames.sum()
    assert counter(with_dcqcn, "ecn_marked_packets", bottleneck) > 0
    assert counter(pfc_only, "ecn_marked_packets", bottleneck) == 0
    assert with_dcqcn.packets.dropped == 0


def test_senders_converge_to_a_fair_share_of_the_bottleneck(with_dcqcn):
    flows = with_dcqcn.flows
    throughput = flows.size_bytes / (flows.finish_ns - flows.start_ns)
    jain = throughput.sum() ** 2 / (len(throughput) * (throughput**2).sum())
    assert jain > 0.95
    # Four equal flows through one 100G uplink take at least 4 x SIZE at its payload rate; DCQCN
    # must not leave it idle much: within 80% of that.
    ideal_ns = 4 * SIZE * 8 / 100 * (4096 + 82) / 4096
    assert with_dcqcn.makespan_ns < ideal_ns / 0.8


def test_every_cnp_a_receiver_sends_is_handled_by_its_sender(with_dcqcn):
    totals = with_dcqcn.packets.counters
    assert totals["cnp_sent"] > 0
    assert totals["cnp_sent"] == totals["cnp_handled"]
    per_flow = with_dcqcn.flows.counters
    np.testing.assert_array_equal(per_flow["cnp_sent"], per_flow["cnp_handled"])
    # At most one CNP per flow per 50 us interval.
    duration = with_dcqcn.flows.finish_ns - with_dcqcn.flows.start_ns
    assert (per_flow["cnp_sent"] <= duration // 50_000 + 1).all()
    assert totals["ecn_marked_packets"] >= totals["cnp_sent"]


def test_no_marks_below_kmin_means_no_cnps_and_the_same_run_as_without_dcqcn(pfc_only):
    unmarked = run(dcqcn=True, ecn_kmin_bytes=3 << 20, ecn_kmax_bytes=4 << 20)
    assert unmarked.packets.counters["ecn_marked_packets"] == 0
    assert unmarked.packets.counters["cnp_sent"] == 0
    assert unmarked.makespan_ns == pfc_only.makespan_ns


def test_a_lone_flow_is_never_marked():
    alone = run(dcqcn=True, flows=[(4, 0)])
    assert alone.packets.counters["ecn_marked_packets"] == 0
    assert alone.flows.counters["cnp_handled"].sum() == 0


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"dcqcn": True, "ecn_pmax": 1.5}, "roce.ecn_pmax"),
        ({"dcqcn": True, "ecn_kmin_bytes": 200_000, "ecn_kmax_bytes": 100_000}, "roce.ecn_kmin_bytes"),
        ({"dcqcn": True, "dcqcn_g": -0.1}, "roce.dcqcn_g"),
        ({"dcqcn": False, "ecn_kmin_bytes": 1000}, "roce.ecn_kmin_bytes"),
        ({"dcqcn": True, "fidelity": "FLOW"}, "roce.dcqcn"),
        ({"dcqcn": True, "transport": "INFINIBAND"}, "roce.dcqcn"),
    ],
)
def test_settings_that_cannot_work_are_refused_naming_the_field(settings, field):
    spec = {
        "fabric": "fabrics/test",
        "fidelity": "PACKET",
        "jobs": [{"collective": "ALL_REDUCE", "size_bytes": 1 << 20, "rank_count": 2}],
        "load_balancing": {"mode": "ECMP"},
        **settings,
    }
    with pytest.raises(InvalidArgument) as caught:
        run_simulation(spec, FABRIC)
    assert caught.value.field == field


def test_a_connections_transfers_share_one_dcqcn_rate_state():
    from services.simulator.packet.arrays import EngineArrays as _Arrays
    from services.simulator.packet.config import PacketEngineConfig
    from services.simulator.paths import route_workload
    from services.simulator.spec import LoadBalancingMode, LoadBalancingSpec, SimulationSpec
    from services.simulator.workload import build_workload

    spec = SimulationSpec.from_dict(
        {
            "fabric": "fabrics/test",
            "fidelity": "PACKET",
            "jobs": [
                {"collective": "ALL_REDUCE", "size_bytes": 1 << 20, "rank_count": 4, "qps_per_connection": 2}
            ],
            "load_balancing": {"mode": "ECMP"},
        }
    )
    workload = build_workload(spec, FABRIC)
    lb = LoadBalancingSpec(mode=LoadBalancingMode.ECMP)
    routes, flow_route = route_workload(lb, FABRIC, workload, 0)
    config = PacketEngineConfig(lb, 4096, 82, 1 << 20, 0, 0)
    arrays = _Arrays(FABRIC, workload, routes, flow_route, config, 1_000_000)
    # A 4-rank ring: 4 connections x 2 QPs, each QP carrying one flow per ring step (6 steps).
    assert len(arrays.qf) == 8
    assert np.bincount(arrays.f_qp).tolist() == [6] * 8
    same_port = workload.flow_source_port[arrays.f_qp == arrays.f_qp[0]]
    assert len(set(same_port.tolist())) == 1


# A parking lot: host-1 shares leaf-0 -> host-0 with three senders behind one spine port. The
# switch's FIFO serves its two input ports alike, so with PFC alone host-1 gets half the port and the
# three others a sixth each; DCQCN, marking early enough (Kmax 50 KB, Pmax 0.2, a CNP per 4 us,
# R_AI 500 Mb/s), cuts whoever sends too fast and evens them out.
PARKING_LOT = [(1, 0), (4, 0), (5, 0), (6, 0)]
TUNED = {"cnp_interval_ns": 4000, "ecn_kmax_bytes": 50_000, "ecn_pmax": 0.2, "rate_ai_mbps": 500}


def jain(outcome) -> float:
    flows = outcome.flows
    throughput = flows.size_bytes / (flows.finish_ns - flows.start_ns)
    return float(throughput.sum() ** 2 / (len(throughput) * (throughput**2).sum()))


def test_dcqcn_evens_out_the_parking_lot_that_pfc_alone_leaves_unfair():
    assert jain(run(dcqcn=False, flows=PARKING_LOT)) < 0.93
    assert jain(run(dcqcn=True, flows=PARKING_LOT, **TUNED)) > 0.98


def test_one_cnp_costs_the_closed_form_of_the_cut_and_its_fast_recovery():
    # One CE mark on a lone 100 Gb/s flow: the sender (alpha = 1) halves its rate, then every 55 us
    # timer event moves it halfway back to the target (line rate): 50, 75, 87.5, ... % for one period
    # each, until it is within 0.1% of line rate after 9 events (F = 5 fast-recovery steps, then
    # additive steps toward the same capped target). The flow loses T x sum(2^-k, k=1..9) of line-rate
    # time: 55 us x (1 - 2^-9) = 54.89 us, if it is long enough to ride out the recovery.
    spec = point_to_point_spec(FABRIC, [(1, 0, 64 << 20)], dcqcn=True)
    plain = run_simulation(spec, FABRIC)
    marked = run_simulation({**spec, "mark_once": (0, 100)}, FABRIC)
    assert marked.packets.counters["cnp_sent"] == marked.packets.counters["cnp_handled"] == 1
    extra_ns = marked.makespan_ns - plain.makespan_ns
    assert extra_ns == pytest.approx(55_000 * (1 - 2**-9), rel=0.015)
