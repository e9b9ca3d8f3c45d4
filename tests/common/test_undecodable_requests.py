"""A request that does not decode is the caller's mistake: INVALID_ARGUMENT on every method, never UNKNOWN.

grpc-python deserializes a request before any interceptor's behaviour runs, and answers UNKNOWN
("Unexpected <class 'DecodeError'>") when that fails. The requests here are raw bytes sent through a
generic channel, as a client built from another proto version, or a broken one, would send them.
"""

from __future__ import annotations

import grpc
import pytest
from fabrictwin.v1 import (
    scenario_pb2,
    scenario_pb2_grpc,
    simulation_pb2,
    simulation_pb2_grpc,
    telemetry_pb2,
    telemetry_pb2_grpc,
    topology_pb2,
    topology_pb2_grpc,
)
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection_pb2

from services.common.config import ServiceConfig
from services.common.server import ServiceDefinition, serving

# Field 1 (a string in GetFabricRequest) holding bytes that are not UTF-8.
BAD_UTF8 = b"\x0a\x02\xff\xfe"
# Field 1 announcing 16 bytes and carrying 2: no message type parses it.
TRUNCATED = b"\x0a\x10ab"

_FILES = (topology_pb2, simulation_pb2, telemetry_pb2, scenario_pb2, health_pb2, reflection_pb2)
METHODS = [
    (f"/{service.full_name}/{method.name}", method.client_streaming, method.server_streaming)
    for module in _FILES
    for service in module.DESCRIPTOR.services_by_name.values()
    for method in service.methods
]


async def _drain(self, request_iterator, context):
    async for _ in request_iterator:
        pass
    raise NotImplementedError


async def _drain_streaming(self, request_iterator, context):
    async for _ in request_iterator:
        pass
    raise NotImplementedError
    yield  # pragma: no cover - an async generator, as response-streaming behaviours are


def _reading_servicer(module, name: str):
    """The generated base servicer of service `name`, except that client-streaming methods read their
    whole stream (a stream's messages are decoded as the servicer reads them) before UNIMPLEMENTED."""
    base = getattr(module, f"{name}Servicer")
    service = next(
        s
        for f in _FILES
        for s in f.DESCRIPTOR.services_by_name.values()
        if s.full_name == f"fabrictwin.v1.{name}"
    )
    methods = {
        m.name: _drain_streaming if m.server_streaming else _drain
        for m in service.methods
        if m.client_streaming
    }
    return type(f"Reading{name}", (base,), methods)()


def _base_servicers() -> list[ServiceDefinition]:
    """The generated servicers of the four services: every method UNIMPLEMENTED once decoded."""
    return [
        ServiceDefinition(
            f"fabrictwin.v1.{name}",
            _reading_servicer(module, name),
            getattr(module, f"add_{name}Servicer_to_server"),
        )
        for module, name in (
            (topology_pb2_grpc, "TopologyService"),
            (simulation_pb2_grpc, "SimulationService"),
            (telemetry_pb2_grpc, "TelemetryService"),
            (scenario_pb2_grpc, "ScenarioService"),
        )
    ]


@pytest.fixture
async def every_service():
    async with (
        serving(ServiceConfig(service="every", port=0), _base_servicers()) as running,
        grpc.aio.insecure_channel(running.address) as channel,
    ):
        yield channel


async def _raw_call(channel: grpc.aio.Channel, method: str, client_streaming: bool, server_streaming: bool,
                    messages: list[bytes]) -> list[bytes]:  # fmt: skip
    """Send `messages` (bytes, not serialized by the client) and collect what comes back."""
    if client_streaming and server_streaming:
        return [reply async for reply in channel.stream_stream(method)(iter(messages), timeout=10)]
    if client_streaming:
        return [await channel.stream_unary(method)(iter(messages), timeout=10)]
    if server_streaming:
        return [reply async for reply in channel.unary_stream(method)(messages[0], timeout=10)]
    return [await channel.unary_unary(method)(messages[0], timeout=10)]


@pytest.mark.parametrize(
    ("method", "client_streaming", "server_streaming"), METHODS, ids=[m[0] for m in METHODS]
)
async def test_every_method_of_every_service_answers_invalid_argument_to_bytes_that_do_not_decode(
    every_service, method, client_streaming, server_streaming
):
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await _raw_call(every_service, method, client_streaming, server_streaming, [TRUNCATED])
    assert failed.value.code() == grpc.StatusCode.INVALID_ARGUMENT, failed.value.details()
    assert "does not decode" in failed.value.details()


@pytest.mark.parametrize(
    ("payload", "problem"), [(BAD_UTF8, "UTF-8"), (TRUNCATED, "")], ids=["utf8", "truncated"]
)
async def test_an_undecodable_unary_request_names_the_message_type_and_the_problem(channel, payload, problem):
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await channel.unary_unary("/fabrictwin.v1.TopologyService/GetFabric")(payload, timeout=10)
    details = failed.value.details()
    assert failed.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert details.startswith("request: does not decode as fabrictwin.v1.GetFabricRequest"), details
    assert problem in details


async def test_an_undecodable_server_streaming_request_is_refused_before_anything_streams(channel):
    call = channel.unary_stream("/fabrictwin.v1.TopologyService/WatchFabric")(BAD_UTF8, timeout=10)
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        _ = [event async for event in call]
    assert failed.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "fabrictwin.v1.WatchFabricRequest" in failed.value.details()


async def test_an_undecodable_message_in_a_client_stream_is_refused_naming_its_position(channel):
    good = telemetry_pb2.IngestSamplesRequest(
        batch=telemetry_pb2.SampleBatch(source="sources/ok")
    ).SerializeToString()
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await channel.stream_unary("/fabrictwin.v1.TelemetryService/IngestSamples")(
            iter([good, good, TRUNCATED, good]), timeout=10
        )
    assert failed.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert failed.value.details().startswith("request message 3: does not decode"), failed.value.details()


async def test_requests_that_decode_still_reach_the_servicer(every_service, channel):
    # An empty message is a valid (all-default) request: UNIMPLEMENTED shows it reached the servicer.
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await every_service.unary_unary("/fabrictwin.v1.TopologyService/GetFabric")(b"", timeout=10)
    assert failed.value.code() == grpc.StatusCode.UNIMPLEMENTED
    request = topology_pb2.GetFabricRequest(name="fabrics/ok").SerializeToString()
    reply = await channel.unary_unary("/fabrictwin.v1.TopologyService/GetFabric")(request, timeout=10)
    assert topology_pb2.Fabric.FromString(reply).name == "fabrics/ok"


async def test_the_server_keeps_serving_after_undecodable_requests(channel):
    for _ in range(3):
        with pytest.raises(grpc.aio.AioRpcError):
            await channel.unary_unary("/fabrictwin.v1.TopologyService/GetFabric")(TRUNCATED, timeout=10)
    health = await channel.unary_unary(
        "/grpc.health.v1.Health/Check",
        request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
        response_deserializer=health_pb2.HealthCheckResponse.FromString,
    )(health_pb2.HealthCheckRequest(), timeout=10)
    assert health.status == health_pb2.HealthCheckResponse.SERVING
