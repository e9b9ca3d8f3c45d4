"""Prometheus metrics of every RPC (count, latency histogram, errors by status code).

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
from collections.abc import Callable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

import grpc
from prometheus_client import CollectorRegistry, Counter, Histogram, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from services.common.interceptors import Continuation, MethodHandler, ServicerContext, rewrap_handler

__all__ = ["MetricsHttp", "MetricsInterceptor", "RpcMetrics", "start_metrics_http"]

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class RpcMetrics:
    """The metric families of one server."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.requests = Counter(
            "fabrictwin_rpc_requests", "RPCs handled", ["method", "code"], registry=self.registry
        )
        self.errors = Counter(
            "fabrictwin_rpc_errors",
            "RPCs that ended with a non-OK status",
            ["method", "code"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "fabrictwin_rpc_latency_seconds",
            "RPC handling time",
            ["method"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )

    def observe(self, method: str, code: str, seconds: float) -> None:
        self.requests.labels(method, code).inc()
        if code != "OK":
            self.errors.labels(method, code).inc()
        self.latency.labels(method).observe(seconds)


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


class MetricsInterceptor(grpc.aio.ServerInterceptor):
    """Times every call and records its final status code."""

    def __init__(self, metrics: RpcMetrics) -> None:
        self.metrics = metrics

    async def intercept_service(
        self,
        continuation: Continuation,
        handler_call_details: grpc.HandlerCallDetails,
    ) -> MethodHandler | None:
        return rewrap_handler(
            await continuation(handler_call_details),
            handler_call_details.method,
            self._wrap_unary,
            self._wrap_streaming,
        )

    def _wrap_unary(self, behavior: Callable[..., Any], method: str) -> Callable[..., Any]:
        async def wrapper(request: Any, context: ServicerContext) -> Any:
            start = time.perf_counter()
            code = "UNKNOWN"
            try:
                result = behavior(request, context)
                if inspect.isawaitable(result):
                    result = await result
                code = _code_of(context, "OK")
                return result
            except asyncio.CancelledError:
                code = "CANCELLED"
                raise
            except BaseException:
                code = _failure_code(context)
                raise
            finally:
                self.metrics.observe(method, code, time.perf_counter() - start)

        return wrapper

    def _wrap_streaming(self, behavior: Callable[..., Any], method: str) -> Callable[..., Any]:
        async def wrapper(request: Any, context: ServicerContext) -> Any:
            start = time.perf_counter()
            code = "UNKNOWN"
            try:
                async for item in behavior(request, context):
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
                self.metrics.observe(method, code, time.perf_counter() - start)

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
