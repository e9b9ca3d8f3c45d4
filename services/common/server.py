"""The one server bootstrap every FabricTwin service uses.

`create_server` builds a started grpc.aio server with health checking, reflection, message-size
limits, keepalive, TLS or mutual TLS, bearer-token auth, error translation and Prometheus metrics;
`run_service` is what each `python -m services.<name>` calls: it configures logging, builds the
service's servicers, serves, and shuts down gracefully on SIGTERM/SIGINT (health NOT_SERVING first,
then `server.stop(grace)`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from services.common.auth import BearerTokenInterceptor
from services.common.config import ServiceConfig, load_config
from services.common.interceptors import ErrorInterceptor
from services.common.logs import configure_logging
from services.common.metrics import MetricsInterceptor, RpcMetrics, start_metrics_http

__all__ = ["RunningServer", "ServiceDefinition", "create_server", "run_service", "serving"]

log = logging.getLogger("fabrictwin.server")


@dataclasses.dataclass(frozen=True)
class ServiceDefinition:
    """One gRPC service to mount: its full name, its servicer, and the generated `add_*_to_server`."""

    full_name: str  # e.g. "fabrictwin.v1.TopologyService"
    servicer: Any
    add_to_server: Callable[[Any, grpc.aio.Server], None]


@dataclasses.dataclass
class RunningServer:
    """A started server and what a caller needs to talk to it or stop it."""

    server: grpc.aio.Server
    port: int
    health: health.aio.HealthServicer
    services: Sequence[ServiceDefinition]
    metrics: RpcMetrics
    metrics_port: int | None
    grace_seconds: float

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def stop(self, grace: float | None = None) -> None:
        """Report NOT_SERVING, then let in-flight calls finish for `grace` seconds."""
        for definition in self.services:
            await self.health.set(definition.full_name, health_pb2.HealthCheckResponse.NOT_SERVING)
        await self.health.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
        await self.server.stop(self.grace_seconds if grace is None else grace)


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def server_credentials(config: ServiceConfig) -> grpc.ServerCredentials | None:
    """TLS credentials when a certificate is configured; mutual TLS when a client CA is too."""
    if not config.tls_cert and not config.tls_key:
        if config.tls_client_ca:
            raise ValueError("--tls-client-ca needs --tls-cert and --tls-key")
        return None
    if not (config.tls_cert and config.tls_key):
        raise ValueError("TLS needs both --tls-cert and --tls-key")
    pair = [(_read(config.tls_key), _read(config.tls_cert))]
    if config.tls_client_ca:
        return grpc.ssl_server_credentials(
            pair, root_certificates=_read(config.tls_client_ca), require_client_auth=True
        )
    return grpc.ssl_server_credentials(pair)


async def create_server(config: ServiceConfig, services: Sequence[ServiceDefinition]) -> RunningServer:
    """Build, bind and start a server for `services`; port 0 binds any free port (tests)."""
    metrics = RpcMetrics()
    interceptors: list[grpc.aio.ServerInterceptor] = [MetricsInterceptor(metrics)]
    if config.auth_token:
        interceptors.append(BearerTokenInterceptor(config.auth_token))
    interceptors.append(ErrorInterceptor())
    options = [
        ("grpc.max_receive_message_length", config.max_message_bytes),
        ("grpc.max_send_message_length", config.max_message_bytes),
        ("grpc.keepalive_time_ms", config.keepalive_time_ms),
        ("grpc.keepalive_timeout_ms", config.keepalive_timeout_ms),
        ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.so_reuseport", 0),
    ]
    server = grpc.aio.server(interceptors=interceptors, options=options)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    for definition in services:
        definition.add_to_server(definition.servicer, server)
    names = [d.full_name for d in services]
    reflection.enable_server_reflection([*names, health.SERVICE_NAME, reflection.SERVICE_NAME], server)
    address = f"{config.host}:{config.port}"
    credentials = server_credentials(config)
    if credentials is None:
        port = server.add_insecure_port(address)
    else:
        port = server.add_secure_port(address, credentials)
    if port == 0:
        raise OSError(f"could not bind {address}")
    await server.start()
    for name in names:
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    await health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    metrics_port = None
    if config.metrics_port >= 0:
        metrics_port = start_metrics_http(metrics, config.host, config.metrics_port)
    return RunningServer(
        server, port, health_servicer, list(services), metrics, metrics_port, config.grace_seconds
    )


@contextlib.asynccontextmanager
async def serving(
    config: ServiceConfig, services: Sequence[ServiceDefinition]
) -> AsyncIterator[RunningServer]:
    """`async with serving(cfg, defs) as running:` for tests; stops with no grace on exit."""
    running = await create_server(config, services)
    try:
        yield running
    finally:
        await running.stop(0)


Cleanup = Callable[[], Awaitable[None]]
# Builds a service's servicers from its config; returns them and an optional cleanup coroutine
# (close the worker pool, dispose the database engine) run after the server has stopped.
ServicesFactory = Callable[[ServiceConfig], Awaitable[tuple[Sequence[ServiceDefinition], Cleanup | None]]]


async def _serve(config: ServiceConfig, build: ServicesFactory) -> None:
    services, cleanup = await build(config)
    running = await create_server(config, services)
    log.info(
        "serving",
        extra={
            "address": f"{config.host}:{running.port}",
            "metrics_port": running.metrics_port,
            "services": ",".join(d.full_name for d in services),
        },
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("shutting down", extra={"grace_seconds": config.grace_seconds})
    await running.stop()
    if cleanup is not None:
        await cleanup()
    log.info("stopped")


def run_service(
    service: str,
    build: ServicesFactory,
    argv: Sequence[str] | None = None,
    extra_flags: Callable[[Any], None] | None = None,
) -> None:
    """Entry point of `python -m services.<service>`."""
    config = load_config(service, argv, extra_flags=extra_flags)
    configure_logging(service, config.log_level, config.log_format)
    try:
        asyncio.run(_serve(config, build))
    except (ValueError, OSError) as exc:
        log.error("cannot start: %s", exc)
        raise SystemExit(2) from exc
