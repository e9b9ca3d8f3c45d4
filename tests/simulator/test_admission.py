"""Admission control: StartSimulation refuses work beyond the simulator's limits with
RESOURCE_EXHAUSTED naming the estimate and the limit, at once, before anything is allocated.

Each case is one of the measured failures: the run was accepted and then took gigabytes (or tried
834 GiB) before failing with INTERNAL.
"""

from __future__ import annotations

import dataclasses
import resource
import time

import grpc
import pytest
from fabrictwin.v1 import common_pb2, simulation_pb2

from services.common.errors import ResourceExhausted
from services.simulator.admission import DEFAULT_LIMITS, SimulationLimits, job_cost
from services.simulator.checks import check_simulation
from services.simulator.spec import Collective, Fidelity, JobSpec, SimulationSpec

from .fabrics import fat_tree
from .servers import simulator_server, wait_done
from .test_service import ring_spec, topology  # noqa: F401 - `topology` is a fixture

S = simulation_pb2
REFUSAL_SECONDS = 1.0  # "at once": measured 3-40 ms (a million listed flows: the client's encoding aside)


@pytest.fixture
async def simulator(topology):  # noqa: F811
    async with simulator_server(topology) as server:
        yield server.stub


def with_job(**fields) -> S.SimulationSpec:
    spec = ring_spec()
    for name, value in fields.items():
        setattr(spec.jobs[0], name, value)
    return spec


def tree(chunks: int) -> S.SimulationSpec:
    return with_job(algorithm=S.COLLECTIVE_ALGORITHM_DOUBLE_BINARY_TREE, chunks=chunks)


def point_to_point(count: int) -> S.SimulationSpec:
    flows = [
        S.FlowSpec(source=f"host-{i % 16}", destination=f"host-{(i + 1) % 16}", size_bytes=4096)
        for i in range(count)
    ]
    return S.SimulationSpec(
        fabric="fabrics/ls",
        jobs=[S.Job(collective=S.COLLECTIVE_POINT_TO_POINT, flows=flows)],
        load_balancing=common_pb2.LoadBalancing(mode=common_pb2.LOAD_BALANCING_MODE_ECMP),
    )


def packet(size_bytes: int) -> S.SimulationSpec:
    spec = with_job(size_bytes=size_bytes)
    spec.fidelity = S.FIDELITY_PACKET
    return spec


async def refused(simulator, spec: S.SimulationSpec) -> tuple[grpc.aio.AioRpcError, float]:
    started = time.perf_counter()
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await simulator.StartSimulation(S.StartSimulationRequest(spec=spec))
    return caught.value, time.perf_counter() - started


@pytest.mark.parametrize(
    ("spec", "estimate"),
    [
        (with_job(iterations=1_000_000), "flows 480,000,000 (limit 5,000,000)"),  # was 5.6 GB, then INTERNAL
        (
            with_job(qps_per_connection=1_000_000),
            "flows 480,000,000 (limit 5,000,000)",
        ),  # 3.7 GB and counting
        (tree(1_000_000), "flows 60,000,000 (limit 5,000,000)"),  # a tree of a million chunks: 4.8 GB
        (with_job(iterations=1_000_000_000), "flows 480,000,000,000 (limit 5,000,000)"),  # 834 GiB
        (with_job(chunks=1_000_000_000), "flows 480,000,000,000 (limit 5,000,000)"),
        (tree(1_000_000_000), "transfers 60,000,000,000 (limit 5,000,000)"),
        (packet(1 << 40), "packets 8,053,064,160 (limit 1,000,000,000)"),  # 1 TiB packet by packet
    ],
    ids=[
        "iterations-1e6",
        "qps-1e6",
        "tree-chunks-1e6",
        "iterations-1e9",
        "chunks-1e9",
        "tree-chunks-1e9",
        "packets",
    ],
)
async def test_work_beyond_the_limits_is_refused_at_once_naming_estimate_and_limit(simulator, spec, estimate):
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    error, seconds = await refused(simulator, spec)
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, error.details()
    assert estimate in error.details()
    assert seconds < REFUSAL_SECONDS, seconds
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before
    assert grown_kib < 100 * 1024, f"the refusal allocated {grown_kib} KiB"
    listed = await simulator.ListSimulations(S.ListSimulationsRequest())
    assert not listed.simulations


async def test_a_million_point_to_point_flows_are_refused_before_they_are_read(simulator):
    spec = point_to_point(1_000_000)
    error, seconds = await refused(simulator, spec)
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "flows listed in the spec 1,000,000 (limit 200,000)" in error.details()
    assert seconds < 3 * REFUSAL_SECONDS, seconds  # the 24 MB request's encoding and parsing included


async def test_a_spec_within_the_limits_runs(simulator):
    started = await simulator.StartSimulation(S.StartSimulationRequest(spec=with_job(iterations=10)))
    done = await wait_done(simulator, started.name)
    assert done.state == common_pb2.JOB_STATE_SUCCEEDED, done.error.message


async def test_a_run_estimated_above_the_memory_limit_is_refused(topology):  # noqa: F811
    # 3.8M transfers: within the transfer and flow limits; the memory estimate is what refuses it
    # (under the default 4 GiB it was refused while FLOW's estimate was 1.2 KB a transfer: 4.5 GiB).
    async with simulator_server(topology, max_memory_bytes=1 << 30) as server:
        error, seconds = await refused(server.stub, with_job(iterations=8_000))
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, error.details()
    assert "peak memory 1.7 GiB (limit 1.0 GiB)" in error.details()
    assert seconds < REFUSAL_SECONDS, seconds


async def test_limits_come_from_the_simulator_flags(topology):  # noqa: F811
    async with simulator_server(topology, max_flows=100, max_memory_bytes=0) as server:
        error, _ = await refused(server.stub, with_job(iterations=1))
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "flows 480 (limit 100)" in error.details()


def test_the_closed_forms_count_what_the_generators_make():
    from services.simulator.workload import build_workload

    from .fabrics import leaf_spine

    fabric = leaf_spine(4, 4, 4)
    jobs = [
        {"collective": "ALL_REDUCE", "size_bytes": 1 << 22, "rank_count": 16, "iterations": 3, "chunks": 2},
        {"collective": "ALL_GATHER", "size_bytes": 1 << 22, "rank_count": 8, "qps_per_connection": 3},
        {
            "collective": "ALL_REDUCE",
            "algorithm": "DOUBLE_BINARY_TREE",
            "size_bytes": 1 << 22,
            "rank_count": 16,
        },
        {"collective": "ALL_REDUCE", "algorithm": "HALVING_DOUBLING", "size_bytes": 1 << 22, "rank_count": 8},
        {"collective": "ALL_TO_ALL", "size_bytes": 1 << 22, "rank_count": 16, "chunks": 2, "iterations": 2},
        {"collective": "BROADCAST", "size_bytes": 3 << 20, "rank_count": 16},
    ]
    from services.simulator.spec import SimulationSpec

    for job in jobs:
        spec = SimulationSpec.from_dict(
            {"fabric": "fabrics/x", "jobs": [job], "load_balancing": {"mode": "ECMP"}}
        )
        workload = build_workload(spec, fabric)
        cost = job_cost(spec.jobs[0], spec.jobs[0].rank_count)
        assert (cost.transfers, cost.flows) == (workload.transfer_count, workload.flow_count), job
        assert cost.edges >= len(workload.dependents)
        assert cost.payload_bytes == int(workload.flow_size_bytes.sum()), job
        assert cost.largest_flow_bytes >= int(workload.flow_size_bytes.max()), job


def test_point_to_point_flows_count_each_repetition_and_qp():
    from services.simulator.spec import PointToPointFlow

    flows = tuple(PointToPointFlow("a", "b", 10) for _ in range(5))
    job = JobSpec(Collective.POINT_TO_POINT, iterations=4, qps_per_connection=2, flows=flows)
    cost = job_cost(job, 0)
    assert (cost.transfers, cost.flows, cost.payload_bytes, cost.listed_flows) == (20, 40, 200, 5)


def test_a_limit_of_zero_is_no_limit_and_negative_limits_are_refused():
    assert SimulationLimits(max_flows=0).max_flows == 0
    with pytest.raises(ValueError, match="max_flows"):
        SimulationLimits(max_flows=-1)
    assert DEFAULT_LIMITS.max_packets == 1_000_000_000


def test_a_ring_generated_as_it_runs_is_costed_by_what_it_holds():
    """A PACKET ring above 4M transfers is generated as it runs (workload.RingStream): its transfer
    and flow counts are not held, so they are not limited, and its memory is a few blocks' worth.
    Under Go-Back-N it streams too; with a test hook (which names a flow by index) it is held
    whole, and refused."""
    fabric = fat_tree(8)
    spec = SimulationSpec.from_dict(
        {
            "fabric": fabric.fabric,
            "fidelity": "PACKET",
            "jobs": [
                {"collective": "ALL_REDUCE", "size_bytes": 1 << 20, "rank_count": 128, "iterations": 160}
            ],
            "load_balancing": {"mode": "ECMP"},
        }
    )
    streamed = check_simulation(spec, fabric).estimate
    assert streamed.streamed and streamed.transfers == 2 * 127 * 128 * 160 > 5_000_000
    assert streamed.exceeding(DEFAULT_LIMITS) == []
    assert streamed.memory_bytes < 1 << 30
    reliable = check_simulation(dataclasses.replace(spec, window_bytes=64 << 10), fabric).estimate
    assert reliable.streamed and reliable.exceeding(DEFAULT_LIMITS) == []
    held = check_simulation(dataclasses.replace(spec, drop_once=(0, 1)), fabric).estimate
    assert not held.streamed
    assert held.exceeding(DEFAULT_LIMITS)[:2] == [
        "flows 5,201,920 (limit 5,000,000)",
        "transfers 5,201,920 (limit 5,000,000)",
    ]
    assert held.memory_bytes > 2 * streamed.memory_bytes


def test_a_refused_ring_says_how_it_would_fit():
    """A ring too large to hold is refused with what would run it: at FLOW fidelity, PACKET (which
    generates a large ring as it runs: 8,192 ranks at FLOW were refused with the advice to use
    FLOW); at PACKET with a test hook, the same ring without it."""
    fabric = fat_tree(8)
    job = {"collective": "ALL_REDUCE", "size_bytes": 1 << 20, "rank_count": 128, "iterations": 160}
    spec = SimulationSpec.from_dict(
        {"fabric": fabric.fabric, "fidelity": "FLOW", "jobs": [job], "load_balancing": {"mode": "ECMP"}}
    )
    with pytest.raises(ResourceExhausted) as flow:
        check_simulation(spec, fabric).estimate.admit(DEFAULT_LIMITS)
    assert "transfers 5,201,920 (limit 5,000,000)" in str(flow.value)
    assert "At PACKET fidelity this ring is generated as it runs" in str(flow.value)
    assert "or FLOW fidelity" not in str(flow.value)  # it is FLOW already
    packet = dataclasses.replace(spec, fidelity=Fidelity.PACKET)
    check_simulation(packet, fabric).estimate.admit(DEFAULT_LIMITS)  # streamed: admitted
    with pytest.raises(ResourceExhausted) as hooked:
        check_simulation(dataclasses.replace(packet, drop_once=(0, 1)), fabric).estimate.admit(DEFAULT_LIMITS)
    assert "Without faults or test hooks this ring would be generated as it runs" in str(hooked.value)
