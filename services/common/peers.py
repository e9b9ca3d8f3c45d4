"""Calls from one FabricTwin service to another: channels, credentials, and error mapping.

A service calls its peers with the settings it serves with: `peer_auth(config)` gathers the bearer
token, the CA that peers' certificates must chain to (`--peer-tls-ca`; TLS only when it is set) and
the client certificate for peers that ask for mutual TLS (`--peer-tls-cert`/`--peer-tls-key`, by
default the service's own `--tls-cert`/`--tls-key`). `peer_channel` and `auth_metadata` take that
`PeerAuth`, or, as before, a bare token (plaintext).

A peer's status code becomes the domain error the *caller's* caller should see, naming the field
of the original request that led to it (`spec.fabric`, `scenario.fabric`).
"""

from __future__ import annotations

import dataclasses
import ssl
from collections.abc import Sequence
from typing import Any

import grpc

from services.common.config import ServiceConfig
from services.common.errors import (
    AlreadyExists,
    FabricTwinError,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
    Unavailable,
)

__all__ = ["PeerAuth", "auth_metadata", "domain_error", "peer_auth", "peer_channel", "read_setting_file"]

_CHANNEL_OPTIONS = (
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
    # A DNS name (a Kubernetes headless Service) resolves to every replica; spread calls over them.
    ("grpc.lb_policy_name", "round_robin"),
)

_BY_CODE: dict[grpc.StatusCode, type[FabricTwinError]] = {
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExists,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
}


@dataclasses.dataclass(frozen=True)
class PeerAuth:
    """How a service proves itself to its peers and checks them: TLS material (PEM) and the token."""

    token: str = dataclasses.field(default="", repr=False)
    root_certificates: bytes | None = None  # set: TLS, peers verified against these
    private_key: bytes | None = dataclasses.field(default=None, repr=False)
    certificate_chain: bytes | None = None

    @property
    def tls(self) -> bool:
        return self.root_certificates is not None

    def credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(self.root_certificates, self.private_key, self.certificate_chain)


def read_setting_file(path: str, flag: str) -> bytes:
    """The bytes of a file a setting names (a certificate, a key); OSError naming the flag."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise OSError(f"{flag} {path}: cannot read ({exc.strerror})") from exc


def peer_auth(config: ServiceConfig) -> PeerAuth:
    """The peer settings of a service's configuration, files read and checked now (at start-up).

    ValueError names the flags of an incomplete or unusable setting; OSError an unreadable file.
    """
    cert_flag, key_flag = "--peer-tls-cert", "--peer-tls-key"
    cert, key = config.peer_tls_cert, config.peer_tls_key
    if bool(cert) != bool(key):
        missing = key_flag if cert else cert_flag
        raise ValueError(f"a peer client certificate needs {cert_flag} and {key_flag}; {missing} is not set")
    if not config.peer_tls_ca:
        return PeerAuth(token=config.auth_token)
    if not cert and config.tls_cert and config.tls_key:
        # One certificate per service serves both ends, as a service mesh's workload certificate does.
        cert, key, cert_flag, key_flag = config.tls_cert, config.tls_key, "--tls-cert", "--tls-key"
    # Read first (OSError names the flag), then check what was read is what it should be.
    root_certificates = read_setting_file(config.peer_tls_ca, "--peer-tls-ca")
    chain = read_setting_file(cert, cert_flag) if cert else None
    private_key = read_setting_file(key, key_flag) if cert else None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        context.load_verify_locations(cafile=config.peer_tls_ca)
    except ssl.SSLError as exc:
        problem = exc.reason or exc
        raise ValueError(f"--peer-tls-ca {config.peer_tls_ca} holds no PEM certificate ({problem})") from exc
    if cert:
        try:
            context.load_cert_chain(cert, key)
        except ssl.SSLError as exc:
            raise ValueError(
                f"{cert_flag} {cert} and {key_flag} {key} are not a PEM certificate and its private key "
                f"({exc.reason or exc})"
            ) from exc
    return PeerAuth(config.auth_token, root_certificates, private_key, chain)


def peer_channel(
    address: str,
    auth: PeerAuth | str | None = None,
    *,
    server_name: str = "",
    options: Sequence[tuple[str, Any]] = (),
) -> grpc.aio.Channel:
    """A channel to a peer: TLS when `auth` carries a CA, plaintext otherwise (or for a bare token).

    `server_name` is the name the peer's certificate must carry when `address` is an IP the name
    resolved to (a replica behind a headless Service); `options` adds channel arguments.
    """
    merged = [*_CHANNEL_OPTIONS, *options]
    if isinstance(auth, PeerAuth) and auth.tls:
        if server_name:
            merged.append(("grpc.ssl_target_name_override", server_name))
        return grpc.aio.secure_channel(address, auth.credentials(), options=merged)
    return grpc.aio.insecure_channel(address, options=merged)


def auth_metadata(auth: PeerAuth | str) -> tuple[tuple[str, str], ...]:
    """The bearer token a service forwards to its peers (all services share one token)."""
    token = auth.token if isinstance(auth, PeerAuth) else auth
    return (("authorization", f"Bearer {token}"),) if token else ()


def domain_error(exc: grpc.aio.AioRpcError, peer: str, field: str = "") -> FabricTwinError:
    """Map a peer's failure to a domain error; transport failures become Unavailable."""
    code, details = exc.code(), exc.details() or ""
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return InvalidArgument(field, f"rejected by the {peer} service: {details}")
    if code in _BY_CODE:
        return _BY_CODE[code](f"{field}: {details}" if field else details)
    return Unavailable(f"{peer} service: {code.name}: {details}")
