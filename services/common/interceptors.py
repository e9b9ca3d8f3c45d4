"""Server interceptors every FabricTwin server installs: domain-error translation.

`rewrap_handler` is the one place that knows how to wrap the four kinds of gRPC method handler;
the metrics, auth and error interceptors all use it.

The error interceptor also owns two ways a call can fail before or around the servicer:

- **a request that does not decode** (invalid UTF-8 in a string field, truncated bytes). grpc-python
  deserializes before any behaviour runs and answers UNKNOWN when that raises, so the interceptor
  swaps in a deserializer that returns an `_Undecodable` marker instead, and its behaviour wrapper
  answers INVALID_ARGUMENT naming the message type (and, in a client stream, the message's position).
- **a message too large to send**: a status message travels as an HTTP/2 header, and one beyond the
  peer's metadata limit (8-16 KiB) is refused, so the caller would see RESOURCE_EXHAUSTED about
  metadata instead of the error. Cores quote at most ~200 characters of input
  (`services.common.errors.quote`); as a safety net every status message is cut to
  MAX_DETAILS_BYTES on the wire, and what is logged to a few thousand characters.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import inspect
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeAlias

import grpc

from services.common.errors import FabricTwinError, excerpt

__all__ = [
    "LOG_CHARS",
    "MAX_DETAILS_BYTES",
    "Continuation",
    "ErrorInterceptor",
    "MethodHandler",
    "ServicerContext",
    "bounded_details",
    "rewrap_handler",
]

log = logging.getLogger("fabrictwin.rpc")

UnaryWrap = Callable[[Callable[..., Any], str], Callable[..., Any]]
# The handler of any one method, the continuation an interceptor gets to find it, and the context its
# behaviour runs in. grpc's classes are generic in their type stubs only, hence the quotes.
MethodHandler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"
Continuation: TypeAlias = "Callable[[grpc.HandlerCallDetails], Awaitable[MethodHandler | None]]"
ServicerContext: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"

# A status message's size on the wire (grpc-message, percent-encoded): well inside the 8 KiB soft
# metadata limit of grpc clients, with room for the other headers.
MAX_DETAILS_BYTES = 4096
# The most characters of an error's text that go into one log record.
LOG_CHARS = 2000
# A failed call's request at least this large is let go of at once (see `_release_soon`).
LARGE_REQUEST_BYTES = 1 << 20


def rewrap_handler(
    handler: MethodHandler | None,
    method: str,
    wrap_unary: UnaryWrap,
    wrap_streaming: UnaryWrap,
    request_deserializer: Callable[[bytes], Any] | None = None,
) -> MethodHandler | None:
    """Return `handler` with its behaviour wrapped (and its request deserializer, if one is given).

    Response-streaming behaviours that are async generators get `wrap_streaming`. Those written as a
    coroutine that calls `context.write()` (grpc's own health Watch is one) are awaited like a unary
    behaviour, so they get `wrap_unary`: iterating over a coroutine would fail every such call.
    """
    if handler is None:
        return None
    kwargs = {
        "request_deserializer": request_deserializer or handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    behavior: Callable[..., Any] | None
    if handler.response_streaming:
        behavior = handler.stream_stream if handler.request_streaming else handler.unary_stream
    else:
        behavior = handler.stream_unary if handler.request_streaming else handler.unary_unary
    # grpc's handler factories fill in exactly the behaviour that the two streaming flags name.
    assert behavior is not None, f"{method}: a method handler without the behaviour its flags name"
    if handler.response_streaming:
        wrap = wrap_unary if inspect.iscoroutinefunction(behavior) else wrap_streaming
        if handler.request_streaming:
            return grpc.stream_stream_rpc_method_handler(wrap(behavior, method), **kwargs)
        return grpc.unary_stream_rpc_method_handler(wrap(behavior, method), **kwargs)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(wrap_unary(behavior, method), **kwargs)
    return grpc.unary_unary_rpc_method_handler(wrap_unary(behavior, method), **kwargs)


def _wire_bytes(char: str) -> int:
    """Bytes `char` takes in a grpc-message header: printable ASCII but '%' as is, else %XX per byte."""
    if " " <= char <= "~" and char != "%":
        return 1
    return 3 * len(char.encode("utf-8", "replace"))


def bounded_details(text: str, limit: int = MAX_DETAILS_BYTES) -> str:
    """`text` as it may go out as a status message: whole if it fits in `limit` bytes on the wire,
    else its beginning and a marker saying how many characters were cut.

    >>> bounded_details("line 3: bad port")
    'line 3: bad port'
    >>> bounded_details("x" * 10_000, 60)
    'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx ... [9,968 characters cut]'
    """
    if 3 * len(text.encode("utf-8", "replace")) <= limit:
        return text
    budget = limit - len(f" ... [{len(text):,} characters cut]")
    used = 0
    for kept, char in enumerate(text):  # ends within `limit` characters: each costs at least a byte
        used += _wire_bytes(char)
        if used > budget:
            return f"{text[:kept]} ... [{len(text) - kept:,} characters cut]"
    return text


def _bounded_for_log(exc: BaseException) -> bool:
    """Cut the text of `exc` (and of the exceptions it chains) to LOG_CHARS, so that a traceback of an
    exception quoting a 10 MB input logs as a few KB. False if some text could not be cut."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        try:
            text = str(current)
        except Exception:  # a broken __str__: the traceback module copes with it on its own
            text = ""
        if len(text) > LOG_CHARS:
            try:
                current.args = (excerpt(text, LOG_CHARS),)
            except Exception:
                return False
            if len(str(current)) > 2 * LOG_CHARS:  # a __str__ that does not come from args
                return False
        current = current.__cause__ or current.__context__
    return True


async def _translate(exc: Exception, method: str, context: ServicerContext) -> None:
    """Abort the call with the status `exc` deserves; only domain errors reach the caller verbatim."""
    if isinstance(exc, FabricTwinError):
        code = getattr(grpc.StatusCode, exc.code, grpc.StatusCode.INTERNAL)
        level = logging.ERROR if code == grpc.StatusCode.INTERNAL else logging.INFO
        detail = str(exc)
        log.log(
            level,
            "rpc rejected",
            extra={"method": method, "code": code.name, "detail": excerpt(detail, LOG_CHARS)},
        )
        await context.abort(code, bounded_details(detail))
    if isinstance(exc, NotImplementedError):
        # What the generated base servicer raises for a method a service has not written yet.
        log.info("rpc unimplemented", extra={"method": method})
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"{method} is not implemented")
    incident = uuid.uuid4().hex[:12]
    if _bounded_for_log(exc):
        log.error("rpc failed", exc_info=exc, extra={"method": method, "incident": incident})
    else:
        error = excerpt(f"{type(exc).__name__}: {exc}", LOG_CHARS)
        log.error("rpc failed", extra={"method": method, "incident": incident, "error": error})
    await context.abort(grpc.StatusCode.INTERNAL, f"internal error (incident {incident}; see server log)")


# Requests that arrived large, by id() from their decoding until their call ends (bounded: a
# request whose call never ran is forgotten with the oldest).
_large_requests: collections.OrderedDict[int, int] = collections.OrderedDict()


def _release_soon(request: Any) -> None:
    """A failed call's frames hold its request in a reference cycle (the frames, the servicer context
    and the AbortError), which only Python's full collection breaks: a refused 61 MB request stayed
    in memory, and eight of them took a service from 147 to 729 MiB. After a request that arrived
    large fails, a full collection runs once the call has unwound. (Its size is the one seen when it
    was decoded: protobuf's ByteSize() would encode the message again to tell.)"""
    if _large_requests.pop(id(request), None) is not None:
        asyncio.get_running_loop().call_later(0.2, gc.collect)


def _forget(request: Any) -> None:
    _large_requests.pop(id(request), None)


class _Undecodable:
    """What a request that does not decode becomes, so that a behaviour wrapper can refuse it."""

    __slots__ = ("problem",)

    def __init__(self, problem: str) -> None:
        self.problem = problem


def _tolerant(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    """`deserializer`, returning an `_Undecodable` where it would raise (grpc would answer UNKNOWN)."""
    if deserializer is None:
        return None
    message_type = getattr(
        getattr(getattr(deserializer, "__self__", None), "DESCRIPTOR", None), "full_name", ""
    )
    expected = f"does not decode as {message_type}" if message_type else "does not decode"

    def deserialize(data: bytes) -> Any:
        try:
            message = deserializer(data)
            if len(data) >= LARGE_REQUEST_BYTES:
                _large_requests[id(message)] = len(data)
                while len(_large_requests) > 64:
                    _large_requests.popitem(last=False)
            return message
        except Exception as exc:  # DecodeError above all; any failure here is the request's
            reason = str(exc).rpartition("': ")[2] or type(exc).__name__
            return _Undecodable(f"{expected} ({excerpt(reason)})")

    return deserialize


async def _refuse_undecodable(request: Any, context: ServicerContext) -> Any:
    """The request, or its messages checked one by one as the servicer reads them (client streams)."""
    if isinstance(request, _Undecodable):
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"request: {request.problem}")
    if hasattr(request, "__aiter__"):
        return _checked_messages(request, context)
    return request


async def _checked_messages(requests: AsyncIterator[Any], context: ServicerContext) -> AsyncIterator[Any]:
    position = 0
    async for request in requests:
        position += 1
        if isinstance(request, _Undecodable):
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"request message {position}: {request.problem}"
            )
        yield request


class ErrorInterceptor(grpc.aio.ServerInterceptor):
    """Turns domain errors into status codes and unexpected exceptions into INTERNAL without a trace."""

    async def intercept_service(
        self,
        continuation: Continuation,
        handler_call_details: grpc.HandlerCallDetails,
    ) -> MethodHandler | None:
        handler = await continuation(handler_call_details)
        return rewrap_handler(
            handler,
            handler_call_details.method,
            self._wrap_unary,
            self._wrap_streaming,
            request_deserializer=_tolerant(handler.request_deserializer) if handler is not None else None,
        )

    @staticmethod
    def _wrap_unary(behavior: Callable[..., Any], method: str) -> Callable[..., Any]:
        async def wrapper(request: Any, context: ServicerContext) -> Any:
            try:
                request = await _refuse_undecodable(request, context)
                result = behavior(request, context)
                answer = await result if inspect.isawaitable(result) else result
                _forget(request)
                return answer
            except (grpc.aio.AbortError, grpc.aio.UsageError):
                _release_soon(request)
                raise
            except Exception as exc:
                _release_soon(request)
                await _translate(exc, method, context)

        return wrapper

    @staticmethod
    def _wrap_streaming(behavior: Callable[..., Any], method: str) -> Callable[..., Any]:
        async def wrapper(request: Any, context: ServicerContext) -> Any:
            try:
                request = await _refuse_undecodable(request, context)
                async for item in behavior(request, context):
                    yield item
            except (grpc.aio.AbortError, grpc.aio.UsageError):
                raise
            except Exception as exc:
                await _translate(exc, method, context)

        return wrapper
