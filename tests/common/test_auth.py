"""Bearer-token auth: every RPC but health needs `authorization: Bearer <token>`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest
from fabrictwin.v1 import telemetry_pb2, telemetry_pb2_grpc, topology_pb2, topology_pb2_grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from services.common.config import ServiceConfig
from services.common.server import RunningServer, serving

from .scripted_services import scripted_definitions

TOKEN = "s3cret-token"


@pytest.fixture
async def guarded() -> AsyncIterator[RunningServer]:
    async with serving(
        ServiceConfig(service="scripted", port=0, auth_token=TOKEN), scripted_definitions()
    ) as running:
        yield running


async def _unary(channel, metadata):
    stub = topology_pb2_grpc.TopologyServiceStub(channel)
    return await stub.GetFabric(topology_pb2.GetFabricRequest(name="fabrics/ok"), metadata=metadata)


async def _server_streaming(channel, metadata):
    stub = topology_pb2_grpc.TopologyServiceStub(channel)
    call = stub.WatchFabric(topology_pb2.WatchFabricRequest(name="fabrics/ok"), metadata=metadata)
    return [event async for event in call]


async def _client_streaming(channel, metadata):
    stub = telemetry_pb2_grpc.TelemetryServiceStub(channel)
    batch = telemetry_pb2.IngestSamplesRequest(batch=telemetry_pb2.SampleBatch(source="sources/ok"))
    return await stub.IngestSamples(iter([batch]), metadata=metadata)


CALLS = {"unary": _unary, "server-streaming": _server_streaming, "client-streaming": _client_streaming}
REFUSED = {
    "no token": None,
    "wrong token": (("authorization", "Bearer guess"),),
    "no scheme": (("authorization", TOKEN),),
}


@pytest.mark.parametrize("kind", CALLS)
@pytest.mark.parametrize("metadata", REFUSED.values(), ids=REFUSED.keys())
async def test_a_call_without_the_right_token_is_unauthenticated(guarded, kind, metadata):
    async with grpc.aio.insecure_channel(guarded.address) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await CALLS[kind](channel, metadata)
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED


@pytest.mark.parametrize("kind", CALLS)
@pytest.mark.parametrize("scheme", ["Bearer", "bearer"])
async def test_a_call_with_the_right_token_passes(guarded, kind, scheme):
    async with grpc.aio.insecure_channel(guarded.address) as channel:
        assert await CALLS[kind](channel, (("authorization", f"{scheme} {TOKEN}"),))


async def test_health_check_and_watch_need_no_token(guarded):
    async with grpc.aio.insecure_channel(guarded.address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        reply = await health.Check(health_pb2.HealthCheckRequest(service="fabrictwin.v1.TopologyService"))
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        watch = health.Watch(health_pb2.HealthCheckRequest(service=""))
        assert (await asyncio.wait_for(watch.read(), 2)).status == health_pb2.HealthCheckResponse.SERVING
        watch.cancel()


async def test_reflection_needs_the_token(guarded):
    async with grpc.aio.insecure_channel(guarded.address) as channel:
        call = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo()
        # The server may refuse the stream before the request is written: then write raises.
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await call.write(reflection_pb2.ServerReflectionRequest(list_services=""))
            await call.read()
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
