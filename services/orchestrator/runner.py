"""Executes a scenario run: one simulation per mode and sweep point, spread over simulator replicas.

Free of gRPC: it talks to the other services through the Protocols in `peers.py`. A run's progress
is the fraction of its simulations that have finished; every change goes to a `RunRecord` (saved,
then announced to watchers): the whole run at its start and end, one result as its simulation
starts or ends, so a change costs the size of one result, not of the run. A simulation whose
replica went away (`SimulatorLost`) is started again on one that answers, at most `reruns` times:
a simulation is deterministic, so the re-run's result is the one the lost run would have given. A
mode fails only when no replica can take it.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from fabrictwin.v1 import common_pb2, scenario_pb2, simulation_pb2, telemetry_pb2

from services.common.errors import FabricTwinError, Unavailable, status_code_number
from services.orchestrator.peers import SimulatorLost, SimulatorPeer, TelemetryPeer
from services.orchestrator.scenarios import PlannedSimulation

__all__ = ["RunRecord", "execute_run"]

log = logging.getLogger("fabrictwin.orchestrator")

_TERMINAL = (common_pb2.JOB_STATE_SUCCEEDED, common_pb2.JOB_STATE_FAILED, common_pb2.JOB_STATE_CANCELLED)


class RunRecord(Protocol):
    """Where a run's changes go: saved, then announced to its watchers."""

    async def run_changed(self, run: scenario_pb2.Run) -> None:
        """The run as a whole, its own fields and every result: at its start and its end."""

    async def result_changed(self, run: scenario_pb2.Run, position: int) -> None:
        """`run.results[position]` alone, as its simulation starts or ends."""


def _fill_result(result: scenario_pb2.ModeResult, simulation: simulation_pb2.Simulation) -> None:
    result.state = simulation.state
    if simulation.state == common_pb2.JOB_STATE_SUCCEEDED:
        outcome = simulation.result
        result.makespan_ns = outcome.makespan_ns
        if outcome.jobs:
            result.busbw_gbps = outcome.jobs[0].busbw_gbps
            result.ideal_completion_ns = outcome.jobs[0].ideal_completion_ns
        result.jobs.extend(outcome.jobs)
        result.uplink_skew.CopyFrom(outcome.uplink_skew)
        result.model_notes.extend(outcome.model_notes)
    elif simulation.HasField("error"):
        result.error.CopyFrom(simulation.error)


async def _follow(
    planned: PlannedSimulation,
    result: scenario_pb2.ModeResult,
    simulators: SimulatorPeer,
    changed: Callable[[], Awaitable[None]],
) -> simulation_pb2.Simulation:
    """Start the simulation and follow it to its end; SimulatorLost when its replica goes away."""
    simulation = await simulators.start(planned.spec)
    result.simulation = simulation.name
    result.state = simulation.state
    await changed()
    async for update in simulators.watch(result.simulation):
        simulation = update  # the watch ends after the terminal state
    if simulation.state not in _TERMINAL:
        raise SimulatorLost(f"{result.simulation}: the simulator stopped reporting before it finished")
    return simulation


async def _one(
    planned: PlannedSimulation,
    result: scenario_pb2.ModeResult,
    simulators: SimulatorPeer,
    changed: Callable[[], Awaitable[None]],
    reruns: int,
) -> None:
    try:
        for attempt in range(reruns + 1):
            try:
                simulation = await _follow(planned, result, simulators, changed)
                break
            except SimulatorLost as lost:
                log.warning(
                    "simulation lost with its replica; starting it again",
                    extra={"simulation": result.simulation, "label": result.label, "reason": str(lost)},
                )
                if attempt == reruns:
                    raise Unavailable(
                        f"lost {reruns + 1} times with its simulator replica; last: {lost}"
                    ) from lost
        _fill_result(result, simulation)
    except FabricTwinError as exc:
        result.state = common_pb2.JOB_STATE_FAILED
        result.error.CopyFrom(common_pb2.ErrorStatus(code=status_code_number(exc.code), message=str(exc)))
    await changed()


async def execute_run(
    run: scenario_pb2.Run,
    planned: list[PlannedSimulation],
    simulators: SimulatorPeer,
    telemetry: TelemetryPeer | None,
    record: RunRecord,
    *,
    store_telemetry: bool = False,
    parallelism: int = 8,
    reruns: int = 3,
) -> scenario_pb2.Run:
    """Run every planned simulation (at most `parallelism` at once) and fill `run` as they finish.

    A simulation lost with its replica is started again elsewhere up to `reruns` times.
    """
    run.state = common_pb2.JOB_STATE_RUNNING
    run.progress.stage = "simulating"
    del run.results[:]
    for i, p in enumerate(planned):
        result = run.results.add(label=p.label, state=common_pb2.JOB_STATE_PENDING)
        result.load_balancing.CopyFrom(p.spec.load_balancing)
        result.sweep_point.update(p.sweep_point)
        if store_telemetry:
            source_id = f"{run.name.rsplit('/', 1)[-1]}-{i}"
            result.telemetry_source = f"sources/{source_id}"
            p.spec.telemetry_source = source_id
    await record.run_changed(run)

    lock = asyncio.Lock()  # one write at a time, in the order the changes happened
    finished: set[int] = set()  # positions of terminal results: counted, not summed per change

    def changed_for(position: int) -> Callable[[], Awaitable[None]]:
        async def changed() -> None:
            async with lock:
                if run.results[position].state in _TERMINAL:
                    finished.add(position)
                    run.progress.fraction = len(finished) / len(run.results)
                await record.result_changed(run, position)

        return changed

    if store_telemetry and telemetry is not None:
        for p, result in zip(planned, run.results, strict=True):
            await telemetry.create_source(
                p.spec.telemetry_source,
                telemetry_pb2.Source(
                    kind=telemetry_pb2.SOURCE_KIND_SIMULATED,
                    display_name=f"{run.name} {result.label}",
                    fabric=p.spec.fabric,
                ),
            )

    gate = asyncio.Semaphore(max(1, parallelism))

    async def gated(position: int, p: PlannedSimulation) -> None:
        async with gate:
            await _one(p, run.results[position], simulators, changed_for(position), reruns)

    await asyncio.gather(*(gated(i, p) for i, p in enumerate(planned)))
    failed = [r for r in run.results if r.state != common_pb2.JOB_STATE_SUCCEEDED]
    if failed:
        # No silent partial result: one failed mode fails the run; each mode keeps its own state
        # and error, and the successful ones keep their results for inspection.
        run.state = common_pb2.JOB_STATE_FAILED
        run.error.CopyFrom(failed[0].error)
        names = ", ".join(
            f"{r.label}: {r.error.message or common_pb2.JobState.Name(r.state)}" for r in failed
        )
        run.error.message = f"{len(failed)} of {len(run.results)} simulations failed ({names})"
    else:
        run.state = common_pb2.JOB_STATE_SUCCEEDED
    run.progress.fraction = 1.0
    run.progress.stage = "done"
    run.end_time.FromDatetime(dt.datetime.now(dt.UTC))
    await record.run_changed(run)
    log.info("run finished", extra={"run": run.name, "state": common_pb2.JobState.Name(run.state)})
    return run
