"""Every number of a simulation spec has a documented range, checked before any arithmetic: out of
range is INVALID_ARGUMENT naming the field, never a wrong answer or INTERNAL.

The measured cases: `header_bytes` 2^31-1 succeeded with a makespan of -171,796,364 ns;
`time_limit_ns` 2^63-1, a job's `start_ns` 2^62 and a switch latency of 2^62 ns overflowed into
INTERNAL; `ecn_pmax` NaN ran and succeeded; a rate of 1e300 Gb/s.
"""

from __future__ import annotations

import dataclasses
import math

import grpc
import numpy as np
import pytest
from fabrictwin.v1 import common_pb2, simulation_pb2

from services.common.errors import InvalidArgument
from services.simulator import bounds
from services.simulator.runner import run_simulation
from services.simulator.spec import SimulationSpec
from services.simulator.validation import validate_spec

from .fabrics import leaf_spine
from .servers import simulator_server, wait_done
from .test_service import ring_spec, topology  # noqa: F401 - `topology` is a fixture

S = simulation_pb2


@pytest.fixture
async def simulator(topology):  # noqa: F811
    async with simulator_server(topology) as server:
        yield server.stub


def packet_ring(**fields) -> S.SimulationSpec:
    return ring_spec(fidelity=S.FIDELITY_PACKET, **fields)


def started_late() -> S.SimulationSpec:
    spec = ring_spec()
    spec.jobs[0].start_ns = 2**62
    return spec


def dcqcn(**roce) -> S.SimulationSpec:
    return packet_ring(roce=S.RoceConfig(dcqcn=True, **roce))


def capped(rate_gbps: float) -> S.SimulationSpec:
    flow = S.FlowSpec(source="host-0", destination="host-5", size_bytes=1 << 20, rate_gbps=rate_gbps)
    return S.SimulationSpec(
        fabric="fabrics/ls",
        jobs=[S.Job(collective=S.COLLECTIVE_POINT_TO_POINT, flows=[flow])],
        load_balancing=common_pb2.LoadBalancing(mode=common_pb2.LOAD_BALANCING_MODE_ECMP),
    )


def fault_at(start_ns: int) -> S.SimulationSpec:
    fault = S.Fault(link="0", kind=S.FAULT_KIND_BIT_ERRORS, bit_error_rate=1e-9, start_ns=start_ns)
    return packet_ring(faults=[fault])


@pytest.mark.parametrize(
    ("spec", "field", "problem"),
    [
        (packet_ring(header_bytes=2**31 - 1), "spec.header_bytes", "must be in 0..4096, got 2147483647"),
        (ring_spec(time_limit_ns=2**63 - 1), "spec.time_limit_ns", "must be in 0..1000000000000000"),
        (started_late(), "spec.jobs[0].start_ns", "got 4611686018427387904"),
        (ring_spec(switch_latency_ns=2**62), "spec.switch_latency_ns", "must be in 0..1000000000"),
        (dcqcn(ecn_pmax=math.nan), "spec.roce.ecn_pmax", "must be a finite number, got nan"),
        (dcqcn(dcqcn_g=math.inf), "spec.roce.dcqcn_g", "finite"),
        (dcqcn(rate_ai_mbps=1e300), "spec.roce.rate_ai_mbps", "must be in 0..1e+07"),
        (capped(1e300), "spec.jobs[0].flows[0].rate_gbps", "at most 10000"),
        (capped(math.nan), "spec.jobs[0].flows[0].rate_gbps", "finite"),
        (fault_at(2**62), "spec.faults[0].start_ns", "must be in 0..1000000000000000"),
        (packet_ring(buffer_bytes=2**40), "spec.buffer_bytes", "must be in 0..1073741824"),
        (
            packet_ring(roce=S.RoceConfig(retransmit_timeout_ns=2**62)),
            "spec.roce.retransmit_timeout_ns",
            "must be in 0..1000000000000,",
        ),
    ],
    ids=[
        "header-2^31",
        "time-limit-2^63",
        "start-2^62",
        "switch-latency-2^62",
        "ecn-pmax-nan",
        "dcqcn-g-inf",
        "rate-ai-1e300",
        "flow-rate-1e300",
        "flow-rate-nan",
        "fault-start-2^62",
        "buffer-1TiB",
        "rto-2^62",
    ],
)
async def test_out_of_range_numbers_are_refused_naming_the_field(simulator, spec, field, problem):
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await simulator.StartSimulation(S.StartSimulationRequest(spec=spec))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, caught.value.details()
    assert caught.value.details().startswith(f"{field}: "), caught.value.details()
    assert problem in caught.value.details()


async def test_the_largest_header_gives_a_positive_makespan(simulator):
    started = await simulator.StartSimulation(S.StartSimulationRequest(spec=packet_ring(header_bytes=4096)))
    done = await wait_done(simulator, started.name)
    assert done.state == common_pb2.JOB_STATE_SUCCEEDED, done.error.message
    assert done.result.makespan_ns > 0
    assert done.result.jobs[0].completion_ns >= done.result.jobs[0].ideal_completion_ns > 0


BASE = {
    "fabric": "fabrics/x",
    "load_balancing": {"mode": "ECMP"},
    "jobs": [{"collective": "ALL_REDUCE", "size_bytes": 1 << 20, "rank_count": 4}],
}


def _spec_with(field: str, value) -> SimulationSpec:
    spec = SimulationSpec.from_dict(BASE)
    if field.startswith("jobs[0]."):
        job = dataclasses.replace(spec.jobs[0], **{field.removeprefix("jobs[0]."): value})
        return dataclasses.replace(spec, jobs=(job,))
    return dataclasses.replace(spec, **{field: value})


SPEC_INTEGERS = [(name, high) for name, _, high in bounds._SPEC_INTEGERS]
JOB_INTEGERS = [(f"jobs[0].{name}", high) for name, _, high in bounds._JOB_INTEGERS]


@pytest.mark.parametrize(("field", "high"), SPEC_INTEGERS + JOB_INTEGERS)
def test_each_whole_number_is_refused_just_above_its_bound_and_below_zero(field, high):
    request_name = bounds._request_name(field.removeprefix("jobs[0]."))
    named = f"jobs[0].{request_name}" if field.startswith("jobs[0].") else request_name
    with pytest.raises(InvalidArgument) as above:
        validate_spec(_spec_with(field, high + 1))
    assert above.value.field == named
    with pytest.raises(InvalidArgument) as below:
        validate_spec(_spec_with(field, -1))
    assert below.value.field == named
    bounds.check_bounds(_spec_with(field, high))  # the bound itself is in range


@pytest.mark.parametrize("field", [*bounds._SPEC_FRACTIONS, *bounds._SPEC_RATES_MBPS])
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, -0.5])
def test_each_real_number_must_be_finite_and_in_range(field, value):
    with pytest.raises(InvalidArgument) as caught:
        bounds.check_bounds(_spec_with(field, value))
    assert caught.value.field == f"roce.{field}"


def test_a_run_without_a_time_limit_stops_at_the_simulated_time_the_engines_count():
    slow = leaf_spine(2, 1, 2, rate_bps=1_000_000)  # 1 Mb/s links
    spec = {**BASE, "jobs": [{"collective": "ALL_REDUCE", "size_bytes": 1 << 48, "rank_count": 4}]}
    outcome = run_simulation(spec, slow)
    assert outcome.makespan_ns == bounds.MAX_SIMULATED_NS
    assert any("the most simulated time the simulator counts" in note for note in outcome.model_notes)
    assert not outcome.jobs[0].completed
    assert np.all(outcome.series.bytes >= 0)


@pytest.mark.parametrize(
    "spec",
    [
        {**BASE, "jobs": [{**BASE["jobs"][0], "label": "x" * 100_000}]},
        {**BASE, "load_balancing": {"mode": "ECMP", "label": "y" * 100_000}},
    ],
    ids=["job-label", "mode-label"],
)
def test_a_label_longer_than_its_bound_is_refused_quoting_little_of_it(spec):
    with pytest.raises(InvalidArgument) as refused:
        validate_spec(SimulationSpec.from_dict(spec))
    assert refused.value.field in ("jobs[0].label", "load_balancing.label")
    assert len(str(refused.value)) < 400
    validate_spec(SimulationSpec.from_dict({**BASE, "jobs": [{**BASE["jobs"][0], "label": "z" * 128}]}))
