"""Prometheus metrics of every RPC (count, latency histogram, errors by status code).

A grpc.aio server interceptor wraps each method handler; `start_metrics_http` exposes the registry
on `/metrics`. Each server gets its own CollectorRegistry so that several servers in one test process
do not collide.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server

from services.common.interceptors import rewrap_handler

__all__ = ["MetricsInterceptor", "RpcMetrics", "start_metrics_http"]

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


def _code_of(context: grpc.aio.ServicerContext, default: str) -> str:
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
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        return rewrap_handler(
            await continuation(handler_call_details),
            handler_call_details.method,
            self._wrap_unary,
            self._wrap_streaming,
        )

    def _wrap_unary(self, behavior: Callable[..., Any], method: str) -> Callable[..., Any]:
        async def wrapper(request: Any, context: grpc.aio.ServicerContext) -> Any:
            start = time.perf_counter()
            code = "OK"
            try:
                result = behavior(request, context)
                if hasattr(result, "__await__"):
                    result = await result
                code = _code_of(context, "OK")
                return result
            except grpc.aio.AbortError:
                code = _code_of(context, "UNKNOWN")
                raise
            except BaseException:
                code = _code_of(context, "UNKNOWN")
                if code == "OK":
                    code = "UNKNOWN"
                raise
            finally:
                self.metrics.observe(method, code, time.perf_counter() - start)

        return wrapper

    def _wrap_streaming(self, behavior: Callable[..., Any], method: str) -> Callable[..., Any]:
        async def wrapper(request: Any, context: grpc.aio.ServicerContext) -> Any:
            start = time.perf_counter()
            code = "OK"
            try:
                async for item in behavior(request, context):
                    yield item
                code = _code_of(context, "OK")
            except grpc.aio.AbortError:
                code = _code_of(context, "UNKNOWN")
                raise
            except BaseException:
                code = _code_of(context, "CANCELLED")
                if code == "OK":
                    code = "CANCELLED"
                raise
            finally:
                self.metrics.observe(method, code, time.perf_counter() - start)

        return wrapper


def start_metrics_http(metrics: RpcMetrics, host: str, port: int) -> int:
    """Serve `/metrics` over HTTP in a daemon thread; returns the bound port."""
    server, _thread = start_http_server(port, addr=host, registry=metrics.registry)
    return server.server_port
