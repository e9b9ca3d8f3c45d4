"""SimulationService on real grpc.aio servers (port 0), fed by a real TopologyService."""

from __future__ import annotations

import grpc
import pytest
from fabrictwin.v1 import common_pb2, simulation_pb2, simulation_pb2_grpc, topology_pb2, topology_pb2_grpc

from services.common.config import ServiceConfig
from services.common.server import serving
from services.simulator.__main__ import build as build_simulator
from services.topology.__main__ import build as build_topology

S = simulation_pb2
TERMINAL = {common_pb2.JOB_STATE_SUCCEEDED, common_pb2.JOB_STATE_FAILED, common_pb2.JOB_STATE_CANCELLED}


@pytest.fixture
async def topology(tmp_path):
    config = ServiceConfig(service="topology", port=0, database_url=f"sqlite:///{tmp_path / 'topology.db'}")
    services, cleanup = await build_topology(config)
    async with serving(config, services) as running, grpc.aio.insecure_channel(running.address) as channel:
        stub = topology_pb2_grpc.TopologyServiceStub(channel)
        spec = topology_pb2.FabricSpec(
            leaf_spine=topology_pb2.LeafSpineSpec(leaves=4, spines=4, hosts_per_leaf=4)
        )
        await stub.CreateFabric(topology_pb2.CreateFabricRequest(fabric_id="ls", spec=spec))
        big = topology_pb2.FabricSpec(fat_tree=topology_pb2.FatTreeSpec(k=8))
        await stub.CreateFabric(topology_pb2.CreateFabricRequest(fabric_id="ft8", spec=big))
        yield running.address
    await cleanup()


async def start_simulator(topology_address, telemetry_address="127.0.0.1:1"):
    config = ServiceConfig(
        service="simulator", port=0, topology_address=topology_address, telemetry_address=telemetry_address
    )
    return config, await build_simulator(config)


@pytest.fixture
async def simulator(topology):
    config, (services, cleanup) = await start_simulator(topology)
    async with serving(config, services) as running, grpc.aio.insecure_channel(running.address) as channel:
        yield simulation_pb2_grpc.SimulationServiceStub(channel)
    await cleanup()


def ring_spec(fabric="fabrics/ls", mode=common_pb2.LOAD_BALANCING_MODE_ECMP, ranks=16, **extra):
    return S.SimulationSpec(
        fabric=fabric,
        jobs=[
            S.Job(
                collective=S.COLLECTIVE_ALL_REDUCE,
                size_bytes=1 << 24,
                rank_count=ranks,
                placement=S.PLACEMENT_POLICY_SCATTERED,
            )
        ],
        load_balancing=common_pb2.LoadBalancing(mode=mode),
        **extra,
    )


async def watch_until_done(simulator, name):
    seen = []
    async for simulation in simulator.WatchSimulation(S.WatchSimulationRequest(name=name)):
        seen.append(simulation)
    return seen


async def test_a_simulation_runs_to_success_and_reports_results_and_link_series(simulator):
    started = await simulator.StartSimulation(
        S.StartSimulationRequest(simulation_id="ring", spec=ring_spec())
    )
    assert started.name == "simulations/ring"
    assert started.state == common_pb2.JOB_STATE_PENDING
    assert started.routing_version == 1
    seen = await watch_until_done(simulator, started.name)
    assert seen[-1].state == common_pb2.JOB_STATE_SUCCEEDED, seen[-1].error
    assert seen[-1].progress.fraction == 1.0
    done = await simulator.GetSimulation(S.GetSimulationRequest(name=started.name))
    job = done.result.jobs[0]
    assert job.ranks == 16 and job.completion_ns > 0 and job.busbw_gbps > 0
    assert job.ideal_completion_ns <= job.completion_ns
    assert len(done.result.flows) == job.flows == 2 * 15 * 16
    assert done.result.uplink_skew.links == 16
    assert any("ECMP at FLOW fidelity" in note for note in done.result.model_notes)
    assert done.spec.fabric == "fabrics/ls"
    channels = len(done.result.links)
    first = await simulator.ListLinkSeries(S.ListLinkSeriesRequest(parent=started.name, page_size=10))
    assert len(first.series) == 10 and first.next_page_token
    intervals = -(-done.result.makespan_ns // done.result.sample_interval_ns)
    assert len(first.series[0].bytes) == len(first.series[0].utilisation) == intervals
    streamed = [s async for s in simulator.StreamLinkSeries(S.StreamLinkSeriesRequest(parent=started.name))]
    assert len(streamed) == channels
    assert sum(sum(s.bytes) for s in streamed) == sum(link.bytes for link in done.result.links)


async def test_a_flow_steady_ring_runs_through_the_service_with_flows_link_totals(simulator):
    """FLOW_STEADY through gRPC: the same link totals as FLOW (every byte is counted alike), its own
    model notes, its completion within a percent of FLOW's here (-0.19%)."""
    results = {}
    for fidelity in (S.FIDELITY_FLOW_STEADY, S.FIDELITY_FLOW):
        spec = ring_spec(fabric="fabrics/ft8", ranks=64, fidelity=fidelity, seed=3)
        started = await simulator.StartSimulation(S.StartSimulationRequest(spec=spec))
        seen = await watch_until_done(simulator, started.name)
        assert seen[-1].state == common_pb2.JOB_STATE_SUCCEEDED, seen[-1].error
        results[fidelity] = (await simulator.GetSimulation(S.GetSimulationRequest(name=started.name))).result
    steady, flow = results[S.FIDELITY_FLOW_STEADY], results[S.FIDELITY_FLOW]
    assert [(x.link, x.direction, x.bytes) for x in steady.links] == [
        (x.link, x.direction, x.bytes) for x in flow.links
    ]
    assert steady.jobs[0].completion_ns == pytest.approx(flow.jobs[0].completion_ns, rel=0.01)
    assert len(steady.flows) == steady.jobs[0].flows == flow.jobs[0].flows == 2 * 63 * 64
    assert any(note.startswith("FLOW_STEADY fidelity") for note in steady.model_notes)


async def test_list_is_newest_first_and_paged_without_flows(simulator):
    for sim_id in ("first", "second", "third"):
        await simulator.StartSimulation(
            S.StartSimulationRequest(simulation_id=sim_id, spec=ring_spec(ranks=4))
        )
    page = await simulator.ListSimulations(S.ListSimulationsRequest(page_size=2))
    assert [s.name for s in page.simulations] == ["simulations/third", "simulations/second"]
    rest = await simulator.ListSimulations(
        S.ListSimulationsRequest(page_size=2, page_token=page.next_page_token)
    )
    assert [s.name for s in rest.simulations] == ["simulations/first"] and not rest.next_page_token
    await watch_until_done(simulator, "simulations/third")
    listed = await simulator.ListSimulations(S.ListSimulationsRequest())
    assert all(not s.result.flows for s in listed.simulations)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await simulator.StartSimulation(
            S.StartSimulationRequest(simulation_id="first", spec=ring_spec(ranks=4))
        )
    assert caught.value.code() == grpc.StatusCode.ALREADY_EXISTS


def without_mode():
    spec = ring_spec()
    spec.ClearField("load_balancing")
    return spec


def with_hosts(*hosts):
    spec = ring_spec()
    spec.jobs[0].rank_count = 0
    spec.jobs[0].hosts.extend(hosts)
    return spec


def with_size(size):
    spec = ring_spec()
    spec.jobs[0].size_bytes = size
    return spec


def ring_and_all_to_all(**extra):
    spec = ring_spec(ranks=8, **extra)
    spec.jobs.append(spec.jobs[0])
    spec.jobs[1].collective = S.COLLECTIVE_ALL_TO_ALL
    return spec


def with_algorithm(algorithm, **extra):
    spec = ring_spec(**extra)
    spec.jobs[0].algorithm = algorithm
    return spec


@pytest.mark.parametrize(
    ("spec", "code", "mentions"),
    [
        (ring_spec(fabric=""), grpc.StatusCode.INVALID_ARGUMENT, "spec.fabric"),
        (
            S.SimulationSpec(fabric="fabrics/ls", load_balancing=common_pb2.LoadBalancing(mode=1)),
            grpc.StatusCode.INVALID_ARGUMENT,
            "spec.jobs",
        ),
        (with_size(0), grpc.StatusCode.INVALID_ARGUMENT, "spec.jobs[0].size_bytes"),
        (without_mode(), grpc.StatusCode.INVALID_ARGUMENT, "spec.load_balancing.mode"),
        (with_hosts("host-0", "host-404"), grpc.StatusCode.INVALID_ARGUMENT, "host-404"),
        (ring_spec(fabric="fabrics/nowhere"), grpc.StatusCode.NOT_FOUND, "spec.fabric"),
        (
            ring_spec(fidelity=S.FIDELITY_PACKET, mtu_bytes=4096, buffer_bytes=100),
            grpc.StatusCode.INVALID_ARGUMENT,
            "spec.buffer_bytes",
        ),
        (
            ring_spec(mode=common_pb2.LOAD_BALANCING_MODE_FLOWLET),
            grpc.StatusCode.INVALID_ARGUMENT,
            "FLOWLET needs PACKET",
        ),
        (
            ring_and_all_to_all(fidelity=S.FIDELITY_FLOW_STEADY),
            grpc.StatusCode.INVALID_ARGUMENT,
            "spec.jobs[1].collective: FLOW_STEADY models rings",
        ),
        (
            with_algorithm(S.COLLECTIVE_ALGORITHM_DOUBLE_BINARY_TREE, fidelity=S.FIDELITY_FLOW_STEADY),
            grpc.StatusCode.INVALID_ARGUMENT,
            "spec.jobs[0].algorithm",
        ),
    ],
)
async def test_bad_specs_are_refused_synchronously_naming_the_field(simulator, spec, code, mentions):
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await simulator.StartSimulation(S.StartSimulationRequest(spec=spec))
    assert caught.value.code() == code
    assert mentions in caught.value.details()
    listed = await simulator.ListSimulations(S.ListSimulationsRequest())
    assert not listed.simulations


async def test_cancelling_a_running_simulation_stops_it(simulator):
    spec = ring_spec(fabric="fabrics/ft8", ranks=128)
    started = await simulator.StartSimulation(S.StartSimulationRequest(simulation_id="long", spec=spec))
    async for simulation in simulator.WatchSimulation(S.WatchSimulationRequest(name=started.name)):
        if simulation.state == common_pb2.JOB_STATE_RUNNING:
            break
    cancelled = await simulator.CancelSimulation(S.CancelSimulationRequest(name=started.name))
    assert cancelled.state == common_pb2.JOB_STATE_CANCELLED
    seen = await watch_until_done(simulator, started.name)
    assert [s.state for s in seen] == [common_pb2.JOB_STATE_CANCELLED]
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await simulator.CancelSimulation(S.CancelSimulationRequest(name=started.name))
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await simulator.ListLinkSeries(S.ListLinkSeriesRequest(parent=started.name))
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION


async def test_unknown_simulations_are_not_found(simulator):
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await simulator.GetSimulation(S.GetSimulationRequest(name="simulations/ghost"))
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await simulator.GetSimulation(S.GetSimulationRequest(name="ghost"))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


@pytest.fixture
async def telemetry(tmp_path):
    from services.telemetry.__main__ import build as build_telemetry

    config = ServiceConfig(service="telemetry", port=0, database_url=f"sqlite:///{tmp_path / 'telemetry.db'}")
    services, cleanup = await build_telemetry(config)
    async with serving(config, services) as running:
        yield running.address
    await cleanup()


async def test_series_are_written_to_telemetry_as_a_simulated_source(topology, telemetry):
    from fabrictwin.v1 import telemetry_pb2, telemetry_pb2_grpc

    config, (services, cleanup) = await start_simulator(topology, telemetry)
    async with (
        serving(config, services) as running,
        grpc.aio.insecure_channel(running.address) as channel,
        grpc.aio.insecure_channel(telemetry) as telemetry_channel,
    ):
        simulator = simulation_pb2_grpc.SimulationServiceStub(channel)
        store = telemetry_pb2_grpc.TelemetryServiceStub(telemetry_channel)
        # The source may exist already (a rerun): ALREADY_EXISTS is not an error.
        await store.CreateSource(
            telemetry_pb2.CreateSourceRequest(
                source_id="ring-run", source=telemetry_pb2.Source(kind=telemetry_pb2.SOURCE_KIND_SIMULATED)
            )
        )
        spec = ring_spec(telemetry_source="ring-run")
        started = await simulator.StartSimulation(
            S.StartSimulationRequest(simulation_id="to-telemetry", spec=spec)
        )
        seen = await watch_until_done(simulator, started.name)
        assert seen[-1].state == common_pb2.JOB_STATE_SUCCEEDED, seen[-1].error
        assert "storing series" in [s.progress.stage for s in seen]
        links = {link.display_name: link for link in seen[-1].result.links}
        queried = await store.QuerySeries(
            telemetry_pb2.QuerySeriesRequest(
                source="sources/ring-run",
                metric=telemetry_pb2.METRIC_TX_BYTES,
                ports=telemetry_pb2.PortSelector(patterns=["leaf-0->spine-*"]),
                page_size=100,
            )
        )
        # Every uplink reports, as every port of a live cluster does; idle ones report zeros.
        assert sorted(s.port for s in queried.series) == [f"leaf-0->spine-{i}" for i in range(4)]
        assert any(s.port in links for s in queried.series)
        for series in queried.series:
            expected = links[series.port].bytes if series.port in links else 0
            assert sum(series.values) == expected
            assert len(series.values) == -(-seen[-1].result.makespan_ns // seen[-1].result.sample_interval_ns)
            assert series.time_ns[1] - series.time_ns[0] == seen[-1].result.sample_interval_ns
    await cleanup()
