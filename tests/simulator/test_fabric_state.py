"""Simulations on the fabric as it is now, or as it would be repaired (fabric_state, routing_version),
on real topology and simulator servers (port 0).

Checked by equivalence with runs whose answer is known: a repaired (or ALL_UP) fabric simulates
exactly as a fabric that never failed; a DEGRADED link at PACKET fidelity loses exactly what an
explicit BIT_ERRORS fault of the same rate loses; a pinned routing version runs the routes it had."""

from __future__ import annotations

import grpc
import pytest
from fabrictwin.v1 import common_pb2, simulation_pb2, simulation_pb2_grpc, topology_pb2, topology_pb2_grpc

from services.common.config import ServiceConfig
from services.common.server import serving
from services.simulator.__main__ import build as build_simulator
from services.topology.__main__ import build as build_topology

S = simulation_pb2
LEAF_SPINE = topology_pb2.FabricSpec(
    leaf_spine=topology_pb2.LeafSpineSpec(leaves=4, spines=2, hosts_per_leaf=2)
)
UPLINK = "spine-0/p1<->leaf-0/p3"


@pytest.fixture
async def services(tmp_path):
    """(topology stub, simulator stub, the topology service's address)."""
    config = ServiceConfig(service="topology", port=0, database_url=f"sqlite:///{tmp_path / 'topology.db'}")
    topology_services, topology_cleanup = await build_topology(config)
    async with serving(config, topology_services) as topology:
        sim_config = ServiceConfig(
            service="simulator", port=0, topology_address=topology.address, telemetry_address="127.0.0.1:1"
        )
        sim_services, sim_cleanup = await build_simulator(sim_config)
        async with (
            serving(sim_config, sim_services) as simulator,
            grpc.aio.insecure_channel(topology.address) as t,
            grpc.aio.insecure_channel(simulator.address) as s,
        ):
            fabrics = topology_pb2_grpc.TopologyServiceStub(t)
            for fabric_id in ("clean", "worn"):
                await fabrics.CreateFabric(
                    topology_pb2.CreateFabricRequest(fabric_id=fabric_id, spec=LEAF_SPINE)
                )
            yield fabrics, simulation_pb2_grpc.SimulationServiceStub(s), topology.address
        await sim_cleanup()
    await topology_cleanup()


def spec(fabric: str, fidelity=S.FIDELITY_FLOW, **extra) -> S.SimulationSpec:
    job = S.Job(
        collective=S.COLLECTIVE_ALL_REDUCE,
        size_bytes=1 << 20,
        rank_count=8,
        placement=S.PLACEMENT_POLICY_SCATTERED,
    )
    return S.SimulationSpec(
        fabric=f"fabrics/{fabric}",
        jobs=[job],
        load_balancing=common_pb2.LoadBalancing(mode=common_pb2.LOAD_BALANCING_MODE_ECMP),
        fidelity=fidelity,
        seed=5,
        **extra,
    )


async def run(simulator, request_spec: S.SimulationSpec) -> S.Simulation:
    started = await simulator.StartSimulation(S.StartSimulationRequest(spec=request_spec))
    last = started
    async for update in simulator.WatchSimulation(S.WatchSimulationRequest(name=started.name)):
        last = update
    assert last.state == common_pb2.JOB_STATE_SUCCEEDED, last.error.message
    return await simulator.GetSimulation(S.GetSimulationRequest(name=started.name))


def same_run(a: S.Simulation, b: S.Simulation) -> bool:
    """Equal outcomes: completion, every link's bytes and every flow (notes aside)."""
    links = lambda sim: [(x.link, x.direction, x.bytes, x.drops) for x in sim.result.links]  # noqa: E731
    flows = lambda sim: [(f.finish_ns, f.size_bytes, f.retransmitted_packets) for f in sim.result.flows]  # noqa: E731
    return (a.result.makespan_ns, links(a), flows(a)) == (b.result.makespan_ns, links(b), flows(b))


async def set_state(fabrics, fabric: str, link: str, state: int, ber: float = 0.0) -> int:
    reply = await fabrics.SetLinkState(
        topology_pb2.SetLinkStateRequest(
            name=f"fabrics/{fabric}/links/{link}", state=state, bit_error_rate=ber
        )
    )
    return reply.routing.routing_version


async def test_a_down_link_is_routed_around_and_repairing_it_gives_the_clean_fabrics_run(services) -> None:
    fabrics, simulator, _ = services
    clean = await run(simulator, spec("clean"))
    await set_state(fabrics, "worn", UPLINK, topology_pb2.LINK_STATE_DOWN)
    as_is = await run(simulator, spec("worn"))
    assert as_is.result.makespan_ns > clean.result.makespan_ns  # one spine fewer for leaf-0
    assert any("DOWN links routed around: " + UPLINK in n for n in as_is.result.model_notes)
    policy = S.FabricState(link_state=S.LINK_STATE_POLICY_REPAIRED, repaired_links=[UPLINK])
    repaired = await run(simulator, spec("worn", fabric_state=policy))
    assert same_run(repaired, clean)
    assert any("REPAIRED" in n and UPLINK in n for n in repaired.result.model_notes)
    all_up = await run(
        simulator, spec("worn", fabric_state=S.FabricState(link_state=S.LINK_STATE_POLICY_ALL_UP))
    )
    assert same_run(all_up, clean)


async def test_a_degraded_link_loses_what_an_explicit_bit_error_fault_loses(services) -> None:
    fabrics, simulator, _ = services
    ber = 2e-6
    await set_state(fabrics, "worn", UPLINK, topology_pb2.LINK_STATE_DEGRADED, ber)
    explicit = S.Fault(kind=S.FAULT_KIND_BIT_ERRORS, link=UPLINK, bit_error_rate=ber)
    reference = await run(simulator, spec("clean", S.FIDELITY_PACKET, faults=[explicit]))
    as_is = await run(simulator, spec("worn", S.FIDELITY_PACKET))
    assert reference.result.corrupted_packets > 0  # the rate is high enough to lose packets
    assert as_is.result.corrupted_packets == reference.result.corrupted_packets
    assert same_run(as_is, reference)
    assert any("stored bit error rate" in n and UPLINK in n for n in as_is.result.model_notes)
    flow = await run(simulator, spec("worn"))  # FLOW models no loss: says so
    assert any("run clean at FLOW fidelity" in n for n in flow.result.model_notes)
    # An explicit fault on the link overrides the stored rate.
    overridden = S.Fault(kind=S.FAULT_KIND_BIT_ERRORS, link=UPLINK, bit_error_rate=1e-9)
    mine = await run(simulator, spec("worn", S.FIDELITY_PACKET, faults=[overridden]))
    theirs = await run(simulator, spec("clean", S.FIDELITY_PACKET, faults=[overridden]))
    assert same_run(mine, theirs)


async def test_a_pinned_routing_version_runs_the_routes_it_had(services) -> None:
    fabrics, simulator, topology_address = services
    before = await run(simulator, spec("worn"))
    version = before.routing_version
    await set_state(fabrics, "worn", UPLINK, topology_pb2.LINK_STATE_DOWN)
    pinned = await run(simulator, spec("worn", routing_version=version))
    assert pinned.routing_version == version and same_run(pinned, before)
    for _ in range(5):  # the topology service keeps the current version and 3 before it
        await set_state(fabrics, "worn", UPLINK, topology_pb2.LINK_STATE_UP)
        await set_state(fabrics, "worn", UPLINK, topology_pb2.LINK_STATE_DOWN)
    # This simulator still holds version 1's snapshot; a fresh one has to ask for it, and cannot.
    config = ServiceConfig(
        service="simulator",
        port=0,
        topology_address=topology_address,
        telemetry_address="127.0.0.1:1",
    )
    fresh_services, cleanup = await build_simulator(config)
    async with serving(config, fresh_services) as fresh, grpc.aio.insecure_channel(fresh.address) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await simulation_pb2_grpc.SimulationServiceStub(channel).StartSimulation(
                S.StartSimulationRequest(spec=spec("worn", routing_version=version))
            )
    await cleanup()
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert f"routing version {version}" in caught.value.details()


async def test_another_routing_engine_for_one_run(services) -> None:
    _, simulator, _ = services
    routed = await run(
        simulator, spec("clean", fabric_state=S.FabricState(routing_engine=topology_pb2.ROUTING_ENGINE_UPDN))
    )
    assert any("routed by updn" in n for n in routed.result.model_notes)


@pytest.mark.parametrize(
    ("state", "field"),
    [
        (
            S.FabricState(link_state=S.LINK_STATE_POLICY_REPAIRED, repaired_links=["nowhere"]),
            "spec.fabric_state.repaired_links[0]",
        ),
        (S.FabricState(link_state=S.LINK_STATE_POLICY_REPAIRED), "spec.fabric_state.repaired_links"),
        (S.FabricState(repaired_links=["1"]), "spec.fabric_state.repaired_links"),
        (S.FabricState(routing_engine=topology_pb2.ROUTING_ENGINE_FILE), "spec.fabric_state.routing_engine"),
        (S.FabricState(routing_engine=99), "spec.fabric_state.routing_engine"),
    ],
)
async def test_bad_fabric_states_are_refused_naming_the_field(services, state, field) -> None:
    _, simulator, _ = services
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await simulator.StartSimulation(S.StartSimulationRequest(spec=spec("clean", fabric_state=state)))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details().startswith(field), caught.value.details()
