"""What an unauthenticated or read-only caller learns and costs: the same UNAUTHENTICATED for every
method name, nothing parsed before the refusal, and PERMISSION_DENIED for writes with a read-only token."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest
from fabrictwin.v1 import telemetry_pb2, telemetry_pb2_grpc, topology_pb2, topology_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from services.common.auth import is_read_method
from services.common.config import ServiceConfig
from services.common.server import RunningServer, ServiceDefinition, serving

from .scripted_services import scripted_definitions

FULL = "full-token"
READ_ONLY = "read-only-token"


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


@pytest.fixture
async def guarded() -> AsyncIterator[RunningServer]:
    config = ServiceConfig(service="scripted", port=0, auth_token=FULL, read_only_token=READ_ONLY)
    async with serving(config, scripted_definitions()) as running:
        yield running


async def raw_call(address: str, method: str, body: bytes, metadata=None, **config) -> grpc.StatusCode:
    """Call `method` with raw bytes, whatever it is (a client that enumerates names does just this)."""
    async with grpc.aio.insecure_channel(address, options=config.get("options", ())) as channel:
        try:
            await channel.unary_unary(method)(body, metadata=metadata, timeout=30)
        except grpc.aio.AioRpcError as exc:
            return exc.code()
    return grpc.StatusCode.OK


METHOD_NAMES = [
    "/fabrictwin.v1.TopologyService/GetFabric",  # real and served
    "/fabrictwin.v1.TopologyService/CreateFabric",  # real, not served by the double
    "/fabrictwin.v1.TopologyService/NoSuchMethod",
    "/fabrictwin.v1.SecretAdminService/DropEverything",
    "/",
    "not-even-a-path",
]


@pytest.mark.parametrize("method", METHOD_NAMES)
async def test_without_a_token_every_method_name_is_unauthenticated(guarded, method):
    assert await raw_call(guarded.address, method, b"") == grpc.StatusCode.UNAUTHENTICATED


@pytest.mark.parametrize("method", METHOD_NAMES[2:4])
async def test_with_a_token_an_unknown_method_is_unimplemented(guarded, method):
    assert await raw_call(guarded.address, method, b"", bearer(FULL)) == grpc.StatusCode.UNIMPLEMENTED


# --- Nothing is parsed before a refusal ------------------------------------------------------------


class CountingDeserializer:
    """GetFabricRequest.FromString that counts its calls: the server parsed a request iff it grew."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, data: bytes) -> topology_pb2.GetFabricRequest:
        self.calls += 1
        return topology_pb2.GetFabricRequest.FromString(data)


def counted_get_fabric(deserializer: CountingDeserializer) -> ServiceDefinition:
    async def get_fabric(request, context):
        return topology_pb2.Fabric(name=request.name)

    handler = grpc.method_handlers_generic_handler(
        "fabrictwin.v1.TopologyService",
        {
            "GetFabric": grpc.unary_unary_rpc_method_handler(
                get_fabric,
                request_deserializer=deserializer,
                response_serializer=topology_pb2.Fabric.SerializeToString,
            )
        },
    )
    return ServiceDefinition(
        "fabrictwin.v1.TopologyService",
        None,
        lambda _servicer, server: server.add_generic_rpc_handlers((handler,)),
    )


SIXTY_MB = topology_pb2.GetFabricRequest(name="fabrics/" + "a" * (60 << 20)).SerializeToString()
BIG_CLIENT = {"options": [("grpc.max_send_message_length", 100 << 20)]}
GET_FABRIC = "/fabrictwin.v1.TopologyService/GetFabric"


async def test_an_unauthenticated_60_mb_request_is_refused_without_being_parsed():
    deserializer = CountingDeserializer()
    config = ServiceConfig(service="scripted", port=0, auth_token=FULL)  # default 64 MiB limit
    async with serving(config, [counted_get_fabric(deserializer)]) as running:
        code = await raw_call(running.address, GET_FABRIC, SIXTY_MB, **BIG_CLIENT)
        assert code == grpc.StatusCode.UNAUTHENTICATED
        assert deserializer.calls == 0
        small = topology_pb2.GetFabricRequest(name="fabrics/ok").SerializeToString()
        assert await raw_call(running.address, GET_FABRIC, small, bearer(FULL)) == grpc.StatusCode.OK
        assert deserializer.calls == 1


@pytest.mark.parametrize("metadata", [None, bearer(FULL)], ids=["no token", "token"])
async def test_a_request_over_the_size_limit_is_refused_at_the_transport_unparsed(metadata):
    deserializer = CountingDeserializer()
    config = ServiceConfig(service="scripted", port=0, auth_token=FULL, max_message_bytes=4096)
    async with serving(config, [counted_get_fabric(deserializer)]) as running:
        code = await raw_call(running.address, GET_FABRIC, SIXTY_MB, metadata, **BIG_CLIENT)
    # Without a token the call is refused on its headers, before a byte of the body is read.
    expected = grpc.StatusCode.RESOURCE_EXHAUSTED if metadata else grpc.StatusCode.UNAUTHENTICATED
    assert code == expected
    assert deserializer.calls == 0


# --- Roles -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "method",
    [
        "/fabrictwin.v1.TopologyService/GetFabric",
        "/fabrictwin.v1.TopologyService/ListLinks",
        "/fabrictwin.v1.TopologyService/WatchFabric",
        "/fabrictwin.v1.TopologyService/ExportFabric",
        "/fabrictwin.v1.TopologyService/StreamFabricSnapshot",
        "/fabrictwin.v1.TelemetryService/QuerySeries",
        "/fabrictwin.v1.TelemetryService/TopLinks",
        "/fabrictwin.v1.ScenarioService/CompareRuns",
        "/fabrictwin.v1.ScenarioService/Diagnose",
        "/grpc.health.v1.Health/Check",
        "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
        "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
    ],
)
def test_queries_are_reads(method):
    assert is_read_method(method)


@pytest.mark.parametrize(
    "method",
    [
        "/fabrictwin.v1.TopologyService/CreateFabric",
        "/fabrictwin.v1.TopologyService/ImportFabric",
        "/fabrictwin.v1.TopologyService/SetLinkState",
        "/fabrictwin.v1.TopologyService/ComputeRoutes",
        "/fabrictwin.v1.TopologyService/DeleteFabric",
        "/fabrictwin.v1.SimulationService/StartSimulation",
        "/fabrictwin.v1.SimulationService/CancelSimulation",
        "/fabrictwin.v1.TelemetryService/IngestSamples",
        "/fabrictwin.v1.TelemetryService/UpdateSource",
        "/fabrictwin.v1.ScenarioService/RunScenario",
        "/fabrictwin.v1.TopologyService/Getaway",  # a prefix is a whole word, not letters
        "/fabrictwin.v1.TopologyService/Listen",
        "/fabrictwin.v1.Health/Check",  # not the health service
        "/fabrictwin.v1.TopologyService/",
        "garbage",
    ],
)
def test_everything_else_is_a_write(method):
    assert not is_read_method(method)


async def test_a_read_only_token_can_query(guarded):
    async with grpc.aio.insecure_channel(guarded.address) as channel:
        topology = topology_pb2_grpc.TopologyServiceStub(channel)
        fabric = await topology.GetFabric(
            topology_pb2.GetFabricRequest(name="fabrics/ok"), metadata=bearer(READ_ONLY)
        )
        assert fabric.name == "fabrics/ok"
        events = topology.WatchFabric(
            topology_pb2.WatchFabricRequest(name="fabrics/ok"), metadata=bearer(READ_ONLY)
        )
        assert len([e async for e in events]) == 2
        reflection = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
            metadata=bearer(READ_ONLY)
        )
        await reflection.write(reflection_pb2.ServerReflectionRequest(list_services=""))
        listed = await reflection.read()
        await reflection.done_writing()
    assert "fabrictwin.v1.TopologyService" in {s.name for s in listed.list_services_response.service}


async def test_a_read_only_token_cannot_create_change_or_delete(guarded):
    for method in ("CreateFabric", "SetLinkState", "DeleteFabric", "NoSuchWrite"):
        code = await raw_call(
            guarded.address, f"/fabrictwin.v1.TopologyService/{method}", b"", bearer(READ_ONLY)
        )
        assert code == grpc.StatusCode.PERMISSION_DENIED, method
    async with grpc.aio.insecure_channel(guarded.address) as channel:
        telemetry = telemetry_pb2_grpc.TelemetryServiceStub(channel)
        batch = telemetry_pb2.IngestSamplesRequest(batch=telemetry_pb2.SampleBatch(source="sources/ok"))
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await telemetry.IngestSamples(iter([batch]), metadata=bearer(READ_ONLY))
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "read-only" in refused.value.details()
        stored = await telemetry.IngestSamples(iter([batch]), metadata=bearer(FULL))
    assert stored.stored == 1


async def test_the_full_token_may_write(guarded):
    code = await raw_call(guarded.address, "/fabrictwin.v1.TopologyService/CreateFabric", b"", bearer(FULL))
    assert code == grpc.StatusCode.UNIMPLEMENTED  # past auth; the double does not create fabrics


async def test_refusals_are_counted_without_a_metric_per_invented_method_name(guarded):
    for i in range(20):
        await raw_call(guarded.address, f"/fabrictwin.v1.TopologyService/Probe{i}", b"")
    await raw_call(guarded.address, "/fabrictwin.v1.TopologyService/GetFabric", b"")
    methods = {
        sample.labels["method"]
        for family in guarded.metrics.registry.collect()
        for sample in family.samples
        if "method" in sample.labels and sample.labels.get("code") == "UNAUTHENTICATED"
    }
    assert "/fabrictwin.v1.TopologyService/GetFabric" in methods
    assert not any("Probe" in m for m in methods)
    assert len(methods) == 2  # GetFabric and one bucket for every name the server does not serve
