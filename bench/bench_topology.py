"""Topology benchmarks: build and fully route fat-trees with minhop."""

from __future__ import annotations

import time

from bench.registry import benchmark
from services.topology.generators import fat_tree
from services.topology.routing import engine_named


def _build_and_route(k: int, engine: str) -> dict:
    start = time.perf_counter()
    fabric = fat_tree(k)
    built = time.perf_counter()
    routes = engine_named(engine).compute(fabric)
    done = time.perf_counter()
    return {
        "seconds": round(done - start, 3),
        "build_seconds": round(built - start, 3),
        "route_seconds": round(done - built, 3),
        "hosts": int(fabric.num_hosts),
        "switches": int(fabric.num_switches),
        "route_entries": int(routes.next_channels.shape[0]),
    }


@benchmark("topology.route.k16.minhop")
def route_k16_minhop() -> dict:
    return _build_and_route(16, "minhop")


@benchmark("topology.route.k32.minhop")
def route_k32_minhop() -> dict:
    return _build_and_route(32, "minhop")
