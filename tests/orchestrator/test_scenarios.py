import time

import pytest
from fabrictwin.v1 import common_pb2, scenario_pb2, simulation_pb2

from services.common.errors import InvalidArgument, ResourceExhausted
from services.orchestrator.messages import (
    build_spec,
    scenario_from_proto,
    scenario_to_proto,
    validate_scenario,
)
from services.orchestrator.model import PlannedSimulation, SimulationRequest
from services.orchestrator.scenarios import (
    DEFAULT_MAX_SIMULATIONS_PER_RUN,
    check_run_size,
    expand,
    simulation_count,
)

ECMP = common_pb2.LoadBalancing(mode=common_pb2.LOAD_BALANCING_MODE_ECMP)
ADAPTIVE = common_pb2.LoadBalancing(mode=common_pb2.LOAD_BALANCING_MODE_ADAPTIVE)


def specs(message: scenario_pb2.Scenario) -> list[tuple[PlannedSimulation, simulation_pb2.SimulationSpec]]:
    """Each point of a run of the scenario with the SimulationSpec the simulator is sent for it."""
    domain = scenario_from_proto(message)
    return [(p, build_spec(SimulationRequest(f"sim-{p.position}", domain, p))) for p in expand(domain)]


def message(**overrides) -> scenario_pb2.Scenario:
    base = scenario_pb2.Scenario(
        fabric="fabrics/ft8",
        jobs=[
            simulation_pb2.Job(
                collective=simulation_pb2.COLLECTIVE_ALL_REDUCE, size_bytes=1 << 20, rank_count=8
            )
        ],
        modes=[ECMP, ADAPTIVE],
        seed=7,
    )
    for key, value in overrides.items():
        if isinstance(value, list):
            base.ClearField(key)  # type: ignore[arg-type]  # a repeated field named by the caller
            getattr(base, key).extend(value)
        else:
            setattr(base, key, value)
    return base


def scenario(**overrides):  # the domain scenario
    return scenario_from_proto(message(**overrides))


def test_each_mode_becomes_one_simulation_with_the_same_workload_and_seed():
    planned = specs(message())
    assert [p.label for p, _ in planned] == ["ECMP", "ADAPTIVE"]
    assert planned[0][1].jobs == planned[1][1].jobs
    assert {spec.seed for _, spec in planned} == {7}
    assert planned[1][1].load_balancing.mode == common_pb2.LOAD_BALANCING_MODE_ADAPTIVE
    assert [spec.fabric for _, spec in planned] == ["fabrics/ft8"] * 2


def test_sweeps_multiply_with_modes_and_set_the_named_field():
    s = message(sweeps=[scenario_pb2.Sweep(parameter="jobs.0.size_bytes", values=["1024", "1e6"])])
    planned = specs(s)
    assert len(planned) == 4
    assert [spec.jobs[0].size_bytes for _, spec in planned] == [1024, 1024, 1_000_000, 1_000_000]
    assert planned[2][0].sweep_point == {"jobs.0.size_bytes": "1e6"}
    assert [p.position for p, _ in planned] == [0, 1, 2, 3]


def test_sweep_of_an_enum_takes_its_name():
    s = message(sweeps=[scenario_pb2.Sweep(parameter="fidelity", values=["FIDELITY_FLOW"])])
    assert specs(s)[0][1].fidelity == simulation_pb2.FIDELITY_FLOW


def test_a_scenario_reads_back_from_its_domain_model_unchanged():
    s = message(
        display_name="two modes",
        sweeps=[scenario_pb2.Sweep(parameter="seed", values=["1", "2"])],
        store_telemetry=True,
        mtu_bytes=2048,
    )
    s.roce.window_bytes = 1 << 18
    s.modes[0].label = "hashed"
    assert scenario_to_proto(scenario_from_proto(s)) == s
    assert [m.label for m in scenario_from_proto(s).modes] == ["hashed", "ADAPTIVE"]


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"fabric": ""}, "scenario.fabric"),
        ({"fabric": "ft8"}, "scenario.fabric"),
        ({"modes": []}, "scenario.modes"),
        ({"jobs": []}, "scenario.jobs"),
        ({"modes": [ECMP, ECMP]}, "scenario.modes[1].label"),
        ({"modes": [common_pb2.LoadBalancing()]}, "scenario.modes[0].mode"),
        (
            {"sweeps": [scenario_pb2.Sweep(parameter="jobs.0.nope", values=["1"])]},
            "scenario.sweeps[0].parameter",
        ),
        (
            {"sweeps": [scenario_pb2.Sweep(parameter="jobs.0.size_bytes", values=["big"])]},
            "scenario.sweeps[0].values",
        ),
        ({"sweeps": [scenario_pb2.Sweep(parameter="seed", values=[])]}, "scenario.sweeps[0].values"),
    ],
)
def test_bad_scenarios_are_rejected_naming_the_field(overrides, field):
    with pytest.raises(InvalidArgument) as err:
        validate_scenario(message(**overrides))
    assert err.value.field == field


def test_a_job_without_a_size_is_rejected():
    bad = message(jobs=[simulation_pb2.Job(collective=simulation_pb2.COLLECTIVE_ALL_REDUCE, rank_count=8)])
    with pytest.raises(InvalidArgument, match=r"scenario\.jobs\[0\]\.size_bytes"):
        validate_scenario(bad)


def test_a_run_is_counted_as_sweep_points_times_modes_without_expanding_it():
    axis = [str(v) for v in range(1, 1001)]
    s = scenario(
        sweeps=[scenario_pb2.Sweep(parameter=p, values=axis) for p in ("seed", "mtu_bytes", "buffer_bytes")]
    )
    started = time.perf_counter()
    assert simulation_count(s) == 1000 * 1000 * 1000 * 2
    assert time.perf_counter() - started < 0.1


def test_a_sweep_above_the_limit_is_refused_naming_the_count_and_the_limit():
    axis = [str(v) for v in range(1, 1001)]
    s = scenario(sweeps=[scenario_pb2.Sweep(parameter="seed", values=axis)] * 2)
    with pytest.raises(ResourceExhausted) as refused:
        check_run_size(s, DEFAULT_MAX_SIMULATIONS_PER_RUN)
    assert "2,000,000 simulations" in str(refused.value)
    assert "10,000" in str(refused.value)
    assert "--max-simulations-per-run" in str(refused.value)


def test_expand_refuses_a_run_above_the_limit_before_building_any_spec():
    axis = [str(v) for v in range(1, 1001)]
    s = scenario(sweeps=[scenario_pb2.Sweep(parameter="seed", values=axis)] * 3)
    started = time.perf_counter()
    with pytest.raises(ResourceExhausted):
        expand(s, max_simulations=DEFAULT_MAX_SIMULATIONS_PER_RUN)
    assert time.perf_counter() - started < 1.0


def test_a_run_at_the_limit_is_admitted_and_a_limit_of_zero_admits_any_size():
    s = scenario(sweeps=[scenario_pb2.Sweep(parameter="seed", values=["1", "2"])])
    check_run_size(s, 4)
    with pytest.raises(ResourceExhausted):
        check_run_size(s, 3)
    check_run_size(scenario(sweeps=[scenario_pb2.Sweep(parameter="seed", values=["1"] * 10_000)] * 3), 0)
