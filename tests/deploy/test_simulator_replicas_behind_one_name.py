"""The chart's premise: the orchestrator reaches every simulator replica through one DNS name (the
headless Service, `dns:///...`, round_robin), and finds again each simulation it started through it.

Two real simulator servers stand for two pods; `ipv4:a,b` is one target with both addresses, which is
what the headless name resolves to with two ready replicas.
"""

from __future__ import annotations

import contextlib

import grpc
from fabrictwin.v1 import common_pb2, simulation_pb2, topology_pb2, topology_pb2_grpc

from services.common.config import ServiceConfig
from services.common.server import create_server
from services.orchestrator.peers import GrpcSimulators
from services.simulator.__main__ import build as build_simulator
from services.topology.__main__ import build as build_topology


def ring_allreduce(fabric: str) -> simulation_pb2.SimulationSpec:
    job = simulation_pb2.Job(
        collective=simulation_pb2.COLLECTIVE_ALL_REDUCE,
        size_bytes=1 << 20,
        rank_count=8,
        placement=simulation_pb2.PLACEMENT_POLICY_SCATTERED,
    )
    balancing = common_pb2.LoadBalancing(mode=common_pb2.LOAD_BALANCING_MODE_ADAPTIVE)
    return simulation_pb2.SimulationSpec(fabric=fabric, jobs=[job], load_balancing=balancing)


async def test_simulations_started_through_one_name_are_found_again_through_it(tmp_path):
    async with contextlib.AsyncExitStack() as stack:

        async def start(config: ServiceConfig, build) -> str:  # type: ignore[no-untyped-def]
            services, cleanup = await build(config)
            stack.push_async_callback(cleanup)
            running = await create_server(config, services)
            stack.push_async_callback(running.stop, 0)
            return running.address

        topology = await start(
            ServiceConfig(service="topology", port=0, data_dir=str(tmp_path)), build_topology
        )
        async with grpc.aio.insecure_channel(topology) as channel:
            await topology_pb2_grpc.TopologyServiceStub(channel).CreateFabric(
                topology_pb2.CreateFabricRequest(
                    fabric_id="ft4", spec=topology_pb2.FabricSpec(fat_tree=topology_pb2.FatTreeSpec(k=4))
                )
            )
        replicas = [
            await start(
                ServiceConfig(service="simulator", port=0, topology_address=topology), build_simulator
            )
            for _ in range(2)
        ]
        simulators = GrpcSimulators([f"ipv4:{','.join(replicas)}"])
        stack.push_async_callback(simulators.close)
        assert len(simulators.channels) == 2  # one channel per replica

        started = [await simulators.start(ring_allreduce("fabrics/ft4")) for _ in range(4)]
        assert len({simulators._owner[s.name] for s in started}) == 2  # spread over both replicas
        for simulation in started:
            assert (await simulators.get(simulation.name)).name == simulation.name
            # As the orchestrator follows it: every update from its own replica, to the end.
            updates = [update async for update in simulators.watch(simulation.name)]
            assert {u.name for u in updates} == {simulation.name}
            assert updates[-1].state == common_pb2.JOB_STATE_SUCCEEDED
