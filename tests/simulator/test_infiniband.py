"""InfiniBand at PACKET fidelity: credit-based link-level flow control never overflows a buffer,
even under incast, counts PortXmitWait, and leaves bit errors to the reliable transport."""

from __future__ import annotations

import pytest

from services.common.errors import InvalidArgument
from services.simulator.runner import run_simulation
from tests.simulator.fabrics import leaf_spine, point_to_point_spec

GBPS = 1_000_000_000
FABRIC = leaf_spine(2, 1, 4, rate_bps=200 * GBPS)
HOSTS = [FABRIC.node_names[h] for h in FABRIC.host_nodes]
SIZE = 2 << 20
# Three senders into host-0 (two on its leaf, one across the spine) and an innocent flow to host-3.
INCAST = [(1, 0), (2, 0), (4, 0)]
VL_BUFFER = 32 * 1024


def run(transport: str, flows=INCAST, faults=(), **settings):
    defaults = {"transport": transport, "buffer_bytes": 256 * 1024, "faults": list(faults)}
    spec = point_to_point_spec(FABRIC, [(s, d, SIZE) for s, d in flows], **{**defaults, **settings})
    return run_simulation(spec, FABRIC)


@pytest.fixture(scope="module")
def infiniband():
    return run("INFINIBAND", vl_buffer_bytes=VL_BUFFER)


def test_the_same_incast_drops_packets_on_lossy_ethernet():
    assert run("ROCEV2").packets.dropped > 0


def test_credits_mean_no_buffer_ever_overflows_and_nothing_is_dropped(infiniband):
    assert infiniband.packets.dropped == 0
    assert infiniband.packets.delivered_bytes == len(INCAST) * SIZE
    peak = infiniband.channels.counters["peak_input_buffer_bytes"]
    assert peak.max() <= VL_BUFFER  # the invariant: never more than the credits advertised
    assert peak.max() > VL_BUFFER // 2  # ...and the incast did fill input buffers


def test_ports_without_credit_count_port_xmit_wait(infiniband):
    wait = dict(
        zip(infiniband.channels.display_names, infiniband.channels.counters["xmit_wait_ns"], strict=True)
    )
    # host-0's port is the bottleneck: the senders' and leaf-0's upstream ports wait for its credits.
    waiting = {name for name, ns in wait.items() if ns > 0}
    assert waiting, wait
    assert waiting <= {
        "host-1->leaf-0",
        "host-2->leaf-0",
        "host-4->leaf-1",
        "leaf-1->spine-0",
        "spine-0->leaf-0",
    }
    assert wait.get("leaf-0->host-0", 0) == 0  # a host drains at line rate: never short of credit
    assert infiniband.packets.counters["xmit_wait_ns"] == sum(wait.values())


def test_credits_do_not_slow_the_incast_below_the_bottleneck_rate(infiniband):
    ideal_ns = len(INCAST) * SIZE * 8 / 200 * (4096 + 26) / 4096
    assert infiniband.makespan_ns < 1.1 * ideal_ns


def test_infiniband_removes_congestion_loss_not_bit_errors():
    ber = {"link": "host-4<->leaf-1", "kind": "BIT_ERRORS", "bit_error_rate": 1e-6}
    outcome = run("INFINIBAND", faults=[ber], vl_buffer_bytes=VL_BUFFER)
    assert outcome.packets.corrupted > 0  # PortRcvErrors
    assert outcome.packets.retransmitted > 0  # recovered by the reliable connection (Go-Back-N)
    assert outcome.packets.delivered_bytes == len(INCAST) * SIZE
    assert outcome.packets.dropped == 0
    errors = dict(zip(outcome.channels.display_names, outcome.channels.rcv_errors, strict=True))
    assert errors["host-4->leaf-1"] + errors.get("leaf-1->host-4", 0) == outcome.packets.corrupted
    symbol = dict(
        zip(outcome.channels.display_names, outcome.channels.counters["symbol_errors"], strict=True)
    )
    assert symbol["host-4->leaf-1"] == errors["host-4->leaf-1"]


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"transport": "INFINIBAND", "virtual_lanes": 4}, "infiniband.virtual_lanes"),
        ({"transport": "INFINIBAND", "vl_buffer_bytes": 1000}, "infiniband.vl_buffer_bytes"),
        ({"transport": "INFINIBAND", "pfc": True}, "roce.pfc"),
        ({"transport": "ROCEV2", "vl_buffer_bytes": 65536}, "infiniband"),
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
