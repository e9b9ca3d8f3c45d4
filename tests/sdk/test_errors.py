"""gRPC failures reach scripts as FabricTwinError subclasses with the code and the server's message."""

from __future__ import annotations

import grpc
import pytest
from fabrictwin import Client
from fabrictwin.errors import (
    FabricTwinError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    UnauthenticatedError,
    UnavailableError,
    UnimplementedError,
    error_from_status,
)
from fabrictwin.v1 import telemetry_pb2

from services.common.config import ServiceConfig
from tests.common.scripted_services import SECRET, scripted_definitions

from .conftest import definitions_build


@pytest.fixture
def scripted(serve):
    """A real bootstrap server hosting the scripted TopologyService and TelemetryService doubles."""
    return serve(definitions_build(scripted_definitions()), ServiceConfig(service="scripted", port=0))


@pytest.fixture
def client(scripted):
    with Client(topology=scripted.address, telemetry=scripted.address, timeout=10) as opened:
        yield opened


def test_a_missing_resource_raises_not_found_with_the_servers_message(client: Client) -> None:
    with pytest.raises(NotFoundError) as caught:
        client.fabrics.get("missing")
    assert caught.value.code == "NOT_FOUND"
    assert caught.value.details == "fabrics/missing does not exist"
    assert caught.value.service == "topology"
    assert isinstance(caught.value, LookupError)


def test_bad_input_raises_invalid_argument_naming_the_field(client: Client) -> None:
    with pytest.raises(InvalidArgumentError, match=r"spec\.fat_tree\.k: must be even \(INVALID_ARGUMENT\)"):
        client.fabrics.get("invalid")


def test_a_server_bug_raises_internal_without_the_servers_secrets(client: Client) -> None:
    with pytest.raises(InternalError) as caught:
        client.fabrics.get("secret")
    assert SECRET not in str(caught.value)
    assert "incident" in caught.value.details


def test_a_method_the_server_lacks_raises_unimplemented(client: Client) -> None:
    with pytest.raises(UnimplementedError) as caught:
        client.fabrics.delete("ft8")
    assert caught.value.code == "UNIMPLEMENTED"


def test_an_unreachable_service_says_which_address_it_tried() -> None:
    with Client(topology="127.0.0.1:1", timeout=5) as client, pytest.raises(UnavailableError) as caught:
        client.fabrics.get("ft8")
    assert "127.0.0.1:1" in str(caught.value)
    assert str(caught.value).startswith("topology: cannot reach 127.0.0.1:1")


def test_a_failure_in_the_middle_of_a_stream_is_wrapped(client: Client) -> None:
    # The scripted WatchFabric sends one event, then fails as its name says.
    stream = client.fabrics.watch("missing")
    assert next(stream).fabric == "fabrics/missing"
    with pytest.raises(NotFoundError):
        next(stream)


def test_the_bearer_token_is_sent_on_every_call(serve) -> None:
    cfg = ServiceConfig(service="scripted", port=0, auth_token="s3cret")
    server = serve(definitions_build(scripted_definitions()), cfg)
    with Client(topology=server.address) as anonymous, pytest.raises(UnauthenticatedError):
        anonymous.fabrics.get("ok")
    with Client(topology=server.address, token="wrong") as wrong, pytest.raises(UnauthenticatedError):
        wrong.fabrics.get("ok")
    with Client(topology=server.address, token="s3cret") as authorised:
        assert authorised.fabrics.get("ok").name == "fabrics/ok"
        assert [e.fabric for e in authorised.fabrics.watch("ok")] == ["fabrics/ok", "fabrics/ok"]


def test_an_exception_in_the_callers_batches_reaches_the_caller_unchanged(client: Client) -> None:
    class CorruptFile(Exception):
        pass

    def batches():
        yield telemetry_pb2.SampleBatch(source="sources/ok")
        raise CorruptFile("line 7: not a number")

    with pytest.raises(CorruptFile, match="line 7"):
        client.telemetry.ingest(batches())
    # and a clean stream still works on the same channel
    assert client.telemetry.ingest([telemetry_pb2.SampleBatch(source="sources/ok")] * 3).stored == 3


def test_unknown_status_codes_still_give_a_fabrictwin_error() -> None:
    error = error_from_status("DATA_LOSS", "disk gone", service="telemetry")
    assert type(error) is FabricTwinError
    assert str(error) == "telemetry: disk gone (DATA_LOSS)"
    assert {c.name for c in grpc.StatusCode} >= {"DATA_LOSS"}
