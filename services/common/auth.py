"""Bearer-token authentication and roles for every RPC except health checking.

The full token may call every method; an optional read-only token may call only reads, told apart
by method name (`is_read_method`). The check runs on the call's headers, before a byte of the
request body is read: a refused call gets one generic handler whatever its method name, so a caller
without a token cannot tell served methods from invented ones, and nothing of the body is parsed.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Sequence

import grpc

from services.common.interceptors import Continuation, MethodHandler, ServicerContext

__all__ = ["EXEMPT_PREFIXES", "UNKNOWN_METHOD", "BearerTokenInterceptor", "is_read_method"]

# Health checks must work for kubelet probes and load balancers that carry no token; reflection is
# left protected (it discloses the API surface).
EXEMPT_PREFIXES = ("/grpc.health.v1.Health/",)

# How a refusal of a method the server does not serve is reported to `on_refusal` (one metrics
# label for every invented name, so enumerating names cannot grow the metrics without bound).
UNKNOWN_METHOD = "unknown"

# A read's method name starts with one of these words (`GetFabric`, `TopLinks`), or is listed whole.
READ_PREFIXES = ("Get", "List", "Watch", "Query", "Top", "Export", "Compare", "Stream")
READ_METHODS = frozenset({"Diagnose"})
READ_SERVICES = frozenset(
    {
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
        "grpc.reflection.v1.ServerReflection",
    }
)

_UNAUTHENTICATED = "missing or invalid bearer token (metadata `authorization: Bearer <token>`)"
_READ_ONLY = (
    "the read-only token may call reads only (Get*, List*, Watch*, Query*, Top*, Export*, Compare*, "
    "Stream*, Diagnose); this method creates, changes or deletes"
)

RefusalObserver = Callable[[str, grpc.StatusCode], None]


def is_read_method(method: str) -> bool:
    """True when the full method name (`/fabrictwin.v1.TopologyService/GetFabric`) is a read.

    Reads: health and reflection, `Diagnose`, and names made of a read word and a capitalised rest
    (`GetFabric`, `ListLinks`, `WatchRun`, `QuerySeries`, `TopLinks`, `ExportFabric`, `CompareRuns`,
    `StreamFabricSnapshot`). Everything else, unknown names included, is a write.

    >>> is_read_method("/fabrictwin.v1.TopologyService/ListLinks"), is_read_method("/x.S/Listen")
    (True, False)
    """
    service, slash, name = method.removeprefix("/").partition("/")
    if not method.startswith("/") or not slash or not name or "/" in name:
        return False
    if service in READ_SERVICES or name in READ_METHODS:
        return True
    return any(name.startswith(word) and name[len(word) : len(word) + 1].isupper() for word in READ_PREFIXES)


def _refusal(code: grpc.StatusCode, message: str) -> MethodHandler:
    """A handler that answers any kind of call with `code`, reading none of its request."""

    async def refuse(_requests: object, context: ServicerContext) -> None:
        await context.abort(code, message)

    # Streaming both ways and without a deserializer: grpc hands it no parsed message, and on the
    # wire it answers unary and streaming callers alike.
    return grpc.stream_stream_rpc_method_handler(refuse)


class BearerTokenInterceptor(grpc.aio.ServerInterceptor):
    """UNAUTHENTICATED without a valid token; PERMISSION_DENIED for a write with the read-only token.

    `on_refusal(method, code)` is told of each refusal, with `UNKNOWN_METHOD` for a method the
    server does not serve (the metrics of refused calls).
    """

    def __init__(
        self, token: str, read_only_token: str = "", on_refusal: RefusalObserver | None = None
    ) -> None:
        self._full = token.encode()
        self._read_only = read_only_token.encode() if read_only_token else None
        self._on_refusal = on_refusal
        self._unauthenticated = _refusal(grpc.StatusCode.UNAUTHENTICATED, _UNAUTHENTICATED)
        self._permission_denied = _refusal(grpc.StatusCode.PERMISSION_DENIED, _READ_ONLY)

    def _token(self, metadata: Sequence[tuple[str, str | bytes]] | None) -> bytes | None:
        supplied = dict(metadata or ()).get("authorization", "")
        if isinstance(supplied, bytes):
            supplied = supplied.decode("latin-1")
        scheme, _, token = supplied.strip().partition(" ")
        # The scheme is case-insensitive (RFC 7235).
        return token.strip().encode() if scheme.lower() == "bearer" else None

    async def intercept_service(
        self,
        continuation: Continuation,
        handler_call_details: grpc.HandlerCallDetails,
    ) -> MethodHandler | None:
        method = handler_call_details.method or ""
        if method.startswith(EXEMPT_PREFIXES):
            return await continuation(handler_call_details)
        token = self._token(handler_call_details.invocation_metadata)
        # Tokens are compared in constant time.
        full = token is not None and hmac.compare_digest(token, self._full)
        read_only = (
            token is not None and self._read_only is not None and hmac.compare_digest(token, self._read_only)
        )
        if full or (read_only and is_read_method(method)):
            return await continuation(handler_call_details)
        if read_only:
            code, handler = grpc.StatusCode.PERMISSION_DENIED, self._permission_denied
        else:
            code, handler = grpc.StatusCode.UNAUTHENTICATED, self._unauthenticated
        if self._on_refusal is not None:
            served = await continuation(handler_call_details) is not None
            self._on_refusal(method if served else UNKNOWN_METHOD, code)
        return handler
