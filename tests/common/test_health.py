"""Health checking: SERVING for every mounted service once ready, NOT_SERVING as soon as a stop begins."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest
from fabrictwin.v1 import topology_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.common.server import RunningServer

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
MOUNTED = ["", "fabrictwin.v1.TopologyService", "fabrictwin.v1.TelemetryService"]


@pytest.mark.parametrize("service", MOUNTED)
async def test_every_mounted_service_reports_serving_when_ready(channel, service):
    reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=service))
    assert reply.status == SERVING


async def test_a_service_that_is_not_mounted_is_not_found(channel):
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service="fabrictwin.v1.SimulationService")
        )
    assert failed.value.code() == grpc.StatusCode.NOT_FOUND


async def test_watch_streams_serving_through_the_interceptors(channel):
    watch = health_pb2_grpc.HealthStub(channel).Watch(
        health_pb2.HealthCheckRequest(service="fabrictwin.v1.TopologyService")
    )
    first = await asyncio.wait_for(watch.read(), 2)
    watch.cancel()
    assert first.status == SERVING


async def test_stop_reports_not_serving_and_lets_an_in_flight_call_finish(scripted_server, channel, topology):
    running: RunningServer = scripted_server
    watch = health_pb2_grpc.HealthStub(channel).Watch(
        health_pb2.HealthCheckRequest(service="fabrictwin.v1.TopologyService")
    )
    assert (await asyncio.wait_for(watch.read(), 2)).status == SERVING
    in_flight = asyncio.ensure_future(
        topology.GetFabric(topology_pb2.GetFabricRequest(name="fabrics/slow-400"))
    )
    await asyncio.sleep(0.1)  # the slow call is now inside the servicer

    grace = 3.0
    started = time.perf_counter()
    stopping = asyncio.ensure_future(running.stop(grace))
    assert (await asyncio.wait_for(watch.read(), 2)).status == NOT_SERVING
    assert not stopping.done(), "NOT_SERVING must be visible while the server is still draining"
    watch.cancel()  # a watcher would hold the server for the whole grace period

    reply = await asyncio.wait_for(in_flight, grace)
    assert reply.name == "fabrics/slow-400"
    await asyncio.wait_for(stopping, grace)
    assert time.perf_counter() - started < grace
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await topology.GetFabric(topology_pb2.GetFabricRequest(name="fabrics/ok"), timeout=1)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_a_call_longer_than_the_grace_period_is_cut_off(scripted_server, topology):
    in_flight = asyncio.ensure_future(
        topology.GetFabric(topology_pb2.GetFabricRequest(name="fabrics/slow-5000"))
    )
    await asyncio.sleep(0.1)
    started = time.perf_counter()
    await scripted_server.stop(0.3)
    assert time.perf_counter() - started < 2
    with pytest.raises(grpc.aio.AioRpcError) as cut_off:
        await asyncio.wait_for(in_flight, 2)
    assert cut_off.value.code() in (grpc.StatusCode.CANCELLED, grpc.StatusCode.UNAVAILABLE)


async def test_a_stopped_server_cannot_be_set_back_to_serving(scripted_server):
    await scripted_server.stop(0)
    await scripted_server.health.set("fabrictwin.v1.TopologyService", SERVING)
    request = health_pb2.HealthCheckRequest(service="fabrictwin.v1.TopologyService")
    assert (await scripted_server.health.Check(request, None)).status == NOT_SERVING


async def test_during_the_drain_period_a_check_prober_reads_not_serving():
    from services.common.config import ServiceConfig
    from services.common.server import create_server

    from .scripted_services import scripted_definitions

    running = await create_server(
        ServiceConfig(service="drain", port=0, drain_seconds=0.5), scripted_definitions()
    )
    async with grpc.aio.insecure_channel(running.address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        request = health_pb2.HealthCheckRequest(service="fabrictwin.v1.TopologyService")
        assert (await stub.Check(request)).status == SERVING
        stopping = asyncio.ensure_future(running.stop(1.0))
        await asyncio.sleep(0.1)
        assert (await stub.Check(request, timeout=1)).status == NOT_SERVING
        await asyncio.wait_for(stopping, 3)
        with pytest.raises(grpc.aio.AioRpcError):
            await stub.Check(request, timeout=1)
