"""Benchmark: 128-rank ring AllReduce (1 GiB) at FLOW fidelity on k=8 and k=16 fat-trees.

Run: `.venv/bin/python -m tests.simulator.bench_ring` (prints one JSON line per case). Fabrics come
from the topology service's generator (minhop routes), or the test helper if it is absent.
"""

from __future__ import annotations

import json
import time

from services.simulator.runner import run_simulation


def fat_tree_snapshot(k: int):
    try:
        from services.topology.generators import fat_tree
        from services.topology.snapshots import route_and_snapshot

        return route_and_snapshot(fat_tree(k))
    except ImportError:
        from tests.simulator.fabrics import fat_tree as hand_built

        return hand_built(k)


def main() -> None:
    cases = [
        (8, "ADAPTIVE", "SCATTERED", 1),
        (8, "ECMP", "SCATTERED", 1),
        (8, "ECMP", "SCATTERED", 4),
        (16, "ADAPTIVE", "RANDOM", 1),
        (16, "ECMP", "RANDOM", 1),
        (16, "ECMP", "SCATTERED", 1),
    ]
    for k, mode, placement, qps in cases:
        snapshot = fat_tree_snapshot(k)
        job = dict(
            collective="ALL_REDUCE",
            size_bytes=1 << 30,
            rank_count=128,
            placement=placement,
            qps_per_connection=qps,
        )
        spec = dict(fabric=snapshot.fabric, jobs=[job], load_balancing=dict(mode=mode), switch_latency_ns=300)
        wall = time.perf_counter()
        outcome = run_simulation(spec, snapshot)
        result = outcome.jobs[0]
        print(
            json.dumps(
                dict(
                    bench="ring_all_reduce_128",
                    k=k,
                    mode=mode,
                    placement=placement,
                    qps=qps,
                    wall_seconds=round(time.perf_counter() - wall, 3),
                    events=outcome.events,
                    flows=result.flows,
                    completion_ns=result.completion_ns,
                    ideal_ns=result.ideal_completion_ns,
                    busbw_gbps=round(result.busbw_gbps, 1),
                    uplink_max_over_mean=round(outcome.uplink_skew.max_over_mean, 2),
                )
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
