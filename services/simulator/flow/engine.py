"""The FLOW engine behind the `Engine` seam: route the workload by its mode, run the max-min fair
loop (model.py) on the flows' wire bytes (payload plus one header per packet), turn its record of
channel loads into series and totals, hand them to the shared assembler.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from services.common.snapshot import FabricSnapshot
from services.simulator.assemble import EngineRun, assemble_outcome
from services.simulator.bounds import run_time_limit_ns
from services.simulator.cancel import RESULTS_STAGE, report_stage, setup_stage
from services.simulator.engine import PlacedRun, Progress, RunFabric
from services.simulator.flow.integrate import DEFAULT_INTERVALS, LoadIntegrator
from services.simulator.flow.model import simulate_flows
from services.simulator.flow.notes import flow_model_notes
from services.simulator.ideal import expected_end_ns, job_ideals
from services.simulator.paths import route_workload
from services.simulator.results import SimulationOutcome, channel_totals
from services.simulator.series import MAX_SERIES_VALUES, first_interval_ns, refuse_sample_interval
from services.simulator.spec import SimulationSpec, wire_overhead_bytes
from services.simulator.workload import Workload, wire_bytes

__all__ = ["FlowEngine"]

# Per channel and interval: the integrator's edge (float64) and, at the end, the cumulative bytes,
# their rounding, bytes, capacity and utilisation (series.series_from_edges), 8 bytes each.
_SERIES_CELL_BYTES = 48
_SERIES_INTERVALS = DEFAULT_INTERVALS + 1  # edges of a run whose interval the engine chooses


class FlowEngine:
    """Fluid flows, max-min fair at every event (services.simulator.flow.model)."""

    def check_placed(
        self, spec: SimulationSpec, snapshot: FabricSnapshot, placed: PlacedRun
    ) -> list[tuple[int, ...]]:
        """Refuse a sample interval whose series cannot fit however the run goes (a row per link
        direction that carries traffic: at least one per sending host); a run that turns out longer
        gets a wider interval instead, which its model notes report. FLOW takes no LINK_DOWN faults
        (validation.py), so it needs no what-if routings."""
        interval = spec.sample_interval_ns
        if interval:
            senders = [
                len({f.source for f in job.flows}) if job.flows else len(hosts) - 1
                for job, hosts in zip(spec.jobs, placed.hosts, strict=True)
            ]
            channels = max(1, *senders)
            intervals = -(-placed.shortest_ns // interval)
            if channels * (intervals + 1) > MAX_SERIES_VALUES:
                most = MAX_SERIES_VALUES // max(1, channels) - 1
                refuse_sample_interval(interval, placed.shortest_ns, channels, most)
        return []

    def flow_memory_bytes(self, spec: SimulationSpec, snapshot: FabricSnapshot, flows: int) -> int:
        """Nothing per (flow, link): the fluid model keeps its routes' shares, counted per flow."""
        return 0

    def series_memory_bytes(self, spec: SimulationSpec, snapshot: FabricSnapshot, shortest_ns: int) -> int:
        """The series of every channel over the intervals the engine chooses (DEFAULT_INTERVALS), or
        more with a finer `sample_interval_ns`, at most MAX_SERIES_VALUES cells: the integrator keeps
        them as the run goes, whatever its number of events (flow/integrate.py)."""
        bins = _SERIES_INTERVALS
        if spec.sample_interval_ns:
            bins = max(bins, -(-shortest_ns // spec.sample_interval_ns) + 1)
        return _SERIES_CELL_BYTES * min(MAX_SERIES_VALUES, snapshot.num_channels * bins)

    def check(self, spec: SimulationSpec, fabric: RunFabric, workload: Workload) -> None:
        """Nothing beyond the checks every engine shares (checks.py): the FLOW model takes any
        spec they accept."""

    def simulate(
        self, spec: SimulationSpec, fabric: RunFabric, workload: Workload, progress: Progress | None
    ) -> SimulationOutcome:
        setup_stage(progress, "routing")
        started = time.perf_counter()
        snapshot = fabric.snapshot
        assert spec.load_balancing is not None
        routes, flow_route = route_workload(spec.load_balancing, snapshot, workload, spec.switch_latency_ns)
        # Every packet carries its header on the wire: flows move wire bytes at the link rate, so
        # links count wire bytes (as at PACKET fidelity) and busbw stays below the payload rate.
        header = wire_overhead_bytes(spec)
        on_the_wire = dataclasses.replace(
            workload, flow_size_bytes=wire_bytes(workload.flow_size_bytes, spec.mtu_bytes, header)
        )
        ideals = job_ideals(on_the_wire, routes.latency_ns[flow_route], snapshot)
        if spec.sample_interval_ns:
            loads = LoadIntegrator(spec.sample_interval_ns, fixed=True)
        else:  # from the run's expected length; it doubles if the run outlasts DEFAULT_INTERVALS
            first = first_interval_ns(expected_end_ns(spec, ideals), DEFAULT_INTERVALS)
            loads = LoadIntegrator(first, fixed=False)
        setup_stage(progress, "")  # simulating
        run = simulate_flows(
            on_the_wire,
            flow_route,
            routes,
            snapshot.channel_rate_bps(),
            loads,
            run_time_limit_ns(spec),
            progress,
        )
        report_stage(progress, RESULTS_STAGE)
        route_count = len(routes.latency_ns)
        route_of_entry = np.repeat(np.arange(route_count), np.diff(routes.offsets))
        flows_per_route = np.bincount(flow_route, minlength=route_count)
        crossing = np.bincount(
            routes.channels, weights=flows_per_route[route_of_entry], minlength=snapshot.num_channels
        )
        exact_bytes = None
        if not run.time_limited:  # every flow finished: each channel carried exactly its flows' bytes
            bytes_per_route = np.bincount(
                flow_route, weights=on_the_wire.flow_size_bytes, minlength=route_count
            )
            exact_bytes = np.bincount(
                routes.channels,
                weights=routes.fractions * bytes_per_route[route_of_entry],
                minlength=snapshot.num_channels,
            )
        series = loads.series(run.end_ns, snapshot.channel_rate_bps(), exact_bytes)
        measured = EngineRun(
            routes=routes,
            flow_route=flow_route,
            flow_start_ns=run.flow_start_ns,
            flow_finish_ns=run.flow_finish_ns,
            end_ns=run.end_ns,
            events=run.events,
            time_limited=run.time_limited,
            series=series,
            totals=channel_totals(snapshot, series, crossing, run.end_ns),
            ideals=ideals,
            notes=flow_model_notes(spec),
        )
        return assemble_outcome(spec, snapshot, workload, measured, started)
