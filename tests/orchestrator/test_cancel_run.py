"""Cancelling a run: CancelRun and the CLI's Ctrl-C, on real services (in process, port 0)."""

from __future__ import annotations

import asyncio
import signal
import sys

import grpc
import pytest
from fabrictwin.v1 import (
    common_pb2,
    scenario_pb2,
    scenario_pb2_grpc,
    simulation_pb2,
    simulation_pb2_grpc,
    topology_pb2,
    topology_pb2_grpc,
)

from tests.in_process import in_process_stack

ECMP = common_pb2.LoadBalancing(mode=common_pb2.LOAD_BALANCING_MODE_ECMP)
TERMINAL = {common_pb2.JOB_STATE_SUCCEEDED, common_pb2.JOB_STATE_FAILED, common_pb2.JOB_STATE_CANCELLED}


@pytest.fixture
async def stack(tmp_path):
    async with in_process_stack(tmp_path) as running:
        async with grpc.aio.insecure_channel(running.topology.address) as channel:
            spec = topology_pb2.FabricSpec(fat_tree=topology_pb2.FatTreeSpec(k=4))
            await topology_pb2_grpc.TopologyServiceStub(channel).CreateFabric(
                topology_pb2.CreateFabricRequest(fabric_id="ft4", spec=spec)
            )
        yield running


def long_scenario() -> scenario_pb2.Scenario:
    """200 simulations (a seed sweep): a run that is still going when it is cancelled."""
    job = simulation_pb2.Job(
        collective=simulation_pb2.COLLECTIVE_ALL_REDUCE,
        size_bytes=64 << 20,
        rank_count=16,
        placement=simulation_pb2.PLACEMENT_POLICY_RANDOM,
    )
    sweep = scenario_pb2.Sweep(parameter="seed", values=[str(i) for i in range(1, 201)])
    return scenario_pb2.Scenario(fabric="fabrics/ft4", jobs=[job], modes=[ECMP], sweeps=[sweep])


async def started_run(scenarios) -> scenario_pb2.Run:
    await scenarios.CreateScenario(
        scenario_pb2.CreateScenarioRequest(scenario_id="long", scenario=long_scenario())
    )
    run = await scenarios.RunScenario(scenario_pb2.RunScenarioRequest(scenario="scenarios/long"))
    async for update in scenarios.WatchRun(scenario_pb2.WatchRunRequest(name=run.name)):
        if any(r.state == common_pb2.JOB_STATE_SUCCEEDED for r in update.results):
            return update  # running, with a result in
    raise AssertionError("the run ended before it could be cancelled")


async def assert_cancelled(stack, scenarios, name: str) -> None:
    run = await scenarios.GetRun(scenario_pb2.GetRunRequest(name=name))
    assert run.state == common_pb2.JOB_STATE_CANCELLED and "cancelled" in run.error.message
    states = [r.state for r in run.results]
    assert common_pb2.JOB_STATE_SUCCEEDED in states  # finished results are kept
    assert set(states) <= {common_pb2.JOB_STATE_SUCCEEDED, common_pb2.JOB_STATE_CANCELLED}
    async with grpc.aio.insecure_channel(stack.simulator.address) as channel:
        simulator = simulation_pb2_grpc.SimulationServiceStub(channel)
        listed = await simulator.ListSimulations(simulation_pb2.ListSimulationsRequest(page_size=1000))
        assert all(s.state in TERMINAL for s in listed.simulations)  # nothing left running on the simulator
        assert len(listed.simulations) < 200  # and most were never started


async def test_cancel_run_cancels_its_simulations_and_keeps_finished_results(stack) -> None:
    async with grpc.aio.insecure_channel(stack.orchestrator.address) as channel:
        scenarios = scenario_pb2_grpc.ScenarioServiceStub(channel)
        run = await started_run(scenarios)
        cancelled = await scenarios.CancelRun(scenario_pb2.CancelRunRequest(name=run.name))
        assert cancelled.state == common_pb2.JOB_STATE_CANCELLED
        await assert_cancelled(stack, scenarios, run.name)
        again = await scenarios.CancelRun(scenario_pb2.CancelRunRequest(name=run.name))  # finished: as it is
        assert again == cancelled
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await scenarios.CancelRun(scenario_pb2.CancelRunRequest(name="scenarios/long/runs/nope"))
        assert caught.value.code() == grpc.StatusCode.NOT_FOUND


async def test_ctrl_c_while_the_cli_waits_cancels_the_run_and_says_so(stack) -> None:
    async with grpc.aio.insecure_channel(stack.orchestrator.address) as channel:
        scenarios = scenario_pb2_grpc.ScenarioServiceStub(channel)
        await scenarios.CreateScenario(
            scenario_pb2.CreateScenarioRequest(scenario_id="long", scenario=long_scenario())
        )
        cli = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "fabrictwin.cli",
            f"--orchestrator={stack.orchestrator.address}",
            "scenario",
            "run",
            "long",
            "--id",
            "watched",
            "--wait",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        name = "scenarios/long/runs/watched"
        try:
            for _ in range(600):  # until a result is in (the CLI prints progress lines on stderr)
                await asyncio.sleep(0.1)
                try:
                    run = await scenarios.GetRun(scenario_pb2.GetRunRequest(name=name))
                except grpc.aio.AioRpcError:
                    continue
                if any(r.state == common_pb2.JOB_STATE_SUCCEEDED for r in run.results):
                    break
            cli.send_signal(signal.SIGINT)
            _, err = await asyncio.wait_for(cli.communicate(), timeout=60)
        finally:
            if cli.returncode is None:
                cli.kill()
                await cli.wait()
        assert cli.returncode == 130, err.decode()
        assert f"Ctrl-C: cancelled {name}" in err.decode()
        assert "Traceback" not in err.decode()
        await assert_cancelled(stack, scenarios, name)
