"""Every check a spec can fail runs before StartSimulation returns: nothing is accepted that the
worker would then refuse (a simulation FAILED with INVALID_ARGUMENT after StartSimulation said OK).

Measured before: XOFF + headroom above the buffer, and a telemetry_source the telemetry service
refuses, were accepted and failed later. The other refusals the worker made (a flow of 2^25
packets, a sample interval whose series cannot fit, a link taken down for good that leaves no
route) are here too; a series that turns out longer than it can hold gets a wider interval and a
note instead of a late refusal.
"""

from __future__ import annotations

import grpc
import numpy as np
import pytest
from fabrictwin.v1 import common_pb2, simulation_pb2, telemetry_pb2, telemetry_pb2_grpc

from services.simulator import checks, series
from services.simulator.flow import engine as flow_engine
from services.simulator.flow import integrate
from services.simulator.packet import arrays as engine  # the engine's array budget lives in arrays.py
from services.simulator.packet import seam as packet_engine  # what its check_placed reads
from services.simulator.runner import run_simulation

from .fabrics import leaf_spine
from .servers import simulator_server, wait_done
from .test_service import ring_spec, telemetry, topology  # noqa: F401 - fixtures

S = simulation_pb2


@pytest.fixture
async def simulator(topology):  # noqa: F811
    async with simulator_server(topology) as server:
        yield server.stub


def pfc_ring(**roce) -> S.SimulationSpec:
    return ring_spec(fidelity=S.FIDELITY_PACKET, buffer_bytes=100_000, roce=S.RoceConfig(pfc=True, **roce))


def one_flow(size_bytes: int) -> S.SimulationSpec:
    flow = S.FlowSpec(source="host-0", destination="host-5", size_bytes=size_bytes)
    return S.SimulationSpec(
        fabric="fabrics/ls",
        fidelity=S.FIDELITY_PACKET,
        jobs=[S.Job(collective=S.COLLECTIVE_POINT_TO_POINT, flows=[flow])],
        load_balancing=common_pb2.LoadBalancing(mode=common_pb2.LOAD_BALANCING_MODE_ECMP),
    )


def every_nanosecond() -> S.SimulationSpec:
    """A 1 GiB ring sampled every ns: at least 2.4 ms, millions of intervals for each link direction."""
    spec = ring_spec(fidelity=S.FIDELITY_PACKET, sample_interval_ns=1)
    spec.jobs[0].size_bytes = 1 << 30
    return spec


def host_link_down_for_good() -> S.SimulationSpec:
    spec = ring_spec(fidelity=S.FIDELITY_PACKET)
    spec.jobs[0].hosts.extend(["host-0", "host-5"])
    spec.jobs[0].rank_count = 0
    spec.faults.append(
        S.Fault(
            link="leaf-0/p1<->host-0/p1",
            kind=S.FAULT_KIND_LINK_DOWN,
            start_ns=1000,
            reroute=S.REROUTE_MODEL_FAST_RECOVERY,
        )
    )
    return spec


@pytest.mark.parametrize(
    ("spec", "field", "problem"),
    [
        (pfc_ring(pfc_xoff_bytes=90_000), "spec.roce.pfc_xoff_bytes", "is above the port buffer of 100000"),
        (ring_spec(telemetry_source="Not An Id"), "spec.telemetry_source", "is not a valid id"),
        (one_flow(1 << 38), "spec.jobs[0].flows[0].size_bytes", "67108864 packets"),
        (every_nanosecond(), "spec.sample_interval_ns", "more than the series can hold"),
        (host_link_down_for_good(), "spec.faults[0].link", "leaves no route from host-0"),
    ],
    ids=["xoff-headroom-above-buffer", "telemetry-source-id", "flow-of-2^26-packets", "series", "link-down"],
)
async def test_refused_at_start_not_after(simulator, spec, field, problem):
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await simulator.StartSimulation(S.StartSimulationRequest(spec=spec))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, caught.value.details()
    assert caught.value.details().startswith(f"{field}: "), caught.value.details()
    assert problem in caught.value.details()
    assert not (await simulator.ListSimulations(S.ListSimulationsRequest())).simulations


async def test_a_telemetry_service_that_does_not_answer_is_unavailable_at_start(simulator):
    # The fixture's telemetry address (127.0.0.1:1) has nobody listening.
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await simulator.StartSimulation(S.StartSimulationRequest(spec=ring_spec(telemetry_source="runs")))
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "telemetry" in caught.value.details()


async def test_a_live_source_is_not_written_with_a_run(topology, telemetry):  # noqa: F811
    async with grpc.aio.insecure_channel(telemetry) as channel:
        await telemetry_pb2_grpc.TelemetryServiceStub(channel).CreateSource(
            telemetry_pb2.CreateSourceRequest(
                source_id="pod1", source=telemetry_pb2.Source(kind=telemetry_pb2.SOURCE_KIND_LIVE)
            )
        )
    async with simulator_server(topology, telemetry) as server:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await server.stub.StartSimulation(
                S.StartSimulationRequest(spec=ring_spec(telemetry_source="pod1"))
            )
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "spec.telemetry_source: sources/pod1 holds a live cluster's counters" in caught.value.details()
        started = await server.stub.StartSimulation(
            S.StartSimulationRequest(spec=ring_spec(telemetry_source="new"))
        )
        done = await wait_done(server.stub, started.name)
        assert done.state == common_pb2.JOB_STATE_SUCCEEDED, done.error.message


async def test_pfc_thresholds_that_fit_the_buffer_run(simulator):
    spec = pfc_ring(pfc_xoff_bytes=20_000, pfc_headroom_bytes=30_000)
    started = await simulator.StartSimulation(S.StartSimulationRequest(spec=spec))
    done = await wait_done(simulator, started.name)
    assert done.state == common_pb2.JOB_STATE_SUCCEEDED, done.error.message


FABRIC = leaf_spine(4, 4, 4)


def _ring(fidelity: str, interval_ns: int) -> dict:
    return {
        "fabric": "fabrics/x",
        "fidelity": fidelity,
        "load_balancing": {"mode": "ECMP"},
        "sample_interval_ns": interval_ns,
        "jobs": [
            {"collective": "ALL_REDUCE", "size_bytes": 1 << 22, "rank_count": 16, "placement": "SCATTERED"}
        ],
    }


def _shortest(spec: dict) -> int:
    from services.simulator.spec import SimulationSpec

    return checks.check_simulation(SimulationSpec.from_dict(spec), FABRIC).estimate.shortest_ns


def test_a_flow_run_longer_than_its_series_can_hold_widens_the_interval_and_says_so(monkeypatch):
    monkeypatch.setattr(series, "MAX_SERIES_VALUES", 1_000)
    monkeypatch.setattr(flow_engine, "MAX_SERIES_VALUES", 1_000)
    monkeypatch.setattr(integrate, "MAX_SERIES_VALUES", 1_000)
    interval = max(1, _shortest(_ring("FLOW", 0)) // 50)  # 15 senders x 51 intervals fit the check
    outcome = run_simulation(_ring("FLOW", interval), FABRIC)
    assert outcome.sample_interval_ns > interval
    assert any(f"sample_interval_ns={interval} would give more" in note for note in outcome.model_notes)
    assert outcome.series.bytes.size <= 1_000 + len(outcome.series.channels)
    assert np.array_equal(outcome.series.bytes.sum(axis=1), outcome.channels.bytes)


def test_a_packet_run_longer_than_its_series_can_hold_widens_the_interval_and_says_so(monkeypatch):
    cell = engine.series_cell_bytes(False)
    budget = FABRIC.num_channels * cell * 40
    monkeypatch.setattr(engine, "MAX_SERIES_BYTES", budget)
    monkeypatch.setattr(packet_engine, "MAX_SERIES_BYTES", budget)
    interval = max(1, _shortest(_ring("PACKET", 0)) // 30)  # 30 intervals of the bound fit, not the run
    outcome = run_simulation(_ring("PACKET", interval), FABRIC)
    assert outcome.sample_interval_ns > interval
    assert any("the series use" in note for note in outcome.model_notes)
    assert np.allclose(
        outcome.series.bytes.sum(axis=1), outcome.channels.bytes, atol=outcome.series.bytes.shape[1]
    )
