"""What-if as one request: the variants RunWhatIf builds, and what each simulation is sent."""

from __future__ import annotations

import grpc
import pytest
from fabrictwin.v1 import (
    common_pb2,
    scenario_pb2,
    scenario_pb2_grpc,
    simulation_pb2,
    topology_pb2,
    topology_pb2_grpc,
)

from services.common.errors import InvalidArgument
from services.orchestrator.messages import (
    build_spec,
    scenario_from_proto,
    scenario_to_proto,
    validate_scenario,
    what_if_scenario,
)
from services.orchestrator.model import SimulationRequest
from services.orchestrator.scenarios import expand
from tests.in_process import in_process_stack

ECMP = common_pb2.LoadBalancing(mode=common_pb2.LOAD_BALANCING_MODE_ECMP)
ADAPTIVE = common_pb2.LoadBalancing(mode=common_pb2.LOAD_BALANCING_MODE_ADAPTIVE)
REPAIRED = simulation_pb2.LINK_STATE_POLICY_REPAIRED


def base(**overrides) -> scenario_pb2.Scenario:
    job = simulation_pb2.Job(
        collective=simulation_pb2.COLLECTIVE_ALL_REDUCE, size_bytes=1 << 20, rank_count=8
    )
    return scenario_pb2.Scenario(
        **{"fabric": "fabrics/ft8", "jobs": [job], "modes": [ECMP], "seed": 3, **overrides}
    )


def sent(
    scenario: scenario_pb2.Scenario, routing_version: int = 7
) -> dict[str, simulation_pb2.SimulationSpec]:
    """label -> the SimulationSpec each simulation of a run is sent (pinned to `routing_version`)."""
    domain = scenario_from_proto(scenario)
    return {
        p.label: build_spec(SimulationRequest(f"sim-{p.position}", domain, p, "", routing_version))
        for p in expand(domain)
    }


def test_one_variant_per_change_plus_as_is_and_all_changes_together() -> None:
    request = scenario_pb2.RunWhatIfRequest(
        scenario=base(),
        repair_links=["leaf-3/p17<->spine-1/p4"],
        routing_engines=[topology_pb2.ROUTING_ENGINE_FTREE],
        modes=[ADAPTIVE],
    )
    specs = sent(what_if_scenario(request))
    assert list(specs) == [
        "as-is",
        "repair leaf-3/p17<->spine-1/p4",
        "routing ftree",
        "ADAPTIVE",
        "all changes",
    ]
    assert all(s.routing_version == 7 for s in specs.values())  # every variant on the pinned routes
    assert specs["as-is"].fabric_state == simulation_pb2.FabricState()
    assert specs["as-is"].load_balancing.mode == common_pb2.LOAD_BALANCING_MODE_ECMP
    repair = specs["repair leaf-3/p17<->spine-1/p4"]
    assert (repair.fabric_state.link_state, list(repair.fabric_state.repaired_links)) == (
        REPAIRED,
        ["leaf-3/p17<->spine-1/p4"],
    )
    assert repair.load_balancing.mode == common_pb2.LOAD_BALANCING_MODE_ECMP
    assert specs["routing ftree"].fabric_state.routing_engine == topology_pb2.ROUTING_ENGINE_FTREE
    assert specs["ADAPTIVE"].load_balancing.mode == common_pb2.LOAD_BALANCING_MODE_ADAPTIVE
    assert specs["ADAPTIVE"].fabric_state == simulation_pb2.FabricState()
    together = specs["all changes"]
    assert together.fabric_state.link_state == REPAIRED
    assert together.fabric_state.routing_engine == topology_pb2.ROUTING_ENGINE_FTREE
    assert together.load_balancing.mode == common_pb2.LOAD_BALANCING_MODE_ADAPTIVE
    # Every variant runs the same workload and seed.
    assert len({(tuple(j.SerializeToString() for j in s.jobs), s.seed) for s in specs.values()}) == 1


def test_a_single_change_has_no_all_changes_row_and_a_clean_fabric_is_a_change() -> None:
    specs = sent(what_if_scenario(scenario_pb2.RunWhatIfRequest(scenario=base(), all_clean=True)))
    assert list(specs) == ["as-is", "all links clean"]
    assert specs["all links clean"].fabric_state.link_state == simulation_pb2.LINK_STATE_POLICY_ALL_UP


def test_variants_round_trip_through_the_domain() -> None:
    scenario = what_if_scenario(scenario_pb2.RunWhatIfRequest(scenario=base(), repair_links=["3", "9"]))
    again = scenario_to_proto(scenario_from_proto(scenario))
    assert again == scenario
    assert [v.label for v in again.variants] == ["as-is", "repair 3", "repair 9", "all changes"]
    assert list(again.variants[-1].fabric_state.repaired_links) == ["3", "9"]


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (scenario_pb2.RunWhatIfRequest(scenario=base()), "repair_links"),
        (scenario_pb2.RunWhatIfRequest(scenario=base(), repair_links=["3", "3"]), "repair_links[1]"),
        (scenario_pb2.RunWhatIfRequest(scenario=base(), repair_links=[""]), "repair_links[0]"),
        (
            scenario_pb2.RunWhatIfRequest(
                scenario=base(), routing_engines=[topology_pb2.ROUTING_ENGINE_UNSPECIFIED]
            ),
            "routing_engines[0]",
        ),
        (
            scenario_pb2.RunWhatIfRequest(
                scenario=base(), routing_engines=[topology_pb2.ROUTING_ENGINE_FILE]
            ),
            "routing_engine",
        ),
        (scenario_pb2.RunWhatIfRequest(scenario=base(modes=[]), all_clean=True), "scenario.modes"),
        (
            scenario_pb2.RunWhatIfRequest(
                scenario=base(variants=[scenario_pb2.Variant(label="x")]), all_clean=True
            ),
            "scenario.variants",
        ),
        (
            scenario_pb2.RunWhatIfRequest(scenario=base(), modes=[common_pb2.LoadBalancing()]),
            "modes[0].mode",
        ),
    ],
)
def test_bad_what_ifs_are_refused_naming_the_field(request_, field) -> None:
    with pytest.raises(InvalidArgument) as caught:
        what_if_scenario(request_)
    assert caught.value.field.startswith(field) or field in str(caught.value)


@pytest.mark.parametrize(
    ("variant", "field"),
    [
        (scenario_pb2.Variant(), "scenario.variants[0].label"),
        (
            scenario_pb2.Variant(label="r", fabric_state=simulation_pb2.FabricState(link_state=REPAIRED)),
            "scenario.variants[0].fabric_state.repaired_links",
        ),
        (
            scenario_pb2.Variant(label="r", fabric_state=simulation_pb2.FabricState(repaired_links=["1"])),
            "scenario.variants[0].fabric_state.repaired_links",
        ),
        (
            scenario_pb2.Variant(label="r", load_balancing=common_pb2.LoadBalancing(seed=1)),
            "scenario.variants[0].load_balancing.mode",
        ),
    ],
)
def test_bad_variants_are_refused_naming_the_field(variant, field) -> None:
    with pytest.raises(InvalidArgument) as caught:
        validate_scenario(base(variants=[variant]))
    assert caught.value.field == field


# -- through the real services ----------------------------------------------------------------------


@pytest.fixture
async def stack(tmp_path):
    async with in_process_stack(tmp_path) as running:
        async with grpc.aio.insecure_channel(running.topology.address) as channel:
            fabrics = topology_pb2_grpc.TopologyServiceStub(channel)
            spec = topology_pb2.FabricSpec(
                leaf_spine=topology_pb2.LeafSpineSpec(leaves=4, spines=2, hosts_per_leaf=2)
            )
            await fabrics.CreateFabric(topology_pb2.CreateFabricRequest(fabric_id="worn", spec=spec))
            await fabrics.SetLinkState(
                topology_pb2.SetLinkStateRequest(
                    name=f"fabrics/worn/links/{UPLINK}", state=topology_pb2.LINK_STATE_DOWN
                )
            )
        yield running


UPLINK = "spine-0/p1<->leaf-0/p3"


def ring(**extra) -> scenario_pb2.Scenario:
    job = simulation_pb2.Job(
        collective=simulation_pb2.COLLECTIVE_ALL_REDUCE,
        size_bytes=16 << 20,
        rank_count=8,
        placement=simulation_pb2.PLACEMENT_POLICY_SCATTERED,
    )
    return scenario_pb2.Scenario(fabric="fabrics/worn", jobs=[job], modes=[ECMP], seed=5, **extra)


async def test_a_what_if_runs_as_is_and_repaired_and_says_what_the_repair_buys(stack) -> None:
    async with grpc.aio.insecure_channel(stack.orchestrator.address) as channel:
        scenarios = scenario_pb2_grpc.ScenarioServiceStub(channel)
        request = scenario_pb2.RunWhatIfRequest(
            scenario=ring(), repair_links=[UPLINK], modes=[ADAPTIVE], scenario_id="tonight"
        )
        started = await scenarios.RunWhatIf(request)
        assert started.name.startswith("scenarios/tonight/runs/")
        version = started.routing_version
        run = started
        async for update in scenarios.WatchRun(scenario_pb2.WatchRunRequest(name=started.name)):
            run = update
        assert run.state == common_pb2.JOB_STATE_SUCCEEDED, run.error.message
        results = {r.label: r for r in run.results}
        assert list(results) == ["as-is", f"repair {UPLINK}", "ADAPTIVE", "all changes"]
        assert {r.routing_version for r in run.results} == {version}
        as_is, repaired = results["as-is"], results[f"repair {UPLINK}"]
        assert repaired.makespan_ns < as_is.makespan_ns  # the repair gives leaf-0 its second spine back
        assert repaired.fabric_state.repaired_links == [UPLINK]
        assert any("DOWN links routed around" in n for n in as_is.model_notes)
        comparison = await scenarios.CompareRuns(scenario_pb2.CompareRunsRequest(runs=[run.name]))
        assert comparison.baseline == "as-is"
        ratio = as_is.makespan_ns / repaired.makespan_ns
        assert f"repair {UPLINK}: {ratio:.3g}x faster" in comparison.summary
        assert comparison.summary.startswith("against as-is")


async def test_a_repair_naming_no_link_is_refused_naming_it(stack) -> None:
    async with grpc.aio.insecure_channel(stack.orchestrator.address) as channel:
        scenarios = scenario_pb2_grpc.ScenarioServiceStub(channel)
        request = scenario_pb2.RunWhatIfRequest(
            scenario=ring(), repair_links=[UPLINK, "spine-9/p1<->nowhere/p1"]
        )
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await scenarios.RunWhatIf(request)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert caught.value.details().startswith("repair_links[1]")
        listed = await scenarios.ListScenarios(scenario_pb2.ListScenariosRequest())
        assert list(listed.scenarios) == []  # nothing stored
        bad = ring(
            variants=[
                scenario_pb2.Variant(
                    label="x",
                    fabric_state=simulation_pb2.FabricState(
                        link_state=simulation_pb2.LINK_STATE_POLICY_REPAIRED, repaired_links=["99999"]
                    ),
                )
            ]
        )
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await scenarios.CreateScenario(scenario_pb2.CreateScenarioRequest(scenario=bad))
        assert "scenario.variants[0].fabric_state.repaired_links[0]" in caught.value.details()
