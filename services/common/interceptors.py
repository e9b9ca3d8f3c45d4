"""Server interceptors every FabricTwin server installs: domain-error translation.

`rewrap_handler` is the one place that knows how to wrap the four kinds of gRPC method handler;
the metrics, auth and error interceptors all use it.
"""

from __future__ import annotations

import inspect
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from services.common.errors import FabricTwinError

__all__ = ["ErrorInterceptor", "rewrap_handler"]

log = logging.getLogger("fabrictwin.rpc")

UnaryWrap = Callable[[Callable[..., Any], str], Callable[..., Any]]


def rewrap_handler(
    handler: grpc.RpcMethodHandler | None, method: str, wrap_unary: UnaryWrap, wrap_streaming: UnaryWrap
) -> grpc.RpcMethodHandler | None:
    """Return `handler` with its behaviour wrapped.

    Response-streaming behaviours that are async generators get `wrap_streaming`. Those written as a
    coroutine that calls `context.write()` (grpc's own health Watch is one) are awaited like a unary
    behaviour, so they get `wrap_unary`: iterating over a coroutine would fail every such call.
    """
    if handler is None:
        return None
    kwargs = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.response_streaming:
        behavior = handler.stream_stream if handler.request_streaming else handler.unary_stream
        wrap = wrap_unary if inspect.iscoroutinefunction(behavior) else wrap_streaming
        if handler.request_streaming:
            return grpc.stream_stream_rpc_method_handler(wrap(behavior, method), **kwargs)
        return grpc.unary_stream_rpc_method_handler(wrap(behavior, method), **kwargs)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(wrap_unary(handler.stream_unary, method), **kwargs)
    return grpc.unary_unary_rpc_method_handler(wrap_unary(handler.unary_unary, method), **kwargs)


async def _translate(exc: Exception, method: str, context: grpc.aio.ServicerContext) -> None:
    """Abort the call with the status `exc` deserves; only domain errors reach the caller verbatim."""
    if isinstance(exc, FabricTwinError):
        code = getattr(grpc.StatusCode, exc.code, grpc.StatusCode.INTERNAL)
        level = logging.ERROR if code == grpc.StatusCode.INTERNAL else logging.INFO
        log.log(level, "rpc rejected", extra={"method": method, "code": code.name, "detail": str(exc)})
        await context.abort(code, str(exc))
    if isinstance(exc, NotImplementedError):
        # What the generated base servicer raises for a method a service has not written yet.
        log.info("rpc unimplemented", extra={"method": method})
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"{method} is not implemented")
    incident = uuid.uuid4().hex[:12]
    log.error("rpc failed", exc_info=exc, extra={"method": method, "incident": incident})
    await context.abort(grpc.StatusCode.INTERNAL, f"internal error (incident {incident}; see server log)")


class ErrorInterceptor(grpc.aio.ServerInterceptor):
    """Turns domain errors into status codes and unexpected exceptions into INTERNAL without a trace."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        return rewrap_handler(
            await continuation(handler_call_details),
            handler_call_details.method,
            self._wrap_unary,
            self._wrap_streaming,
        )

    @staticmethod
    def _wrap_unary(behavior: Callable[..., Any], method: str) -> Callable[..., Any]:
        async def wrapper(request: Any, context: grpc.aio.ServicerContext) -> Any:
            try:
                result = behavior(request, context)
                return await result if inspect.isawaitable(result) else result
            except (grpc.aio.AbortError, grpc.aio.UsageError):
                raise
            except Exception as exc:
                await _translate(exc, method, context)

        return wrapper

    @staticmethod
    def _wrap_streaming(behavior: Callable[..., Any], method: str) -> Callable[..., Any]:
        async def wrapper(request: Any, context: grpc.aio.ServicerContext) -> Any:
            try:
                async for item in behavior(request, context):
                    yield item
            except (grpc.aio.AbortError, grpc.aio.UsageError):
                raise
            except Exception as exc:
                await _translate(exc, method, context)

        return wrapper
