"""Fingerprints of the packet engine: small PACKET runs over every load-balancing mode, transport and
fault, each reduced to one digest of everything the engine returned (every field of `PacketRun`:
per-flow times and counters, per-link totals, every series).

A restructuring of the engine must leave every digest unchanged, bit for bit. A change that means to
change results (a fidelity fix) updates only the digests it affects, and says why in its commit.
The digests were computed from the engine as it stood before the event loop was split into modules.
"""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np
import pytest

from services.simulator.packet import arrays as packet_arrays
from services.simulator.packet import outcome as packet_outcome
from services.simulator.packet.link_faults import down_sets
from services.simulator.runner import run_simulation
from services.simulator.spec import SimulationSpec
from tests.simulator.fabrics import fat_tree, leaf_spine, point_to_point_spec, with_links_down

GBPS = 1_000_000_000
FAT_TREE = fat_tree(4, rate_bps=100 * GBPS)
LEAF_SPINE = leaf_spine(2, 2, 4, rate_bps=100 * GBPS)
FT_HOSTS = [FAT_TREE.node_names[h] for h in FAT_TREE.host_nodes]
INCAST = [(4, 0, 256 << 10), (5, 0, 256 << 10), (6, 0, 256 << 10), (1, 0, 128 << 10)]


def ring(mode: str, size: int = 256 << 10, lb=None, **settings) -> dict:
    """A scattered ring AllReduce over the 16 hosts of the k=4 fat-tree."""
    job = {"collective": "ALL_REDUCE", "size_bytes": size, "rank_count": 16, "placement": "SCATTERED"}
    return {
        "fabric": FAT_TREE.fabric,
        "fidelity": "PACKET",
        "jobs": [job],
        "load_balancing": {"mode": mode, **(lb or {})},
        "switch_latency_ns": 300,
        "seed": 7,
        **settings,
    }


def incast(transport: str = "ROCEV2", mode: str = "ECMP", **settings) -> dict:
    spec = point_to_point_spec(LEAF_SPINE, INCAST, transport=transport, **settings)
    spec["load_balancing"] = {"mode": mode}
    return spec


def link_down(mode: str, reroute: str, end_ns: int = 0, link: str = "leaf-0<->spine-0", **settings) -> dict:
    flows = [
        {"source": FT_HOSTS[0], "destination": FT_HOSTS[15], "size_bytes": 512 << 10},
        {"source": FT_HOSTS[5], "destination": FT_HOSTS[10], "size_bytes": 512 << 10},
    ]
    # By default leaf-0 <-> spine-0: flow 0's first uplink under ECMP, down while it runs.
    fault = {"link": link, "kind": "LINK_DOWN", "start_ns": 10_000, "end_ns": end_ns, "reroute": reroute}
    return {
        "fabric": FAT_TREE.fabric,
        "fidelity": "PACKET",
        "jobs": [{"collective": "POINT_TO_POINT", "flows": flows}],
        "load_balancing": {"mode": mode},
        "faults": [fault],
        **settings,
    }


SCENARIOS = {
    # load balancing, lossy RoCEv2 (small buffers drop)
    "ecmp_lossy": (ring("ECMP", buffer_bytes=8 << 10), FAT_TREE),
    "adaptive": (ring("ADAPTIVE", buffer_bytes=8 << 10), FAT_TREE),
    "spray_round_robin": (ring("SPRAY"), FAT_TREE),
    "spray_random": (ring("SPRAY", lb={"spray_random": True, "seed": 3}), FAT_TREE),
    "flowlet": (ring("FLOWLET", lb={"flowlet_gap_ns": 1000}, buffer_bytes=12 << 10), FAT_TREE),
    "ecmp_fixed_interval_growing_bins": (ring("ECMP", sample_interval_ns=50), FAT_TREE),
    "time_limited": (ring("SPRAY", time_limit_ns=20_000), FAT_TREE),
    "double_binary_tree": (
        {
            **ring("ADAPTIVE"),
            "jobs": [
                {
                    "collective": "ALL_REDUCE",
                    "algorithm": "DOUBLE_BINARY_TREE",
                    "size_bytes": 128 << 10,
                    "rank_count": 8,
                    "placement": "SCATTERED",
                }
            ],
        },
        FAT_TREE,
    ),
    "pinned_and_capped": (
        point_to_point_spec(
            LEAF_SPINE,
            [],
            jobs=[
                {
                    "collective": "POINT_TO_POINT",
                    "flows": [
                        {
                            "source": "host-0",
                            "destination": "host-4",
                            "size_bytes": 256 << 10,
                            "path": ["host-0", "leaf-0", "spine-1", "leaf-1", "host-4"],
                        },
                        {
                            "source": "host-1",
                            "destination": "host-5",
                            "size_bytes": 256 << 10,
                            "rate_gbps": 20,
                        },
                        {"source": "host-2", "destination": "host-6", "size_bytes": 128 << 10},
                    ],
                }
            ],
            load_balancing={"mode": "SPRAY"},
        ),
        LEAF_SPINE,
    ),
    # transports
    "lossy_incast": (incast(buffer_bytes=64 << 10), LEAF_SPINE),
    "go_back_n": (incast(buffer_bytes=64 << 10, window_bytes=128 << 10, ack_every=2), LEAF_SPINE),
    "go_back_n_drop_once": (incast(window_bytes=256 << 10, drop_once=(0, 5)), LEAF_SPINE),
    "pfc": (incast(buffer_bytes=1 << 20, pfc=True, window_bytes=1 << 20), LEAF_SPINE),
    "dcqcn": (
        incast("ROCEV2", "ADAPTIVE", buffer_bytes=1 << 20, pfc=True, window_bytes=1 << 20, dcqcn=True),
        LEAF_SPINE,
    ),
    "dcqcn_mark_once": (incast(window_bytes=1 << 20, dcqcn=True, mark_once=(1, 3)), LEAF_SPINE),
    "infiniband_credits": (incast("INFINIBAND", vl_buffer_bytes=16 << 10, switch_latency_ns=250), LEAF_SPINE),
    "infiniband_spray": (incast("INFINIBAND", "SPRAY", vl_buffer_bytes=16 << 10), LEAF_SPINE),
    # faults
    "bit_errors": (
        incast(window_bytes=256 << 10, faults=[{"link": "0", "kind": "BIT_ERRORS", "bit_error_rate": 2e-6}]),
        LEAF_SPINE,
    ),
    "gilbert_elliott_lossy": (
        ring(
            "SPRAY",
            faults=[
                {
                    "link": link,
                    "kind": "GILBERT_ELLIOTT",
                    "good_loss": 0.001,
                    "bad_loss": 0.3,
                    "p_good_to_bad": 0.01,
                    "p_bad_to_good": 0.2,
                    "start_ns": 2_000,
                    "end_ns": 100_000,
                }
                for link in FAT_TREE.link_names[16:24]
            ],
        ),
        FAT_TREE,
    ),
    "infiniband_bit_errors": (
        incast(
            "INFINIBAND",
            vl_buffer_bytes=16 << 10,
            faults=[{"link": "1", "kind": "BIT_ERRORS", "bit_error_rate": 1e-6}],
        ),
        LEAF_SPINE,
    ),
    "link_down_subnet_manager_ecmp": (link_down("ECMP", "SUBNET_MANAGER", window_bytes=128 << 10), FAT_TREE),
    "link_down_and_back_spray": (
        link_down("SPRAY", "ROUTING_PROTOCOL", end_ns=30_000, window_bytes=128 << 10),
        FAT_TREE,
    ),
    "link_down_fast_recovery_adaptive_lossy": (link_down("ADAPTIVE", "FAST_RECOVERY"), FAT_TREE),
    "link_down_flowlet_pfc": (
        link_down("FLOWLET", "SUBNET_MANAGER", 30_000, "host-0<->leaf-0", pfc=True, window_bytes=128 << 10)
        | {"load_balancing": {"mode": "FLOWLET", "flowlet_gap_ns": 2000}},
        FAT_TREE,
    ),
}


# Fields added to PacketRun after the digests were taken: left out of the digest (so that it still
# proves nothing else changed), checked by the test on their own.
ADDED_SINCE = {"flow_dropped", "channel_flows", "streamed"}


def digest(run) -> str:
    """SHA-256 over every field of a PacketRun but ADDED_SINCE, by name: arrays as dtype, shape and
    bytes."""
    h = hashlib.sha256()

    def add(name: str, value) -> None:
        h.update(name.encode())
        if isinstance(value, np.ndarray):
            h.update(f"{value.dtype.str}{value.shape}".encode())
            h.update(np.ascontiguousarray(value).tobytes())
        elif isinstance(value, dict):
            for key in sorted(value):
                add(f"{name}.{key}", value[key])
        else:
            h.update(repr(value).encode())

    for field in sorted(f.name for f in dataclasses.fields(run) if f.name not in ADDED_SINCE):
        add(field, getattr(run, field))
    return h.hexdigest()[:24]


def run_packets(data: dict, fabric):
    """The PacketRun of `data` (what the engine returned, before the outcome's conversion)."""
    runs = []
    engine = packet_outcome.simulate_packets

    def capture(*args, **kwargs):
        runs.append(engine(*args, **kwargs))
        return runs[-1]

    spec = SimulationSpec.from_dict(data)
    what_if = {down: (with_links_down(fabric, down), 0.004) for down in down_sets(spec, fabric)}
    packet_outcome.simulate_packets = capture
    try:
        run_simulation(data, fabric, what_if=what_if)
    finally:
        packet_outcome.simulate_packets = engine
    assert len(runs) == 1
    return runs[0]


# Retaken when the event queue became a timing wheel (heap.py): events of the same instant now pop in
# a seeded random order instead of the order the old heap's layout happened to give. 21 of the 24
# changed; makespans moved by under 2.2% except where ties decide a Go-Back-N resend storm
# (go_back_n +49%, bit_errors +29%, infiniband_spray +37%: such runs are that sensitive to the order
# of simultaneous events, so compare them over seeds), and every closed-form and fidelity test
# passes unchanged.
# Retaken when a packet's last link into its host stopped needing an arrival event
# (`test_sink_delivery.py`): the 16 runs that change are those with such links and nothing acting on
# a delivery (Go-Back-N and InfiniBand's credits included); with the change switched off (`EVENTED`)
# they give the digests from before, bit for bit.
EXPECTED = {
    "adaptive": "440a7dba88be519f76c1d750",
    "bit_errors": "a091ea63acf3273552728e28",
    "dcqcn": "ca4b026d018a7876c2fe40b9",
    "dcqcn_mark_once": "33fc63f0b2bc90ce50fed966",
    "double_binary_tree": "1b0c303f43b1609e92885e17",
    "ecmp_fixed_interval_growing_bins": "86a837d02f337a6eace8393d",
    "ecmp_lossy": "2ee8d18abf25094a86107936",
    "flowlet": "80709523e693f152fd2f813a",
    "gilbert_elliott_lossy": "f8df0ac29698de376128a926",
    "go_back_n": "3efe5ab090043a6132a66574",
    "go_back_n_drop_once": "3a1a33360e75366cb53a2ca8",
    "infiniband_bit_errors": "824d76a93eebb5f645813f2e",
    # Credits return one link delay (propagation) after a packet leaves the input buffer, no longer
    # plus the switch latency a second time (test_packet_fidelity.py).
    "infiniband_credits": "0cb90a715dbdd782af22f2b4",
    "infiniband_spray": "ca0bb8b4eac08dff2556c812",
    "link_down_and_back_spray": "87db9eb6077ba4fc2b736ab2",
    "link_down_fast_recovery_adaptive_lossy": "3b289771cdb8f0ea7298b4e9",
    "link_down_flowlet_pfc": "730474f15ea5125c30db5752",
    "link_down_subnet_manager_ecmp": "6762a6a04d4f33306b229a55",
    "lossy_incast": "08fde9e9a9e84e1871e0ade2",
    "pfc": "0291c1a43b659ac16619c362",
    "pinned_and_capped": "718c2fe05278f17040562b68",
    "spray_random": "2b1f76e982e50565614a8d5d",
    "spray_round_robin": "23905490a056541d0302a83d",
    "time_limited": "5d44486656d2ad897417f690",
}


# The digests from before sink deliveries, which each delivery's own event still gives.
EVENTED = {
    "adaptive": "60a9a266df0a4bbc76af05b1",
    "double_binary_tree": "2365fd0340248ea482ea6f40",
    "ecmp_fixed_interval_growing_bins": "0e237449443a1d94c76d875c",
    "ecmp_lossy": "089c59917b3bdca0b073b360",
    "flowlet": "83564d37b449894245749e3a",
    "gilbert_elliott_lossy": "1586999bd2c3c1fa0d705c9f",
    "go_back_n": "8cc872812b2c9197074770af",
    "infiniband_bit_errors": "67ba13f06c813e2e624ef667",
    "infiniband_credits": "de39dde6f36e5ab9501e3776",
    "infiniband_spray": "dacadab845e2d5e3b579c71f",
    "lossy_incast": "cfbaecfeebc689ea1bc6012d",
    "pfc": "49009beadfd69f696774aae0",
    "pinned_and_capped": "1c5003dd0c047601e5e93fa0",
    "spray_random": "9a7e513f97b884a12a24412e",
    "spray_round_robin": "3eb2fb802f1e48bbaa55503a",
    "time_limited": "85c85b60bf7af5f8b20ee866",
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_engine_returns_what_it_returned_before(name):
    data, fabric = SCENARIOS[name]
    run = run_packets(data, fabric)
    assert digest(run) == EXPECTED[name]
    assert run.flow_dropped.sum() == run.packets_dropped  # each drop is some flow's
    if run.channel_flows.size:  # kept under per-packet modes: a channel some flow used carried bytes
        assert ((run.channel_flows > 0) == (run.channel_tx_bytes > 0)).all()


@pytest.mark.parametrize("name", sorted(EVENTED))
def test_with_an_event_per_delivery_the_engine_returns_what_it_did_before(monkeypatch, name):
    monkeypatch.setattr(packet_arrays, "SINK_DELIVERY", False)
    data, fabric = SCENARIOS[name]
    assert digest(run_packets(data, fabric)) == EVENTED[name]
