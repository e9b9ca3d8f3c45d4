"""PACKET fidelity: runs the compiled loop over a run's arrays (`arrays.py`) in slices (progress,
cancellation, growing arrays, routing epochs), and returns what happened (`report.PacketRun`)."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from services.common.errors import FailedPrecondition
from services.common.snapshot import FabricSnapshot
from services.simulator.cancel import RESULTS_STAGE, Cancelled, check_cancelled, report_stage
from services.simulator.packet import layout as L
from services.simulator.packet.arrays import (
    MAX_BINS,
    MAX_PACKETS_PER_FLOW,
    MAX_SERIES_BYTES,
    EngineArrays,
    series_cell_bytes,
)
from services.simulator.packet.compile_cache import COMPILING_STAGE, engine_compiled
from services.simulator.packet.config import PacketEngineConfig
from services.simulator.packet.loop import run_events
from services.simulator.packet.report import (
    PacketRun,
    check_progress,
    pause_cycle,
    report_pause_deadlock,
    run_result,
)
from services.simulator.routes import FlowRoutes
from services.simulator.series import first_interval_ns
from services.simulator.workload import Workload

__all__ = ["MAX_BINS", "MAX_PACKETS_PER_FLOW", "MAX_SERIES_BYTES", "series_cell_bytes", "simulate_packets"]

_LAST_FRACTION = 0.999  # the most progress reported before the loop ends


def simulate_packets(
    workload: Workload,
    snapshot: FabricSnapshot,
    routes: FlowRoutes,
    flow_route: np.ndarray,
    config: PacketEngineConfig,
    progress: Callable[[float], bool] | None = None,
    phases: dict[str, float] | None = None,
) -> PacketRun:
    """Run the workload packet by packet; `progress(fraction)` returning False cancels (Cancelled).

    A `progress` with a `report_stage(text)` method is told COMPILING_STAGE while the engine compiles.
    `phases`, when given, receives the seconds of "engine_setup", "event_loop" (including the first
    run's compile) and "engine_report".
    """
    started = time.perf_counter()
    fixed = config.sample_interval_ns > 0
    if fixed:
        interval_ps = config.sample_interval_ns * 1000
    else:  # start fine; the interval doubles whenever the run outlasts MAX_BINS intervals
        # A power of two of whole nanoseconds, so the interval reported in ns is the one used.
        interval_ps = first_interval_ns(config.expected_end_ns, MAX_BINS) * 1000
    arrays = EngineArrays(snapshot, workload, routes, flow_route, config, interval_ps)
    check_cancelled(progress)
    loop_started = time.perf_counter()
    pool = arrays.pool  # a streamed ring: its transfers are generated as the loop asks
    if workload.stream is not None:
        total_bytes = max(1, int(workload.stream.sent_bytes().sum()))
    else:
        total_bytes = max(1, int(workload.flow_size_bytes.sum()))
    # The first run of this engine source compiles it (about a minute): say so to whoever waits, when
    # the progress callback can carry a stage (the service's WorkerProgress.report_stage).
    compiling = hasattr(progress, "report_stage") and not engine_compiled()
    report_stage(progress, COMPILING_STAGE if compiling else "")  # the setup is over: simulating
    while True:
        code = run_events(*arrays.state())
        if compiling:
            report_stage(progress, "")
            compiling = False
        if code == L.RC_DONE or code == L.RC_STOPPED:
            if code == L.RC_DONE and config.pfc and (arrays.f_finish < 0).any():
                report_pause_deadlock(arrays, snapshot)
            if code == L.RC_DONE and pool is not None and not pool.done:  # pragma: no cover - a bug
                raise RuntimeError(f"the event queue ran dry with transfers {pool.next}.. never generated")
            break
        if code == L.RC_MATERIALIZE:
            assert pool is not None, "a held run has every transfer"
            pool.materialize(arrays.schedule)
            continue
        if code == L.RC_BUDGET:
            # PFC watchdog: Go-Back-N timers keep the heap from emptying in a deadlock.
            if config.pfc and arrays.ch_paused.any() and pause_cycle(arrays):
                report_pause_deadlock(arrays, snapshot)
            check_progress(arrays, config)
            if progress is not None:
                if pool is not None:
                    done = pool.settled_bytes() / total_bytes
                else:
                    done = (arrays.f_recv.sum() + arrays.f_lost.sum()) / total_bytes
                # Below 1 until the run is over; 0.99 had left the last 1% without a change (4 s
                # of an 8,192-rank run, where the service shows a change of 0.1%).
                if not progress(min(_LAST_FRACTION, float(done))):
                    raise Cancelled()
        elif code == L.RC_GROW_HEAP:
            arrays.grow_heap()
        elif code == L.RC_GROW_PACKETS:
            arrays.grow_packets()
        elif code == L.RC_GROW_ROB:
            arrays.grow_slots()
        elif code == L.RC_GROW_BINS:
            arrays.grow_bins(fixed)
        elif code == L.RC_REROUTE:
            epoch = config.reroutes[int(arrays.sc[L.SC_EPOCH])]
            arrays.install_routes(epoch.snapshot, epoch.routes, epoch.flow_route)
            arrays.f_fl_ch[:] = -1  # flowlets start over on the new routes
            arrays.pr[L.PR_REROUTED] = 1  # ECMP packets in flight may be on an old path
        elif code == L.RC_LOOP:
            raise FailedPrecondition(
                f"a packet exceeded {arrays.max_hops} hops in {snapshot.fabric}: the routes loop"
            )
        elif code == L.RC_NO_ROUTE:
            raise FailedPrecondition(
                f"a switch of {snapshot.fabric} has no usable next hop toward a packet's destination "
                f"(routing version {snapshot.routing_version})"
            )
        else:  # pragma: no cover - a code the loop does not return
            raise RuntimeError(f"packet engine returned {code}")
    report_started = time.perf_counter()
    report_stage(progress, RESULTS_STAGE)
    result = run_result(arrays, code == L.RC_STOPPED)
    if phases is not None:
        phases["engine_setup"] = loop_started - started
        phases["event_loop"] = report_started - loop_started
        phases["engine_report"] = time.perf_counter() - report_started
    return result
