"""A server on port 0 answers health checks; binding problems are reported clearly."""

from __future__ import annotations

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.common.config import ServiceConfig
from services.common.server import create_server, serving


async def test_a_server_on_port_zero_reports_serving():
    async with serving(ServiceConfig(service="t", port=0), []) as running:
        assert running.port > 0
        async with grpc.aio.insecure_channel(running.address) as channel:
            reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""))
            assert reply.status == health_pb2.HealthCheckResponse.SERVING


async def test_a_taken_port_fails_with_an_os_error_naming_the_address():
    async with serving(ServiceConfig(service="t", port=0), []) as running:
        with pytest.raises(OSError, match=f"cannot bind 127.0.0.1:{running.port}"):
            await create_server(ServiceConfig(service="t", port=running.port), [])


async def test_a_server_bound_to_every_interface_is_reached_on_loopback():
    async with serving(ServiceConfig(service="t", host="0.0.0.0", port=0), []) as running:
        assert running.address == f"127.0.0.1:{running.port}"
        async with grpc.aio.insecure_channel(running.address) as channel:
            reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""))
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
