"""Server reflection lists the mounted services and health, through grpc's own reflection client."""

from __future__ import annotations

import asyncio

import grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase


async def test_reflection_lists_the_mounted_services_and_health(channel):
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    call = stub.ServerReflectionInfo()
    await call.write(reflection_pb2.ServerReflectionRequest(list_services=""))
    reply = await asyncio.wait_for(call.read(), 2)
    await call.done_writing()
    names = {service.name for service in reply.list_services_response.service}
    assert {
        "fabrictwin.v1.TopologyService",
        "fabrictwin.v1.TelemetryService",
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
    } <= names


def _describe(address: str) -> tuple[list[str], list[str]]:
    """What a generic client (grpcurl-like) learns over a blocking channel: services and one's methods."""
    with grpc.insecure_channel(address) as channel:
        database = ProtoReflectionDescriptorDatabase(channel)
        services = list(database.get_services())
        topology = database.FindFileContainingSymbol("fabrictwin.v1.TopologyService")
        methods = [m.name for s in topology.service if s.name == "TopologyService" for m in s.method]
    return services, methods


async def test_a_reflection_client_can_describe_the_topology_service(scripted_server):
    # The blocking client runs in a thread so that the server on this event loop can answer it.
    services, methods = await asyncio.to_thread(_describe, scripted_server.address)
    assert "fabrictwin.v1.TopologyService" in services
    assert "grpc.health.v1.Health" in services
    assert {"GetFabric", "WatchFabric", "CreateFabric"} <= set(methods)
