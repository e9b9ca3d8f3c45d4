"""Calls from one FabricTwin service to another: channels, credentials, and error mapping.

A peer's status code becomes the domain error the *caller's* caller should see, naming the field
of the original request that led to it (`spec.fabric`, `scenario.fabric`).
"""

from __future__ import annotations

import grpc

from services.common.errors import (
    AlreadyExists,
    FabricTwinError,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
    Unavailable,
)

__all__ = ["auth_metadata", "domain_error", "peer_channel"]

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


def peer_channel(address: str) -> grpc.aio.Channel:
    """An insecure channel to a peer on the cluster network (TLS between peers is not configured yet)."""
    return grpc.aio.insecure_channel(address, options=_CHANNEL_OPTIONS)


def auth_metadata(auth_token: str) -> tuple[tuple[str, str], ...]:
    """The bearer token a service forwards to its peers (all services share one token)."""
    return (("authorization", f"Bearer {auth_token}"),) if auth_token else ()


def domain_error(exc: grpc.aio.AioRpcError, peer: str, field: str = "") -> FabricTwinError:
    """Map a peer's failure to a domain error; transport failures become Unavailable."""
    code, details = exc.code(), exc.details() or ""
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return InvalidArgument(field, f"rejected by the {peer} service: {details}")
    if code in _BY_CODE:
        return _BY_CODE[code](f"{field}: {details}" if field else details)
    return Unavailable(f"{peer} service: {code.name}: {details}")
