"""gRPC adapters of the orchestrator's peers: the Protocols of `contracts.py` over real channels.

Each translates between the domain and the peer's messages and turns gRPC status codes back into
domain errors naming what the orchestrator's caller sent. The simulators' adapter, with its failover,
is `replicas.GrpcSimulators`. Every adapter calls with the service's peer settings (`PeerAuth`: TLS
and the bearer token).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import grpc
from fabrictwin.v1 import (
    common_pb2,
    telemetry_pb2,
    telemetry_pb2_grpc,
    topology_pb2,
    topology_pb2_grpc,
)

from services.common.errors import AlreadyExists
from services.common.peers import PeerAuth, auth_metadata, domain_error, peer_channel
from services.orchestrator.contracts import Measure
from services.orchestrator.diagnosis import PortValue, Window
from services.orchestrator.messages import build_spec, port_values, simulation_status
from services.orchestrator.model import FabricInfo, SimulatedSource, SimulationRequest, SimulationStatus
from services.orchestrator.replicas import GrpcSimulators

__all__ = ["GrpcSimulatorPeer", "GrpcSimulators", "GrpcTelemetry", "GrpcTopology"]

_MEASURES = {
    Measure.MEAN_UTILISATION: (telemetry_pb2.METRIC_UTILISATION, telemetry_pb2.AGGREGATION_AVG),
    Measure.TOTAL_DROPS: (telemetry_pb2.METRIC_DROPS, telemetry_pb2.AGGREGATION_SUM),
    Measure.TOTAL_RECEIVE_ERRORS: (telemetry_pb2.METRIC_RCV_ERRORS, telemetry_pb2.AGGREGATION_SUM),
    Measure.TOTAL_XMIT_DISCARDS: (telemetry_pb2.METRIC_XMIT_DISCARDS, telemetry_pb2.AGGREGATION_SUM),
}


class GrpcTopology:
    def __init__(self, address: str, auth: PeerAuth | str = "") -> None:
        self.channel = peer_channel(address, auth)
        self.metadata = auth_metadata(auth)
        self.stub = topology_pb2_grpc.TopologyServiceStub(self.channel)

    async def get_fabric(self, name: str) -> FabricInfo:
        try:
            fabric = await self.stub.GetFabric(
                topology_pb2.GetFabricRequest(name=name), timeout=30, metadata=self.metadata
            )
        except grpc.aio.AioRpcError as exc:
            raise domain_error(exc, "topology", "scenario.fabric") from exc
        return FabricInfo(fabric.name, fabric.routing_version)

    async def has_link(self, fabric: str, link: str) -> bool:
        try:
            await self.stub.GetLink(
                topology_pb2.GetLinkRequest(name=f"{fabric}/links/{link}"), timeout=30, metadata=self.metadata
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT):
                return False
            raise domain_error(exc, "topology", "scenario.fabric") from exc
        return True


class GrpcSimulatorPeer:
    """The run's SimulatorPeer over the simulator replicas (`GrpcSimulators`: placement, failover)."""

    def __init__(self, replicas: GrpcSimulators) -> None:
        self.replicas = replicas

    async def start(self, request: SimulationRequest) -> SimulationStatus:
        simulation = await self.replicas.start(build_spec(request), request.simulation_id)
        return simulation_status(simulation)

    async def watch(self, name: str) -> AsyncIterator[SimulationStatus]:
        async for simulation in self.replicas.watch(name):
            yield simulation_status(simulation)

    async def cancel(self, name: str) -> None:
        await self.replicas.cancel(name)


class GrpcTelemetry:
    def __init__(self, address: str, auth: PeerAuth | str = "") -> None:
        self.channel = peer_channel(address, auth)
        self.metadata = auth_metadata(auth)
        self.stub = telemetry_pb2_grpc.TelemetryServiceStub(self.channel)

    async def create_source(self, source: SimulatedSource) -> None:
        message = telemetry_pb2.Source(
            kind=telemetry_pb2.SOURCE_KIND_SIMULATED,
            display_name=source.display_name,
            fabric=source.fabric,
            simulation=source.simulation,
        )
        try:
            await self.stub.CreateSource(
                telemetry_pb2.CreateSourceRequest(source_id=source.source_id, source=message),
                timeout=30,
                metadata=self.metadata,
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.ALREADY_EXISTS:  # never written into: it is another's
                raise AlreadyExists(f"sources/{source.source_id} exists already in telemetry") from exc
            raise domain_error(exc, "telemetry") from exc

    async def check_source(self, name: str) -> None:
        try:
            await self.stub.GetSource(
                telemetry_pb2.GetSourceRequest(name=name), timeout=30, metadata=self.metadata
            )
        except grpc.aio.AioRpcError as exc:
            raise domain_error(exc, "telemetry", "source") from exc

    async def top_ports(
        self, source: str, measure: Measure, ports: Sequence[str], window: Window | None
    ) -> list[PortValue]:
        metric, aggregation = _MEASURES[measure]
        request = telemetry_pb2.TopLinksRequest(
            source=source,
            metric=metric,
            aggregation=aggregation,
            ports=telemetry_pb2.PortSelector(patterns=ports),
            limit=100_000,
        )
        if window is not None:
            request.time_range.CopyFrom(common_pb2.TimeRange(start_ns=window.start_ns, end_ns=window.end_ns))
        try:
            reply = await self.stub.TopLinks(request, timeout=60, metadata=self.metadata)
        except grpc.aio.AioRpcError as exc:
            raise domain_error(exc, "telemetry", "source") from exc
        return port_values(reply.ports)
