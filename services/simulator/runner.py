"""One simulation from spec to outcome: validate, generate traffic, route, run the engine, assemble.

`run_simulation` is plain Python and picklable end to end, so the service runs it in a worker
process (`run_in_worker`, through services.common.workers.WorkerPool) and core tests call it
directly.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from services.common.errors import FabricTwinError, InvalidArgument
from services.common.snapshot import FabricSnapshot
from services.simulator.bounds import run_limit_notes, run_time_limit_ns
from services.simulator.checks import check_simulation
from services.simulator.flow_model import Cancelled, simulate_flows
from services.simulator.link_faults import WhatIf
from services.simulator.packet.outcome import run_packet_simulation
from services.simulator.paths import flow_outcomes, route_workload
from services.simulator.pinning import flow_option_notes
from services.simulator.placement import HostDirectory
from services.simulator.results import (
    SimulationOutcome,
    channel_totals,
    ideal_completion_ns,
    job_outcome,
    uplink_skew,
)
from services.simulator.series import channel_series, default_sample_interval_ns
from services.simulator.spec import (
    Algorithm,
    Fidelity,
    LoadBalancingMode,
    SimulationSpec,
    Transport,
)
from services.simulator.workload import build_workload

__all__ = ["WorkerFailure", "model_notes", "run_in_worker", "run_simulation"]


@dataclasses.dataclass
class WorkerFailure:
    """A domain error raised in a worker, carried back as data (code name and message)."""

    code: str
    message: str


def model_notes(spec: SimulationSpec) -> list[str]:
    """What the FLOW model does and does not model for this spec, in words a reader can check."""
    lb = spec.load_balancing
    assert lb is not None and lb.mode is not None
    notes = [
        "FLOW fidelity: max-min fair sharing of link bandwidth, recomputed at every flow start and "
        "end; no queues, drops, PFC or retransmissions.",
        "Payload moves at the link rate (RoCEv2/IB header overhead ignored); the ideal completion "
        "uses the same rate.",
        "Collective steps wait per rank, not at a global barrier: a chunk is sent once the data it "
        "needs has arrived and the rank's previous send on the connection has left.",
    ]
    if lb.mode == LoadBalancingMode.ECMP:
        seeds = "the same seed on every switch" if lb.same_seed_everywhere else "a seed per switch"
        qp = " and destination QP" if lb.hash_destination_qp else ""
        notes.append(
            f"ECMP at FLOW fidelity: each QP flow pinned to one path by {lb.ecmp_hash.value} of its "
            f"5-tuple{qp} with {seeds}."
        )
    else:
        notes.append(
            f"{lb.mode.value} at FLOW fidelity: modelled as an even split over equal-cost paths "
            "(fluid limit; per hop, evenly over the equal-cost group)."
        )
    if lb.mode == LoadBalancingMode.SPRAY:
        notes.append("SPRAY at FLOW fidelity: the NIC reorder buffer is not modelled (peak reported as 0).")
    if any(job.iterations > 1 for job in spec.jobs):
        notes.append("With several iterations, completion_ns covers all of them; algbw/busbw use the mean.")
    if spec.transport == Transport.INFINIBAND:
        notes.append("InfiniBand transport: credits and VLs do not change FLOW results.")
    notes += flow_option_notes(spec)
    if any(job.algorithm == Algorithm.SHARP for job in spec.jobs):
        notes.append(
            "SHARP at FLOW fidelity: one aggregation tree per job; each switch reduces a chunk once it has "
            "arrived from all its children and forwards it whole (SHARP hardware streams packets); SHARP "
            "hops stay on the tree's links whatever the load-balancing mode."
        )
    return notes


def run_simulation(
    spec: SimulationSpec | Mapping[str, Any],
    snapshot: FabricSnapshot,
    progress: Callable[[float], bool] | None = None,
    what_if: WhatIf | None = None,
) -> SimulationOutcome:
    """Simulate `spec` on `snapshot` (FLOW, or PACKET with `what_if` routes for LINK_DOWN faults).

    `progress(fraction)` is called now and then; returning False cancels (raises Cancelled).
    Raises InvalidArgument / FailedPrecondition naming the offending field, host or link.
    """
    wall = time.perf_counter()
    if not isinstance(spec, SimulationSpec):
        spec = SimulationSpec.from_dict(spec)
    check_simulation(spec, snapshot)  # what StartSimulation checked, for core callers too
    assert spec.load_balancing is not None
    if spec.fidelity == Fidelity.PACKET:
        return run_packet_simulation(spec, snapshot, progress, what_if)
    workload = build_workload(spec, snapshot)
    routes, flow_route = route_workload(spec.load_balancing, snapshot, workload, spec.switch_latency_ns)
    run = simulate_flows(
        workload, flow_route, routes, snapshot.channel_rate_bps(), run_time_limit_ns(spec), progress
    )
    interval = spec.sample_interval_ns or default_sample_interval_ns(run.end_ns)
    route_count = len(routes.latency_ns)
    route_of_entry = np.repeat(np.arange(route_count), np.diff(routes.offsets))
    flows_per_route = np.bincount(flow_route, minlength=route_count)
    crossing = np.bincount(
        routes.channels, weights=flows_per_route[route_of_entry], minlength=snapshot.num_channels
    )
    exact_bytes = None
    if not run.time_limited:  # every flow finished: each channel carried exactly its flows' bytes
        bytes_per_route = np.bincount(flow_route, weights=workload.flow_size_bytes, minlength=route_count)
        exact_bytes = np.bincount(
            routes.channels,
            weights=routes.fractions * bytes_per_route[route_of_entry],
            minlength=snapshot.num_channels,
        )
    series = channel_series(
        run.record_time_ns,
        run.record_channel,
        run.record_load_bps,
        snapshot.channel_rate_bps(),
        run.end_ns,
        interval,
        exact_bytes,
    )
    totals = channel_totals(snapshot, series, crossing, run.end_ns)
    names = HostDirectory(snapshot).names
    flow_latency = routes.latency_ns[flow_route]
    jobs = [
        job_outcome(
            plan,
            workload,
            j,
            run.flow_finish_ns,
            ideal_completion_ns(plan, workload, j, flow_latency, snapshot),
            names,
        )
        for j, plan in enumerate(workload.jobs)
    ]
    notes = model_notes(spec) + run_limit_notes(spec, jobs, run.time_limited, series.interval_ns)
    rank_hosts = np.concatenate([plan.hosts for plan in workload.jobs])
    return SimulationOutcome(
        fabric=snapshot.fabric,
        routing_version=snapshot.routing_version,
        jobs=jobs,
        makespan_ns=run.end_ns,
        channels=totals,
        series=series,
        flows=flow_outcomes(workload, routes, flow_route, run.flow_start_ns, run.flow_finish_ns, names),
        uplink_skew=uplink_skew(snapshot, totals, rank_hosts, run.end_ns),
        events=run.events,
        wall_seconds=time.perf_counter() - wall,
        sample_interval_ns=series.interval_ns,
        model_notes=notes,
    )


def run_in_worker(
    spec: SimulationSpec,
    snapshot: FabricSnapshot,
    progress: Callable[[float], bool] | None = None,
    what_if: WhatIf | None = None,
) -> SimulationOutcome | WorkerFailure:
    """`run_simulation` for a worker process: domain errors come back as a WorkerFailure value.

    (Domain exceptions take two constructor arguments and do not survive pickling.) Fields named
    by InvalidArgument are prefixed with `spec.`, as the service's caller knows them.
    """
    try:
        if progress is not None and not progress(0.0):  # tells the service the run has started
            raise Cancelled()
        return run_simulation(spec, snapshot, progress, what_if)
    except Cancelled:
        return WorkerFailure("CANCELLED", "cancelled")
    except InvalidArgument as exc:  # fields of the spec, named as in the request
        return WorkerFailure(exc.code, f"spec.{exc}")
    except FabricTwinError as exc:
        return WorkerFailure(exc.code, str(exc))
