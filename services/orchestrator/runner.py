"""Executes a scenario run: one simulation per mode and sweep point, spread over simulator replicas.

Free of gRPC and protobuf: it works on the domain of `model.py` and talks to the other services
through the Protocols of `contracts.py`. The run owns its contract with the simulators:

- it names each simulation (`simulations/{id}`) before starting it, and alone creates the telemetry
  source its series go to, with `simulation` set to that name;
- every simulation runs on the routing version the run pinned when it started: a simulation the
  simulator would run on other routes (the fabric's routes changed mid-run) is cancelled, it and every
  simulation not yet started fail with FAILED_PRECONDITION saying which versions differ, and no two
  results of one run ever compare different routes;
- a simulation whose replica went away (`SimulatorLost`) is started again, under the same name, on a
  replica that answers, at most `reruns` times: a simulation is deterministic, so the re-run's result
  is the one the lost run would have given. A mode fails only when no replica can take it.

A run's progress is the fraction of its simulations that have finished; every change goes to a
`RunRecord` (saved, then announced to watchers): the whole run at its start and end, one result as
its simulation starts or ends, so a change costs the size of one result, not of the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import logging
from collections.abc import Sequence
from typing import Protocol

from services.common.errors import FabricTwinError, FailedPrecondition, Unavailable, status_code_number
from services.common.resources import new_id
from services.orchestrator.contracts import SimulatorLost, SimulatorPeer, TelemetryPeer
from services.orchestrator.model import (
    Error,
    JobState,
    ModeResult,
    PlannedSimulation,
    Run,
    SimulatedSource,
    SimulationRequest,
    SimulationStatus,
)

__all__ = ["RunRecord", "execute_run"]

log = logging.getLogger("fabrictwin.orchestrator")


class RunRecord(Protocol):
    """Where a run's changes go: saved, then announced to its watchers."""

    async def run_changed(self, run: Run) -> None:
        """The run as a whole, its own fields and every result: at its start and its end."""

    async def result_changed(self, run: Run, position: int) -> None:
        """`run.results[position]` alone, as its simulation starts or ends."""


class _RoutingPin:
    """The run's routing version, and what became of it once the fabric's routes moved on."""

    def __init__(self, fabric: str, version: int) -> None:
        self.fabric = fabric
        self.version = version
        self.moved_to: int | None = None

    def check(self, status: SimulationStatus) -> None:
        """FailedPrecondition when the simulator would run `status` on other routes than the pinned ones."""
        if status.routing_version != self.version:
            self.moved_to = status.routing_version
            raise FailedPrecondition(
                f"the routes of {self.fabric} changed during the run: the run is pinned to routing "
                f"version {self.version} and {status.name} would run on version {status.routing_version}; "
                "it was cancelled so that no two results of the run compare different routes "
                "(run the scenario again to simulate the new routes)"
            )

    def check_before_start(self) -> None:
        if self.moved_to is not None:
            raise FailedPrecondition(
                f"not started: the routes of {self.fabric} changed during the run (pinned routing version "
                f"{self.version}, the simulators now have version {self.moved_to}); a run never compares "
                "results on different routes (run the scenario again to simulate the new routes)"
            )


class _Execution:
    """One run in progress: its simulations' names, its routing pin, and where its changes go."""

    def __init__(
        self,
        run: Run,
        planned: Sequence[PlannedSimulation],
        simulators: SimulatorPeer,
        telemetry: TelemetryPeer | None,
        record: RunRecord,
        reruns: int,
    ) -> None:
        self.run = run
        self.planned = planned
        self.simulators = simulators
        self.telemetry = telemetry if run.scenario.store_telemetry else None
        self.record = record
        self.reruns = reruns
        self.pin = _RoutingPin(run.scenario.fabric, run.routing_version)
        self.ids = [new_id("sim") for _ in planned]  # a simulation keeps its name across re-runs
        self.lock = asyncio.Lock()  # one write at a time, in the order the changes happened
        self.finished: set[int] = set()  # positions of terminal results: counted, not summed per change

    def update(self, position: int, **changes: object) -> None:
        self.run.results[position] = dataclasses.replace(self.run.results[position], **changes)  # type: ignore[arg-type]

    async def changed(self, position: int) -> None:
        async with self.lock:
            if self.run.results[position].state.terminal:
                self.finished.add(position)
                self.run.fraction = len(self.finished) / len(self.run.results)
            await self.record.result_changed(self.run, position)

    async def simulate(self, position: int) -> None:
        """Run one planned simulation to its end and record its result; never raises a domain error."""
        point = self.planned[position]
        simulation_id = self.ids[position]
        try:
            self.pin.check_before_start()
            source_id = ""
            if self.telemetry is not None:
                source_id = simulation_id
                await self.telemetry.create_source(
                    SimulatedSource(
                        source_id=source_id,
                        display_name=f"{self.run.name} {point.label}",
                        fabric=self.run.scenario.fabric,
                        simulation=f"simulations/{simulation_id}",
                    )
                )
                self.update(position, telemetry_source=f"sources/{source_id}")
            request = SimulationRequest(
                simulation_id, self.run.scenario, point, source_id, self.run.routing_version
            )
            status = await self._with_reruns(position, request)
            self.update(
                position,
                state=status.state,
                routing_version=status.routing_version,
                outcome=status.outcome if status.state is JobState.SUCCEEDED else None,
                error=status.error,
            )
        except FabricTwinError as exc:
            self.update(position, state=JobState.FAILED, error=Error.of(exc))
        await self.changed(position)

    async def _with_reruns(self, position: int, request: SimulationRequest) -> SimulationStatus:
        for attempt in range(self.reruns + 1):
            try:
                return await self._follow(position, request)
            except SimulatorLost as lost:
                log.warning(
                    "simulation lost with its replica; starting it again",
                    extra={
                        "simulation": request.simulation_id,
                        "label": request.point.label,
                        "reason": str(lost),
                    },
                )
                if attempt == self.reruns:
                    raise Unavailable(
                        f"lost {self.reruns + 1} times with its simulator replica; last: {lost}"
                    ) from lost
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def _follow(self, position: int, request: SimulationRequest) -> SimulationStatus:
        """Start the simulation and follow it to its end; SimulatorLost when its replica goes away."""
        status = await self.simulators.start(request)
        self.update(position, simulation=status.name, state=status.state)
        try:
            self.pin.check(status)
        except FailedPrecondition:
            with contextlib.suppress(FabricTwinError):
                await self.simulators.cancel(status.name)
            raise
        await self.changed(position)
        async for update in self.simulators.watch(status.name):
            status = update  # the watch ends after the terminal state
        if not status.state.terminal:
            raise SimulatorLost(f"{status.name}: the simulator stopped reporting before it finished")
        return status


async def execute_run(
    run: Run,
    planned: Sequence[PlannedSimulation],
    simulators: SimulatorPeer,
    telemetry: TelemetryPeer | None,
    record: RunRecord,
    *,
    parallelism: int = 8,
    reruns: int = 3,
) -> Run:
    """Run every planned simulation (at most `parallelism` at once) on `run.routing_version` and fill
    `run` as they finish. A simulation lost with its replica is started again elsewhere up to `reruns`
    times. With `run.scenario.store_telemetry`, each simulation's series go to a source of its own.
    """
    run.state = JobState.RUNNING
    run.stage = "simulating"
    run.results = [
        ModeResult(p.label, p.mode.load_balancing, dict(p.sweep_point), fabric_state=p.mode.fabric_state)
        for p in planned
    ]
    await record.run_changed(run)

    execution = _Execution(run, planned, simulators, telemetry, record, reruns)
    gate = asyncio.Semaphore(max(1, parallelism))

    async def gated(position: int) -> None:
        async with gate:
            await execution.simulate(position)

    try:
        await asyncio.gather(*(gated(i) for i in range(len(planned))))
    except asyncio.CancelledError:  # CancelRun, or the orchestrator stopping
        await _cancelled(execution)
        raise
    failed = [r for r in run.results if r.state is not JobState.SUCCEEDED]
    if failed:
        # No silent partial result: one failed mode fails the run; each mode keeps its own state
        # and error, and the successful ones keep their results for inspection.
        names = ", ".join(f"{r.label}: {r.error.message if r.error else r.state.value}" for r in failed)
        run.state = JobState.FAILED
        run.error = Error(
            failed[0].error.code if failed[0].error else status_code_number("CANCELLED"),
            f"{len(failed)} of {len(run.results)} simulations failed ({names})",
        )
    else:
        run.state = JobState.SUCCEEDED
    run.fraction = 1.0
    run.stage = "done"
    run.end_time = dt.datetime.now(dt.UTC)
    await record.run_changed(run)
    log.info("run finished", extra={"run": run.name, "state": run.state.value})
    return run


async def _cancelled(execution: _Execution) -> None:
    """End a cancelled run: its unfinished simulations cancelled on their simulators (best effort),
    their results and the run CANCELLED, finished results kept; saved before the task ends."""
    run = execution.run
    for position, result in enumerate(run.results):
        if result.state.terminal:
            continue
        # By the name the run chose: a simulation whose StartSimulation was in flight is cancelled too.
        with contextlib.suppress(FabricTwinError):
            await execution.simulators.cancel(f"simulations/{execution.ids[position]}")
        execution.update(position, state=JobState.CANCELLED)
    run.state = JobState.CANCELLED
    run.stage = "cancelled"
    run.error = Error(status_code_number("CANCELLED"), "the run was cancelled (CancelRun)")
    run.end_time = dt.datetime.now(dt.UTC)
    await execution.record.run_changed(run)
    log.info("run cancelled", extra={"run": run.name})
