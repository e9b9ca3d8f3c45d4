"""Failover: a simulator replica that dies mid-run costs the run nothing.

Two real simulator servers stand behind a real orchestrator (with real topology and telemetry). One is
stopped abruptly while it runs a run's simulations: the orchestrator, following each simulation with
WatchSimulation on its replica, sees the replica go, re-runs what it lost on the live one, and sends
new work only to live replicas until the dead one answers its health check again.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import pathlib
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

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
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.common.config import ServiceConfig
from services.common.server import create_server
from services.orchestrator.__main__ import build as build_orchestrator
from services.stack import free_port
from services.telemetry.__main__ import build as build_telemetry
from services.topology.__main__ import build as build_topology
from tests.in_process import in_process_stack

ROOT = pathlib.Path(__file__).resolve().parents[2]

# A few seconds of FLOW-fidelity work each: ECMP recomputes rates at every flow start and end.
JOB = simulation_pb2.Job(
    collective=simulation_pb2.COLLECTIVE_ALL_REDUCE,
    size_bytes=256 << 20,
    rank_count=64,
    placement=simulation_pb2.PLACEMENT_POLICY_SCATTERED,
)


def four_point_scenario() -> scenario_pb2.Scenario:
    """Two ECMP seeds x two hash seeds: four simulations, each long enough to be caught running."""
    modes = [
        common_pb2.LoadBalancing(mode=common_pb2.LOAD_BALANCING_MODE_ECMP, seed=seed, label=f"ECMP-{seed}")
        for seed in (1, 2)
    ]
    sweep = scenario_pb2.Sweep(parameter="seed", values=["7", "8"])
    return scenario_pb2.Scenario(fabric="fabrics/ft8", jobs=[JOB], modes=modes, sweeps=[sweep])


@pytest.fixture
async def stack(tmp_path):
    async with in_process_stack(tmp_path, simulator_replicas=2) as running:
        async with grpc.aio.insecure_channel(running.topology.address) as channel:
            spec = topology_pb2.FabricSpec(fat_tree=topology_pb2.FatTreeSpec(k=8))
            await topology_pb2_grpc.TopologyServiceStub(channel).CreateFabric(
                topology_pb2.CreateFabricRequest(fabric_id="ft8", spec=spec)
            )
        yield running


@pytest.fixture
async def scenarios(stack):
    async with grpc.aio.insecure_channel(stack.orchestrator.address) as channel:
        yield scenario_pb2_grpc.ScenarioServiceStub(channel)


async def simulations_on(address: str) -> dict[str, int]:
    """name -> state of every simulation the replica at `address` holds."""
    async with grpc.aio.insecure_channel(address) as channel:
        reply = await simulation_pb2_grpc.SimulationServiceStub(channel).ListSimulations(
            simulation_pb2.ListSimulationsRequest(page_size=1000), timeout=5
        )
    return {s.name: s.state for s in reply.simulations}


_UNFINISHED = (common_pb2.JOB_STATE_PENDING, common_pb2.JOB_STATE_RUNNING)


async def wait_until_running_on(address: str, timeout: float = 60.0) -> None:
    """Until the replica at `address` holds a simulation it has not finished (PENDING or RUNNING: a
    short run may go from PENDING to SUCCEEDED without a progress report in between)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(state in _UNFINISHED for state in (await simulations_on(address)).values()):
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"no simulation started on {address}")


async def run_to_end(scenarios, scenario: str) -> scenario_pb2.Run:
    run = await scenarios.RunScenario(scenario_pb2.RunScenarioRequest(scenario=scenario))
    last = run
    async for update in scenarios.WatchRun(scenario_pb2.WatchRunRequest(name=run.name), timeout=180):
        last = update
    return last


async def test_a_run_survives_a_replica_stopped_mid_run(stack, scenarios):
    created = await scenarios.CreateScenario(
        scenario_pb2.CreateScenarioRequest(scenario_id="sweep", scenario=four_point_scenario())
    )
    live, doomed = stack.simulators
    run = await scenarios.RunScenario(scenario_pb2.RunScenarioRequest(scenario=created.name))
    await wait_until_running_on(doomed.address)
    held = await simulations_on(doomed.address)
    lost = {name for name, state in held.items() if state in _UNFINISHED}
    assert lost, "the run gave the doomed replica nothing to do"
    await doomed.server.stop(0)  # abrupt: connections closed, nothing drained

    last = run
    async for update in scenarios.WatchRun(scenario_pb2.WatchRunRequest(name=run.name), timeout=180):
        last = update
    assert last.state == common_pb2.JOB_STATE_SUCCEEDED, last.error.message
    assert len(last.results) == 4
    assert all(r.state == common_pb2.JOB_STATE_SUCCEEDED and r.makespan_ns > 0 for r in last.results)
    on_live = await simulations_on(live.address)
    # Every result comes from the live replica, or from the doomed one where it had finished before
    # the stop; what was running when it stopped was run again on the live replica, under the same
    # name (the one the run chose, and its telemetry source records).
    finished = {name for name, state in held.items() if state == common_pb2.JOB_STATE_SUCCEEDED}
    assert {r.simulation for r in last.results} <= set(on_live) | finished
    assert lost <= set(on_live)
    assert all(on_live[name] == common_pb2.JOB_STATE_SUCCEEDED for name in lost)


async def test_a_rerun_gives_the_same_result_as_an_undisturbed_run(stack, scenarios):
    created = await scenarios.CreateScenario(
        scenario_pb2.CreateScenarioRequest(scenario_id="same", scenario=four_point_scenario())
    )
    undisturbed = await run_to_end(scenarios, created.name)
    assert undisturbed.state == common_pb2.JOB_STATE_SUCCEEDED, undisturbed.error.message

    _, doomed = stack.simulators
    run = await scenarios.RunScenario(scenario_pb2.RunScenarioRequest(scenario=created.name))
    await wait_until_running_on(doomed.address)
    await doomed.server.stop(0)
    last = run
    async for update in scenarios.WatchRun(scenario_pb2.WatchRunRequest(name=run.name), timeout=180):
        last = update
    assert last.state == common_pb2.JOB_STATE_SUCCEEDED, last.error.message
    assert [r.makespan_ns for r in last.results] == [r.makespan_ns for r in undisturbed.results]


async def test_a_stored_run_that_loses_a_replica_keeps_one_source_per_simulation(stack, scenarios):
    scenario = four_point_scenario()
    scenario.store_telemetry = True
    created = await scenarios.CreateScenario(
        scenario_pb2.CreateScenarioRequest(scenario_id="stored", scenario=scenario)
    )
    _, doomed = stack.simulators
    run = await scenarios.RunScenario(scenario_pb2.RunScenarioRequest(scenario=created.name))
    await wait_until_running_on(doomed.address)
    lost = {name for name, state in (await simulations_on(doomed.address)).items() if state in _UNFINISHED}
    await doomed.server.stop(0)
    last = run
    async for update in scenarios.WatchRun(scenario_pb2.WatchRunRequest(name=run.name), timeout=180):
        last = update
    assert last.state == common_pb2.JOB_STATE_SUCCEEDED, last.error.message
    assert lost & {r.simulation for r in last.results}, "nothing was re-run"
    # The re-run kept its name, so the source the run created before starting it names it still.
    async with grpc.aio.insecure_channel(stack.telemetry.address) as channel:
        telemetry = telemetry_pb2_grpc.TelemetryServiceStub(channel)
        for result in last.results:
            source = await telemetry.GetSource(telemetry_pb2.GetSourceRequest(name=result.telemetry_source))
            assert source.simulation == result.simulation
            assert source.sample_count > 0


async def test_new_runs_avoid_a_dead_replica_until_it_answers_health_again(stack, scenarios):
    created = await scenarios.CreateScenario(
        scenario_pb2.CreateScenarioRequest(scenario_id="avoid", scenario=four_point_scenario())
    )
    live, doomed = stack.simulators
    dead_port = doomed.port
    replicas = stack.orchestrator.services[0].servicer.simulators.replicas  # its GrpcSimulators
    await doomed.server.stop(0)

    for _ in range(2):  # every run after the death, not only the first
        run = await run_to_end(scenarios, created.name)
        assert run.state == common_pb2.JOB_STATE_SUCCEEDED, run.error.message
        assert {r.simulation for r in run.results} <= set(await simulations_on(live.address))
        assert replicas.serving() == [live.address]  # out of rotation: no work is tried on it

    back = await stack.start_simulator(port=dead_port)
    came_back = time.monotonic()
    while doomed.address not in replicas.serving():  # its health probe takes it back
        assert time.monotonic() - came_back < 5, "the replica that came back is still out of rotation"
        await asyncio.sleep(0.05)
    deadline = time.monotonic() + 10
    while True:  # the orchestrator probes the dead replica's health and takes it back
        run = await run_to_end(scenarios, created.name)
        assert run.state == common_pb2.JOB_STATE_SUCCEEDED, run.error.message
        if {r.simulation for r in run.results} & set(await simulations_on(back.address)):
            break
        assert time.monotonic() < deadline, "the replica that came back got no work within 10 s"


async def test_a_replica_reporting_not_serving_gets_no_new_work(stack, scenarios):
    created = await scenarios.CreateScenario(
        scenario_pb2.CreateScenarioRequest(scenario_id="drain", scenario=four_point_scenario())
    )
    _, draining = stack.simulators
    replicas = stack.orchestrator.services[0].servicer.simulators.replicas
    await draining.health.set("fabrictwin.v1.SimulationService", health_pb2.HealthCheckResponse.NOT_SERVING)
    run = await run_to_end(scenarios, created.name)
    assert run.state == common_pb2.JOB_STATE_SUCCEEDED, run.error.message
    assert await simulations_on(draining.address) == {}  # it still answers, but takes no work
    await draining.health.set("fabrictwin.v1.SimulationService", health_pb2.HealthCheckResponse.SERVING)
    deadline = time.monotonic() + 5
    while draining.address not in replicas.serving():
        assert time.monotonic() < deadline, "a replica SERVING again stays out of rotation"
        await asyncio.sleep(0.05)


async def test_a_run_fails_only_when_no_replica_can_take_the_work(stack, scenarios):
    created = await scenarios.CreateScenario(
        scenario_pb2.CreateScenarioRequest(scenario_id="none", scenario=four_point_scenario())
    )
    for replica in stack.simulators:
        await replica.server.stop(0)
    run = await run_to_end(scenarios, created.name)
    assert run.state == common_pb2.JOB_STATE_FAILED
    assert all(r.error.code == grpc.StatusCode.UNAVAILABLE.value[0] for r in run.results)
    assert "no simulator replica" in run.error.message


# --- kill -9 of a replica process ----------------------------------------------------------------


@contextlib.contextmanager
def simulator_process(tmp_path: pathlib.Path, topology: str, telemetry: str) -> Iterator[SimulatorProcess]:
    """`python -m services.simulator` in a session of its own, so kill -9 takes its workers with it."""
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")])),
        "FABRICTWIN_PORT": str(port),
        "FABRICTWIN_DATA_DIR": str(tmp_path),
        "FABRICTWIN_TOPOLOGY_ADDRESS": topology,
        "FABRICTWIN_TELEMETRY_ADDRESS": telemetry,
        "FABRICTWIN_LOG_FORMAT": "json",
    }
    with open(tmp_path / f"simulator-{port}.log", "ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "services.simulator"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    replica = SimulatorProcess(process, f"127.0.0.1:{port}")
    try:
        yield replica
    finally:
        replica.kill()


@dataclasses.dataclass
class SimulatorProcess:
    process: subprocess.Popen
    address: str

    def kill(self) -> None:
        """kill -9 of the replica and every process of its session (its simulation workers)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    async def wait_serving(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        async with grpc.aio.insecure_channel(self.address) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            while True:
                assert self.process.poll() is None, f"the simulator at {self.address} exited"
                with contextlib.suppress(grpc.aio.AioRpcError):
                    # types-grpcio-health-checking declares HealthStub without its methods.
                    reply = await health.Check(health_pb2.HealthCheckRequest(), timeout=1)  # type: ignore[attr-defined]
                    if reply.status == health_pb2.HealthCheckResponse.SERVING:
                        return
                assert time.monotonic() < deadline, f"the simulator at {self.address} is not SERVING"
                await asyncio.sleep(0.1)


async def test_a_run_survives_kill_9_of_a_replica_process_mid_run(tmp_path):
    async with contextlib.AsyncExitStack() as stack:

        async def start(config: ServiceConfig, build) -> str:
            services, cleanup = await build(config)
            stack.push_async_callback(cleanup)
            running = await create_server(config, services)
            stack.push_async_callback(running.stop, 0)
            return running.address

        base: dict[str, Any] = {"port": 0, "data_dir": str(tmp_path)}
        topology = await start(ServiceConfig(service="topology", **base), build_topology)
        telemetry = await start(ServiceConfig(service="telemetry", **base), build_telemetry)
        live = stack.enter_context(simulator_process(tmp_path, topology, telemetry))
        doomed = stack.enter_context(simulator_process(tmp_path, topology, telemetry))
        await asyncio.gather(live.wait_serving(), doomed.wait_serving())
        orchestrator = await start(
            ServiceConfig(
                service="orchestrator",
                topology_address=topology,
                telemetry_address=telemetry,
                simulator_addresses=f"{live.address},{doomed.address}",
                **base,
            ),
            build_orchestrator,
        )
        async with grpc.aio.insecure_channel(topology) as channel:
            await topology_pb2_grpc.TopologyServiceStub(channel).CreateFabric(
                topology_pb2.CreateFabricRequest(
                    fabric_id="ft8", spec=topology_pb2.FabricSpec(fat_tree=topology_pb2.FatTreeSpec(k=8))
                )
            )
        async with grpc.aio.insecure_channel(orchestrator) as channel:
            scenarios = scenario_pb2_grpc.ScenarioServiceStub(channel)
            created = await scenarios.CreateScenario(
                scenario_pb2.CreateScenarioRequest(scenario_id="kill9", scenario=four_point_scenario())
            )
            run = await scenarios.RunScenario(scenario_pb2.RunScenarioRequest(scenario=created.name))
            await wait_until_running_on(doomed.address)
            held = await simulations_on(doomed.address)
            doomed.kill()

            last = run
            async for update in scenarios.WatchRun(scenario_pb2.WatchRunRequest(name=run.name), timeout=180):
                last = update
            assert last.state == common_pb2.JOB_STATE_SUCCEEDED, last.error.message
            assert all(r.state == common_pb2.JOB_STATE_SUCCEEDED for r in last.results)
            # From the live replica, or finished on the killed one before the kill.
            finished = {name for name, state in held.items() if state == common_pb2.JOB_STATE_SUCCEEDED}
            assert {r.simulation for r in last.results} <= set(await simulations_on(live.address)) | finished

            again = await run_to_end(scenarios, created.name)  # the next run: no attempt at the dead one
            assert again.state == common_pb2.JOB_STATE_SUCCEEDED, again.error.message
