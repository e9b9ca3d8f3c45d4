"""Prometheus metrics: every RPC is counted by method and status code, timed, and served on /metrics."""

from __future__ import annotations

import asyncio
import socket
import urllib.error
import urllib.request
from collections.abc import AsyncIterator

import grpc
import pytest
from fabrictwin.v1 import topology_pb2, topology_pb2_grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from services.common.config import ServiceConfig
from services.common.server import RunningServer, create_server, serving

from .scripted_services import scripted_definitions

GET = "/fabrictwin.v1.TopologyService/GetFabric"
WATCH = "/fabrictwin.v1.TopologyService/WatchFabric"


@pytest.fixture
async def measured() -> AsyncIterator[RunningServer]:
    async with serving(
        ServiceConfig(service="scripted", port=0, metrics_port=0), scripted_definitions()
    ) as running:
        yield running


def _scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample on /metrics as {(name, sorted labels): value}."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _value(samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


async def _calls(address: str) -> None:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = topology_pb2_grpc.TopologyServiceStub(channel)
        await stub.GetFabric(topology_pb2.GetFabricRequest(name="fabrics/ok"))
        await stub.GetFabric(topology_pb2.GetFabricRequest(name="fabrics/ok"))
        with pytest.raises(grpc.aio.AioRpcError):
            await stub.GetFabric(topology_pb2.GetFabricRequest(name="fabrics/invalid"))
        with pytest.raises(grpc.aio.AioRpcError):
            await stub.GetFabric(topology_pb2.GetFabricRequest(name="fabrics/divide"))
        assert (
            len([e async for e in stub.WatchFabric(topology_pb2.WatchFabricRequest(name="fabrics/ok"))]) == 2
        )
        with pytest.raises(grpc.aio.AioRpcError):
            async for _ in stub.WatchFabric(topology_pb2.WatchFabricRequest(name="fabrics/missing")):
                pass
        # A watcher that hangs up mid-stream.
        watch = stub.WatchFabric(topology_pb2.WatchFabricRequest(name="fabrics/slow-2000"))
        await watch.read()
        watch.cancel()


async def test_calls_are_counted_by_method_and_status_code(measured):
    await _calls(measured.address)
    await asyncio.sleep(0.1)  # let the cancelled stream's handler unwind
    samples = await asyncio.to_thread(_scrape, measured.metrics_port)
    requests = "fabrictwin_rpc_requests_total"
    assert _value(samples, requests, method=GET, code="OK") == 2
    assert _value(samples, requests, method=GET, code="INVALID_ARGUMENT") == 1
    assert _value(samples, requests, method=GET, code="INTERNAL") == 1
    assert _value(samples, requests, method=WATCH, code="OK") == 1
    assert _value(samples, requests, method=WATCH, code="NOT_FOUND") == 1
    assert _value(samples, requests, method=WATCH, code="CANCELLED") == 1


async def test_only_failed_calls_are_counted_as_errors(measured):
    await _calls(measured.address)
    samples = await asyncio.to_thread(_scrape, measured.metrics_port)
    errors = "fabrictwin_rpc_errors_total"
    assert _value(samples, errors, method=GET, code="INVALID_ARGUMENT") == 1
    assert _value(samples, errors, method=GET, code="INTERNAL") == 1
    assert _value(samples, errors, method=WATCH, code="NOT_FOUND") == 1
    assert _value(samples, errors, method=GET, code="OK") == 0


async def test_latency_is_a_histogram_per_method(measured):
    await _calls(measured.address)
    samples = await asyncio.to_thread(_scrape, measured.metrics_port)
    assert _value(samples, "fabrictwin_rpc_latency_seconds_count", method=GET) == 4
    assert _value(samples, "fabrictwin_rpc_latency_seconds_bucket", method=GET, le="+Inf") == 4
    assert _value(samples, "fabrictwin_rpc_latency_seconds_bucket", method=GET, le="10.0") == 4
    assert _value(samples, "fabrictwin_rpc_latency_seconds_sum", method=GET) > 0
    assert _value(samples, "fabrictwin_rpc_latency_seconds_count", method=WATCH) >= 2


async def test_health_checks_are_counted_too(measured):
    async with grpc.aio.insecure_channel(measured.address) as channel:
        await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
    samples = await asyncio.to_thread(_scrape, measured.metrics_port)
    assert (
        _value(samples, "fabrictwin_rpc_requests_total", method="/grpc.health.v1.Health/Check", code="OK")
        == 1
    )


async def test_stopping_the_server_releases_the_metrics_port():
    running = await create_server(ServiceConfig(service="scripted", port=0, metrics_port=0), [])
    port = running.metrics_port
    await running.stop(0)
    with pytest.raises(urllib.error.URLError):
        await asyncio.to_thread(_scrape, port)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", port))


async def test_no_metrics_endpoint_unless_asked(scripted_server):
    assert scripted_server.metrics_port is None
