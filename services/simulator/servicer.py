"""fabrictwin.v1.SimulationService: requests -> simulator core -> Simulation messages.

StartSimulation runs every check a spec can fail before it accepts anything (the request's size,
the spec's numbers and fields, the fabric's snapshot: checks.py, with admission control against
the service's limits; the what-if routings LINK_DOWN faults need; the telemetry source), then
returns the simulation PENDING while a background task runs it in a worker process, shows its
progress, and (with `telemetry_source`) writes its series to telemetry.

A worker that dies during a run (killed, out of memory, crashed) fails that simulation with a
message saying how it died; the pool replaces it and later simulations run. A cancelled run's worker
stops at its next progress report; one that has not stopped CANCEL_GRACE_SECONDS after the cancel
(building a large run's workload and engine arrays, which report nothing for seconds, or compiling)
is killed; stopping the service cancels every run and ends their workers.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator, Callable
from typing import TypeVar

from fabrictwin.v1 import simulation_pb2, simulation_pb2_grpc

from services.common.errors import FabricTwinError, FailedPrecondition, InvalidArgument
from services.common.listing import MAX_FILTERED, Listing, filtered_page
from services.common.peers import PeerAuth
from services.common.resources import (
    decode_page_token,
    encode_page_token,
    new_id,
    page_size,
    parse_name,
    validate_id,
)
from services.common.server import HealthSetter
from services.common.snapshot import FabricSnapshot
from services.common.workers import WorkerDied, WorkerOutOfMemory, WorkerPool
from services.simulator.admission import DEFAULT_LIMITS, SimulationLimits, check_request_size
from services.simulator.checks import check_routes, check_simulation
from services.simulator.convert import record_to_proto, series_to_protos, spec_from_proto
from services.simulator.engine import RunFabric, WhatIfRoutings
from services.simulator.fabric_state import SnapshotView, view_of, with_stored_state
from services.simulator.peers import SnapshotSource, export_series, prepare_telemetry_source
from services.simulator.progress import ProgressBoard, WorkerProgress
from services.simulator.registry import SimulationRecord, SimulationRegistry, SimulationState
from services.simulator.runner import WorkerFailure, run_in_worker
from services.simulator.spec import SimulationSpec
from services.simulator.validation import validate_spec

__all__ = ["SimulationServicer"]

log = logging.getLogger("fabrictwin.simulator")

POLL_SECONDS = 0.25
# A cancelled run's worker gets this long from the cancel to stop before it is killed: the engines
# report progress every 0.1-0.3 s while they run, so one that reports stops well within it.
CANCEL_GRACE_SECONDS = 0.5
# Signals by which a worker is stopped from outside (an operator, a supervisor): the run may be
# retried as it was. Any other death (SIGSEGV, SIGABRT, an exit code) is a bug: INTERNAL.
_STOPPED_FROM_OUTSIDE = {"SIGKILL", "SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT"}
T = TypeVar("T")


def _in_spec(check: Callable[[], T]) -> T:
    """Run a core check whose field names are relative to the spec; name them from the request."""
    try:
        return check()
    except InvalidArgument as exc:
        raise InvalidArgument(f"spec.{exc.field}", str(exc).removeprefix(f"{exc.field}: ")) from exc


def _worker_death(exc: WorkerDied) -> tuple[str, str]:
    """The status code and message a simulation fails with when its worker died."""
    if exc.out_of_memory:
        code = "RESOURCE_EXHAUSTED"
    elif exc.signal_name in _STOPPED_FROM_OUTSIDE:
        code = "UNAVAILABLE"
    else:
        code = "INTERNAL"
    return code, f"{exc}; the simulation did not finish (a new worker runs the simulations that follow)"


@dataclasses.dataclass
class _Run:
    """A run in a worker: its progress record, and `cancelled`, set by CancelSimulation (the grace starts)."""

    progress: WorkerProgress
    cancelled: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)


def _simulation_name(value: str, field: str) -> str:
    parse_name(value, "simulations/{simulation}", field)
    return value


class SimulationServicer(simulation_pb2_grpc.SimulationServiceServicer):
    """Translates SimulationService calls; simulations run in `pool`, state lives in `registry`."""

    def __init__(
        self,
        registry: SimulationRegistry,
        snapshots: SnapshotSource,
        pool: WorkerPool,
        progress: ProgressBoard,
        telemetry_address: str,
        auth_token: PeerAuth | str = "",
        limits: SimulationLimits = DEFAULT_LIMITS,
    ) -> None:
        self._registry = registry
        self._snapshots = snapshots
        self._pool = pool
        self._progress = progress
        self._telemetry_address = telemetry_address
        self._auth_token = auth_token
        self._limits = limits
        self._tasks: set[asyncio.Task[None]] = set()
        self._running: dict[str, _Run] = {}

    async def StartSimulation(self, request, context) -> simulation_pb2.Simulation:
        sim_id = (
            validate_id(request.simulation_id, "simulation_id") if request.simulation_id else new_id("sim")
        )
        name = f"simulations/{sim_id}"
        check_request_size(request.spec, self._limits)  # before a listed flow is read
        spec = spec_from_proto(request.spec)
        _in_spec(lambda: validate_spec(spec))  # before asking the topology service anything
        parse_name(spec.fabric, "fabrics/{fabric}", "spec.fabric")
        # The routes of the pinned version, and the what-if of them the spec asks for (fabric_state.py).
        stored = await self._snapshots.get(spec.fabric, SnapshotView(spec.routing_version))
        view = _in_spec(lambda: view_of(spec, stored))
        snapshot = await self._snapshots.get(spec.fabric, view) if view.what_if else stored
        spec = _in_spec(lambda: with_stored_state(spec, snapshot, view))
        # Off the event loop: a large spec's placement and checks take a while.
        accepted = await asyncio.to_thread(
            _in_spec, lambda: check_simulation(spec, snapshot, self._limits, spec_checked=True)
        )
        # LINK_DOWN faults: the routes with those links down, as the topology service recomputes them.
        what_if = {
            down: await self._snapshots.what_if(spec.fabric, down, view=view) for down in accepted.down_sets
        }
        # The workload routed as the engine will route it (no route, LINK_DOWN epochs): checks.py.
        await asyncio.to_thread(_in_spec, lambda: check_routes(spec, RunFabric(snapshot, what_if)))
        if spec.telemetry_source:
            await prepare_telemetry_source(
                self._telemetry_address, spec.telemetry_source, spec.fabric, name, self._auth_token
            )
        record = self._registry.create(name, request.spec, snapshot.routing_version)
        task = asyncio.create_task(self._run(name, spec, snapshot, what_if))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return record_to_proto(record)

    async def GetSimulation(self, request, context) -> simulation_pb2.Simulation:
        return record_to_proto(self._registry.get(_simulation_name(request.name, "name")), with_flows=True)

    async def ListSimulations(self, request, context) -> simulation_pb2.ListSimulationsResponse:
        listing = Listing.of(simulation_pb2.Simulation.DESCRIPTOR, request.filter, request.order_by)
        if listing.active:
            everything, _ = self._registry.page(0, MAX_FILTERED + 1)
            simulations = map(record_to_proto, everything)
            size = page_size(request.page_size)
            chosen, token = filtered_page(simulations, listing, "simulations", request.page_token, size)
            return simulation_pb2.ListSimulationsResponse(simulations=chosen, next_page_token=token)
        records, following = self._registry.page(
            decode_page_token(request.page_token), page_size(request.page_size)
        )
        return simulation_pb2.ListSimulationsResponse(
            simulations=[record_to_proto(record) for record in records],
            next_page_token=encode_page_token(following) if following is not None else "",
        )

    async def CancelSimulation(self, request, context) -> simulation_pb2.Simulation:
        name = _simulation_name(request.name, "name")
        record = self._registry.cancel(name)
        run = self._running.get(name)
        if run is not None:
            run.cancelled.set()  # the grace period starts now
            await asyncio.to_thread(run.progress.cancel)
        return record_to_proto(record)

    async def WatchSimulation(self, request, context) -> AsyncIterator[simulation_pb2.Simulation]:
        async for record in self._registry.watch(_simulation_name(request.name, "name")):
            yield record_to_proto(record)

    def _succeeded(self, name: str) -> SimulationRecord:
        record = self._registry.get(_simulation_name(name, "parent"))
        if record.state != SimulationState.SUCCEEDED or record.outcome is None:
            raise FailedPrecondition(
                f"{name} is {record.state.value}; its link series exist once it has SUCCEEDED"
            )
        return record

    async def ListLinkSeries(self, request, context) -> simulation_pb2.ListLinkSeriesResponse:
        outcome = self._succeeded(request.parent).outcome
        assert outcome is not None
        offset, size = decode_page_token(request.page_token), page_size(request.page_size, default=100)
        following = offset + size
        return simulation_pb2.ListLinkSeriesResponse(
            series=series_to_protos(outcome.series, outcome.channels.display_names, offset, following),
            next_page_token=encode_page_token(following) if following < len(outcome.series.channels) else "",
        )

    async def StreamLinkSeries(self, request, context) -> AsyncIterator[simulation_pb2.LinkSeries]:
        outcome = self._succeeded(request.parent).outcome
        assert outcome is not None
        for i in range(len(outcome.series.channels)):
            for message in series_to_protos(outcome.series, outcome.channels.display_names, i, i + 1):
                yield message

    async def _run(
        self, name: str, spec: SimulationSpec, snapshot: FabricSnapshot, what_if: WhatIfRoutings
    ) -> None:
        try:
            run = _Run(await asyncio.to_thread(self._progress.new))
            self._running[name] = run
            if self._registry.get(name).state.terminal:
                return
            work = asyncio.ensure_future(self._pool.run(run_in_worker, spec, snapshot, run.progress, what_if))
            try:
                await self._follow(name, work, run)
            except asyncio.CancelledError:  # the service is stopping: end the run and its worker
                work.cancel()
                await asyncio.wait({work}, timeout=CANCEL_GRACE_SECONDS)
                self._registry.update(name, state=SimulationState.CANCELLED, stage="cancelled")
                raise
            if work.cancelled():  # cancelled, and its worker was killed for not stopping
                return
            outcome = work.result()
            if isinstance(outcome, WorkerFailure):
                self._fail(name, outcome.code, outcome.message)
                return
            if spec.telemetry_source:
                self._registry.update(name, stage="storing series", fraction=0.95)
                await export_series(
                    self._telemetry_address,
                    spec.telemetry_source,
                    outcome.series.over_all_channels(snapshot.num_channels),
                    [snapshot.channel_name(c) for c in range(snapshot.num_channels)],
                    self._auth_token,
                    on_progress=lambda done: self._registry.update(name, fraction=0.95 + 0.04 * done),
                )
            self._registry.update(
                name, state=SimulationState.SUCCEEDED, stage="done", fraction=1.0, outcome=outcome
            )
        except FabricTwinError as exc:
            self._fail(name, exc.code, str(exc))
        except WorkerDied as exc:
            log.error("worker died", extra={"simulation": name, "reason": str(exc)})
            self._fail(name, *_worker_death(exc))
        except WorkerOutOfMemory as exc:
            log.error("worker out of memory", extra={"simulation": name})
            self._fail(name, "RESOURCE_EXHAUSTED", f"{exc}; the simulation did not finish")
        except Exception:
            log.exception("simulation failed", extra={"simulation": name})
            self._fail(name, "INTERNAL", "internal error in the simulator (see its log)")
        finally:
            self._running.pop(name, None)

    async def _follow(self, name: str, work: asyncio.Future, run: _Run) -> None:
        """Show the run's progress until its worker answers; once it is cancelled, give the worker
        CANCEL_GRACE_SECONDS from the cancel to stop, then kill it."""
        cancelled = asyncio.ensure_future(run.cancelled.wait())
        try:
            while not work.done() and not cancelled.done():
                await asyncio.wait(
                    {work, cancelled}, timeout=POLL_SECONDS, return_when=asyncio.FIRST_COMPLETED
                )
                if not cancelled.done():
                    await self._show_progress(name, run.progress)
        finally:
            cancelled.cancel()
        if not work.done():
            await asyncio.wait({work}, timeout=CANCEL_GRACE_SECONDS)
        if not work.done():
            work.cancel()  # kills the worker; the pool starts another
            await asyncio.wait({work})

    def serving_states(self) -> AsyncIterator[bool]:
        """True while the service can run simulations (a live worker), then each change."""
        return self._pool.watch_ready()

    def watch_health(self, set_serving: HealthSetter) -> None:
        """Report NOT_SERVING through `set_serving` while no worker process can run simulations, and
        SERVING again when one can (the server's `ReportsHealth` hook)."""

        async def follow() -> None:
            async for serving in self.serving_states():
                await set_serving(serving)

        task = asyncio.get_running_loop().create_task(follow())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _show_progress(self, name: str, progress: WorkerProgress) -> None:
        fraction = await asyncio.to_thread(progress.fraction)
        stage = await asyncio.to_thread(progress.stage) or "simulating"  # or a setup phase, or compiling
        record = self._registry.get(name)
        if fraction is None or record.state.terminal:
            return
        shown = round(0.9 * fraction, 3)
        if record.state != SimulationState.RUNNING or record.fraction != shown or record.stage != stage:
            self._registry.update(name, state=SimulationState.RUNNING, stage=stage, fraction=shown)

    def _fail(self, name: str, code: str, message: str) -> None:
        if code == "CANCELLED":
            self._registry.update(name, state=SimulationState.CANCELLED, stage="cancelled")
        else:
            self._registry.update(
                name, state=SimulationState.FAILED, stage="failed", error_code=code, error_message=message
            )

    async def close(self) -> None:
        """Stop the background tasks (the worker pool and peers are closed by their owner)."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
