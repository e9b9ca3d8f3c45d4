"""The smallest fabric an engine can run on, and the small run on it that the engines' warm-ups
compile their loops with."""

from __future__ import annotations

import numpy as np

from services.common.snapshot import FabricSnapshot

__all__ = ["two_hosts_one_switch", "warm_up_run"]

_HOST, _SWITCH = 1, 2


def two_hosts_one_switch() -> FabricSnapshot:
    """host-0 -- switch -- host-1 at 100 Gb/s; channel 2l is link l a->b, 2l+1 b->a."""
    links = np.array([[0, 1], [1, 2]], dtype=np.int32)
    # Next channels per (node, destination host index): node * hosts + host.
    offsets = np.array([0, 0, 1, 2, 3, 4, 4], dtype=np.int64)  # (0,1): 0; (1,0): 1; (1,1): 2; (2,0): 3
    return FabricSnapshot(
        fabric="fabrics/warm-up",
        routing_version=1,
        node_kind=np.array([_HOST, _SWITCH, _HOST], dtype=np.int8),
        node_tier=np.array([0, 1, 0], dtype=np.int8),
        node_names=["host-0", "switch", "host-1"],
        host_nodes=np.array([0, 2], dtype=np.int32),
        host_ip=np.array([0x0A000001, 0x0A000002], dtype=np.uint32),
        host_rail=np.full(2, -1, dtype=np.int32),
        link_a=links[:, 0].copy(),
        link_b=links[:, 1].copy(),
        link_rate_bps=np.full(2, 100_000_000_000, dtype=np.int64),
        link_latency_ns=np.full(2, 500, dtype=np.int64),
        link_state=np.ones(2, dtype=np.int8),
        link_ber=np.zeros(2),
        link_names=["host-0<->switch", "switch<->host-1"],
        route_offsets=offsets,
        route_next_channels=np.array([0, 1, 2, 3], dtype=np.int32),
    )


def warm_up_run(fidelity: str) -> tuple[FabricSnapshot, dict]:
    """64 KiB from host-0 to host-1, and a 64 KiB ring AllReduce over both hosts (the compiled
    `collectives.ring_block` too), under ECMP at `fidelity`, on `two_hosts_one_switch` (the spec as
    `SimulationSpec.from_dict` takes it)."""
    snapshot = two_hosts_one_switch()
    flow = {"source": "host-0", "destination": "host-1", "size_bytes": 64 << 10}
    return snapshot, {
        "fabric": snapshot.fabric,
        "fidelity": fidelity,
        "jobs": [
            {"collective": "POINT_TO_POINT", "flows": [flow]},
            {"collective": "ALL_REDUCE", "size_bytes": 64 << 10, "rank_count": 2},
        ],
        "load_balancing": {"mode": "ECMP"},
    }
