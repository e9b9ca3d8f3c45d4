"""Message-size limits and keepalive: the channel options every server gets from its config."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import grpc
import pytest
from fabrictwin.v1 import topology_pb2, topology_pb2_grpc
from grpc._cython import cygrpc

from services.common.config import ServiceConfig
from services.common.server import RunningServer, serving

from .scripted_services import scripted_definitions

LIMIT = 4096


@pytest.fixture
async def small_server() -> AsyncIterator[RunningServer]:
    config = ServiceConfig(service="scripted", port=0, max_message_bytes=LIMIT)
    async with serving(config, scripted_definitions()) as running:
        yield running


async def test_a_request_within_the_limit_is_served(small_server):
    async with grpc.aio.insecure_channel(small_server.address) as channel:
        name = "fabrics/" + "a" * (LIMIT // 2 - 100)  # the reply carries it twice (name and display_name)
        reply = await topology_pb2_grpc.TopologyServiceStub(channel).GetFabric(
            topology_pb2.GetFabricRequest(name=name)
        )
    assert reply.name == name


async def test_a_request_over_max_message_bytes_is_resource_exhausted(small_server):
    async with grpc.aio.insecure_channel(small_server.address) as channel:
        stub = topology_pb2_grpc.TopologyServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.GetFabric(topology_pb2.GetFabricRequest(name="fabrics/" + "a" * 2 * LIMIT))
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert (await stub.GetFabric(topology_pb2.GetFabricRequest(name="fabrics/ok"))).name == "fabrics/ok"


async def test_a_reply_over_max_message_bytes_is_resource_exhausted(small_server):
    async with grpc.aio.insecure_channel(small_server.address) as channel:
        stub = topology_pb2_grpc.TopologyServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.GetFabric(topology_pb2.GetFabricRequest(name=f"fabrics/big-{2 * LIMIT}"))
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


def _keepalive_pings_sent_by_server(port: int) -> int:
    """Keepalive pings the server on `port` has sent, from channelz (what grpcio-channelz serves)."""
    sent = 0
    for server in json.loads(cygrpc.channelz_get_servers(0)).get("server", []):
        sockets = json.loads(cygrpc.channelz_get_server_sockets(int(server["ref"]["serverId"]), 0, 100))
        for ref in sockets.get("socketRef", []):
            socket = json.loads(cygrpc.channelz_get_socket(int(ref["socketId"])))["socket"]
            if int(socket["local"]["tcpipAddress"].get("port", 0)) == port:
                sent += int(socket["data"].get("keepAlivesSent", 0))
    return sent


@pytest.fixture
async def pinging_server() -> AsyncIterator[RunningServer]:
    config = ServiceConfig(service="scripted", port=0, keepalive_time_ms=100, keepalive_timeout_ms=1000)
    async with serving(config, scripted_definitions()) as running:
        yield running


async def test_the_server_sends_keepalive_pings_and_the_connection_survives_them(pinging_server):
    # The client pings as often as the server's policy (one ping per 5 s without data) allows.
    client_options = [("grpc.keepalive_time_ms", 5_000), ("grpc.keepalive_permit_without_calls", 1)]
    async with grpc.aio.insecure_channel(pinging_server.address, options=client_options) as channel:
        stub = topology_pb2_grpc.TopologyServiceStub(channel)
        assert (await stub.GetFabric(topology_pb2.GetFabricRequest(name="fabrics/ok"))).name
        await asyncio.sleep(0.35)  # idle: a ping every 100 ms, each answered
        assert _keepalive_pings_sent_by_server(pinging_server.port) >= 2
        assert channel.get_state() == grpc.ChannelConnectivity.READY
        reply = await stub.GetFabric(topology_pb2.GetFabricRequest(name="fabrics/ok"))
    assert reply.name == "fabrics/ok"
