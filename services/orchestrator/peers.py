"""The orchestrator's view of the other three services, as narrow Protocols plus their gRPC adapters.

The run logic (`runner.py`) depends only on the Protocols, so it stays free of gRPC; the adapters
here translate gRPC status codes back into domain errors.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Protocol

import grpc
from fabrictwin.v1 import (
    simulation_pb2,
    simulation_pb2_grpc,
    telemetry_pb2,
    telemetry_pb2_grpc,
    topology_pb2,
    topology_pb2_grpc,
)

from services.common.peers import auth_metadata, domain_error, peer_channel

__all__ = [
    "GrpcSimulators",
    "GrpcTelemetry",
    "GrpcTopology",
    "SimulatorPeer",
    "TelemetryPeer",
    "TopologyPeer",
]


class TopologyPeer(Protocol):
    async def get_fabric(self, name: str) -> topology_pb2.Fabric: ...


class SimulatorPeer(Protocol):
    async def start(self, spec: simulation_pb2.SimulationSpec) -> simulation_pb2.Simulation: ...

    async def get(self, name: str) -> simulation_pb2.Simulation: ...


class TelemetryPeer(Protocol):
    async def create_source(self, source_id: str, source: telemetry_pb2.Source) -> None: ...

    async def top_ports(self, request: telemetry_pb2.TopLinksRequest) -> list[telemetry_pb2.PortValue]: ...

    async def get_source(self, name: str) -> telemetry_pb2.Source: ...


class GrpcTopology:
    def __init__(self, address: str, auth_token: str = "") -> None:
        self.channel = peer_channel(address)
        self.metadata = auth_metadata(auth_token)
        self.stub = topology_pb2_grpc.TopologyServiceStub(self.channel)

    async def get_fabric(self, name: str) -> topology_pb2.Fabric:
        try:
            return await self.stub.GetFabric(
                topology_pb2.GetFabricRequest(name=name), timeout=30, metadata=self.metadata
            )
        except grpc.aio.AioRpcError as exc:
            raise domain_error(exc, "topology", "scenario.fabric") from exc


class GrpcSimulators:
    """Simulator replicas: jobs go round-robin over the configured addresses.

    On Kubernetes one address, a headless Service's DNS name (`dns:///simulator:50052`), resolves to
    every replica and the channel's round_robin policy spreads calls over them; on a laptop a
    comma-separated list of addresses does the same across channels.
    """

    def __init__(self, addresses: Sequence[str], auth_token: str = "") -> None:
        if not addresses:
            raise ValueError("at least one simulator address is needed")
        self.metadata = auth_metadata(auth_token)
        self.channels = [peer_channel(a) for a in addresses]
        self.stubs = [simulation_pb2_grpc.SimulationServiceStub(c) for c in self.channels]
        self._next = itertools.cycle(range(len(self.stubs)))
        self._owner: dict[str, int] = {}

    async def start(self, spec: simulation_pb2.SimulationSpec) -> simulation_pb2.Simulation:
        index = next(self._next)
        try:
            simulation = await self.stubs[index].StartSimulation(
                simulation_pb2.StartSimulationRequest(spec=spec), timeout=60, metadata=self.metadata
            )
        except grpc.aio.AioRpcError as exc:
            raise domain_error(exc, "simulator", "scenario") from exc
        self._owner[simulation.name] = index
        return simulation

    async def get(self, name: str) -> simulation_pb2.Simulation:
        stub = self.stubs[self._owner.get(name, 0)]
        try:
            return await stub.GetSimulation(
                simulation_pb2.GetSimulationRequest(name=name), timeout=30, metadata=self.metadata
            )
        except grpc.aio.AioRpcError as exc:
            raise domain_error(exc, "simulator") from exc


class GrpcTelemetry:
    def __init__(self, address: str, auth_token: str = "") -> None:
        self.channel = peer_channel(address)
        self.metadata = auth_metadata(auth_token)
        self.stub = telemetry_pb2_grpc.TelemetryServiceStub(self.channel)

    async def create_source(self, source_id: str, source: telemetry_pb2.Source) -> None:
        try:
            await self.stub.CreateSource(
                telemetry_pb2.CreateSourceRequest(source_id=source_id, source=source),
                timeout=30,
                metadata=self.metadata,
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.ALREADY_EXISTS:
                raise domain_error(exc, "telemetry") from exc

    async def get_source(self, name: str) -> telemetry_pb2.Source:
        try:
            return await self.stub.GetSource(
                telemetry_pb2.GetSourceRequest(name=name), timeout=30, metadata=self.metadata
            )
        except grpc.aio.AioRpcError as exc:
            raise domain_error(exc, "telemetry", "source") from exc

    async def top_ports(self, request: telemetry_pb2.TopLinksRequest) -> list[telemetry_pb2.PortValue]:
        try:
            reply = await self.stub.TopLinks(request, timeout=60, metadata=self.metadata)
        except grpc.aio.AioRpcError as exc:
            raise domain_error(exc, "telemetry", "source") from exc
        return list(reply.ports)
