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

from services.simulator.packet import layout as L
from services.simulator.packet.collective import fold_totals
from services.simulator.packet.compile_cache import COMPILING_STAGE, engine_cache_dir, engine_compiled
from services.simulator.packet.config import PacketEngineConfig
from services.simulator.packet.engine import simulate_packets
from services.simulator.paths import route_workload
from services.simulator.spec import SimulationSpec
from services.simulator.warm_fabric import warm_up_run
from services.simulator.workload import build_workload

__all__ = ["warm_up"]


def warm_up() -> bool:
    """Compile the engine unless it is compiled; returns whether it compiled now."""
    if engine_compiled():
        return False
    snapshot, run = warm_up_run("PACKET")
    spec = SimulationSpec.from_dict(run)
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
    # A streamed ring's page fold (stream.py), which this run is too small to reach.
    none = np.zeros(0, dtype=np.int64)
    fold_totals(
        none, none, none, np.zeros((0, L.FI_SIZE), np.int64), np.zeros(L.FI_SIZE, np.int64), L.FI_REC_PS
    )
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
