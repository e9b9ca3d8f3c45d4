"""The FLOW engines behind the `Engine` seam: route the workload by its mode, run the max-min fair
loop (model.py) on the flows' wire bytes (payload plus one header per packet), turn its record of
channel loads into series and totals, hand them to the shared assembler. FLOW_STEADY
(`SteadyFlowEngine`) runs ring jobs' steady state (steady.py) instead of the loop.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

import numpy as np

from services.common.errors import InvalidArgument
from services.common.snapshot import FabricSnapshot
from services.simulator.assemble import EngineRun, assemble_outcome
from services.simulator.bounds import run_time_limit_ns
from services.simulator.cancel import RESULTS_STAGE, report_stage, setup_stage
from services.simulator.engine import PlacedRun, Progress, RunFabric
from services.simulator.flow.integrate import DEFAULT_INTERVALS, LoadIntegrator
from services.simulator.flow.model import simulate_flows
from services.simulator.flow.notes import flow_model_notes, steady_model_notes
from services.simulator.flow.steady import route_entries, simulate_steady_rings, spread_rows
from services.simulator.ideal import expected_end_ns, job_ideals
from services.simulator.modes import mode_of
from services.simulator.paths import route_workload
from services.simulator.results import FLOW_RESULTS_LIMIT, SimulationOutcome, channel_totals
from services.simulator.routes import path_channels, widest_even_split
from services.simulator.series import (
    MAX_SERIES_VALUES,
    first_interval_ns,
    refuse_sample_interval,
    series_from_edges,
)
from services.simulator.spec import Algorithm, SimulationSpec, wire_overhead_bytes
from services.simulator.workload import Workload, is_ring, stream_head, wire_bytes

__all__ = ["FlowEngine", "SteadyFlowEngine"]

# Per channel and interval: the integrator's edge (float64) and, at the end, the cumulative bytes,
# their rounding, bytes, capacity and utilisation (series.series_from_edges), 8 bytes each.
_SERIES_CELL_BYTES = 48
_SERIES_INTERVALS = DEFAULT_INTERVALS + 1  # edges of a run whose interval the engine chooses
_ROUTE_BYTES_PER_ENTRY = 100  # a route entry while routed (and FLOW_STEADY's passes' copies after)


def _first_interval(spec: SimulationSpec, ideals: list[int]) -> tuple[int, bool]:
    """(interval, fixed): the caller's `sample_interval_ns`, or one from the run's expected length
    that doubles if the run outlasts DEFAULT_INTERVALS (integrate.LoadIntegrator)."""
    if spec.sample_interval_ns:
        return spec.sample_interval_ns, True
    return first_interval_ns(expected_end_ns(spec, ideals), DEFAULT_INTERVALS), False


def _series_bins(spec: SimulationSpec, shortest_ns: int) -> int:
    """Interval edges a run's series take at first: the engine's DEFAULT_INTERVALS, or more with a
    finer `sample_interval_ns` over a run of at least `shortest_ns`."""
    if spec.sample_interval_ns:
        return max(_SERIES_INTERVALS, -(-shortest_ns // spec.sample_interval_ns) + 1)
    return _SERIES_INTERVALS


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

    def flow_memory_bytes(
        self, spec: SimulationSpec, snapshot: FabricSnapshot, flows: int, connections: Sequence[int]
    ) -> int:
        """The routes' entries, at routing's peak (~100 B an entry: 4.3M entries, ADAPTIVE's even
        split of an 8,192-rank ring on k=32, took ~420 MB): under a mode that pins flows a route per
        QP of a connection, on one up-down path; else a route per connection, over every equal-cost
        path (`routes.widest_even_split`: 546 channels on k=32). A 256-rank AllToAll under ADAPTIVE
        on k=32, uncounted, was estimated at 667 MB and peaked at 4.0 GB."""
        assert spec.load_balancing is not None
        if mode_of(spec.load_balancing).pins_flows:
            qps = [max(1, job.qps_per_connection) for job in spec.jobs]
            rows = sum(c * q for c, q in zip(connections, qps, strict=True))
            per_row = path_channels(snapshot)
        else:
            rows, per_row = sum(connections), widest_even_split(snapshot)
        return _ROUTE_BYTES_PER_ENTRY * rows * per_row

    def series_memory_bytes(self, spec: SimulationSpec, snapshot: FabricSnapshot, shortest_ns: int) -> int:
        """The series of every channel over the intervals the engine chooses (DEFAULT_INTERVALS), or
        more with a finer `sample_interval_ns`, at most MAX_SERIES_VALUES cells: the integrator keeps
        them as the run goes, whatever its number of events (flow/integrate.py)."""
        return _SERIES_CELL_BYTES * min(
            MAX_SERIES_VALUES, snapshot.num_channels * _series_bins(spec, shortest_ns)
        )

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
        loads = LoadIntegrator(*_first_interval(spec, ideals))
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


class SteadyFlowEngine(FlowEngine):
    """Ring jobs' steady state (steady.py): one rate per QP flow, each ring's steps computed from
    them. The checks on the sample interval and the series' memory are FLOW's; the workload is the
    rings' connections (a workload.RingStream each), whatever their size."""

    def check_placed(
        self, spec: SimulationSpec, snapshot: FabricSnapshot, placed: PlacedRun
    ) -> list[tuple[int, ...]]:
        """Refuse any job but a ring, then FLOW's checks."""
        for index, job in enumerate(spec.jobs):
            if not is_ring(job):
                field = "collective" if job.algorithm == Algorithm.RING else "algorithm"
                what = (
                    job.collective.value if field == "collective" and job.collective else job.algorithm.value
                )
                raise InvalidArgument(
                    f"spec.jobs[{index}].{field}",
                    f"FLOW_STEADY models rings (AllReduce, ReduceScatter and AllGather by RING), not {what}: "
                    "use FLOW fidelity",
                )
        return super().check_placed(spec, snapshot, placed)

    def series_memory_bytes(self, spec: SimulationSpec, snapshot: FabricSnapshot, shortest_ns: int) -> int:
        """FLOW's, and each QP flow's bits per interval edge, binned then cumulative (16 B): at most
        MAX_SERIES_VALUES of them (steady.py widens the interval to keep them so)."""
        rows = sum((len(job.hosts) or job.rank_count) * max(1, job.qps_per_connection) for job in spec.jobs)
        bits = 16 * min(MAX_SERIES_VALUES, rows * _series_bins(spec, shortest_ns))
        return super().series_memory_bytes(spec, snapshot, shortest_ns) + bits

    def flow_memory_bytes(
        self, spec: SimulationSpec, snapshot: FabricSnapshot, flows: int, connections: Sequence[int]
    ) -> int:
        """FLOW's route entries, and each ring's per-chunk state: per (rank, chunk) two steps'
        arrivals; per (phase, segment size, chunk, rank, QP) a duration and its two temporaries (a
        ring of many chunks is large)."""
        phases = 2 * len(spec.jobs) + 1
        state = sum(
            8
            * (len(job.hosts) or job.rank_count)
            * max(1, job.chunks)
            * (2 + 3 * phases * 2 * max(1, job.qps_per_connection))
            for job in spec.jobs
        )
        return super().flow_memory_bytes(spec, snapshot, flows, connections) + state

    def simulate(
        self, spec: SimulationSpec, fabric: RunFabric, workload: Workload, progress: Progress | None
    ) -> SimulationOutcome:
        setup_stage(progress, "routing")
        started = time.perf_counter()
        snapshot = fabric.snapshot
        assert workload.rings is not None and spec.load_balancing is not None
        routes, flow_route = route_workload(spec.load_balancing, snapshot, workload, spec.switch_latency_ns)
        header = wire_overhead_bytes(spec)
        latency = routes.latency_ns[flow_route]
        # The ideal counts the bytes each rank sends on the wire, as FLOW's does.
        rings = [dataclasses.replace(ring, wire=(spec.mtu_bytes, header)) for ring in workload.rings]
        ideals = job_ideals(dataclasses.replace(workload, rings=rings), latency, snapshot)
        first = _first_interval(spec, ideals)
        qp_flow, channel, fraction = entries = route_entries(routes, flow_route)
        ids, compact = np.unique(channel, return_inverse=True)
        routed = time.perf_counter()
        setup_stage(progress, "")  # simulating
        run = simulate_steady_rings(
            rings,
            entries,
            len(ids),
            snapshot.channel_rate_bps(),
            latency,
            (spec.mtu_bytes, header),
            first,
            FLOW_RESULTS_LIMIT,
            run_time_limit_ns(spec),
            progress,
        )
        computed = time.perf_counter()
        report_stage(progress, RESULTS_STAGE)
        edges = np.zeros((len(ids), run.row_edge_bits.shape[1]))
        spread_rows(qp_flow, compact, fraction, run.row_edge_bits, edges)
        carried = edges[:, -1] > 0
        exact_bytes = None
        if not run.time_limited:  # every transfer finished: each channel carried its flows' wire bytes
            exact_bytes = np.bincount(
                channel, weights=fraction * run.sent_wire_bytes[qp_flow], minlength=snapshot.num_channels
            )
        series = series_from_edges(
            ids[carried],
            edges[carried],
            snapshot.channel_rate_bps(),
            run.end_ns,
            run.interval_ns,
            exact_bytes,
        )
        # Every transfer of a rank's connection follows its QP flows' rows: as many flows per row.
        flows_per_row = np.repeat(
            [ring.transfers // ring.ranks for ring in rings], [ring.ranks * ring.qps for ring in rings]
        )
        crossing = np.bincount(channel, weights=flows_per_row[qp_flow], minlength=snapshot.num_channels)
        head, qp_row = stream_head(workload, len(run.head_finish_ns))
        completions = [
            last - ring.job.start_ns if last >= 0 else 0
            for last, ring in zip(run.last_finish_ns, rings, strict=True)
        ]
        measured = EngineRun(
            routes=routes,
            flow_route=flow_route[qp_row],
            flow_start_ns=run.head_start_ns,
            flow_finish_ns=run.head_finish_ns,
            end_ns=run.end_ns,
            events=run.transfers,
            time_limited=run.time_limited,
            series=series,
            totals=channel_totals(snapshot, series, crossing.astype(np.int64), run.end_ns),
            ideals=ideals,
            notes=steady_model_notes(
                spec,
                run,
                completions,
                sum(r.flows for r in rings),
                min(len(head.flow_job), FLOW_RESULTS_LIMIT),
            ),
            flow_workload=head,
            job_finish_ns=run.last_finish_ns,
            flow_count=sum(ring.flows for ring in rings),
            phase_seconds={
                "routes": routed - started,
                "steady_state": computed - routed,
                "series": time.perf_counter() - computed,
            },
        )
        return assemble_outcome(spec, snapshot, workload, measured, started)
