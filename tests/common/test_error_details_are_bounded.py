"""The error interceptor's safety net: however much input an error quotes, the caller gets the status and
a few KB of its message (gRPC refuses a status message over its metadata limit, and the caller would
see RESOURCE_EXHAUSTED instead), and the server log gets a bounded line."""

from __future__ import annotations

import logging
import urllib.parse

import grpc
import pytest
from fabrictwin.v1 import telemetry_pb2, topology_pb2

from services.common.interceptors import MAX_DETAILS_BYTES, bounded_details
from services.common.logs import JsonFormatter

HUGE = 10_000_000


async def _unary(topology, telemetry, script):
    return await topology.GetFabric(topology_pb2.GetFabricRequest(name=f"fabrics/{script}"))


async def _server_streaming(topology, telemetry, script):
    request = topology_pb2.WatchFabricRequest(name=f"fabrics/{script}")
    return [event async for event in topology.WatchFabric(request)]


async def _client_streaming(topology, telemetry, script):
    batch = telemetry_pb2.SampleBatch(source=f"sources/{script}")
    return await telemetry.IngestSamples(iter([telemetry_pb2.IngestSamplesRequest(batch=batch)]))


CALLS = {"unary": _unary, "server-streaming": _server_streaming, "client-streaming": _client_streaming}


def _wire_size(details: str) -> int:
    """Bytes of the grpc-message header: the UTF-8 text, percent-encoded outside printable ASCII."""
    return len(urllib.parse.quote(details.encode(), safe=" !\"#$&'()*+,-./:;<=>?@[\\]^_`{|}~"))


@pytest.mark.parametrize("kind", CALLS)
async def test_a_domain_error_quoting_ten_megabytes_reaches_the_caller_as_itself_cut_short(
    topology, telemetry, kind
):
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await CALLS[kind](topology, telemetry, f"huge-{HUGE}")
    details = failed.value.details()
    assert failed.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # not RESOURCE_EXHAUSTED about metadata
    assert details.startswith("line 3: expected a port line, got 'éé")
    assert details.endswith("characters cut]")
    assert _wire_size(details) <= MAX_DETAILS_BYTES


async def test_a_bug_with_a_ten_megabyte_message_is_internal_and_logged_cut_short(
    topology, telemetry, caplog
):
    with (
        caplog.at_level(logging.ERROR, logger="fabrictwin.rpc"),
        pytest.raises(grpc.aio.AioRpcError) as failed,
    ):
        await _unary(topology, telemetry, f"hugebug-{HUGE}")
    assert failed.value.code() == grpc.StatusCode.INTERNAL
    (record,) = [r for r in caplog.records if r.getMessage() == "rpc failed"]
    assert record.exc_info is not None  # the operator still gets the traceback
    line = JsonFormatter("test").format(record)
    assert "ValueError" in line and "yyyy" in line
    assert len(line) < 32_000


async def test_a_rejection_quoting_ten_megabytes_is_logged_cut_short(topology, telemetry, caplog):
    with caplog.at_level(logging.INFO, logger="fabrictwin.rpc"), pytest.raises(grpc.aio.AioRpcError):
        await _unary(topology, telemetry, f"huge-{HUGE}")
    (record,) = [r for r in caplog.records if r.getMessage() == "rpc rejected"]
    line = JsonFormatter("test").format(record)
    assert "line 3: expected a port line" in line
    assert len(line) < 32_000


@pytest.mark.parametrize(
    "text",
    ["short and sweet", "x" * 5000, "é" * 5000, "\n" * 5000, "a" * 4000 + "€" * 500],
    ids=["short", "ascii", "two-byte", "control", "mixed"],
)
def test_bounded_details_keep_short_text_and_fit_long_text_in_the_limit(text):
    bounded = bounded_details(text)
    if _wire_size(text) <= MAX_DETAILS_BYTES:
        assert bounded == text
    else:
        assert _wire_size(bounded) <= MAX_DETAILS_BYTES
        assert bounded.startswith(text[:100]) and bounded.endswith("characters cut]")
