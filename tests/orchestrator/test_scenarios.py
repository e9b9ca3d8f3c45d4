import pytest
from fabrictwin.v1 import common_pb2, scenario_pb2, simulation_pb2

from services.common.errors import InvalidArgument
from services.orchestrator.scenarios import expand, validate_scenario

ECMP = common_pb2.LoadBalancing(mode=common_pb2.LOAD_BALANCING_MODE_ECMP)
ADAPTIVE = common_pb2.LoadBalancing(mode=common_pb2.LOAD_BALANCING_MODE_ADAPTIVE)


def scenario(**overrides) -> scenario_pb2.Scenario:
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
            base.ClearField(key)
            getattr(base, key).extend(value)
        else:
            setattr(base, key, value)
    return base


def test_each_mode_becomes_one_simulation_with_the_same_workload_and_seed():
    planned = expand(scenario())
    assert [p.label for p in planned] == ["ECMP", "ADAPTIVE"]
    assert planned[0].spec.jobs == planned[1].spec.jobs
    assert {p.spec.seed for p in planned} == {7}
    assert planned[1].spec.load_balancing.mode == common_pb2.LOAD_BALANCING_MODE_ADAPTIVE


def test_sweeps_multiply_with_modes_and_set_the_named_field():
    s = scenario(sweeps=[scenario_pb2.Sweep(parameter="jobs.0.size_bytes", values=["1024", "1e6"])])
    planned = expand(s)
    assert len(planned) == 4
    assert [p.spec.jobs[0].size_bytes for p in planned] == [1024, 1024, 1_000_000, 1_000_000]
    assert planned[2].sweep_point == {"jobs.0.size_bytes": "1e6"}


def test_sweep_of_an_enum_takes_its_name():
    s = scenario(sweeps=[scenario_pb2.Sweep(parameter="fidelity", values=["FIDELITY_FLOW"])])
    assert expand(s)[0].spec.fidelity == simulation_pb2.FIDELITY_FLOW


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
        validate_scenario(scenario(**overrides))
    assert err.value.field == field


def test_a_job_without_a_size_is_rejected():
    bad = scenario(jobs=[simulation_pb2.Job(collective=simulation_pb2.COLLECTIVE_ALL_REDUCE, rank_count=8)])
    with pytest.raises(InvalidArgument, match=r"scenario\.jobs\[0\]\.size_bytes"):
        validate_scenario(bad)
