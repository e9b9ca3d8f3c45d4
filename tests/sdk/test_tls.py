"""The SDK and the CLI over TLS and mutual TLS, with the throwaway CA of the bootstrap's TLS tests."""

from __future__ import annotations

import pytest
from fabrictwin import Client, UnavailableError
from fabrictwin.cli import main

from services.common.config import ServiceConfig
from tests.common.scripted_services import scripted_definitions
from tests.common.test_tls import OPENSSL, Pki, pki  # noqa: F401 - `pki` is a fixture

from .conftest import definitions_build

pytestmark = pytest.mark.skipif(
    OPENSSL is None, reason="the openssl CLI is not installed; cannot make certificates"
)


def _mutual_tls(pki: Pki, **overrides) -> ServiceConfig:  # noqa: F811 - the fixture's value
    return ServiceConfig(
        service="scripted",
        port=0,
        tls_cert=str(pki.server_cert),
        tls_key=str(pki.server_key),
        tls_client_ca=str(pki.ca),
        **overrides,
    )


def test_a_client_with_a_certificate_from_the_ca_calls_a_mutual_tls_server(pki, serve) -> None:  # noqa: F811
    server = serve(definitions_build(scripted_definitions()), _mutual_tls(pki, auth_token="tok"))
    with Client(
        topology=server.address,
        token="tok",
        root_certificates=pki.read("ca"),
        private_key=pki.read("client_key"),
        certificate_chain=pki.read("client_cert"),
    ) as client:
        assert client.fabrics.get("ok").name == "fabrics/ok"
        assert client.health(["topology"]) == {"topology": "SERVING"}


def test_a_client_without_a_certificate_is_turned_away(pki, serve) -> None:  # noqa: F811
    server = serve(definitions_build(scripted_definitions()), _mutual_tls(pki))
    client = Client(topology=server.address, root_certificates=pki.read("ca"), timeout=5)
    with client, pytest.raises(UnavailableError):
        client.fabrics.get("ok")


def test_the_cli_reads_its_tls_files_from_the_options(pki, serve, capsys) -> None:  # noqa: F811
    server = serve(definitions_build(scripted_definitions()), _mutual_tls(pki))
    tls = ["--tls-ca", str(pki.ca), "--tls-cert", str(pki.client_cert), "--tls-key", str(pki.client_key)]
    assert main([f"--topology={server.address}", *tls, "fabric", "get", "ok", "--json"]) == 0
    assert '"name": "fabrics/ok"' in capsys.readouterr().out
