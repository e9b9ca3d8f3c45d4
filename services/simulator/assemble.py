"""The one outcome assembler: what an engine measured -> `SimulationOutcome`, the same for FLOW and
PACKET (per-job completions against their ideals, per-flow results, uplink skew, the notes on the
run's limits), so nothing downstream knows which engine ran.

An engine hands over an `EngineRun`: its routes, per-flow times, the channel series and totals it
measured (their counters differ by engine; their shape does not), each job's ideal, its model
notes, and (PACKET) what only a packet-level run can tell.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from services.common.snapshot import FabricSnapshot
from services.simulator.bounds import run_limit_notes
from services.simulator.placement import HostDirectory
from services.simulator.results import (
    ChannelTotals,
    FlowOutcomes,
    PacketStats,
    SimulationOutcome,
    job_last_finish_ns,
    job_outcome,
    uplink_skew,
)
from services.simulator.routes import FlowRoutes
from services.simulator.series import ChannelSeries
from services.simulator.spec import SimulationSpec
from services.simulator.workload import Workload

__all__ = ["EngineRun", "assemble_outcome", "flow_outcomes"]


@dataclasses.dataclass
class EngineRun:
    """What an engine measured, in the shape the assembler takes."""

    routes: FlowRoutes
    flow_route: np.ndarray  # int64 [F], row of `routes`
    flow_start_ns: np.ndarray  # int64 [F], -1 if it never started
    flow_finish_ns: np.ndarray  # int64 [F], -1 if it never finished
    end_ns: int
    events: int
    time_limited: bool
    series: ChannelSeries
    totals: ChannelTotals
    ideals: list[int]  # per job, ideal.job_ideals
    notes: list[str]  # the engine's model notes
    packets: PacketStats | None = None
    flow_counters: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    job_counters: list[dict[str, int]] | None = None  # per job
    # A streamed run (PACKET, workload.RingStream): the per-flow arrays above are its first flows,
    # `flow_workload` those flows as a held workload, `job_finish_ns` each job's last flow's finish
    # (-1: some flow never finished) and `flow_count` all its flows.
    flow_workload: Workload | None = None
    job_finish_ns: list[int] | None = None
    flow_count: int = -1
    phase_seconds: dict[str, float] = dataclasses.field(default_factory=dict)  # the engine's phases


def assemble_outcome(
    spec: SimulationSpec, snapshot: FabricSnapshot, workload: Workload, run: EngineRun, started: float
) -> SimulationOutcome:
    """The outcome of `run` (`started`: time.perf_counter() when the simulation began)."""
    names = HostDirectory(snapshot).names
    last = run.job_finish_ns
    if last is None:
        last = [job_last_finish_ns(workload, j, run.flow_finish_ns) for j in range(len(workload.jobs))]
    jobs = [
        job_outcome(plan, finish, ideal, names)
        for plan, finish, ideal in zip(workload.jobs, last, run.ideals, strict=True)
    ]
    for job, counters in zip(jobs, run.job_counters or [], strict=False):
        job.counters = counters
    held = run.flow_workload or workload
    flows = flow_outcomes(held, run.routes, run.flow_route, run.flow_start_ns, run.flow_finish_ns, names)
    flows.counters = run.flow_counters
    if run.flow_count >= 0:
        flows.count = run.flow_count
    rank_hosts = np.concatenate([plan.hosts for plan in workload.jobs])
    outcome = SimulationOutcome(
        fabric=snapshot.fabric,
        routing_version=snapshot.routing_version,
        jobs=jobs,
        makespan_ns=run.end_ns,
        channels=run.totals,
        series=run.series,
        flows=flows,
        uplink_skew=uplink_skew(snapshot, run.totals, rank_hosts, run.end_ns),
        events=run.events,
        wall_seconds=time.perf_counter() - started,
        sample_interval_ns=run.series.interval_ns,
        model_notes=list(spec.fabric_notes)
        + run.notes
        + run_limit_notes(spec, jobs, run.time_limited, run.series.interval_ns),
        packets=run.packets,
    )
    # The engine's own phases, and the rest (assembling this outcome) as "results".
    phases = dict(run.phase_seconds) or {"engine": 0.0}
    rest = max(0.0, outcome.wall_seconds - sum(phases.values()))
    phases["results" if run.phase_seconds else "engine"] = rest
    outcome.phase_seconds = phases
    return outcome


def flow_outcomes(
    workload: Workload,
    routes: FlowRoutes,
    flow_route: np.ndarray,
    start_ns: np.ndarray,
    finish_ns: np.ndarray,
    host_names: list[str],
) -> FlowOutcomes:
    """Per-flow results of either engine; links per route only where each flow had one path
    (ECMP, and pinned flows).

    Endpoint names are the hosts', then (SHARP) every node's: endpoint num_hosts + node.
    """
    if routes.pinned:
        path_offsets, path_links = routes.offsets, (routes.channels // 2).astype(np.int32)
    else:
        one_path = np.zeros(len(routes.latency_ns), dtype=bool)
        one_path[flow_route[workload.pinned]] = True
        counts = np.diff(routes.offsets) * one_path
        path_offsets = np.zeros(len(routes.offsets), dtype=np.int64)
        np.cumsum(counts, out=path_offsets[1:])
        path_links = (routes.channels[np.repeat(one_path, np.diff(routes.offsets))] // 2).astype(np.int32)
    return FlowOutcomes(
        job=workload.flow_job,
        source=workload.flow_source,
        destination=workload.flow_destination,
        size_bytes=workload.flow_size_bytes,
        start_ns=start_ns,
        finish_ns=finish_ns,
        udp_source_port=workload.flow_source_port,
        route=flow_route,
        path_offsets=path_offsets,
        path_links=path_links,
        host_names=list(host_names) + list(workload.endpoint_names)
        if workload.endpoint_names
        else host_names,
    )
