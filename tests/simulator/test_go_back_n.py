"""RoCEv2 Go-Back-N and link bit errors at PACKET fidelity, against the closed form."""

from __future__ import annotations

import pytest

from services.common.errors import InvalidArgument
from services.simulator.packet import layout as L
from services.simulator.packet.arrays import EngineArrays
from services.simulator.packet.config import PacketEngineConfig
from services.simulator.packet.gobackn import timeout_fires
from services.simulator.packet.state import Flows
from services.simulator.paths import route_workload
from services.simulator.runner import run_simulation
from services.simulator.spec import LoadBalancingMode, LoadBalancingSpec, SimulationSpec
from services.simulator.workload import build_workload
from tests.simulator.fabrics import fat_tree

FABRIC = fat_tree(4, rate_bps=100_000_000_000)
HOSTS = [FABRIC.node_names[h] for h in FABRIC.host_nodes]
MTU, WIRE = 4096, 4096 + 82
SER_NS = WIRE * 8 / 100  # one packet at 100 Gb/s


def one_flow(packets=256, window_packets=8, **extra):
    flows = [{"source": HOSTS[0], "destination": HOSTS[15], "size_bytes": packets * MTU}]
    spec = {
        "fabric": "fabrics/test",
        "fidelity": "PACKET",
        "jobs": [{"collective": "POINT_TO_POINT", "flows": flows}],
        "load_balancing": {"mode": "ECMP"},
        "window_bytes": window_packets * MTU,
        **extra,
    }
    return run_simulation(spec, FABRIC)


@pytest.mark.parametrize("window", [4, 8, 16])
def test_one_drop_resends_exactly_what_was_in_flight_after_it(window):
    # Window-limited (the window is smaller than the bandwidth-delay product): when the NAK for
    # PSN k arrives, the sender has sent k .. k+W-1; Go-Back-N resends all W of them.
    clean = one_flow(window_packets=window)
    dropped = one_flow(window_packets=window, drop_once=(0, 100))
    stats = dropped.packets
    assert stats.retransmitted == window
    assert stats.naks == 1 and stats.timeouts == 0
    assert stats.discarded == window - 1  # k+1 .. k+W-1 reached a receiver waiting for k
    assert stats.injected == stats.delivered + stats.corrupted + stats.dropped
    # The cost is at least the NAK's round trip plus resending the window.
    extra_ns = dropped.jobs[0].completion_ns - clean.jobs[0].completion_ns
    assert extra_ns >= window * SER_NS


def test_with_a_window_above_the_bandwidth_delay_product_every_packet_sent_before_the_nak_is_resent():
    dropped = one_flow(window_packets=1000, drop_once=(0, 100))
    stats = dropped.packets
    # Everything sent from PSN 100 until the NAK came back: the NAK loop, in packet times.
    assert 10 < stats.retransmitted < 100
    assert stats.retransmitted == stats.discarded + 1
    assert dropped.jobs[0].completed


def test_a_lost_tail_is_recovered_by_the_retransmission_timeout():
    dropped = one_flow(window_packets=8, drop_once=(0, 255), retransmit_timeout_ns=50_000)
    stats = dropped.packets
    assert stats.timeouts == 1 and stats.naks == 0 and stats.retransmitted == 1
    clean = one_flow(window_packets=8)
    assert dropped.jobs[0].completion_ns >= clean.jobs[0].completion_ns + 50_000 - 2 * SER_NS


def test_a_marginal_transceiver_costs_resends_and_shows_as_receive_errors_on_its_link():
    link = "0"  # host-0's uplink, crossed by every packet of the flow
    faults = [{"link": link, "kind": "BIT_ERRORS", "bit_error_rate": 1e-6}]
    lossy = one_flow(window_packets=32, faults=faults)
    stats = lossy.packets
    assert stats.corrupted > 0 and stats.retransmitted >= stats.corrupted
    assert lossy.jobs[0].completed
    errors = dict(zip(lossy.channels.channels.tolist(), lossy.channels.rcv_errors.tolist(), strict=True))
    assert errors.get(0, 0) == stats.corrupted  # all on channel 0: link 0, host -> leaf
    assert stats.injected == stats.delivered + stats.corrupted + stats.dropped


def test_gilbert_elliott_loss_comes_in_bursts():
    faults = [
        {
            "link": "0",
            "kind": "GILBERT_ELLIOTT",
            "good_loss": 0.0,
            "bad_loss": 0.9,
            "p_good_to_bad": 0.02,
            "p_bad_to_good": 0.3,
        }
    ]
    bursty = one_flow(packets=512, window_packets=64, faults=faults, seed=3)
    assert bursty.packets.corrupted > 0
    assert bursty.jobs[0].completed


def test_without_go_back_n_a_lossy_link_loses_data_and_says_so():
    faults = [{"link": "0", "kind": "BIT_ERRORS", "bit_error_rate": 1e-6}]
    lossy = one_flow(window_packets=0, faults=faults)
    assert lossy.packets.corrupted > 0 and lossy.packets.retransmitted == 0
    assert lossy.packets.delivered_bytes < 256 * MTU
    assert any("not resent" in note for note in lossy.model_notes)


@pytest.mark.parametrize(
    ("fault", "field"),
    [
        ({"link": "0", "kind": "BIT_ERRORS", "bit_error_rate": 0.0}, "bit_error_rate"),
        ({"link": "0", "kind": "BIT_ERRORS", "bit_error_rate": 1.5}, "bit_error_rate"),
        ({"link": "0", "kind": "GILBERT_ELLIOTT", "bad_loss": 1.2, "p_good_to_bad": 0.1}, "bad_loss"),
        ({"link": "nowhere", "kind": "BIT_ERRORS", "bit_error_rate": 1e-9}, "nowhere"),
        ({"link": "0", "kind": "BIT_ERRORS", "bit_error_rate": 1e-9, "start_ns": 50, "end_ns": 10}, "end_ns"),
        ({"link": "0", "kind": "LINK_DOWN"}, "LINK_DOWN"),
    ],
)
def test_bad_faults_are_refused_naming_the_field(fault, field):
    with pytest.raises(InvalidArgument, match=field):
        one_flow(faults=[fault])


def test_a_timer_left_by_a_slots_earlier_occupant_does_nothing():
    """A streamed ring reuses flow slots while the earlier occupant's (disarmed) retransmission timer
    is still pending; when it pops, the slot's new flow may be armed. The timer carries its
    occupant (`nic.rto_arg`): the stale one does nothing, the new flow's own one re-arms lazily."""
    fabric = fat_tree(4)
    spec = SimulationSpec.from_dict(
        {
            "fabric": fabric.fabric,
            "fidelity": "PACKET",
            "jobs": [{"collective": "ALL_REDUCE", "size_bytes": 1 << 20, "rank_count": 4}],
            "load_balancing": {"mode": "ECMP"},
            "window_bytes": 64 << 10,
        }
    )
    workload = build_workload(spec, fabric)
    lb = LoadBalancingSpec(mode=LoadBalancingMode.ECMP)
    routes, flow_route = route_workload(lb, fabric, workload, 0)
    config = PacketEngineConfig(lb, 4096, 82, 1 << 20, 0, 0, window_packets=16, retransmit_timeout_ns=1000)
    arrays = EngineArrays(fabric, workload, routes, flow_route, config, 1_000_000)
    run, heap, ch = arrays.state()[:3]
    fl = next(part for part in arrays.state() if isinstance(part, Flows))
    slot, queued = 1, int(run.sc[L.SC_HEAP])
    fl.gen[slot], fl.rto_at[slot], fl.snd_una[slot] = 3, 5000, 0  # occupant 3, armed until 5000
    stale = (slot << L.RTO_GEN_BITS) | 2  # occupant 2's timer
    assert timeout_fires(run, heap, ch, fl, stale, 100) == -1
    assert run.sc[L.SC_HEAP] == queued and run.sc[L.SC_TIMEOUTS] == 0  # nothing scheduled, no timeout
    own = (slot << L.RTO_GEN_BITS) | 3
    assert timeout_fires(run, heap, ch, fl, own, 100) == -1
    assert run.sc[L.SC_HEAP] == queued + 1  # its deadline moved on: one event, at 5000
