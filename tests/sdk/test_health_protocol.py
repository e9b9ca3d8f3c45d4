"""The hand-encoded grpc.health.v1 call: same bytes as the real messages, and answered by a real server."""

from __future__ import annotations

import pytest
from fabrictwin import Client
from fabrictwin.health import decode_health_response, encode_health_request
from grpc_health.v1 import health_pb2
from hypothesis import given
from hypothesis import strategies as st

from services.common.config import ServiceConfig
from tests.common.scripted_services import scripted_definitions

from .conftest import definitions_build


@given(st.text(max_size=300))
def test_the_request_bytes_equal_the_generated_message(service: str) -> None:
    assert (
        encode_health_request(service) == health_pb2.HealthCheckRequest(service=service).SerializeToString()
    )


@pytest.mark.parametrize("status", [0, 1, 2, 3])
def test_every_serving_status_decodes_to_its_name(status: int) -> None:
    wire = health_pb2.HealthCheckResponse(status=status).SerializeToString()
    assert decode_health_response(wire) == health_pb2.HealthCheckResponse.ServingStatus.Name(status)


def test_unknown_fields_in_the_response_are_skipped() -> None:
    # field 2 (length-delimited "hi"), field 3 (fixed32), then status = NOT_SERVING
    wire = b"\x12\x02hi" + b"\x1d\x00\x00\x00\x00" + b"\x08\x02"
    assert decode_health_response(wire) == "NOT_SERVING"


def test_a_truncated_response_is_an_error() -> None:
    with pytest.raises(ValueError, match="truncated"):
        decode_health_response(b"\x12\x05hi")


def test_health_reports_serving_unknown_and_unreachable_services(serve) -> None:
    server = serve(definitions_build(scripted_definitions()), ServiceConfig(service="scripted", port=0))
    # Nothing listens on port 1; the scripted server hosts Topology and Telemetry but not the others.
    with Client(
        topology=server.address,
        simulator="127.0.0.1:1",
        telemetry=server.address,
        orchestrator=server.address,
    ) as client:
        assert client.health() == {
            "topology": "SERVING",
            "simulator": "UNAVAILABLE",
            "telemetry": "SERVING",
            "orchestrator": "SERVICE_UNKNOWN",
        }


def test_health_needs_no_token_even_where_calls_do(serve) -> None:
    server = serve(
        definitions_build(scripted_definitions()),
        ServiceConfig(service="scripted", port=0, auth_token="s3cret"),
    )
    with Client(topology=server.address) as client:
        assert client.health(["topology"]) == {"topology": "SERVING"}
