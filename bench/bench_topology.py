"""Topology benchmarks: build and fully route fat-trees with each engine; reroute k=32 after a failure."""

from __future__ import annotations

import dataclasses
import time

from bench.registry import benchmark
from services.topology.fabric import Fabric, LinkState
from services.topology.generators import fat_tree
from services.topology.routing import diff_routes, engine_named
from services.topology.routing.routes import lft_changes
from services.topology.routing.sweep import reroute
from services.topology.snapshots import build_snapshot


def _build_and_route(k: int, engine: str) -> dict:
    start = time.perf_counter()
    fabric = fat_tree(k)
    built = time.perf_counter()
    routes = engine_named(engine).compute(fabric)
    done = time.perf_counter()
    snapshot = build_snapshot(fabric, routes, "fabrics/bench", 1).to_proto()
    return {
        "seconds": round(done - start, 3),
        "build_seconds": round(built - start, 3),
        "route_seconds": round(done - built, 3),
        "hosts": int(fabric.num_hosts),
        "switches": int(fabric.num_switches),
        "distinct_groups": int(routes.table.group_offsets.shape[0] - 1),
        "unreachable_pairs": int(routes.unreachable_pairs),
        "snapshot_mb": round(snapshot.ByteSize() / 2**20, 1),
    }


@benchmark("topology.route.k16.minhop")
def route_k16_minhop() -> dict:
    return _build_and_route(16, "minhop")


@benchmark("topology.route.k16.ftree")
def route_k16_ftree() -> dict:
    return _build_and_route(16, "ftree")


@benchmark("topology.route.k32.minhop")
def route_k32_minhop() -> dict:
    return _build_and_route(32, "minhop")


@benchmark("topology.route.k32.ftree")
def route_k32_ftree() -> dict:
    return _build_and_route(32, "ftree")


@benchmark("topology.route.k32.updn")
def route_k32_updn() -> dict:
    return _build_and_route(32, "updn")


def _fail(fabric: Fabric, name: str, engine: str = "minhop", mode: str = "incremental") -> dict:
    """Reroute after link `name` goes down, as SetLinkState does (in `mode`), and diff the tables:
    seconds, LFT entries changed, entries whose LFT port or equal-cost set changed, switches."""
    router = engine_named(engine)
    routes = router.compute(fabric)
    states = fabric.link_state.copy()
    states[fabric.link_index(name)] = LinkState.DOWN
    broken = dataclasses.replace(fabric, link_state=states)
    start = time.perf_counter()
    rerouted = reroute(router, broken, routes, mode)
    entries, switches = diff_routes(fabric, routes, broken, rerouted, rerouted.changed_rows)
    _, lft_counts = lft_changes(broken, routes, rerouted, rerouted.changed_rows)
    return {
        "seconds": round(time.perf_counter() - start, 3),
        "changed_lft_entries": int(lft_counts.sum()),
        "changed_entries": entries,
        "changed_switches": switches,
    }


@benchmark("topology.reroute.k32")
def reroute_k32() -> dict:
    """k=32 fat-tree: an edge-aggregation link fails, rerouted as a running subnet manager sweeps
    (the timed figure, minhop), and from scratch (`fresh`); then, separately, a core link, a host's
    only link (every switch's LFT balancing shifts in fresh mode: the worst case) and updn."""
    fabric = fat_tree(32)
    edge, core, host = (
        "pod3-agg5/p2<->pod3-edge1/p22",
        "core-17/p4<->pod3-agg1/p18",
        "pod7-edge2/p3<->pod7-edge2-h2/p1",
    )
    sweep = _fail(fabric, edge)
    fresh = _fail(fabric, edge, mode="fresh")
    return {
        **sweep,
        "fresh": fresh,
        "core_link": _fail(fabric, core),
        "host_link": _fail(fabric, host),
        "host_link_fresh": _fail(fabric, host, mode="fresh"),
        "updn": _fail(fabric, edge, "updn"),
    }
