"""Prometheus metrics of every RPC, under the names stock gRPC dashboards read, and of the process.

The RPC families are go-grpc-prometheus's (grpc-ecosystem), so dashboards and alerts written for Go,
Java or C++ gRPC servers work unchanged:

- `grpc_server_started_total{grpc_type, grpc_service, grpc_method}`: calls begun.
- `grpc_server_handled_total{grpc_type, grpc_service, grpc_method, grpc_code}`: calls ended, by status.
- `grpc_server_handling_seconds{grpc_type, grpc_service, grpc_method}`: a histogram of call time.
- `grpc_server_msg_received_total` / `grpc_server_msg_sent_total{grpc_type, grpc_service,
  grpc_method}`: messages, which tell a stream's traffic apart from its calls.

`grpc_type` is unary, client_stream, server_stream or bidi_stream; `grpc_code` is Go's spelling of
the status (`OK`, `InvalidArgument`, `Canceled`, `Unauthenticated`), as those dashboards filter on it.
Calls refused by the bearer-token check are started and handled too, with their method's type from
the protobuf descriptors. `fabrictwin_rpc_requests_total{method, code}` (full method name, code as
grpc names it) stays for the tests that count calls by it.

Each registry also carries prometheus_client's process, platform and GC collectors
(`process_cpu_seconds_total`, `process_resident_memory_bytes`, `process_open_fds`,
`process_start_time_seconds`, `python_info`, `python_gc_*`), as the client's default registry would.

A grpc.aio server interceptor wraps each method handler; `start_metrics_http` exposes the registry
on `/metrics`. Each server gets its own CollectorRegistry so that several servers in one test process
do not collide.
"""

from __future__ import annotations

import asyncio
import inspect
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, NamedTuple
from wsgiref.simple_server import WSGIRequestHandler, make_server

import grpc
from google.protobuf import descriptor_pool
from prometheus_client import (
    GC_COLLECTOR,
    CollectorRegistry,
    Counter,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    make_wsgi_app,
)
from prometheus_client.exposition import ThreadingWSGIServer

from services.common.interceptors import Continuation, MethodHandler, ServicerContext, rewrap_handler

__all__ = ["GRPC_CODES", "MetricsHttp", "MetricsInterceptor", "RpcLabels", "RpcMetrics", "start_metrics_http"]

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_CALL = ("grpc_type", "grpc_service", "grpc_method")

# Status codes as Go's codes.Code.String() spells them: the values go-grpc-prometheus puts in grpc_code.
GRPC_CODES: dict[str, str] = {
    "OK": "OK",
    "CANCELLED": "Canceled",
    "UNKNOWN": "Unknown",
    "INVALID_ARGUMENT": "InvalidArgument",
    "DEADLINE_EXCEEDED": "DeadlineExceeded",
    "NOT_FOUND": "NotFound",
    "ALREADY_EXISTS": "AlreadyExists",
    "PERMISSION_DENIED": "PermissionDenied",
    "RESOURCE_EXHAUSTED": "ResourceExhausted",
    "FAILED_PRECONDITION": "FailedPrecondition",
    "ABORTED": "Aborted",
    "OUT_OF_RANGE": "OutOfRange",
    "UNIMPLEMENTED": "Unimplemented",
    "INTERNAL": "Internal",
    "UNAVAILABLE": "Unavailable",
    "DATA_LOSS": "DataLoss",
    "UNAUTHENTICATED": "Unauthenticated",
}


class RpcLabels(NamedTuple):
    """The labels that name one method: its streaming type, service and method (`GetFabric`)."""

    grpc_type: str
    grpc_service: str
    grpc_method: str

    @classmethod
    def of(cls, method: str, request_streaming: bool, response_streaming: bool) -> RpcLabels:
        """From a full method name (`/fabrictwin.v1.TopologyService/GetFabric`) and its streaming flags.

        >>> tuple(RpcLabels.of("/fabrictwin.v1.TopologyService/WatchFabric", False, True))
        ('server_stream', 'fabrictwin.v1.TopologyService', 'WatchFabric')
        """
        if request_streaming:
            kind = "bidi_stream" if response_streaming else "client_stream"
        else:
            kind = "server_stream" if response_streaming else "unary"
        service, _, name = method.removeprefix("/").rpartition("/")
        return cls(kind, service or name, name)

    @classmethod
    def described(cls, method: str) -> RpcLabels:
        """The labels of a method the server may not have resolved (a refused call): its streaming
        flags from the protobuf descriptors, unary where none describes it (`unknown`)."""
        full_name = method.removeprefix("/").replace("/", ".")
        try:
            descriptor = descriptor_pool.Default().FindMethodByName(full_name)
        except KeyError:
            return cls.of(method, False, False)
        return cls.of(method, descriptor.client_streaming, descriptor.server_streaming)


class RpcMetrics:
    """The metric families of one server, on its own registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        if GC_COLLECTOR is not None:  # None on interpreters without gc.get_stats()
            GCCollector(registry=self.registry)
        self.started = Counter("grpc_server_started", "Calls the server began", _CALL, registry=self.registry)
        self.handled = Counter(
            "grpc_server_handled",
            "Calls the server finished, by status code",
            [*_CALL, "grpc_code"],
            registry=self.registry,
        )
        self.handling = Histogram(
            "grpc_server_handling_seconds",
            "Seconds from the start of a call to its status",
            _CALL,
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.received = Counter(
            "grpc_server_msg_received", "Request messages the server read", _CALL, registry=self.registry
        )
        self.sent = Counter(
            "grpc_server_msg_sent", "Response messages the server sent", _CALL, registry=self.registry
        )
        # Kept for the tests that count calls by full method name (grpc_server_handled_total says the same).
        self.requests = Counter(
            "fabrictwin_rpc_requests", "RPCs handled", ["method", "code"], registry=self.registry
        )
        self._described: dict[str, RpcLabels] = {}

    def start(self, labels: RpcLabels) -> None:
        """A call of `labels`' method began."""
        self.started.labels(*labels).inc()

    def finish(self, method: str, labels: RpcLabels, code: str, seconds: float) -> None:
        """A call of `method` ended with status `code` (grpc's name, `INVALID_ARGUMENT`) after `seconds`."""
        self.handled.labels(*labels, GRPC_CODES.get(code, "Unknown")).inc()
        self.handling.labels(*labels).observe(seconds)
        self.requests.labels(method, code).inc()

    def observe(self, method: str, code: str, seconds: float) -> None:
        """A call of `method` that the server refused before resolving it: started and handled at once."""
        labels = self._described.get(method)
        if labels is None:
            labels = self._described.setdefault(method, RpcLabels.described(method))
        self.start(labels)
        self.finish(method, labels, code, seconds)


def _code_of(context: ServicerContext, default: str) -> str:
    code = context.code()
    if code is None:
        return default
    if isinstance(code, grpc.StatusCode):
        return code.name
    for status in grpc.StatusCode:
        if status.value[0] == code:
            return status.name
    return default


class _Measured:
    """What one handler's wrappers record against: the metrics and its method's labels and counters."""

    __slots__ = ("labels", "method", "metrics", "received", "sent")

    def __init__(self, metrics: RpcMetrics, method: str, labels: RpcLabels) -> None:
        self.metrics = metrics
        self.method = method
        self.labels = labels
        self.received = metrics.received.labels(*labels)
        self.sent = metrics.sent.labels(*labels)

    def counted(self, request: Any) -> Any:
        """The request, or its message stream counting each message as the servicer reads it."""
        if self.labels.grpc_type in ("client_stream", "bidi_stream") and hasattr(request, "__aiter__"):
            return self._counting(request)
        self.received.inc()
        return request

    async def _counting(self, requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
        async for request in requests:
            self.received.inc()
            yield request


class MetricsInterceptor(grpc.aio.ServerInterceptor):
    """Counts and times every call, its messages and its final status code."""

    def __init__(self, metrics: RpcMetrics) -> None:
        self.metrics = metrics
        self._measured: dict[str, _Measured] = {}

    async def intercept_service(
        self,
        continuation: Continuation,
        handler_call_details: grpc.HandlerCallDetails,
    ) -> MethodHandler | None:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        measured = self._measured.get(method)
        if measured is None:
            labels = RpcLabels.of(method, handler.request_streaming, handler.response_streaming)
            measured = self._measured.setdefault(method, _Measured(self.metrics, method, labels))
        return rewrap_handler(
            handler,
            method,
            lambda behavior, _method: _wrap_unary(behavior, measured),
            lambda behavior, _method: _wrap_streaming(behavior, measured),
        )


def _wrap_unary(behavior: Callable[..., Any], measured: _Measured) -> Callable[..., Any]:
    """A behaviour that returns its one response, or (as grpc's health Watch) a coroutine writing its
    stream with `context.write`, whose messages are not counted as sent."""

    async def wrapper(request: Any, context: ServicerContext) -> Any:
        measured.metrics.start(measured.labels)
        start = time.perf_counter()
        code = "UNKNOWN"
        try:
            result = behavior(measured.counted(request), context)
            if inspect.isawaitable(result):
                result = await result
            code = _code_of(context, "OK")
            if code == "OK" and measured.labels.grpc_type in ("unary", "client_stream"):
                measured.sent.inc()
            return result
        except asyncio.CancelledError:
            code = "CANCELLED"
            raise
        except BaseException:
            code = _failure_code(context)
            raise
        finally:
            measured.metrics.finish(measured.method, measured.labels, code, time.perf_counter() - start)

    return wrapper


def _wrap_streaming(behavior: Callable[..., Any], measured: _Measured) -> Callable[..., Any]:
    """A behaviour that is an async generator of responses."""

    async def wrapper(request: Any, context: ServicerContext) -> Any:
        measured.metrics.start(measured.labels)
        start = time.perf_counter()
        code = "UNKNOWN"
        try:
            async for item in behavior(measured.counted(request), context):
                measured.sent.inc()
                yield item
            code = _code_of(context, "OK")
        except (asyncio.CancelledError, GeneratorExit):
            # The caller went away mid-stream.
            code = "CANCELLED"
            raise
        except BaseException:
            code = _failure_code(context)
            raise
        finally:
            measured.metrics.finish(measured.method, measured.labels, code, time.perf_counter() - start)

    return wrapper


def _failure_code(context: ServicerContext) -> str:
    """The status an aborted or crashed call ended with; never OK."""
    code = _code_of(context, "UNKNOWN")
    return "UNKNOWN" if code == "OK" else code


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, *args: Any) -> None:
        """Scrapes are not worth a log line each."""


class MetricsHttp:
    """The `/metrics` HTTP endpoint of one server, in a daemon thread: its port, and `close()`."""

    # prometheus_client's start_http_server polls for shutdown every 0.5 s; a stop should not wait that long.
    _POLL_SECONDS = 0.05

    def __init__(self, metrics: RpcMetrics, host: str, port: int) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        server_class: type[ThreadingWSGIServer] = type(
            "MetricsServer", (ThreadingWSGIServer,), {"address_family": family}
        )
        bind_host = host.strip("[]") or "0.0.0.0"
        self._httpd = make_server(
            bind_host, port, make_wsgi_app(metrics.registry), server_class, handler_class=_QuietHandler
        )
        self.port: int = self._httpd.server_port
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": self._POLL_SECONDS},
            name=f"metrics-http-{self.port}",
            daemon=True,
        )
        self._thread.start()

    def close(self) -> None:
        """Stop serving and free the port."""
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


def start_metrics_http(metrics: RpcMetrics, host: str, port: int) -> MetricsHttp:
    """Serve `/metrics` over HTTP (port 0: any free port); `.port` is the bound port, `.close()` stops it."""
    return MetricsHttp(metrics, host, port)
