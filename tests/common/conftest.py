"""Fixtures of the bootstrap tests: a real server on port 0 running the scripted test doubles."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest
from fabrictwin.v1 import telemetry_pb2_grpc, topology_pb2_grpc

from services.common.config import ServiceConfig
from services.common.server import RunningServer, serving

from .scripted_services import scripted_definitions


@pytest.fixture
async def scripted_server() -> AsyncIterator[RunningServer]:
    """The scripted TopologyService and TelemetryService behind the full bootstrap."""
    async with serving(ServiceConfig(service="scripted", port=0), scripted_definitions()) as running:
        yield running


@pytest.fixture
async def channel(scripted_server: RunningServer) -> AsyncIterator[grpc.aio.Channel]:
    async with grpc.aio.insecure_channel(scripted_server.address) as opened:
        yield opened


@pytest.fixture
def topology(channel: grpc.aio.Channel) -> topology_pb2_grpc.TopologyServiceStub:
    return topology_pb2_grpc.TopologyServiceStub(channel)


@pytest.fixture
def telemetry(channel: grpc.aio.Channel) -> telemetry_pb2_grpc.TelemetryServiceStub:
    return telemetry_pb2_grpc.TelemetryServiceStub(channel)
