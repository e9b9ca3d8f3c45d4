"""ScenarioService on a real server, driving real topology, simulator and telemetry servers."""

from __future__ import annotations

import grpc
import pytest
from fabrictwin.v1 import (
    common_pb2,
    scenario_pb2,
    scenario_pb2_grpc,
    simulation_pb2,
    telemetry_pb2,
    telemetry_pb2_grpc,
    topology_pb2,
    topology_pb2_grpc,
)
from google.protobuf import field_mask_pb2

from tests.in_process import in_process_stack

ECMP = common_pb2.LoadBalancing(mode=common_pb2.LOAD_BALANCING_MODE_ECMP, seed=3)
ADAPTIVE = common_pb2.LoadBalancing(mode=common_pb2.LOAD_BALANCING_MODE_ADAPTIVE)


@pytest.fixture
async def stack(tmp_path):
    async with in_process_stack(tmp_path) as running:
        async with grpc.aio.insecure_channel(running.topology.address) as channel:
            spec = topology_pb2.FabricSpec(fat_tree=topology_pb2.FatTreeSpec(k=4))
            await topology_pb2_grpc.TopologyServiceStub(channel).CreateFabric(
                topology_pb2.CreateFabricRequest(fabric_id="ft4", spec=spec)
            )
        yield running


@pytest.fixture
async def scenarios(stack):
    async with grpc.aio.insecure_channel(stack.orchestrator.address) as channel:
        yield scenario_pb2_grpc.ScenarioServiceStub(channel)


def allreduce_scenario(**extra) -> scenario_pb2.Scenario:
    fields = {"fabric": "fabrics/ft4", "modes": [ECMP, ADAPTIVE], "seed": 11, **extra}
    return scenario_pb2.Scenario(
        jobs=[
            simulation_pb2.Job(
                collective=simulation_pb2.COLLECTIVE_ALL_REDUCE,
                size_bytes=64 << 20,
                rank_count=16,
                placement=simulation_pb2.PLACEMENT_POLICY_RANDOM,
            )
        ],
        **fields,
    )


async def run_to_end(scenarios, scenario_name: str) -> scenario_pb2.Run:
    run = await scenarios.RunScenario(scenario_pb2.RunScenarioRequest(scenario=scenario_name))
    assert run.state == common_pb2.JOB_STATE_PENDING
    last = run
    async for update in scenarios.WatchRun(scenario_pb2.WatchRunRequest(name=run.name)):
        last = update
    return last


async def test_a_scenario_run_compares_ecmp_with_adaptive_routing(scenarios):
    created = await scenarios.CreateScenario(
        scenario_pb2.CreateScenarioRequest(scenario_id="ring", scenario=allreduce_scenario())
    )
    assert created.name == "scenarios/ring"
    run = await run_to_end(scenarios, created.name)
    assert run.state == common_pb2.JOB_STATE_SUCCEEDED, run.error.message
    assert run.progress.fraction == 1.0
    ecmp, adaptive = run.results
    assert (ecmp.label, adaptive.label) == ("ECMP", "ADAPTIVE")
    assert ecmp.simulation.startswith("simulations/")
    assert adaptive.makespan_ns <= ecmp.makespan_ns
    assert adaptive.makespan_ns == pytest.approx(adaptive.ideal_completion_ns, rel=0.03)
    assert any("even split" in note for note in adaptive.model_notes)

    comparison = await scenarios.CompareRuns(scenario_pb2.CompareRunsRequest(runs=[run.name]))
    assert [r.label for r in comparison.rows] == ["ECMP", "ADAPTIVE"]
    assert comparison.rows[0].slowdown_vs_baseline == 1.0
    assert comparison.rows[1].slowdown_vs_baseline <= 1.0

    stored = await scenarios.GetRun(scenario_pb2.GetRunRequest(name=run.name))
    assert stored == run
    listed = await scenarios.ListRuns(scenario_pb2.ListRunsRequest(parent="scenarios/-"))
    assert [r.name for r in listed.runs] == [run.name]


async def test_a_scenario_naming_a_missing_fabric_is_not_found(scenarios):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await scenarios.CreateScenario(
            scenario_pb2.CreateScenarioRequest(scenario=allreduce_scenario(fabric="fabrics/nope"))
        )
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert "scenario.fabric" in str(err.value.details())


async def test_an_empty_mode_list_is_invalid_and_names_the_field(scenarios):
    bad = allreduce_scenario()
    del bad.modes[:]
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await scenarios.CreateScenario(scenario_pb2.CreateScenarioRequest(scenario=bad))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "scenario.modes" in str(err.value.details())


async def test_a_mode_the_simulator_refuses_fails_the_run_with_its_reason(scenarios):
    flowlet = common_pb2.LoadBalancing(mode=common_pb2.LOAD_BALANCING_MODE_FLOWLET)
    created = await scenarios.CreateScenario(
        scenario_pb2.CreateScenarioRequest(scenario=allreduce_scenario(modes=[ADAPTIVE, flowlet]))
    )
    run = await run_to_end(scenarios, created.name)
    assert run.state == common_pb2.JOB_STATE_FAILED
    assert run.results[0].state == common_pb2.JOB_STATE_SUCCEEDED
    assert run.results[1].state == common_pb2.JOB_STATE_FAILED
    assert "FLOWLET" in run.error.message


async def test_update_replaces_only_the_masked_fields(scenarios):
    created = await scenarios.CreateScenario(
        scenario_pb2.CreateScenarioRequest(scenario_id="upd", scenario=allreduce_scenario(display_name="a"))
    )
    change = scenario_pb2.Scenario(name=created.name, display_name="b", modes=[ADAPTIVE])
    updated = await scenarios.UpdateScenario(
        scenario_pb2.UpdateScenarioRequest(
            scenario=change, update_mask=field_mask_pb2.FieldMask(paths=["display_name", "modes"])
        )
    )
    assert updated.display_name == "b"
    assert list(updated.modes) == [ADAPTIVE]
    assert updated.jobs == created.jobs
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await scenarios.UpdateScenario(
            scenario_pb2.UpdateScenarioRequest(
                scenario=change, update_mask=field_mask_pb2.FieldMask(paths=["name"])
            )
        )
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def diagnose_run(stack, scenarios, mode):
    """Run a ring whose every hop crosses the spine (2 leaves x 4 uplinks) and diagnose its telemetry."""
    async with grpc.aio.insecure_channel(stack.topology.address) as channel:
        spec = topology_pb2.FabricSpec(
            leaf_spine=topology_pb2.LeafSpineSpec(leaves=2, spines=4, hosts_per_leaf=4)
        )
        await topology_pb2_grpc.TopologyServiceStub(channel).CreateFabric(
            topology_pb2.CreateFabricRequest(fabric_id="ls", spec=spec)
        )
    job = simulation_pb2.Job(
        collective=simulation_pb2.COLLECTIVE_ALL_REDUCE,
        size_bytes=64 << 20,
        rank_count=8,
        placement=simulation_pb2.PLACEMENT_POLICY_SCATTERED,
    )
    created = await scenarios.CreateScenario(
        scenario_pb2.CreateScenarioRequest(
            scenario=scenario_pb2.Scenario(
                fabric="fabrics/ls", jobs=[job], modes=[mode], store_telemetry=True
            )
        )
    )
    run = await run_to_end(scenarios, created.name)
    assert run.state == common_pb2.JOB_STATE_SUCCEEDED, run.error.message
    source = run.results[0].telemetry_source
    async with grpc.aio.insecure_channel(stack.telemetry.address) as channel:
        stored = await telemetry_pb2_grpc.TelemetryServiceStub(channel).GetSource(
            telemetry_pb2.GetSourceRequest(name=source)
        )
    assert stored.sample_count > 0
    diagnosis = await scenarios.Diagnose(
        scenario_pb2.DiagnoseRequest(source=source, ports=["leaf-*->spine-*"])
    )
    return run.results[0], diagnosis


async def test_a_stored_ecmp_run_is_diagnosed_as_pinned_flows(stack, scenarios):
    # Seed 3 hashes the 4 flows leaving each leaf onto fewer than 4 uplinks: some run hot, some idle.
    result, diagnosis = await diagnose_run(stack, scenarios, ECMP)
    assert result.uplink_skew.share_hot > 0 and result.uplink_skew.share_idle > 0
    assert [f.kind for f in diagnosis.findings] == [scenario_pb2.FINDING_KIND_ECMP_PINNING]
    hot_links = round(result.uplink_skew.share_hot * result.uplink_skew.links)
    # Every uplink above 80% is named hot, and with them any at 1.5x the mean (the relative rule).
    assert hot_links >= 1 and len(diagnosis.findings[0].ports) >= hot_links
    assert "max/mean" in diagnosis.findings[0].evidence and "idle:" in diagnosis.findings[0].evidence


async def test_a_stored_adaptive_run_shows_no_pinning(stack, scenarios):
    result, diagnosis = await diagnose_run(stack, scenarios, ADAPTIVE)
    assert result.uplink_skew.share_idle == 0
    assert list(diagnosis.findings) == []


async def test_diagnosing_a_missing_source_is_not_found(scenarios):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await scenarios.Diagnose(scenario_pb2.DiagnoseRequest(source="sources/nope"))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


def test_simulator_targets_expand_to_one_address_per_replica():
    from services.orchestrator.peers import GrpcSimulators

    assert GrpcSimulators._expand("ipv4:10.0.0.1:50052,10.0.0.2:50052") == [
        "10.0.0.1:50052",
        "10.0.0.2:50052",
    ]
    assert "127.0.0.1:50052" in GrpcSimulators._expand("dns:///localhost:50052")
    assert GrpcSimulators._expand("simulator:50052") == ["simulator:50052"]
