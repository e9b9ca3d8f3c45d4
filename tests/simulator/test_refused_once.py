"""Every refusal a spec can earn happens before StartSimulation returns, once; the worker runs what
was accepted without checking it again.

Measured before: a simulation whose hosts had no route between them (a host link DOWN in the
fabric) was accepted PENDING and FAILED in the worker with FAILED_PRECONDITION; so was a route over
a link of rate 0 (FLOW: "a flow crosses a channel of zero capacity"), and a LINK_DOWN fault whose
what-if routing left no route (the packet engine's fault plan). And the worker ran every check of
StartSimulation a second time.
"""

from __future__ import annotations

import dataclasses

import grpc
import numpy as np
import pytest
from fabrictwin.v1 import common_pb2, simulation_pb2, topology_pb2, topology_pb2_grpc

from services.common.errors import FailedPrecondition, InvalidArgument
from services.simulator import runner
from services.simulator.checks import check_routes, check_simulation
from services.simulator.engine import RunFabric
from services.simulator.spec import SimulationSpec
from tests.simulator.fabrics import leaf_spine, point_to_point_spec, with_links_down

from .servers import simulator_server
from .test_service import topology  # noqa: F401 - fixture

S = simulation_pb2


@pytest.fixture
async def simulator(topology):  # noqa: F811
    async with simulator_server(topology) as server:
        yield server.stub


async def test_hosts_without_a_route_are_refused_at_start_not_failed_later(topology, simulator):  # noqa: F811
    async with grpc.aio.insecure_channel(topology) as channel:
        stub = topology_pb2_grpc.TopologyServiceStub(channel)
        links = await stub.ListLinks(topology_pb2.ListLinksRequest(parent="fabrics/ls", page_size=1000))
        host_link = next(
            link.name
            for link in links.links
            if {link.node_a.rsplit("/", 1)[-1], link.node_b.rsplit("/", 1)[-1]} == {"host-0", "leaf-0"}
        )
        await stub.SetLinkState(
            topology_pb2.SetLinkStateRequest(name=host_link, state=topology_pb2.LINK_STATE_DOWN)
        )
    flow = S.FlowSpec(source="host-0", destination="host-5", size_bytes=1 << 20)
    for fidelity in (S.FIDELITY_FLOW, S.FIDELITY_PACKET):
        spec = S.SimulationSpec(
            fabric="fabrics/ls",
            fidelity=fidelity,
            jobs=[S.Job(collective=S.COLLECTIVE_POINT_TO_POINT, flows=[flow])],
            load_balancing=common_pb2.LoadBalancing(mode=common_pb2.LOAD_BALANCING_MODE_ADAPTIVE),
        )
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await simulator.StartSimulation(S.StartSimulationRequest(spec=spec))
        assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION, caught.value.details()
        assert "no route from host-0 to host-5" in caught.value.details()
    assert not (await simulator.ListSimulations(S.ListSimulationsRequest())).simulations


def _with_zero_rate(snapshot, link_name: str):
    rate = snapshot.link_rate_bps.copy()
    rate[snapshot.link_names.index(link_name)] = 0
    return dataclasses.replace(snapshot, link_rate_bps=rate)


@pytest.mark.parametrize("fidelity", ["FLOW", "PACKET"])
def test_a_route_over_a_link_of_rate_zero_is_refused_by_the_checks_naming_the_link(fidelity):
    fabric = _with_zero_rate(leaf_spine(2, 1, 2), "leaf-0<->spine-0")
    spec = SimulationSpec.from_dict(point_to_point_spec(fabric, [(0, 2, 4096)], fidelity=fidelity))
    check_simulation(spec, fabric)
    with pytest.raises(FailedPrecondition, match=r"link leaf-0<->spine-0 has a rate of 0"):
        check_routes(spec, RunFabric(fabric))
    # A link of rate 0 that no route crosses is no reason to refuse.
    inside_a_leaf = SimulationSpec.from_dict(point_to_point_spec(fabric, [(0, 1, 4096)], fidelity=fidelity))
    check_routes(inside_a_leaf, RunFabric(fabric))


def test_a_link_down_epoch_whose_routing_leaves_no_route_is_refused_by_the_checks():
    fabric = leaf_spine(2, 2, 2)
    faulted = fabric.link_names.index("leaf-0<->spine-0")
    # The what-if routing the topology service computed for that link down: here, with the other
    # uplink of leaf-0 down as well, nothing leaves leaf-0 any more.
    other = fabric.link_names.index("leaf-0<->spine-1")
    routing = with_links_down(fabric, (faulted, other))
    fault = {"link": "leaf-0<->spine-0", "kind": "LINK_DOWN", "start_ns": 1000, "reroute": "FAST_RECOVERY"}
    spec = SimulationSpec.from_dict(point_to_point_spec(fabric, [(0, 2, 1 << 20)], faults=[fault]))
    accepted = check_simulation(spec, fabric)
    assert accepted.down_sets == [(faulted,)]
    with pytest.raises(InvalidArgument) as caught:
        check_routes(spec, RunFabric(fabric, {(faulted,): (routing, 0.0)}))
    assert caught.value.field == "faults[0].link"
    assert "leaves no route" in str(caught.value)


def test_the_worker_runs_the_accepted_spec_without_checking_it_again(monkeypatch):
    def checked_again(*args, **kwargs):
        raise AssertionError("the worker ran a check StartSimulation had run")

    monkeypatch.setattr(runner, "check_simulation", checked_again)
    monkeypatch.setattr(runner, "check_routes", checked_again)
    fabric = leaf_spine(2, 1, 2)
    outcome = runner.run_in_worker(
        SimulationSpec.from_dict(point_to_point_spec(fabric, [(0, 2, 4096)])), fabric
    )
    assert not isinstance(outcome, runner.WorkerFailure), outcome
    assert outcome.jobs[0].completed
    assert np.all(outcome.flows.finish_ns > 0)


async def test_start_simulation_runs_the_spec_checks_once(simulator, monkeypatch):
    from services.simulator import checks, servicer, validation

    calls = []

    def counted(spec):
        calls.append(spec)
        return validation.validate_spec(spec)

    monkeypatch.setattr(servicer, "validate_spec", counted)
    monkeypatch.setattr(checks, "validate_spec", counted)
    spec = S.SimulationSpec(
        fabric="fabrics/ls",
        jobs=[S.Job(collective=S.COLLECTIVE_ALL_REDUCE, size_bytes=1 << 20, rank_count=4)],
        load_balancing=common_pb2.LoadBalancing(mode=common_pb2.LOAD_BALANCING_MODE_ECMP),
    )
    await simulator.StartSimulation(S.StartSimulationRequest(spec=spec))
    assert len(calls) == 1


async def test_a_link_down_whose_rerouting_leaves_no_route_is_refused_at_start(topology, monkeypatch):  # noqa: F811
    async with simulator_server(topology) as server:
        source = server.servicer._snapshots
        fabric = await source.get("fabrics/ls")
        uplinks = [name for name in fabric.link_names if "leaf-0" in name and "spine-" in name]
        fetched = source.what_if

        async def rerouted_into_a_dead_end(name, down, field="spec.fabric", view=None):
            # A routing engine that, with one uplink down, also gives up on leaf-0's other three.
            routing, seconds = await fetched(name, down, field, view) if view else await fetched(name, down)
            state = routing.link_state.copy()
            state[[routing.link_names.index(u) for u in uplinks]] = 2
            return dataclasses.replace(routing, link_state=state), seconds

        monkeypatch.setattr(source, "what_if", rerouted_into_a_dead_end)
        flow = S.FlowSpec(source="host-0", destination="host-5", size_bytes=1 << 20)
        spec = S.SimulationSpec(
            fabric="fabrics/ls",
            fidelity=S.FIDELITY_PACKET,
            jobs=[S.Job(collective=S.COLLECTIVE_POINT_TO_POINT, flows=[flow])],
            load_balancing=common_pb2.LoadBalancing(mode=common_pb2.LOAD_BALANCING_MODE_ADAPTIVE),
            faults=[
                S.Fault(
                    link=uplinks[0],
                    kind=S.FAULT_KIND_LINK_DOWN,
                    start_ns=1000,
                    reroute=S.REROUTE_MODEL_FAST_RECOVERY,
                )
            ],
        )
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await server.stub.StartSimulation(S.StartSimulationRequest(spec=spec))
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, caught.value.details()
        assert caught.value.details().startswith("spec.faults[0].link: "), caught.value.details()
        assert "leaves no route" in caught.value.details()
        assert not (await server.stub.ListSimulations(S.ListSimulationsRequest())).simulations
