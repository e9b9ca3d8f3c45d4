"""Simulator benchmarks at FLOW fidelity: 128-rank ring AllReduce (1 GiB) on fat-trees, and the scale
job (64 MiB ring AllReduce over 1,024 randomly placed ranks) on k=16 and k=32 fat-trees; at
FLOW_STEADY the same job over 8,192 ranks on k=32, and beside FLOW on k=16 (both in one process).

There is no k=32 ADAPTIVE scale benchmark: an even split puts each flow on ~530 channels (of the
~33k the job uses), each event changes the load of ~17k of them, and the run's load records (one
per change, about 350 million) do not fit in memory."""

from __future__ import annotations

import re
import time

import services.simulator.flow.engine as flow_engine
from bench.bench_engine import timed_fabric
from bench.registry import benchmark
from services.simulator.checks import check_simulation
from services.simulator.flow.model import simulate_flows
from services.simulator.flow.warm_up import warm_up as warm_up_flow_engines
from services.simulator.runner import run_simulation
from services.simulator.spec import SimulationSpec
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


def _warm_up() -> None:
    """Load (or compile, the first time) the FLOW engine's compiled loop outside the timed region."""
    snapshot = route_and_snapshot(fat_tree(4))
    job = {"collective": "ALL_REDUCE", "size_bytes": 1 << 20, "rank_count": 8}
    run_simulation({"fabric": snapshot.fabric, "jobs": [job], "load_balancing": {"mode": "ECMP"}}, snapshot)


def _ring_at_scale(k: int, ranks: int, mode: str) -> dict:
    """The scale benchmarks' job at FLOW fidelity: a 64 MiB ring AllReduce over `ranks` randomly
    placed ranks on a k-ary fat-tree (the job bench_engine.py runs at PACKET fidelity)."""
    _warm_up()
    snapshot = route_and_snapshot(fat_tree(k))
    spec = {
        "fabric": snapshot.fabric,
        "fidelity": "FLOW",
        "jobs": [
            {"collective": "ALL_REDUCE", "size_bytes": 64 << 20, "rank_count": ranks, "placement": "RANDOM"}
        ],
        "load_balancing": {"mode": mode, "seed": 1},
        "switch_latency_ns": 300,
        "seed": 1,
    }
    # The engine's event loop, timed apart from its routing and its series (part of "engine").
    loop_seconds = []

    def timed(*args, **kwargs):
        began = time.perf_counter()
        run = simulate_flows(*args, **kwargs)
        loop_seconds.append(time.perf_counter() - began)
        return run

    flow_engine.simulate_flows = timed
    try:
        start = time.perf_counter()
        outcome = run_simulation(spec, snapshot)
        wall = time.perf_counter() - start
    finally:
        flow_engine.simulate_flows = simulate_flows
    job = outcome.jobs[0]
    return {
        "wall_s_simulation": round(wall, 2),
        "events": int(outcome.events),
        "flows": int(job.flows),
        "events_per_s": round(outcome.events / sum(loop_seconds)),
        "completion_ms": round(job.completion_ns / 1e6, 3),
        "ideal_ms": round(job.ideal_completion_ns / 1e6, 3),
        "busbw_gbps": round(float(job.busbw_gbps), 1),
        "phases_s": {
            **{name: round(seconds, 3) for name, seconds in outcome.phase_seconds.items()},
            "engine_event_loop": round(sum(loop_seconds), 3),  # part of "engine"
        },
    }


@benchmark("simulator.flow.ring1024.k16.ecmp")
def ring1024_k16_ecmp() -> dict:
    return _ring_at_scale(16, 1024, "ECMP")


@benchmark("simulator.flow.ring1024.k16.adaptive")
def ring1024_k16_adaptive() -> dict:
    return _ring_at_scale(16, 1024, "ADAPTIVE")


@benchmark("simulator.flow.ring1024.k32.ecmp")
def ring1024_k32_ecmp() -> dict:
    return _ring_at_scale(32, 1024, "ECMP")


def _scale_spec(snapshot, fidelity: str, mode: str, ranks: int) -> dict:
    """The scale job: a 64 MiB ring AllReduce over `ranks` randomly placed ranks (bench_engine's)."""
    return {
        "fabric": snapshot.fabric,
        "fidelity": fidelity,
        "jobs": [
            {"collective": "ALL_REDUCE", "size_bytes": 64 << 20, "rank_count": ranks, "placement": "RANDOM"}
        ],
        "load_balancing": {"mode": mode, "seed": 1},
        "switch_latency_ns": 300,
        "seed": 1,
    }


def _steady_figures(outcome) -> dict:
    """Its passes over the ring and, where the duties changed the rates, the completion at the max-min
    rates alone (every flow meeting the others always), as its model notes state them."""
    notes = " ".join(outcome.model_notes)
    passes = re.search(r"step by step in (\d+) passes", notes)
    all_meet = re.search(r"would have ended (\d+) ns after its start", notes)
    return {
        "passes": int(passes.group(1)) if passes else None,
        "all_meet_ms": round(int(all_meet.group(1)) / 1e6, 4) if all_meet else None,
    }


def _ring8192_k32(mode: str) -> dict:
    """The 8,192-rank job of `engine.allreduce.k32` at FLOW_STEADY, each phase timed as there: the
    fabric's generation, routing and snapshot, its transfer as the simulator service receives it,
    the checks and workload, the engine's routes, steady state and series, the results."""
    warm_up_flow_engines()
    snapshot, _, phases = timed_fabric(32)
    spec = _scale_spec(snapshot, "FLOW_STEADY", mode, 8192)
    estimate = check_simulation(SimulationSpec.from_dict(spec), snapshot).estimate
    start = time.perf_counter()
    outcome = run_simulation(spec, snapshot)
    wall = time.perf_counter() - start
    phases.update(outcome.phase_seconds)
    job = outcome.jobs[0]
    return {
        "ranks": 8192,
        "fidelity": "FLOW_STEADY",
        "transfers": estimate.transfers,
        "memory_estimate_gb": round(estimate.memory_bytes / 2**30, 2),
        "wall_s_simulation": round(wall, 2),
        "wall_s_with_fabric": round(wall + phases["generate"] + phases["route_and_snapshot"], 2),
        "completion_ms": round(job.completion_ns / 1e6, 3),
        "ideal_ms": round(job.ideal_completion_ns / 1e6, 3),
        "busbw_gbps": round(float(job.busbw_gbps), 1),
        "links_with_series": len(outcome.series.channels),
        **_steady_figures(outcome),
        "phases_s": {name: round(seconds, 3) for name, seconds in phases.items()},
    }


@benchmark("simulator.flow.ring8192.k32.ecmp")
def ring8192_k32_ecmp() -> dict:
    return _ring8192_k32("ECMP")


@benchmark("simulator.flow.ring8192.k32.adaptive")
def ring8192_k32_adaptive() -> dict:
    return _ring8192_k32("ADAPTIVE")


ECMP_SEEDS = 4


@benchmark("simulator.flow.ring8192.k32.ecmp_seeds")
def ring8192_k32_ecmp_seeds() -> dict:
    """A what-if sweep at scale: the 8,192-rank ring at FLOW_STEADY under ECMP with `ECMP_SEEDS` hash
    seeds (placement fixed), beside ADAPTIVE's even split, at 64 MiB (8 KiB a step) and 1 GiB
    (128 KiB a step): how much the hash's luck costs as the ring turns from latency- to
    bandwidth-bound."""
    warm_up_flow_engines()
    snapshot = route_and_snapshot(fat_tree(32))
    figures: dict = {"seeds": ECMP_SEEDS}
    walls = []
    for label, size in (("64MiB", 64 << 20), ("1GiB", 1 << 30)):
        completions = []
        for seed in range(1, ECMP_SEEDS + 1):
            spec = _scale_spec(snapshot, "FLOW_STEADY", "ECMP", 8192)
            spec["load_balancing"]["seed"] = seed
            spec["jobs"][0]["size_bytes"] = size
            start = time.perf_counter()
            completions.append(run_simulation(spec, snapshot).jobs[0].completion_ns / 1e6)
            walls.append(time.perf_counter() - start)
        spec = _scale_spec(snapshot, "FLOW_STEADY", "ADAPTIVE", 8192)
        spec["jobs"][0]["size_bytes"] = size
        adaptive = run_simulation(spec, snapshot).jobs[0]
        figures[label] = {
            "ecmp_completion_ms": [round(c, 3) for c in completions],
            "adaptive_ms": round(adaptive.completion_ns / 1e6, 3),
            "ideal_ms": round(adaptive.ideal_completion_ns / 1e6, 3),
            "ecmp_over_adaptive_pct": [
                round(100 * (c * 1e6 / adaptive.completion_ns - 1), 2) for c in completions
            ],
        }
    figures["wall_s_per_ecmp_point"] = round(sum(walls) / len(walls), 2)
    return figures


def _steady_beside_flow(k: int, ranks: int, mode: str, size_bytes: int = 64 << 20) -> dict:
    """The scale job at FLOW_STEADY and at FLOW, one after the other in this process: how much
    faster the steady state is, and how far its completion is from the FLOW loop's."""
    warm_up_flow_engines()
    snapshot = route_and_snapshot(fat_tree(k))
    figures = {}
    for fidelity in ("FLOW_STEADY", "FLOW"):
        start = time.perf_counter()
        spec = _scale_spec(snapshot, fidelity, mode, ranks)
        spec["jobs"][0]["size_bytes"] = size_bytes
        outcome = run_simulation(spec, snapshot)
        figures[fidelity] = (time.perf_counter() - start, outcome.jobs[0])
        if fidelity == "FLOW_STEADY":
            steady_figures = _steady_figures(outcome)
    (steady_s, steady), (flow_s, flow) = figures["FLOW_STEADY"], figures["FLOW"]
    return {
        "ranks": ranks,
        "size_bytes": size_bytes,
        "steady_wall_s": round(steady_s, 2),
        "flow_wall_s": round(flow_s, 2),
        "speedup": round(flow_s / steady_s, 1),
        "steady_completion_ms": round(steady.completion_ns / 1e6, 4),
        "flow_completion_ms": round(flow.completion_ns / 1e6, 4),
        "completion_diff_pct": round(
            100 * (steady.completion_ns - flow.completion_ns) / flow.completion_ns, 3
        ),
        "ideal_ms": round(flow.ideal_completion_ns / 1e6, 4),
        **steady_figures,
    }


@benchmark("simulator.flow.steady_vs_flow.ring1024.k16.ecmp")
def steady_vs_flow_k16_ecmp() -> dict:
    return _steady_beside_flow(16, 1024, "ECMP")


@benchmark("simulator.flow.steady_vs_flow.ring1024.k16.adaptive")
def steady_vs_flow_k16_adaptive() -> dict:
    return _steady_beside_flow(16, 1024, "ADAPTIVE")


@benchmark("simulator.flow.steady_vs_flow.ring1024.k32.ecmp")
def steady_vs_flow_k32_ecmp() -> dict:
    return _steady_beside_flow(32, 1024, "ECMP")


@benchmark("simulator.flow.steady_vs_flow.ring2048.k32.ecmp")
def steady_vs_flow_2048_k32_ecmp() -> dict:
    return _steady_beside_flow(32, 2048, "ECMP")


@benchmark("simulator.flow.steady_vs_flow.ring2048.k32.ecmp_256mib")
def steady_vs_flow_2048_k32_ecmp_256mib() -> dict:
    """128 KiB a step: the ring bandwidth-bound, as the 1 GiB ring of `ring8192.k32.ecmp_seeds`."""
    return _steady_beside_flow(32, 2048, "ECMP", 256 << 20)


def _small_fabric(k: int, gbps: int):
    return route_and_snapshot(fat_tree(k, link_speed_gbps=gbps, link_latency_ns=500))


def _steady_flow_and_all_meeting(raw: dict, snapshot) -> tuple[list[int], list[int], list[int]]:
    """Each job's completion at FLOW_STEADY, at FLOW, and at the all-meeting rates (its notes)."""
    steady = run_simulation({**raw, "fidelity": "FLOW_STEADY"}, snapshot)
    flow = run_simulation({**raw, "fidelity": "FLOW"}, snapshot)
    notes = " ".join(steady.model_notes)
    meeting = {
        m["label"]: int(m["ns"])
        for m in re.finditer(r"(?P<label>[\w-]+) would have ended (?P<ns>\d+) ns", notes)
    }
    steady_ns = [job.completion_ns for job in steady.jobs]
    return (
        steady_ns,
        [job.completion_ns for job in flow.jobs],
        [meeting.get(j.label, c) for j, c in zip(steady.jobs, steady_ns, strict=True)],
    )


def _pct(a: float, b: float) -> float:
    return round(100 * (a / b - 1), 2)


@benchmark("simulator.flow.steady_vs_flow.small_rings")
def steady_vs_flow_small_rings() -> dict:
    """24 single ECMP rings (16 and 128 ranks, 96 KiB to 16 MiB, k=4 at 100 Gb/s and k=8 at 400, three
    seeds): FLOW_STEADY's distance from FLOW, and the all-meeting figure's."""
    warm_up_flow_engines()
    steady_pct, meeting_pct, between = [], [], 0
    for k, gbps in ((4, 100), (8, 400)):
        snapshot = _small_fabric(k, gbps)
        for ranks, size in ((16, 96 << 10), (16, 1 << 20), (16, 16 << 20), (k**3 // 4, 4 << 20)):
            for seed in (1, 5, 9):
                raw = _scale_spec(snapshot, "FLOW", "ECMP", ranks)
                raw["jobs"][0]["size_bytes"], raw["seed"] = size, seed
                (steady,), (flow,), (meeting,) = _steady_flow_and_all_meeting(raw, snapshot)
                steady_pct.append(_pct(steady, flow))
                meeting_pct.append(_pct(meeting, flow))
                between += min(steady, meeting) <= flow <= max(steady, meeting)
    return {
        "rings": len(steady_pct),
        "steady_vs_flow_pct": [min(steady_pct), max(steady_pct)],
        "all_meeting_vs_flow_pct": [min(meeting_pct), max(meeting_pct)],
        "flow_between_the_two": between,
    }


@benchmark("simulator.flow.steady_vs_flow.ring_pairs")
def steady_vs_flow_ring_pairs() -> dict:
    """18 pairs of ECMP rings (64 + 64 ranks of 8 MiB on k=8 at 400 Gb/s, 8 + 8 of 1 MiB on k=4 at
    100, three seeds, the second ring starting with the first, a little later, or later still):
    FLOW_STEADY's distance from FLOW per job."""
    warm_up_flow_engines()
    per_job = []
    for k, gbps, ranks, size, later in (
        (8, 400, 64, 8 << 20, (300_000, 700_000)),
        (4, 100, 8, 1 << 20, (20_000, 60_000)),
    ):
        snapshot = _small_fabric(k, gbps)
        for seed in (1, 5, 9):
            for start in (0, *later):
                raw = _scale_spec(snapshot, "FLOW", "ECMP", ranks)
                raw["jobs"][0]["size_bytes"], raw["seed"] = size, seed
                raw["jobs"].append({**raw["jobs"][0], "start_ns": start})
                steady, flow, _ = _steady_flow_and_all_meeting(raw, snapshot)
                per_job += [_pct(s, f) for s, f in zip(steady, flow, strict=True)]
    return {"pairs": len(per_job) // 2, "steady_vs_flow_pct": [min(per_job), max(per_job)]}
