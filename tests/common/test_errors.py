"""The error interceptor: domain errors become their status codes, bugs INTERNAL with an incident id."""

from __future__ import annotations

import logging
import re

import grpc
import pytest
from fabrictwin.v1 import telemetry_pb2, topology_pb2

from .scripted_services import SECRET

DOMAIN_ERRORS = [
    ("invalid", grpc.StatusCode.INVALID_ARGUMENT, "spec.fat_tree.k: must be even"),
    ("missing", grpc.StatusCode.NOT_FOUND, "/missing does not exist"),
]
BUGS = ["divide", "secret"]


async def _get_fabric(topology, script):
    return await topology.GetFabric(topology_pb2.GetFabricRequest(name=f"fabrics/{script}"))


async def _watch_fabric(topology, script):
    return [
        event
        async for event in topology.WatchFabric(topology_pb2.WatchFabricRequest(name=f"fabrics/{script}"))
    ]


async def _ingest(telemetry, script):
    batches = [
        telemetry_pb2.IngestSamplesRequest(batch=telemetry_pb2.SampleBatch(source=f"sources/{s}"))
        for s in ("ok", script)
    ]
    return await telemetry.IngestSamples(iter(batches))


CALLS = {"unary": _get_fabric, "server-streaming": _watch_fabric, "client-streaming": _ingest}


def _call(kind, topology, telemetry, script):
    return CALLS[kind](telemetry if kind == "client-streaming" else topology, script)


@pytest.mark.parametrize("kind", CALLS)
@pytest.mark.parametrize(("script", "code", "message"), DOMAIN_ERRORS)
async def test_a_domain_error_reaches_the_caller_as_its_status_code(
    topology, telemetry, kind, script, code, message
):
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await _call(kind, topology, telemetry, script)
    assert failed.value.code() == code
    assert failed.value.details().endswith(message)


@pytest.mark.parametrize("kind", CALLS)
@pytest.mark.parametrize("script", BUGS)
async def test_a_bug_is_internal_with_an_incident_id_and_nothing_else(
    topology, telemetry, caplog, kind, script
):
    with (
        caplog.at_level(logging.ERROR, logger="fabrictwin.rpc"),
        pytest.raises(grpc.aio.AioRpcError) as failed,
    ):
        await _call(kind, topology, telemetry, script)
    details = failed.value.details()
    assert failed.value.code() == grpc.StatusCode.INTERNAL
    for leak in (
        SECRET,
        "hunter2",
        "Traceback",
        "ZeroDivisionError",
        "division by zero",
        "ValueError",
        ".py",
    ):
        assert leak not in details
    incident = re.search(r"incident ([0-9a-f]{12})", details)
    assert incident is not None, details
    # The operator finds the whole story in the server log under the same incident id.
    logged = [r for r in caplog.records if getattr(r, "incident", None) == incident.group(1)]
    assert len(logged) == 1 and logged[0].exc_info is not None


@pytest.mark.parametrize("kind", CALLS)
async def test_the_server_keeps_serving_after_a_bug(topology, telemetry, kind):
    for _ in range(2):
        with pytest.raises(grpc.aio.AioRpcError):
            await _call(kind, topology, telemetry, "divide")
        assert await _call(kind, topology, telemetry, "ok")


async def test_a_successful_call_passes_through_untouched(topology, telemetry):
    assert (await _get_fabric(topology, "ok")).display_name == "ok"
    assert [e.fabric for e in await _watch_fabric(topology, "ok")] == ["fabrics/ok", "fabrics/ok"]
    assert (await _ingest(telemetry, "ok")).stored == 2


async def test_a_method_the_service_has_not_written_is_unimplemented_not_internal(topology):
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await topology.ListFabrics(topology_pb2.ListFabricsRequest())
    assert failed.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert "ListFabrics" in failed.value.details()


async def test_a_streaming_call_keeps_what_it_sent_before_the_error(topology):
    received = []
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        async for event in topology.WatchFabric(topology_pb2.WatchFabricRequest(name="fabrics/invalid")):
            received.append(event.fabric)
    assert received == ["fabrics/invalid"]
    assert failed.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_domain_errors_survive_the_trip_back_from_a_worker_process():
    import pickle

    from services.common.errors import InvalidArgument, NotFound

    back = pickle.loads(pickle.dumps(InvalidArgument("spec.jobs[0].size_bytes", "must be positive")))
    assert isinstance(back, InvalidArgument)
    assert back.field == "spec.jobs[0].size_bytes"
    assert str(back) == "spec.jobs[0].size_bytes: must be positive"
    assert str(pickle.loads(pickle.dumps(NotFound("fabrics/x does not exist")))) == "fabrics/x does not exist"
