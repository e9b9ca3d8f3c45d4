"""The orchestrator's view of the other three services, as narrow Protocols plus their gRPC adapters.

The run logic (`runner.py`) depends only on the Protocols, so it stays free of gRPC; the adapters
here translate gRPC status codes back into domain errors. The simulators' adapter, with its failover,
is `replicas.GrpcSimulators`. Every adapter calls with the service's peer settings (`PeerAuth`: TLS
and the bearer token).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

import grpc
from fabrictwin.v1 import (
    simulation_pb2,
    telemetry_pb2,
    telemetry_pb2_grpc,
    topology_pb2,
    topology_pb2_grpc,
)

from services.common.peers import PeerAuth, auth_metadata, domain_error, peer_channel
from services.orchestrator.replicas import GrpcSimulators, SimulatorLost

__all__ = [
    "GrpcSimulators",
    "GrpcTelemetry",
    "GrpcTopology",
    "SimulatorLost",
    "SimulatorPeer",
    "TelemetryPeer",
    "TopologyPeer",
]


class TopologyPeer(Protocol):
    async def get_fabric(self, name: str) -> topology_pb2.Fabric: ...


class SimulatorPeer(Protocol):
    """Starts simulations on a replica that can take them and follows each on its replica."""

    async def start(self, spec: simulation_pb2.SimulationSpec) -> simulation_pb2.Simulation: ...

    def watch(self, name: str) -> AsyncIterator[simulation_pb2.Simulation]:
        """Updates until a terminal state; SimulatorLost when the replica running it went away."""
        ...


class TelemetryPeer(Protocol):
    async def create_source(self, source_id: str, source: telemetry_pb2.Source) -> None: ...

    async def top_ports(self, request: telemetry_pb2.TopLinksRequest) -> list[telemetry_pb2.PortValue]: ...

    async def get_source(self, name: str) -> telemetry_pb2.Source: ...


class GrpcTopology:
    def __init__(self, address: str, auth: PeerAuth | str = "") -> None:
        self.channel = peer_channel(address, auth)
        self.metadata = auth_metadata(auth)
        self.stub = topology_pb2_grpc.TopologyServiceStub(self.channel)

    async def get_fabric(self, name: str) -> topology_pb2.Fabric:
        try:
            return await self.stub.GetFabric(
                topology_pb2.GetFabricRequest(name=name), timeout=30, metadata=self.metadata
            )
        except grpc.aio.AioRpcError as exc:
            raise domain_error(exc, "topology", "scenario.fabric") from exc


class GrpcTelemetry:
    def __init__(self, address: str, auth: PeerAuth | str = "") -> None:
        self.channel = peer_channel(address, auth)
        self.metadata = auth_metadata(auth)
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
