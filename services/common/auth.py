"""Optional bearer-token authentication for every RPC except health checking."""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from services.common.interceptors import rewrap_handler

__all__ = ["EXEMPT_PREFIXES", "BearerTokenInterceptor"]

# Health checks must work for kubelet probes and load balancers that carry no token; reflection is
# left protected (it discloses the API surface).
EXEMPT_PREFIXES = ("/grpc.health.v1.Health/",)


class BearerTokenInterceptor(grpc.aio.ServerInterceptor):
    """Rejects calls without `authorization: Bearer <token>` with UNAUTHENTICATED."""

    def __init__(self, token: str) -> None:
        self._expected = token.encode()

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        method = handler_call_details.method or ""
        if method.startswith(EXEMPT_PREFIXES):
            return await continuation(handler_call_details)
        metadata = dict(handler_call_details.invocation_metadata or ())
        supplied = metadata.get("authorization", "")
        if isinstance(supplied, bytes):
            supplied = supplied.decode("latin-1")
        scheme, _, token = supplied.strip().partition(" ")
        # The scheme is case-insensitive (RFC 7235); the token is compared in constant time.
        if scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), self._expected):
            return await continuation(handler_call_details)
        return rewrap_handler(await continuation(handler_call_details), method, _deny_unary, _deny_streaming)


_DENIED = "missing or invalid bearer token (metadata `authorization: Bearer <token>`)"


def _deny_unary(_behavior: Callable[..., Any], _method: str) -> Callable[..., Any]:
    async def deny(_request: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, _DENIED)

    return deny


def _deny_streaming(_behavior: Callable[..., Any], _method: str) -> Callable[..., Any]:
    async def deny(_request: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, _DENIED)
        yield  # pragma: no cover - makes this an async generator, as streaming handlers must be

    return deny
