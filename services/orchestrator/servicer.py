"""ScenarioService: proto <-> orchestrator core. Validation and run logic live in the core modules.

Requests are checked (`messages.validate_scenario`) and turned into the domain here; responses are
built from the domain by `messages.py`; the core modules never see a message.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import grpc
from fabrictwin.v1 import scenario_pb2, scenario_pb2_grpc

from services.common.errors import InvalidArgument, status_code_number
from services.common.listing import MAX_FILTERED, Listing, filtered_page
from services.common.pinning import PinningRule
from services.common.resources import (
    decode_page_token,
    encode_page_token,
    new_id,
    page_size,
    parse_name,
    validate_id,
)
from services.orchestrator import comparison, diagnosis
from services.orchestrator.contracts import Measure, SimulatorPeer, TelemetryPeer, TopologyPeer
from services.orchestrator.messages import (
    comparison_to_proto,
    finding_to_proto,
    run_to_proto,
    scenario_from_proto,
    scenario_to_proto,
    validate_scenario,
    what_if_scenario,
    window_from_proto,
)
from services.orchestrator.model import Error, JobState, Run, Scenario
from services.orchestrator.runner import execute_run
from services.orchestrator.scenarios import DEFAULT_MAX_SIMULATIONS_PER_RUN, check_run_size, expand
from services.orchestrator.store import ScenarioStore

__all__ = ["RunChanges", "ScenarioServicer"]

_Context = grpc.aio.ServicerContext[object, object]
_CANCEL_WAIT_SECONDS = 30.0  # CancelRun waits this long for the run's simulations to be cancelled

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
    "variants",
}


class _StoredRun:
    """A run's changes saved in the store, then announced to WatchRun callers (a RunRecord)."""

    def __init__(self, store: ScenarioStore, run_id: str, changes: RunChanges) -> None:
        self.store = store
        self.run_id = run_id
        self.changes = changes

    async def run_changed(self, run: Run) -> None:
        await asyncio.to_thread(self.store.save_run, self.run_id, run)
        await self._announce()

    async def result_changed(self, run: Run, position: int) -> None:
        await asyncio.to_thread(self.store.save_result, self.run_id, position, run.results[position])
        await self._announce()

    async def _announce(self) -> None:
        await self.changes.announce()


class RunChanges:
    """How many run changes were saved so far, and the condition WatchRun waits on for the next.

    A watcher notes `count` before it reads a run and waits past that count: a change saved while
    it was reading is seen at once (a bare condition would miss that notify and wait its timeout).
    """

    def __init__(self) -> None:
        self.count = 0
        self._condition = asyncio.Condition()

    async def announce(self) -> None:
        async with self._condition:
            self.count += 1
            self._condition.notify_all()

    async def wait_past(self, seen: int, timeout: float) -> None:
        """Return once a change after `seen` was announced (at once if one already was), else after
        `timeout` seconds."""
        async with self._condition:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._condition.wait_for(lambda: self.count != seen), timeout)


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
        self._changes = RunChanges()
        self._tasks: set[asyncio.Task[Run]] = set()
        self._running: dict[str, asyncio.Task[Run]] = {}  # run name -> its task, while it runs

    async def recover(self) -> None:
        """Runs a previous process left unfinished cannot be resumed: mark them FAILED, say why."""
        for run_id, run in await asyncio.to_thread(self.store.unfinished_runs):
            run.state = JobState.FAILED
            run.error = Error(
                status_code_number("ABORTED"), "the orchestrator restarted while this run was in progress"
            )
            await asyncio.to_thread(self.store.save_run, run_id, run)

    # Scenarios ------------------------------------------------------------------------------------

    async def CreateScenario(
        self, request: scenario_pb2.CreateScenarioRequest, context: _Context
    ) -> scenario_pb2.Scenario:
        scenario_id = (
            validate_id(request.scenario_id, "scenario_id") if request.scenario_id else new_id("scn")
        )
        validate_scenario(request.scenario)
        scenario = scenario_from_proto(request.scenario)
        check_run_size(scenario, self.max_simulations_per_run)
        await self.topology.get_fabric(scenario.fabric)
        await self._check_repairs(request.scenario)
        created = await asyncio.to_thread(self.store.create_scenario, scenario_id, scenario)
        return scenario_to_proto(created)

    async def _check_repairs(self, scenario: scenario_pb2.Scenario) -> None:
        """Every variant's repaired links are links of the fabric (INVALID_ARGUMENT naming one)."""
        for i, variant in enumerate(scenario.variants):
            for j, link in enumerate(variant.fabric_state.repaired_links):
                if not await self.topology.has_link(scenario.fabric, link):
                    raise InvalidArgument(
                        f"scenario.variants[{i}].fabric_state.repaired_links[{j}]",
                        f"{link!r} is not a link of {scenario.fabric}",
                    )

    async def GetScenario(
        self, request: scenario_pb2.GetScenarioRequest, context: _Context
    ) -> scenario_pb2.Scenario:
        ids = parse_name(request.name, "scenarios/{scenario}")
        return scenario_to_proto(await asyncio.to_thread(self.store.get_scenario, ids["scenario"]))

    async def ListScenarios(
        self, request: scenario_pb2.ListScenariosRequest, context: _Context
    ) -> scenario_pb2.ListScenariosResponse:
        size = page_size(request.page_size)
        offset = decode_page_token(request.page_token)
        listing = Listing.of(scenario_pb2.Scenario.DESCRIPTOR, request.filter, request.order_by)
        if listing.active:
            everything = await asyncio.to_thread(self.store.list_scenarios, 0, MAX_FILTERED + 1)
            scenarios = map(scenario_to_proto, everything)
            chosen, token = filtered_page(scenarios, listing, "scenarios", request.page_token, size)
            return scenario_pb2.ListScenariosResponse(scenarios=chosen, next_page_token=token)
        found = await asyncio.to_thread(self.store.list_scenarios, offset, size + 1)
        token = encode_page_token(offset + size) if len(found) > size else ""
        return scenario_pb2.ListScenariosResponse(
            scenarios=[scenario_to_proto(s) for s in found[:size]], next_page_token=token
        )

    async def UpdateScenario(
        self, request: scenario_pb2.UpdateScenarioRequest, context: _Context
    ) -> scenario_pb2.Scenario:
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
        updated = scenario_to_proto(current)
        for path in paths:
            updated.ClearField(path)  # type: ignore[arg-type]
        request.update_mask.MergeMessage(
            request.scenario, updated, replace_message_field=True, replace_repeated_field=True
        )
        validate_scenario(updated)
        scenario = scenario_from_proto(updated)
        check_run_size(scenario, self.max_simulations_per_run)
        if scenario.fabric != current.fabric:
            await self.topology.get_fabric(scenario.fabric)
        await asyncio.to_thread(self.store.update_scenario, ids["scenario"], scenario)
        return updated

    async def DeleteScenario(
        self, request: scenario_pb2.DeleteScenarioRequest, context: _Context
    ) -> scenario_pb2.DeleteScenarioResponse:
        ids = parse_name(request.name, "scenarios/{scenario}")
        await asyncio.to_thread(self.store.delete_scenario, ids["scenario"])
        return scenario_pb2.DeleteScenarioResponse()

    # Runs -----------------------------------------------------------------------------------------

    async def RunScenario(
        self, request: scenario_pb2.RunScenarioRequest, context: _Context
    ) -> scenario_pb2.Run:
        ids = parse_name(request.scenario, "scenarios/{scenario}", "scenario")
        run_id = validate_id(request.run_id, "run_id") if request.run_id else new_id("run")
        scenario = await asyncio.to_thread(self.store.get_scenario, ids["scenario"])
        # The limit may have been lowered since the scenario was stored: refuse before any work.
        check_run_size(scenario, self.max_simulations_per_run)
        return await self._start_run(ids["scenario"], scenario, run_id)

    async def RunWhatIf(self, request: scenario_pb2.RunWhatIfRequest, context: _Context) -> scenario_pb2.Run:
        scenario_id = (
            validate_id(request.scenario_id, "scenario_id") if request.scenario_id else new_id("whatif")
        )
        message = what_if_scenario(request)
        scenario = scenario_from_proto(message)
        check_run_size(scenario, self.max_simulations_per_run)
        await self.topology.get_fabric(scenario.fabric)
        for i, link in enumerate(request.repair_links):  # a repair naming no link: refused now, named
            if not await self.topology.has_link(scenario.fabric, link):
                raise InvalidArgument(f"repair_links[{i}]", f"{link!r} is not a link of {scenario.fabric}")
        created = await asyncio.to_thread(self.store.create_scenario, scenario_id, scenario)
        return await self._start_run(scenario_id, created, new_id("run"))

    async def _start_run(self, scenario_id: str, scenario: Scenario, run_id: str) -> scenario_pb2.Run:
        """Pin the fabric's current routing version, store the run, start it; the run as stored."""
        fabric = await self.topology.get_fabric(scenario.fabric)  # the routes every simulation runs on
        planned = await asyncio.to_thread(expand, scenario, self.max_simulations_per_run)
        run = Run(
            name=f"{scenario.name}/runs/{run_id}",
            scenario=scenario,
            state=JobState.PENDING,
            routing_version=fabric.routing_version,
            stage="queued",
        )
        run = await asyncio.to_thread(self.store.create_run, scenario_id, run_id, run)
        snapshot = run_to_proto(run)

        record = _StoredRun(self.store, run_id, self._changes)
        task = asyncio.create_task(execute_run(run, planned, self.simulators, self.telemetry, record))
        self._tasks.add(task)
        self._running[run.name] = task
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(lambda _: self._running.pop(run.name, None))
        return snapshot

    async def CancelRun(self, request: scenario_pb2.CancelRunRequest, context: _Context) -> scenario_pb2.Run:
        run = await self._get_run(request.name)  # NotFound first
        task = self._running.get(run.name)
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=_CANCEL_WAIT_SECONDS)
            run = await self._get_run(request.name)
        return run_to_proto(run)

    async def _get_run(self, name: str, field: str = "name") -> Run:
        ids = parse_name(name, "scenarios/{scenario}/runs/{run}", field)
        return await asyncio.to_thread(self.store.get_run, ids["scenario"], ids["run"])

    async def GetRun(self, request: scenario_pb2.GetRunRequest, context: _Context) -> scenario_pb2.Run:
        return run_to_proto(await self._get_run(request.name))

    async def ListRuns(
        self, request: scenario_pb2.ListRunsRequest, context: _Context
    ) -> scenario_pb2.ListRunsResponse:
        ids = parse_name(request.parent, "scenarios/{scenario}", "parent")
        scenario_id = None if ids["scenario"] == "-" else ids["scenario"]
        if scenario_id is not None:
            await asyncio.to_thread(self.store.get_scenario, scenario_id)
        size = page_size(request.page_size)
        offset = decode_page_token(request.page_token)
        listing = Listing.of(scenario_pb2.Run.DESCRIPTOR, request.filter, request.order_by)
        if listing.active:
            everything = await asyncio.to_thread(self.store.list_runs, scenario_id, 0, MAX_FILTERED + 1)
            runs = (run_to_proto(r) for r in everything)
            chosen, token = filtered_page(runs, listing, "runs", request.page_token, size)
            return scenario_pb2.ListRunsResponse(runs=chosen, next_page_token=token)
        found = await asyncio.to_thread(self.store.list_runs, scenario_id, offset, size + 1)
        token = encode_page_token(offset + size) if len(found) > size else ""
        return scenario_pb2.ListRunsResponse(
            runs=[run_to_proto(r) for r in found[:size]], next_page_token=token
        )

    async def WatchRun(
        self, request: scenario_pb2.WatchRunRequest, context: _Context
    ) -> AsyncIterator[scenario_pb2.Run]:
        last = b""
        while True:
            seen = self._changes.count
            run = await self._get_run(request.name)
            message = run_to_proto(run)
            body = message.SerializeToString(deterministic=True)
            if body != last:
                last = body
                yield message
            if run.state.terminal:
                return
            await self._changes.wait_past(seen, timeout=1.0)

    async def CompareRuns(
        self, request: scenario_pb2.CompareRunsRequest, context: _Context
    ) -> scenario_pb2.Comparison:
        if not request.runs:
            raise InvalidArgument("runs", "at least one run name is required")
        runs = [await self._get_run(name, f"runs[{i}]") for i, name in enumerate(request.runs)]
        return comparison_to_proto(comparison.compare(runs, request.baseline))

    async def Diagnose(
        self, request: scenario_pb2.DiagnoseRequest, context: _Context
    ) -> scenario_pb2.Diagnosis:
        if not request.source:
            raise InvalidArgument("source", "required (`sources/{source}`)")
        parse_name(request.source, "sources/{source}", "source")
        await self.telemetry.check_source(request.source)
        window = window_from_proto(request.time_range) if request.HasField("time_range") else None
        rule = PinningRule.of(request.hot_above, request.idle_below, request.max_over_mean, request.spread)
        ports = list(request.ports)
        measures = (
            Measure.MEAN_UTILISATION,
            Measure.TOTAL_DROPS,
            Measure.TOTAL_RECEIVE_ERRORS,
            Measure.TOTAL_XMIT_DISCARDS,
        )
        utilisation, drops, errors, discards = [
            await self.telemetry.top_ports(request.source, measure, ports, window) for measure in measures
        ]
        findings: list[diagnosis.Finding] = []
        pinning = diagnosis.ecmp_pinning(utilisation, window, rule)
        if pinning is not None:
            findings.append(pinning)
        findings.extend(diagnosis.lossy_links(drops, window, errors, discards))
        findings.sort(key=lambda f: -f.severity)
        return scenario_pb2.Diagnosis(source=request.source, findings=[finding_to_proto(f) for f in findings])

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
