"""ScenarioService: proto <-> orchestrator core. Validation and run logic live in the core modules."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from fabrictwin.v1 import common_pb2, scenario_pb2, scenario_pb2_grpc, telemetry_pb2

from services.common.errors import InvalidArgument, status_code_number
from services.common.resources import (
    decode_page_token,
    encode_page_token,
    new_id,
    page_size,
    parse_name,
    validate_id,
)
from services.orchestrator import comparison, diagnosis
from services.orchestrator.peers import SimulatorPeer, TelemetryPeer, TopologyPeer
from services.orchestrator.runner import execute_run
from services.orchestrator.scenarios import (
    DEFAULT_MAX_SIMULATIONS_PER_RUN,
    check_run_size,
    expand,
    validate_scenario,
)
from services.orchestrator.store import ScenarioStore

__all__ = ["ScenarioServicer"]

_TERMINAL = (common_pb2.JOB_STATE_SUCCEEDED, common_pb2.JOB_STATE_FAILED, common_pb2.JOB_STATE_CANCELLED)
_UPDATABLE = {
    "display_name",
    "fabric",
    "jobs",
    "modes",
    "fidelity",
    "transport",
    "roce",
    "infiniband",
    "faults",
    "sweeps",
    "seed",
    "store_telemetry",
    "mtu_bytes",
    "buffer_bytes",
    "switch_latency_ns",
    "header_bytes",
}


class _StoredRun:
    """A run's changes saved in the store, then announced to WatchRun callers (a RunRecord)."""

    def __init__(self, store: ScenarioStore, run_id: str, changed: asyncio.Condition) -> None:
        self.store = store
        self.run_id = run_id
        self.changed = changed

    async def run_changed(self, run: scenario_pb2.Run) -> None:
        await asyncio.to_thread(self.store.save_run, self.run_id, run)
        await self._announce()

    async def result_changed(self, run: scenario_pb2.Run, position: int) -> None:
        await asyncio.to_thread(self.store.save_result, self.run_id, position, run.results[position])
        await self._announce()

    async def _announce(self) -> None:
        async with self.changed:
            self.changed.notify_all()


class ScenarioServicer(scenario_pb2_grpc.ScenarioServiceServicer):
    def __init__(
        self,
        store: ScenarioStore,
        topology: TopologyPeer,
        simulators: SimulatorPeer,
        telemetry: TelemetryPeer,
        max_simulations_per_run: int = DEFAULT_MAX_SIMULATIONS_PER_RUN,
    ) -> None:
        self.store = store
        self.max_simulations_per_run = max_simulations_per_run
        self.topology = topology
        self.simulators = simulators
        self.telemetry = telemetry
        self._changed = asyncio.Condition()
        self._tasks: set[asyncio.Task] = set()

    async def recover(self) -> None:
        """Runs a previous process left unfinished cannot be resumed: mark them FAILED, say why."""
        for run_id, run in await asyncio.to_thread(self.store.unfinished_runs):
            run.state = common_pb2.JOB_STATE_FAILED
            run.error.CopyFrom(
                common_pb2.ErrorStatus(
                    code=status_code_number("ABORTED"),
                    message="the orchestrator restarted while this run was in progress",
                )
            )
            await asyncio.to_thread(self.store.save_run, run_id, run)

    # Scenarios ------------------------------------------------------------------------------------

    async def CreateScenario(self, request, context):
        scenario_id = (
            validate_id(request.scenario_id, "scenario_id") if request.scenario_id else new_id("scn")
        )
        scenario = scenario_pb2.Scenario()
        scenario.CopyFrom(request.scenario)
        validate_scenario(scenario)
        check_run_size(scenario, self.max_simulations_per_run)
        await self.topology.get_fabric(scenario.fabric)
        return await asyncio.to_thread(self.store.create_scenario, scenario_id, scenario)

    async def GetScenario(self, request, context):
        ids = parse_name(request.name, "scenarios/{scenario}")
        return await asyncio.to_thread(self.store.get_scenario, ids["scenario"])

    async def ListScenarios(self, request, context):
        size = page_size(request.page_size)
        offset = decode_page_token(request.page_token)
        found = await asyncio.to_thread(self.store.list_scenarios, offset, size + 1)
        token = encode_page_token(offset + size) if len(found) > size else ""
        return scenario_pb2.ListScenariosResponse(scenarios=found[:size], next_page_token=token)

    async def UpdateScenario(self, request, context):
        ids = parse_name(request.scenario.name, "scenarios/{scenario}", "scenario.name")
        paths = list(request.update_mask.paths)
        if not paths:
            raise InvalidArgument("update_mask", "name the fields to update (AIP-134)")
        for path in paths:
            if path not in _UPDATABLE:
                raise InvalidArgument(
                    "update_mask", f"{path!r} cannot be updated; updatable: {sorted(_UPDATABLE)}"
                )
        current = await asyncio.to_thread(self.store.get_scenario, ids["scenario"])
        updated = scenario_pb2.Scenario()
        updated.CopyFrom(current)
        for path in paths:
            updated.ClearField(path)
        request.update_mask.MergeMessage(
            request.scenario, updated, replace_message_field=True, replace_repeated_field=True
        )
        validate_scenario(updated)
        check_run_size(updated, self.max_simulations_per_run)
        if updated.fabric != current.fabric:
            await self.topology.get_fabric(updated.fabric)
        await asyncio.to_thread(self.store.update_scenario, ids["scenario"], updated)
        return updated

    async def DeleteScenario(self, request, context):
        ids = parse_name(request.name, "scenarios/{scenario}")
        await asyncio.to_thread(self.store.delete_scenario, ids["scenario"])
        return scenario_pb2.DeleteScenarioResponse()

    # Runs -----------------------------------------------------------------------------------------

    async def RunScenario(self, request, context):
        ids = parse_name(request.scenario, "scenarios/{scenario}", "scenario")
        run_id = validate_id(request.run_id, "run_id") if request.run_id else new_id("run")
        scenario = await asyncio.to_thread(self.store.get_scenario, ids["scenario"])
        # The limit may have been lowered since the scenario was stored: refuse before any work.
        check_run_size(scenario, self.max_simulations_per_run)
        await self.topology.get_fabric(scenario.fabric)
        planned = await asyncio.to_thread(expand, scenario, self.max_simulations_per_run)
        run = scenario_pb2.Run(
            name=f"{scenario.name}/runs/{run_id}",
            state=common_pb2.JOB_STATE_PENDING,
            progress=common_pb2.Progress(fraction=0.0, stage="queued"),
            scenario=scenario,
        )
        run = await asyncio.to_thread(self.store.create_run, ids["scenario"], run_id, run)
        snapshot = scenario_pb2.Run()
        snapshot.CopyFrom(run)

        record = _StoredRun(self.store, run_id, self._changed)
        task = asyncio.create_task(
            execute_run(
                run,
                planned,
                self.simulators,
                self.telemetry,
                record,
                store_telemetry=scenario.store_telemetry,
            )
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return snapshot

    async def _get_run(self, name: str, field: str = "name") -> scenario_pb2.Run:
        ids = parse_name(name, "scenarios/{scenario}/runs/{run}", field)
        return await asyncio.to_thread(self.store.get_run, ids["scenario"], ids["run"])

    async def GetRun(self, request, context):
        return await self._get_run(request.name)

    async def ListRuns(self, request, context):
        ids = parse_name(request.parent, "scenarios/{scenario}", "parent")
        scenario_id = None if ids["scenario"] == "-" else ids["scenario"]
        if scenario_id is not None:
            await asyncio.to_thread(self.store.get_scenario, scenario_id)
        size = page_size(request.page_size)
        offset = decode_page_token(request.page_token)
        found = await asyncio.to_thread(self.store.list_runs, scenario_id, offset, size + 1)
        token = encode_page_token(offset + size) if len(found) > size else ""
        return scenario_pb2.ListRunsResponse(runs=found[:size], next_page_token=token)

    async def WatchRun(self, request, context) -> AsyncIterator[scenario_pb2.Run]:
        last = b""
        while True:
            run = await self._get_run(request.name)
            body = run.SerializeToString(deterministic=True)
            if body != last:
                last = body
                yield run
            if run.state in _TERMINAL:
                return
            async with self._changed:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), timeout=1.0)

    async def CompareRuns(self, request, context):
        if not request.runs:
            raise InvalidArgument("runs", "at least one run name is required")
        runs = [await self._get_run(name, f"runs[{i}]") for i, name in enumerate(request.runs)]
        return comparison.compare(runs, request.baseline)

    async def Diagnose(self, request, context):
        if not request.source:
            raise InvalidArgument("source", "required (`sources/{source}`)")
        parse_name(request.source, "sources/{source}", "source")
        await self.telemetry.get_source(request.source)
        window = request.time_range if request.HasField("time_range") else None
        selector = telemetry_pb2.PortSelector(patterns=list(request.ports))
        common = {"source": request.source, "ports": selector, "limit": 100_000}
        if window is not None:
            common["time_range"] = window
        utilisation = await self.telemetry.top_ports(
            telemetry_pb2.TopLinksRequest(
                metric=telemetry_pb2.METRIC_UTILISATION, aggregation=telemetry_pb2.AGGREGATION_AVG, **common
            )
        )
        drops = await self.telemetry.top_ports(
            telemetry_pb2.TopLinksRequest(
                metric=telemetry_pb2.METRIC_DROPS, aggregation=telemetry_pb2.AGGREGATION_SUM, **common
            )
        )
        errors = await self.telemetry.top_ports(
            telemetry_pb2.TopLinksRequest(
                metric=telemetry_pb2.METRIC_RCV_ERRORS, aggregation=telemetry_pb2.AGGREGATION_SUM, **common
            )
        )
        findings = []
        pinning = diagnosis.ecmp_pinning(utilisation, window)
        if pinning is not None:
            findings.append(pinning)
        findings.extend(diagnosis.lossy_links(drops, window, errors))
        findings.sort(key=lambda f: -f.severity)
        return scenario_pb2.Diagnosis(source=request.source, findings=findings)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
