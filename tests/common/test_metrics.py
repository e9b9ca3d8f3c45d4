"""Prometheus metrics: every RPC is counted, timed and its messages counted under the standard gRPC
server names (go-grpc-prometheus's), the process is described, and all of it is served on /metrics."""

from __future__ import annotations

import asyncio
import socket
import urllib.error
import urllib.request
from collections.abc import AsyncIterator

import grpc
import pytest
from fabrictwin.v1 import telemetry_pb2, telemetry_pb2_grpc, topology_pb2, topology_pb2_grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from services.common.config import ServiceConfig
from services.common.server import RunningServer, create_server, serving

from .scripted_services import scripted_definitions

TOPOLOGY = "fabrictwin.v1.TopologyService"
TELEMETRY = "fabrictwin.v1.TelemetryService"
GET = {"grpc_type": "unary", "grpc_service": TOPOLOGY, "grpc_method": "GetFabric"}
WATCH = {"grpc_type": "server_stream", "grpc_service": TOPOLOGY, "grpc_method": "WatchFabric"}
INGEST = {"grpc_type": "client_stream", "grpc_service": TELEMETRY, "grpc_method": "IngestSamples"}
TOKEN = "metrics-test-token"


@pytest.fixture
async def measured() -> AsyncIterator[RunningServer]:
    async with serving(
        ServiceConfig(service="scripted", port=0, metrics_port=0), scripted_definitions()
    ) as running:
        yield running


class Scrape:
    """One scrape of /metrics, parsed by prometheus_client's own parser."""

    def __init__(self, port: int) -> None:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
        self.families = {family.name: family for family in text_string_to_metric_families(text)}
        self.samples = {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in self.families.values()
            for sample in family.samples
        }

    def value(self, name: str, **labels: str) -> float:
        """The sample with exactly these labels; 0 when there is none (a counter never incremented)."""
        return self.samples.get((name, tuple(sorted(labels.items()))), 0.0)

    def label_sets(self, name: str) -> list[dict[str, str]]:
        return [dict(labels) for sample, labels in self.samples if sample == name]


async def scrape(server: RunningServer) -> Scrape:
    assert server.metrics_port is not None
    return await asyncio.to_thread(Scrape, server.metrics_port)


async def _calls(address: str) -> None:
    """GetFabric: 2 OK, 1 InvalidArgument, 1 Internal. WatchFabric: 1 OK (2 events), 1 NotFound after
    its first event, 1 cancelled by the caller after one event."""
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
        watch = stub.WatchFabric(topology_pb2.WatchFabricRequest(name="fabrics/slow-2000"))
        await watch.read()
        watch.cancel()
    await asyncio.sleep(0.1)  # let the cancelled stream's handler unwind


async def test_calls_are_counted_by_type_service_method_and_go_style_status_code(measured):
    await _calls(measured.address)
    scraped = await scrape(measured)
    handled = "grpc_server_handled_total"
    assert scraped.value(handled, **GET, grpc_code="OK") == 2
    assert scraped.value(handled, **GET, grpc_code="InvalidArgument") == 1
    assert scraped.value(handled, **GET, grpc_code="Internal") == 1
    assert scraped.value(handled, **WATCH, grpc_code="OK") == 1
    assert scraped.value(handled, **WATCH, grpc_code="NotFound") == 1
    assert scraped.value(handled, **WATCH, grpc_code="Canceled") == 1
    assert sum(scraped.value(handled, **s) for s in scraped.label_sets(handled)) == 7
    assert scraped.value("grpc_server_started_total", **GET) == 4
    assert scraped.value("grpc_server_started_total", **WATCH) == 3
    assert scraped.families["grpc_server_handled"].type == "counter"


async def test_handling_time_is_a_histogram_per_method_without_the_code(measured):
    await _calls(measured.address)
    async with grpc.aio.insecure_channel(measured.address) as channel:
        stub = topology_pb2_grpc.TopologyServiceStub(channel)
        await stub.GetFabric(topology_pb2.GetFabricRequest(name="fabrics/slow-300"))
    scraped = await scrape(measured)
    assert scraped.families["grpc_server_handling_seconds"].type == "histogram"
    assert scraped.value("grpc_server_handling_seconds_count", **GET) == 5
    assert scraped.value("grpc_server_handling_seconds_bucket", **GET, le="+Inf") == 5
    assert scraped.value("grpc_server_handling_seconds_bucket", **GET, le="10.0") == 5
    assert scraped.value("grpc_server_handling_seconds_bucket", **GET, le="0.25") == 4  # not the slow one
    assert scraped.value("grpc_server_handling_seconds_sum", **GET) >= 0.3
    assert scraped.value("grpc_server_handling_seconds_count", **WATCH) == 3
    assert all("grpc_code" not in s for s in scraped.label_sets("grpc_server_handling_seconds_count"))


async def test_messages_are_counted_each_way_for_unary_and_server_streams(measured):
    await _calls(measured.address)
    scraped = await scrape(measured)
    assert scraped.value("grpc_server_msg_received_total", **GET) == 4
    assert scraped.value("grpc_server_msg_sent_total", **GET) == 2  # failed calls send no response
    assert scraped.value("grpc_server_msg_received_total", **WATCH) == 3
    # 2 events of the OK watch, 1 before the NotFound, 1 before the caller hung up.
    assert scraped.value("grpc_server_msg_sent_total", **WATCH) == 4


async def test_a_client_stream_counts_each_request_message(measured):
    batches = [telemetry_pb2.IngestSamplesRequest(batch=telemetry_pb2.SampleBatch(source="sources/ok"))] * 3
    failing = [
        telemetry_pb2.IngestSamplesRequest(batch=telemetry_pb2.SampleBatch(source="sources/ok")),
        telemetry_pb2.IngestSamplesRequest(batch=telemetry_pb2.SampleBatch(source="sources/invalid")),
    ]
    async with grpc.aio.insecure_channel(measured.address) as channel:
        stub = telemetry_pb2_grpc.TelemetryServiceStub(channel)
        assert (await stub.IngestSamples(iter(batches))).stored == 3
        with pytest.raises(grpc.aio.AioRpcError):
            await stub.IngestSamples(iter(failing))
    scraped = await scrape(measured)
    assert scraped.value("grpc_server_started_total", **INGEST) == 2
    assert scraped.value("grpc_server_handled_total", **INGEST, grpc_code="OK") == 1
    assert scraped.value("grpc_server_handled_total", **INGEST, grpc_code="InvalidArgument") == 1
    assert scraped.value("grpc_server_msg_received_total", **INGEST) == 5
    assert scraped.value("grpc_server_msg_sent_total", **INGEST) == 1


async def test_health_checks_are_counted_too(measured):
    async with grpc.aio.insecure_channel(measured.address) as channel:
        await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
    scraped = await scrape(measured)
    check = {"grpc_type": "unary", "grpc_service": "grpc.health.v1.Health", "grpc_method": "Check"}
    assert scraped.value("grpc_server_handled_total", **check, grpc_code="OK") == 1


async def test_calls_refused_for_a_missing_token_are_counted_with_their_methods_type():
    config = ServiceConfig(service="scripted", port=0, metrics_port=0, auth_token=TOKEN)
    async with serving(config, scripted_definitions()) as running:
        async with grpc.aio.insecure_channel(running.address) as channel:
            stub = telemetry_pb2_grpc.TelemetryServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.IngestSamples(iter([telemetry_pb2.IngestSamplesRequest()]))
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
            with pytest.raises(grpc.aio.AioRpcError):
                await channel.unary_unary("/fabrictwin.v1.TopologyService/Invented")(b"")
        scraped = await scrape(running)
    assert scraped.value("grpc_server_started_total", **INGEST) == 1
    assert scraped.value("grpc_server_handled_total", **INGEST, grpc_code="Unauthenticated") == 1
    invented = {"grpc_type": "unary", "grpc_service": "unknown", "grpc_method": "unknown"}
    assert scraped.value("grpc_server_handled_total", **invented, grpc_code="Unauthenticated") == 1
    assert not any("Invented" in s["grpc_method"] for s in scraped.label_sets("grpc_server_started_total"))


async def test_process_and_platform_metrics_describe_the_serving_process(measured):
    scraped = await scrape(measured)
    assert scraped.families["process_cpu_seconds"].type == "counter"
    assert scraped.value("process_cpu_seconds_total") > 0
    assert scraped.value("process_resident_memory_bytes") > 1_000_000
    assert scraped.value("process_open_fds") > 0
    assert scraped.value("process_start_time_seconds") > 1_600_000_000
    (python,) = scraped.label_sets("python_info")
    assert python["implementation"] == "CPython"


async def test_the_fabrictwin_request_count_by_full_method_name_stays(measured):
    await _calls(measured.address)
    scraped = await scrape(measured)
    get = "/fabrictwin.v1.TopologyService/GetFabric"
    assert scraped.value("fabrictwin_rpc_requests_total", method=get, code="OK") == 2
    assert scraped.value("fabrictwin_rpc_requests_total", method=get, code="INVALID_ARGUMENT") == 1
    assert not any(name.startswith("fabrictwin_rpc_latency") for name, _ in scraped.samples)


async def test_stopping_the_server_releases_the_metrics_port():
    running = await create_server(ServiceConfig(service="scripted", port=0, metrics_port=0), [])
    port = running.metrics_port
    assert port is not None
    await running.stop(0)
    with pytest.raises(urllib.error.URLError):
        await asyncio.to_thread(Scrape, port)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", port))


async def test_no_metrics_endpoint_unless_asked(scripted_server):
    assert scripted_server.metrics_port is None
