"""Scenario admission: a run larger than the orchestrator's limit is refused before any work starts.

Issue 11 measured a 1000 x 1000 sweep taking the orchestrator to 4.6 GB and losing the run, and a
100 x 100 x 100 sweep staying PENDING forever. Both are now RESOURCE_EXHAUSTED at CreateScenario
(and at RunScenario, for a scenario stored under a higher limit), naming the count and the limit.
"""

from __future__ import annotations

import time

import grpc
import pytest
from fabrictwin.v1 import common_pb2, scenario_pb2, scenario_pb2_grpc, topology_pb2, topology_pb2_grpc
from google.protobuf import field_mask_pb2

from services.common.config import load_config
from services.common.db import make_engine
from services.orchestrator.__main__ import extra_flags
from services.orchestrator.messages import scenario_from_proto
from services.orchestrator.store import ScenarioStore
from tests.in_process import in_process_stack
from tests.orchestrator.test_service import allreduce_scenario


def sweep(parameter: str, count: int) -> scenario_pb2.Sweep:
    return scenario_pb2.Sweep(parameter=parameter, values=[str(v) for v in range(1, count + 1)])


async def create_fabric(address: str) -> None:
    async with grpc.aio.insecure_channel(address) as channel:
        spec = topology_pb2.FabricSpec(fat_tree=topology_pb2.FatTreeSpec(k=4))
        await topology_pb2_grpc.TopologyServiceStub(channel).CreateFabric(
            topology_pb2.CreateFabricRequest(fabric_id="ft4", spec=spec)
        )


@pytest.fixture
async def stack(tmp_path):
    async with in_process_stack(tmp_path) as running:
        await create_fabric(running.topology.address)
        yield running


@pytest.fixture
async def scenarios(stack):
    async with grpc.aio.insecure_channel(stack.orchestrator.address) as channel:
        yield scenario_pb2_grpc.ScenarioServiceStub(channel)


@pytest.mark.parametrize(
    ("sweeps", "count"),
    [
        ([sweep("seed", 1000), sweep("mtu_bytes", 1000)], "2,000,000"),
        ([sweep("seed", 100), sweep("mtu_bytes", 100), sweep("buffer_bytes", 100)], "2,000,000"),
    ],
)
async def test_a_sweep_over_the_limit_is_refused_at_create_naming_count_and_limit(scenarios, sweeps, count):
    started = time.perf_counter()
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await scenarios.CreateScenario(
            scenario_pb2.CreateScenarioRequest(scenario=allreduce_scenario(sweeps=sweeps))
        )
    elapsed = time.perf_counter() - started
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert f"{count} simulations" in str(refused.value.details())
    assert "limit of 10,000" in str(refused.value.details())
    assert elapsed < 2.0
    listed = await scenarios.ListScenarios(scenario_pb2.ListScenariosRequest())
    assert list(listed.scenarios) == []


async def test_an_update_that_grows_the_sweep_over_the_limit_is_refused(scenarios):
    created = await scenarios.CreateScenario(
        scenario_pb2.CreateScenarioRequest(scenario=allreduce_scenario(sweeps=[sweep("seed", 2)]))
    )
    grown = scenario_pb2.Scenario(name=created.name, sweeps=[sweep("seed", 1000), sweep("mtu_bytes", 1000)])
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await scenarios.UpdateScenario(
            scenario_pb2.UpdateScenarioRequest(
                scenario=grown, update_mask=field_mask_pb2.FieldMask(paths=["sweeps"])
            )
        )
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    kept = await scenarios.GetScenario(scenario_pb2.GetScenarioRequest(name=created.name))
    assert len(kept.sweeps[0].values) == 2


async def test_a_stored_scenario_over_a_lowered_limit_is_refused_at_run_and_no_run_is_stored(tmp_path):
    # Stored while the limit was higher: 3 sweep points x 2 modes = 6 simulations.
    store = ScenarioStore(make_engine(f"sqlite:///{tmp_path / 'orchestrator.db'}"))
    store.create_scenario("big", scenario_from_proto(allreduce_scenario(sweeps=[sweep("seed", 3)])))
    store.engine.dispose()
    async with in_process_stack(tmp_path, settings={"extra": {"max_simulations_per_run": 4}}) as stack:
        await create_fabric(stack.topology.address)
        async with grpc.aio.insecure_channel(stack.orchestrator.address) as channel:
            scenarios = scenario_pb2_grpc.ScenarioServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await scenarios.RunScenario(scenario_pb2.RunScenarioRequest(scenario="scenarios/big"))
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "6 simulations" in str(refused.value.details())
            assert "limit of 4" in str(refused.value.details())
            runs = await scenarios.ListRuns(scenario_pb2.ListRunsRequest(parent="scenarios/big"))
            assert list(runs.runs) == []
            # At the limit is fine: 2 sweep points x 2 modes.
            await scenarios.CreateScenario(
                scenario_pb2.CreateScenarioRequest(
                    scenario_id="small", scenario=allreduce_scenario(sweeps=[sweep("seed", 2)])
                )
            )
            run = await scenarios.RunScenario(scenario_pb2.RunScenarioRequest(scenario="scenarios/small"))
            assert run.state == common_pb2.JOB_STATE_PENDING


def test_the_limit_is_a_flag_and_a_variable_with_a_default_of_ten_thousand():
    assert load_config("orchestrator", [], env={}, extra_flags=extra_flags).extra == {
        "max_simulations_per_run": 10_000
    }
    flag = load_config("orchestrator", ["--max-simulations-per-run", "50"], env={}, extra_flags=extra_flags)
    assert flag.extra["max_simulations_per_run"] == 50
    env = {"FABRICTWIN_MAX_SIMULATIONS_PER_RUN": "0"}
    from_env = load_config("orchestrator", [], env=env, extra_flags=extra_flags)
    assert from_env.extra["max_simulations_per_run"] == 0
