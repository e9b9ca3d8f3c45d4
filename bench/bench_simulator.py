"""Simulator benchmarks: 128-rank ring AllReduce (1 GiB) at FLOW fidelity on fat-trees."""

from __future__ import annotations

import time

from bench.registry import benchmark
from services.simulator.runner import run_simulation
from services.topology.generators import fat_tree
from services.topology.snapshots import route_and_snapshot


def _ring(k: int, mode: str, placement: str, qps: int = 1) -> dict:
    snapshot = route_and_snapshot(fat_tree(k))
    job = {
        "collective": "ALL_REDUCE",
        "size_bytes": 1 << 30,
        "rank_count": 128,
        "placement": placement,
        "qps_per_connection": qps,
    }
    spec = {
        "fabric": snapshot.fabric,
        "jobs": [job],
        "load_balancing": {"mode": mode},
        "switch_latency_ns": 300,
    }
    start = time.perf_counter()
    outcome = run_simulation(spec, snapshot)
    seconds = time.perf_counter() - start
    result = outcome.jobs[0]
    return {
        "seconds": round(seconds, 3),
        "events": int(outcome.events),
        "flows": int(result.flows),
        "completion_ns": int(result.completion_ns),
        "ideal_ns": int(result.ideal_completion_ns),
        "busbw_gbps": round(float(result.busbw_gbps), 1),
        "uplink_max_over_mean": round(float(outcome.uplink_skew.max_over_mean), 2),
    }


@benchmark("simulator.flow.ring128.k8.adaptive")
def ring_k8_adaptive() -> dict:
    return _ring(8, "ADAPTIVE", "SCATTERED")


@benchmark("simulator.flow.ring128.k8.ecmp")
def ring_k8_ecmp() -> dict:
    return _ring(8, "ECMP", "SCATTERED")


@benchmark("simulator.flow.ring128.k8.ecmp_4qp")
def ring_k8_ecmp_4qp() -> dict:
    return _ring(8, "ECMP", "SCATTERED", qps=4)


@benchmark("simulator.flow.ring128.k16.ecmp")
def ring_k16_ecmp() -> dict:
    return _ring(16, "ECMP", "RANDOM")


@benchmark("simulator.flow.ring128.k16.adaptive")
def ring_k16_adaptive() -> dict:
    return _ring(16, "ADAPTIVE", "RANDOM")
