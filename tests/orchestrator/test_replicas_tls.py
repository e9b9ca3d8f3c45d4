"""Over TLS, a simulator replica found through a DNS name is dialled by its IP and checked against the
name: a pod's certificate names the headless Service, never the pod's ever-changing IP."""

from __future__ import annotations

import pytest

from services.common.config import ServiceConfig
from services.common.peers import peer_auth
from services.common.server import serving
from services.orchestrator.replicas import GrpcSimulators
from services.simulator.__main__ import build as build_simulator
from tests.common.test_tls import EC, OPENSSL, Pki, _openssl, pki  # noqa: F401 - `pki` is a fixture

pytestmark = pytest.mark.skipif(
    OPENSSL is None, reason="the openssl CLI is not installed; cannot make certificates"
)


@pytest.fixture(scope="module")
def name_only_certificate(pki: Pki, tmp_path_factory):  # noqa: F811
    """A certificate from the test CA for DNS:localhost only (no IP address)."""
    d = tmp_path_factory.mktemp("name-only")
    _openssl(
        "req", "-x509", *EC, "-CA", str(pki.ca), "-CAkey", str(pki.ca.parent / "ca.key"),
        "-addext", "basicConstraints=critical,CA:FALSE", "-addext", "subjectAltName=DNS:localhost",
        "-keyout", str(d / "replica.key"), "-out", str(d / "replica.crt"), "-subj", "/CN=replica",
    )  # fmt: skip
    return d / "replica.crt", d / "replica.key"


async def test_a_replica_dialled_by_ip_is_checked_against_the_name_it_was_resolved_from(
    pki,  # noqa: F811
    name_only_certificate,
):
    cert, key = name_only_certificate
    config = ServiceConfig(service="simulator", port=0, tls_cert=str(cert), tls_key=str(key))
    services, cleanup = await build_simulator(config)
    try:
        async with serving(config, services) as replica:
            auth = peer_auth(ServiceConfig(service="orchestrator", peer_tls_ca=str(pki.ca)))
            by_name = GrpcSimulators([f"dns:///localhost:{replica.port}"], auth)
            by_ip = GrpcSimulators([replica.address], auth)  # 127.0.0.1: not in the certificate
            try:
                assert replica.address in by_name.serving()
                assert await by_name._serving(replica.address)
                assert not await by_ip._serving(replica.address)
            finally:
                await by_name.close()
                await by_ip.close()
    finally:
        await cleanup()
