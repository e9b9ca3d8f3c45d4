"""fabrictwin.v1.SimulationService: requests -> simulator core -> Simulation messages.

StartSimulation checks the spec (and its hosts against the fabric's snapshot) before it accepts
anything, then returns the simulation PENDING while a background task runs it in a worker
process, shows its progress, and (with `telemetry_source`) writes its series to telemetry.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import TypeVar

from fabrictwin.v1 import simulation_pb2, simulation_pb2_grpc

from services.common.errors import FabricTwinError, FailedPrecondition, InvalidArgument
from services.common.resources import (
    decode_page_token,
    encode_page_token,
    new_id,
    page_size,
    parse_name,
    validate_id,
)
from services.common.snapshot import FabricSnapshot
from services.common.workers import WorkerPool
from services.simulator.convert import record_to_proto, series_to_protos, spec_from_proto
from services.simulator.link_faults import WhatIf, down_sets
from services.simulator.peers import SnapshotSource, export_series
from services.simulator.progress import ProgressBoard, WorkerProgress
from services.simulator.registry import SimulationRecord, SimulationRegistry, SimulationState
from services.simulator.runner import WorkerFailure, run_in_worker
from services.simulator.spec import SimulationSpec, validate_spec
from services.simulator.workload import place_jobs

__all__ = ["SimulationServicer"]

log = logging.getLogger("fabrictwin.simulator")

POLL_SECONDS = 0.25
T = TypeVar("T")


def _in_spec(check: Callable[[], T]) -> T:
    """Run a core check whose field names are relative to the spec; name them from the request."""
    try:
        return check()
    except InvalidArgument as exc:
        raise InvalidArgument(f"spec.{exc.field}", str(exc).removeprefix(f"{exc.field}: ")) from exc


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
        auth_token: str = "",
    ) -> None:
        self._registry = registry
        self._snapshots = snapshots
        self._pool = pool
        self._progress = progress
        self._telemetry_address = telemetry_address
        self._auth_token = auth_token
        self._tasks: set[asyncio.Task[None]] = set()
        self._running: dict[str, WorkerProgress] = {}

    async def StartSimulation(self, request, context) -> simulation_pb2.Simulation:
        sim_id = (
            validate_id(request.simulation_id, "simulation_id") if request.simulation_id else new_id("sim")
        )
        name = f"simulations/{sim_id}"
        spec = spec_from_proto(request.spec)
        _in_spec(lambda: validate_spec(spec))
        parse_name(spec.fabric, "fabrics/{fabric}", "spec.fabric")
        snapshot = await self._snapshots.get(spec.fabric)
        _in_spec(lambda: place_jobs(spec, snapshot))
        # LINK_DOWN faults: the routes with those links down, as the topology service recomputes them.
        what_if = {
            down: await self._snapshots.what_if(spec.fabric, down)
            for down in _in_spec(lambda: down_sets(spec, snapshot))
        }
        record = self._registry.create(name, request.spec, snapshot.routing_version)
        task = asyncio.create_task(self._run(name, spec, snapshot, what_if))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return record_to_proto(record)

    async def GetSimulation(self, request, context) -> simulation_pb2.Simulation:
        return record_to_proto(self._registry.get(_simulation_name(request.name, "name")), with_flows=True)

    async def ListSimulations(self, request, context) -> simulation_pb2.ListSimulationsResponse:
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
        progress = self._running.get(name)
        if progress is not None:
            await asyncio.to_thread(progress.cancel)
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

    async def _run(self, name: str, spec: SimulationSpec, snapshot: FabricSnapshot, what_if: WhatIf) -> None:
        try:
            progress = await asyncio.to_thread(self._progress.new)
            self._running[name] = progress
            if self._registry.get(name).state.terminal:
                return
            work = asyncio.ensure_future(self._pool.run(run_in_worker, spec, snapshot, progress, what_if))
            while not work.done():
                await asyncio.wait({work}, timeout=POLL_SECONDS)
                await self._show_progress(name, progress)
            outcome = work.result()
            if isinstance(outcome, WorkerFailure):
                self._fail(name, outcome.code, outcome.message)
                return
            if spec.telemetry_source:
                self._registry.update(name, stage="storing series", fraction=0.95)
                await export_series(
                    self._telemetry_address,
                    spec.telemetry_source,
                    spec.fabric,
                    name,
                    outcome.series.over_all_channels(snapshot.num_channels),
                    [snapshot.channel_name(c) for c in range(snapshot.num_channels)],
                    self._auth_token,
                )
            self._registry.update(
                name, state=SimulationState.SUCCEEDED, stage="done", fraction=1.0, outcome=outcome
            )
        except FabricTwinError as exc:
            self._fail(name, exc.code, str(exc))
        except Exception:
            log.exception("simulation failed", extra={"simulation": name})
            self._fail(name, "INTERNAL", "internal error in the simulator (see its log)")
        finally:
            self._running.pop(name, None)

    async def _show_progress(self, name: str, progress: WorkerProgress) -> None:
        fraction = await asyncio.to_thread(progress.fraction)
        record = self._registry.get(name)
        if fraction is None or record.state.terminal:
            return
        shown = round(0.9 * fraction, 3)
        if record.state != SimulationState.RUNNING or record.fraction != shown:
            self._registry.update(name, state=SimulationState.RUNNING, stage="simulating", fraction=shown)

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
