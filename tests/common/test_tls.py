"""TLS and mutual TLS with a throwaway CA made by the openssl CLI; misconfiguration fails at start-up."""

from __future__ import annotations

import dataclasses
import pathlib
import shutil
import subprocess

import grpc
import pytest
from fabrictwin.v1 import topology_pb2, topology_pb2_grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.common.config import ServiceConfig
from services.common.server import create_server, serving

from .scripted_services import scripted_definitions

OPENSSL = shutil.which("openssl")
pytestmark = pytest.mark.skipif(
    OPENSSL is None, reason="the openssl CLI is not installed; cannot make certificates"
)
EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1"]


@dataclasses.dataclass(frozen=True)
class Pki:
    """PEM files: a CA, and CA-signed certificates for the server (localhost, 127.0.0.1) and a client."""

    ca: pathlib.Path
    server_cert: pathlib.Path
    server_key: pathlib.Path
    client_cert: pathlib.Path
    client_key: pathlib.Path

    def read(self, name: str) -> bytes:
        return getattr(self, name).read_bytes()


def _openssl(*args: str) -> None:
    subprocess.run([OPENSSL, *args], check=True, capture_output=True, timeout=30)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    d = tmp_path_factory.mktemp("pki")
    _openssl(
        "req",
        "-x509",
        *EC,
        "-keyout",
        str(d / "ca.key"),
        "-out",
        str(d / "ca.crt"),
        "-subj",
        "/CN=fabrictwin-test-ca",
    )
    leaf = [
        "-CA",
        str(d / "ca.crt"),
        "-CAkey",
        str(d / "ca.key"),
        "-addext",
        "basicConstraints=critical,CA:FALSE",
    ]
    _openssl(
        "req", "-x509", *EC, *leaf, "-keyout", str(d / "server.key"), "-out", str(d / "server.crt"),
        "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
    )  # fmt: skip
    _openssl(
        "req",
        "-x509",
        *EC,
        *leaf,
        "-keyout",
        str(d / "client.key"),
        "-out",
        str(d / "client.crt"),
        "-subj",
        "/CN=orchestrator",
    )
    return Pki(d / "ca.crt", d / "server.crt", d / "server.key", d / "client.crt", d / "client.key")


async def _health(channel: grpc.aio.Channel) -> int:
    reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=2)
    return reply.status


def _tls_config(pki: Pki, **overrides) -> ServiceConfig:
    return ServiceConfig(
        service="scripted", port=0, tls_cert=str(pki.server_cert), tls_key=str(pki.server_key), **overrides
    )


async def test_a_client_that_trusts_the_ca_talks_tls(pki):
    async with serving(_tls_config(pki), scripted_definitions()) as running:
        credentials = grpc.ssl_channel_credentials(pki.read("ca"))
        async with grpc.aio.secure_channel(running.address, credentials) as channel:
            assert await _health(channel) == health_pb2.HealthCheckResponse.SERVING


@pytest.mark.parametrize("client", ["plaintext", "system roots only"])
async def test_a_plaintext_or_untrusting_client_cannot_talk_to_a_tls_server(pki, client):
    async with serving(_tls_config(pki), scripted_definitions()) as running:
        if client == "plaintext":
            channel = grpc.aio.insecure_channel(running.address)
        else:
            channel = grpc.aio.secure_channel(running.address, grpc.ssl_channel_credentials())
        async with channel:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await _health(channel)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_mutual_tls_refuses_a_client_without_a_certificate(pki):
    async with serving(_tls_config(pki, tls_client_ca=str(pki.ca)), scripted_definitions()) as running:
        credentials = grpc.ssl_channel_credentials(pki.read("ca"))
        async with grpc.aio.secure_channel(running.address, credentials) as channel:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await _health(channel)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_mutual_tls_admits_a_client_with_a_certificate_from_the_ca(pki):
    async with serving(_tls_config(pki, tls_client_ca=str(pki.ca)), scripted_definitions()) as running:
        credentials = grpc.ssl_channel_credentials(
            pki.read("ca"), pki.read("client_key"), pki.read("client_cert")
        )
        async with grpc.aio.secure_channel(running.address, credentials) as channel:
            assert await _health(channel) == health_pb2.HealthCheckResponse.SERVING


async def test_a_bearer_token_rides_on_tls_as_call_credentials(pki):
    async with serving(_tls_config(pki, auth_token="tok"), scripted_definitions()) as running:
        credentials = grpc.composite_channel_credentials(
            grpc.ssl_channel_credentials(pki.read("ca")), grpc.access_token_call_credentials("tok")
        )
        async with grpc.aio.secure_channel(running.address, credentials) as channel:
            stub = topology_pb2_grpc.TopologyServiceStub(channel)
            assert (
                await stub.GetFabric(topology_pb2.GetFabricRequest(name="fabrics/ok"))
            ).name == "fabrics/ok"


@pytest.mark.parametrize(
    ("fields", "error", "names"),
    [
        ({"tls_cert": "server_cert"}, ValueError, "--tls-key"),
        ({"tls_key": "server_key"}, ValueError, "--tls-cert"),
        ({"tls_client_ca": "ca"}, ValueError, "--tls-client-ca"),
        ({"tls_cert": "server_cert", "tls_key": "client_key"}, ValueError, "--tls-key"),
        (
            {"tls_cert": "server_cert", "tls_key": "server_key", "tls_client_ca": "server_key"},
            ValueError,
            "--tls-client-ca",
        ),
    ],
    ids=[
        "cert without key",
        "key without cert",
        "client CA without cert",
        "key of another cert",
        "CA not a cert",
    ],
)
async def test_a_tls_misconfiguration_fails_at_start_naming_the_flag(pki, fields, error, names):
    config = ServiceConfig(service="scripted", port=0, **{k: str(getattr(pki, v)) for k, v in fields.items()})
    with pytest.raises(error, match=names):
        await create_server(config, scripted_definitions())


async def test_an_unreadable_certificate_fails_naming_the_flag_and_path(pki, tmp_path):
    config = _tls_config(pki, tls_client_ca=str(tmp_path / "absent.pem"))
    with pytest.raises(OSError, match=r"--tls-client-ca .*absent\.pem"):
        await create_server(config, scripted_definitions())
