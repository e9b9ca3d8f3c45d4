"""The orchestrator's view of the other three services, as narrow Protocols plus their gRPC adapters.

The run logic (`runner.py`) depends only on the Protocols, so it stays free of gRPC; the adapters
here translate gRPC status codes back into domain errors.
"""

from __future__ import annotations

import asyncio
import socket
import time
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

from services.common.errors import Unavailable
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
    """Simulator replicas, one channel each: jobs go round-robin, and each is followed on its replica.

    A simulation lives in the memory of the replica that started it, so every later call about it
    must reach that replica. A target is a `host:port`, an `ipv4:a,b` list, or a `dns:///name:port`
    (a Kubernetes headless Service); names are resolved here, again at most every
    `RESOLVE_SECONDS` when jobs start (replicas come and go), and every address gets its own
    channel, so the replica that started a simulation is the one asked about it.
    """

    RESOLVE_SECONDS = 10.0

    def __init__(self, targets: Sequence[str], auth_token: str = "") -> None:
        if not targets:
            raise ValueError("at least one simulator address is needed")
        self.metadata = auth_metadata(auth_token)
        self._targets = list(targets)
        self._stubs: dict[str, simulation_pb2_grpc.SimulationServiceStub] = {}
        self.channels: list[grpc.aio.Channel] = []
        self._order: list[str] = []
        self._turn = 0
        self._resolved_at = -float("inf")
        self._owner: dict[str, str] = {}
        self._use(self._expand_all())

    @staticmethod
    def _expand(target: str) -> list[str]:
        if target.startswith(("ipv4:", "ipv6:")):
            return [a for a in target.split(":", 1)[1].split(",") if a]
        if target.startswith("dns:"):
            host, _, port = target.rsplit("/", 1)[-1].rpartition(":")
            infos = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
            found = {info[4][0] for info in infos}
            return sorted(f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}" for ip in found)
        return [target]

    def _expand_all(self) -> list[str]:
        addresses: list[str] = []
        for target in self._targets:
            try:
                addresses.extend(self._expand(target))
            except OSError:  # a name that does not resolve now: keep what it resolved to before
                addresses.extend(a for a in self._order if a not in addresses)
        return list(dict.fromkeys(addresses))

    def _use(self, addresses: list[str]) -> None:
        for address in addresses:
            if address not in self._stubs:
                channel = peer_channel(address)
                self.channels.append(channel)
                self._stubs[address] = simulation_pb2_grpc.SimulationServiceStub(channel)
        self._order = addresses or self._order
        self._resolved_at = time.monotonic()

    async def start(self, spec: simulation_pb2.SimulationSpec) -> simulation_pb2.Simulation:
        if time.monotonic() - self._resolved_at > self.RESOLVE_SECONDS:
            self._use(await asyncio.to_thread(self._expand_all))
        if not self._order:
            raise Unavailable("no simulator replica resolved from " + ", ".join(self._targets))
        address = self._order[self._turn % len(self._order)]
        self._turn += 1
        try:
            simulation = await self._stubs[address].StartSimulation(
                simulation_pb2.StartSimulationRequest(spec=spec), timeout=60, metadata=self.metadata
            )
        except grpc.aio.AioRpcError as exc:
            raise domain_error(exc, "simulator", "scenario") from exc
        self._owner[simulation.name] = address
        return simulation

    async def get(self, name: str) -> simulation_pb2.Simulation:
        stub = self._stubs[self._owner.get(name, self._order[0])]
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
