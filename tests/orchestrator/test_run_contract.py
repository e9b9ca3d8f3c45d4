"""The orchestrator owns the run contract (issue #12, part 6).

- It follows each simulation with WatchSimulation on its replica, never by polling GetSimulation.
- It alone creates a run's telemetry sources, each naming the simulation whose series it holds.
- It pins the fabric's routing version when the run starts; every result records it, and a change of
  the routes mid-run fails what would run on the new routes instead of mixing them into the run.

Real topology, simulator and telemetry servers (port 0); calls are counted by the servers' own
Prometheus metrics.
"""

from __future__ import annotations

import dataclasses

import grpc
import pytest
from fabrictwin.v1 import (
    common_pb2,
    scenario_pb2,
    scenario_pb2_grpc,
    simulation_pb2,
    simulation_pb2_grpc,
    telemetry_pb2,
    telemetry_pb2_grpc,
    topology_pb2,
    topology_pb2_grpc,
)

from services.common.errors import AlreadyExists
from services.common.server import RunningServer
from services.orchestrator.messages import build_spec, scenario_from_proto
from services.orchestrator.model import JobState, Run, SimulationRequest
from services.orchestrator.peers import GrpcSimulatorPeer, GrpcSimulators, GrpcTelemetry, GrpcTopology
from services.orchestrator.runner import execute_run
from services.orchestrator.scenarios import expand
from tests.in_process import in_process_stack
from tests.orchestrator.test_service import allreduce_scenario, run_to_end

FAILED_PRECONDITION = grpc.StatusCode.FAILED_PRECONDITION.value[0]


@pytest.fixture
async def stack(tmp_path):
    async with in_process_stack(tmp_path) as running:
        async with grpc.aio.insecure_channel(running.topology.address) as channel:
            spec = topology_pb2.FabricSpec(fat_tree=topology_pb2.FatTreeSpec(k=4))
            await topology_pb2_grpc.TopologyServiceStub(channel).CreateFabric(
                topology_pb2.CreateFabricRequest(fabric_id="ft4", spec=spec)
            )
        yield running


def calls(server: RunningServer, service: str, method: str, code: str | None = None) -> int:
    """RPCs of `method` the server handled (with status `code`, or any), from its own metrics."""
    total = 0.0
    for family in server.metrics.registry.collect():
        for sample in family.samples:
            if sample.name != "fabrictwin_rpc_requests_total":
                continue
            if sample.labels["method"] != f"/fabrictwin.v1.{service}/{method}":
                continue
            if code is None or sample.labels["code"] == code:
                total += sample.value
    return int(total)


async def routing_version(stack) -> int:
    async with grpc.aio.insecure_channel(stack.topology.address) as channel:
        fabric = await topology_pb2_grpc.TopologyServiceStub(channel).GetFabric(
            topology_pb2.GetFabricRequest(name="fabrics/ft4")
        )
    return fabric.routing_version


async def set_a_spine_link_down(stack) -> int:
    """Take one aggregation-core link of ft4 DOWN; returns the routing version after the reroute."""
    async with grpc.aio.insecure_channel(stack.topology.address) as channel:
        topology = topology_pb2_grpc.TopologyServiceStub(channel)
        links = await topology.ListLinks(topology_pb2.ListLinksRequest(parent="fabrics/ft4", page_size=1000))
        uplink = next(link for link in links.links if "core-" in link.display_name)  # an agg-core link
        await topology.SetLinkState(
            topology_pb2.SetLinkStateRequest(name=uplink.name, state=topology_pb2.LINK_STATE_DOWN)
        )
    return await routing_version(stack)


async def test_a_run_follows_its_simulations_by_watching_them_and_never_polls(stack):
    pinned = await routing_version(stack)
    async with grpc.aio.insecure_channel(stack.orchestrator.address) as channel:
        scenarios = scenario_pb2_grpc.ScenarioServiceStub(channel)
        created = await scenarios.CreateScenario(
            scenario_pb2.CreateScenarioRequest(scenario_id="watched", scenario=allreduce_scenario())
        )
        run = await run_to_end(scenarios, created.name)
    assert run.state == common_pb2.JOB_STATE_SUCCEEDED, run.error.message
    assert calls(stack.simulator, "SimulationService", "StartSimulation") == 2
    assert calls(stack.simulator, "SimulationService", "WatchSimulation") == 2  # one stream each
    assert calls(stack.simulator, "SimulationService", "GetSimulation") == 0
    assert run.routing_version == pinned > 0
    assert [r.routing_version for r in run.results] == [pinned, pinned]


async def test_a_stored_run_creates_each_source_once_naming_its_simulation(stack):
    async with grpc.aio.insecure_channel(stack.orchestrator.address) as channel:
        scenarios = scenario_pb2_grpc.ScenarioServiceStub(channel)
        created = await scenarios.CreateScenario(
            scenario_pb2.CreateScenarioRequest(
                scenario_id="stored", scenario=allreduce_scenario(store_telemetry=True)
            )
        )
        run = await run_to_end(scenarios, created.name)
    assert run.state == common_pb2.JOB_STATE_SUCCEEDED, run.error.message
    async with grpc.aio.insecure_channel(stack.telemetry.address) as channel:
        telemetry = telemetry_pb2_grpc.TelemetryServiceStub(channel)
        for result in run.results:
            source = await telemetry.GetSource(telemetry_pb2.GetSourceRequest(name=result.telemetry_source))
            assert source.simulation == result.simulation != ""
            assert source.kind == telemetry_pb2.SOURCE_KIND_SIMULATED
            assert source.fabric == "fabrics/ft4"
            assert source.sample_count > 0
            assert result.label in source.display_name
    # Created once each, by the orchestrator: no second attempt swallowed as ALREADY_EXISTS.
    assert calls(stack.telemetry, "TelemetryService", "CreateSource") == 2
    assert calls(stack.telemetry, "TelemetryService", "CreateSource", "ALREADY_EXISTS") == 0


async def test_a_simulation_started_on_its_own_gets_a_source_naming_it_created_once(stack):
    scenario = scenario_from_proto(allreduce_scenario())
    spec = build_spec(SimulationRequest("solo", scenario, expand(scenario)[0], telemetry_source="solo"))
    async with grpc.aio.insecure_channel(stack.simulator.address) as channel:
        simulator = simulation_pb2_grpc.SimulationServiceStub(channel)
        started = await simulator.StartSimulation(simulation_pb2.StartSimulationRequest(spec=spec))
        watch = simulator.WatchSimulation(simulation_pb2.WatchSimulationRequest(name=started.name))
        done = [update async for update in watch][-1]
    assert done.state == common_pb2.JOB_STATE_SUCCEEDED, done.error.message
    async with grpc.aio.insecure_channel(stack.telemetry.address) as channel:
        source = await telemetry_pb2_grpc.TelemetryServiceStub(channel).GetSource(
            telemetry_pb2.GetSourceRequest(name="sources/solo")
        )
    assert source.simulation == started.name
    assert source.sample_count > 0
    assert calls(stack.telemetry, "TelemetryService", "CreateSource") == 1


async def test_a_rerun_reaching_the_replica_that_still_holds_its_simulation_follows_that_one(stack):
    scenario = scenario_from_proto(allreduce_scenario())
    first, second = expand(scenario)
    spec = build_spec(SimulationRequest("again", scenario, first))
    replicas = GrpcSimulators([stack.simulator.address])
    try:
        started = await replicas.start(spec, "again")
        again = await replicas.start(spec, "again")  # as a re-run after a stream that kept breaking
        assert again.name == started.name == "simulations/again"
        assert [update async for update in replicas.watch(again.name)][
            -1
        ].state == common_pb2.JOB_STATE_SUCCEEDED
        with pytest.raises(AlreadyExists, match="another simulation named simulations/again"):
            await replicas.start(build_spec(SimulationRequest("again", scenario, second)), "again")
    finally:
        await replicas.close()
    assert calls(stack.simulator, "SimulationService", "StartSimulation", "OK") == 1


class _Record:
    """A RunRecord that keeps nothing and calls `on_change` after every change of a result."""

    def __init__(self, on_change) -> None:
        self.on_change = on_change

    async def run_changed(self, run: Run) -> None:
        return None

    async def result_changed(self, run: Run, position: int) -> None:
        await self.on_change(run, position)


async def run_in_core(stack, scenario: scenario_pb2.Scenario, on_change, parallelism: int) -> Run:
    """A run through the orchestrator's core and its real gRPC adapters, changes reported to `on_change`."""
    topology = GrpcTopology(stack.topology.address)
    replicas = GrpcSimulators([stack.simulator.address])
    telemetry = GrpcTelemetry(stack.telemetry.address)
    try:
        domain = dataclasses.replace(scenario_from_proto(scenario), name="scenarios/pinned")
        fabric = await topology.get_fabric(domain.fabric)
        run = Run("scenarios/pinned/runs/r", domain, routing_version=fabric.routing_version)
        return await execute_run(
            run,
            expand(domain),
            GrpcSimulatorPeer(replicas),
            telemetry,
            _Record(on_change),
            parallelism=parallelism,
        )
    finally:
        await replicas.close()
        await topology.channel.close()
        await telemetry.channel.close()


def three_modes() -> scenario_pb2.Scenario:
    modes = [
        common_pb2.LoadBalancing(mode=common_pb2.LOAD_BALANCING_MODE_ECMP, seed=3, label=f"ECMP-{i}")
        for i in range(3)
    ]
    return allreduce_scenario(modes=modes)


async def test_routes_changed_between_two_points_leave_the_later_points_on_the_pinned_routes(stack):
    """Each simulation is sent the run's routing version (SimulationSpec.routing_version) and the
    topology service still holds it: the later points run on the pinned routes, not the new ones."""
    pinned = await routing_version(stack)
    moved: list[int] = []

    async def after_the_first_result(run: Run, position: int) -> None:
        if position == 0 and run.results[0].state.terminal and not moved:
            moved.append(await set_a_spine_link_down(stack))  # before the second point starts

    run = await run_in_core(stack, three_modes(), after_the_first_result, parallelism=1)

    assert moved and moved[0] > pinned
    assert run.state is JobState.SUCCEEDED, run.error
    assert {r.routing_version for r in run.results} == {pinned}
    # Three identical modes on the same routes: the same result, to the nanosecond, although the
    # fabric's current routes lost a spine link before the second and third started.
    assert len({r.outcome for r in run.results}) == 1


async def test_routes_changed_after_every_point_started_leave_the_run_on_its_pinned_routes(stack):
    pinned = await routing_version(stack)
    moved: list[int] = []

    async def once_all_started(run: Run, position: int) -> None:
        if all(r.simulation for r in run.results) and not moved:
            moved.append(await set_a_spine_link_down(stack))

    run = await run_in_core(stack, three_modes(), once_all_started, parallelism=3)

    assert moved and moved[0] > pinned
    assert run.state is JobState.SUCCEEDED, run.error
    assert {r.routing_version for r in run.results} == {pinned}
    # Three identical modes on the same routes: the same result, to the nanosecond.
    assert len({r.outcome for r in run.results}) == 1
