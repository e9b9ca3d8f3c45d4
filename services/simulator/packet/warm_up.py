"""Compile the packet engine ahead of its first run: `python -m services.simulator.packet.warm_up`.

The first PACKET run on a machine (or after the engine's source changed, see `compile_cache.py`)
compiles the event loop, about a minute on two cores; `make venv` and `make run` call this so that
no simulation waits for it. It runs one tiny packet simulation (two hosts through one switch) and
returns at once when the engine is already compiled.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from services.common.snapshot import FabricSnapshot
from services.simulator.packet.compile_cache import COMPILING_STAGE, engine_cache_dir, engine_compiled
from services.simulator.packet.config import PacketEngineConfig
from services.simulator.packet.engine import simulate_packets
from services.simulator.paths import route_workload
from services.simulator.spec import SimulationSpec
from services.simulator.workload import build_workload

__all__ = ["warm_up"]

_HOST, _SWITCH = 1, 2


def _two_hosts_one_switch() -> FabricSnapshot:
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


def warm_up() -> bool:
    """Compile the engine unless it is compiled; returns whether it compiled now."""
    if engine_compiled():
        return False
    snapshot = _two_hosts_one_switch()
    flow = {"source": "host-0", "destination": "host-1", "size_bytes": 64 << 10}
    spec = SimulationSpec.from_dict(
        {
            "fabric": snapshot.fabric,
            "fidelity": "PACKET",
            "jobs": [{"collective": "POINT_TO_POINT", "flows": [flow]}],
            "load_balancing": {"mode": "ECMP"},
        }
    )
    assert spec.load_balancing is not None
    workload = build_workload(spec, snapshot)
    routes, flow_route = route_workload(spec.load_balancing, snapshot, workload, 0)
    config = PacketEngineConfig(
        load_balancing=spec.load_balancing,
        mtu_bytes=4096,
        header_bytes=82,
        buffer_bytes=1 << 20,
        switch_latency_ns=0,
        seed=0,
    )
    simulate_packets(workload, snapshot, routes, flow_route, config)
    return True


def main() -> int:
    start = time.perf_counter()
    if engine_compiled():
        print(f"packet engine: compiled ({engine_cache_dir()})", file=sys.stderr)
        return 0
    print(f"packet engine: {COMPILING_STAGE} ...", file=sys.stderr, flush=True)
    warm_up()
    seconds = time.perf_counter() - start
    print(f"packet engine: compiled in {seconds:.0f} s ({engine_cache_dir()})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
