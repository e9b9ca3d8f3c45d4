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
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from services.common.auth import BearerTokenInterceptor
from services.common.config import ServiceConfig, load_config
from services.common.interceptors import ErrorInterceptor
from services.common.logs import configure_logging
from services.common.metrics import MetricsHttp, MetricsInterceptor, RpcMetrics, start_metrics_http
from services.common.peers import read_setting_file

__all__ = [
    "HealthSetter",
    "ReportsHealth",
    "RunningServer",
    "ServiceDefinition",
    "create_server",
    "run_service",
    "serving",
]

log = logging.getLogger("fabrictwin.server")


@dataclasses.dataclass(frozen=True)
class ServiceDefinition:
    """One gRPC service to mount: its full name, its servicer, and the generated `add_*_to_server`."""

    full_name: str  # e.g. "fabrictwin.v1.TopologyService"
    servicer: Any
    add_to_server: Callable[[Any, grpc.aio.Server], None]


_WILDCARD_HOSTS = ("", "0.0.0.0", "::", "[::]")

HealthSetter = Callable[[bool], Awaitable[None]]  # True: SERVING, False: NOT_SERVING


@runtime_checkable
class ReportsHealth(Protocol):
    """A servicer that can lose what it needs to work (its database, its workers) and says so.

    `create_server` calls `watch_health` once the server serves, with a coroutine function that
    reports the service SERVING (True) or NOT_SERVING (False). Once shutdown has begun the status
    stays NOT_SERVING whatever is reported.
    """

    def watch_health(self, set_serving: HealthSetter) -> None: ...


def _health_setter(health_servicer: health.aio.HealthServicer, name: str) -> HealthSetter:
    async def set_serving(serving: bool) -> None:
        status = (
            health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        await health_servicer.set(name, status)
        await health_servicer.set("", status)  # one service per server: the server is its service

    return set_serving


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
    host: str = "127.0.0.1"
    metrics_http: MetricsHttp | None = None
    drain_seconds: float = 0.0

    @property
    def address(self) -> str:
        """Where a client on this machine reaches the server (loopback when bound to every interface)."""
        host = "127.0.0.1" if self.host in _WILDCARD_HOSTS else self.host
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return f"{host}:{self.port}"

    async def stop(self, grace: float | None = None) -> None:
        """Report NOT_SERVING for every service, then let in-flight calls finish for `grace` seconds.

        Health Watch streams see NOT_SERVING at once and the status can no longer be set back to
        SERVING. For `drain_seconds` the server keeps accepting calls, so a prober polling Check reads
        NOT_SERVING; after that new calls are refused and in-flight ones get `grace` to finish.
        """
        await self.health.enter_graceful_shutdown()
        if self.drain_seconds > 0:
            # Still accepting calls: a prober polling Check now reads NOT_SERVING, not a refusal.
            await asyncio.sleep(self.drain_seconds)
        metrics_http, self.metrics_http = self.metrics_http, None
        try:
            await self.server.stop(self.grace_seconds if grace is None else grace)
        finally:
            if metrics_http is not None:
                await asyncio.to_thread(metrics_http.close)  # joins a thread: off the event loop


def _check_tls_files(config: ServiceConfig) -> None:
    """Fail at start-up, naming the flags, rather than with grpc's "failed to bind" or at the first call."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(config.tls_cert, config.tls_key)
    except ssl.SSLError as exc:
        raise ValueError(
            f"--tls-cert {config.tls_cert} and --tls-key {config.tls_key} are not a PEM certificate and "
            f"its private key ({exc.reason or exc})"
        ) from exc
    if config.tls_client_ca:
        try:
            context.load_verify_locations(cafile=config.tls_client_ca)
        except ssl.SSLError as exc:
            raise ValueError(
                f"--tls-client-ca {config.tls_client_ca} holds no PEM certificate ({exc.reason or exc})"
            ) from exc


def server_credentials(config: ServiceConfig) -> grpc.ServerCredentials | None:
    """TLS credentials when a certificate is configured; mutual TLS when a client CA is too.

    ValueError when the configuration is incomplete or the files are not a matching certificate and key;
    OSError naming the flag when a file cannot be read.
    """
    if not config.tls_cert and not config.tls_key:
        if config.tls_client_ca:
            raise ValueError("--tls-client-ca needs --tls-cert and --tls-key")
        return None
    if not (config.tls_cert and config.tls_key):
        missing = "--tls-key" if config.tls_cert else "--tls-cert"
        raise ValueError(f"TLS needs both --tls-cert and --tls-key; {missing} is not set")
    pair = [
        (read_setting_file(config.tls_key, "--tls-key"), read_setting_file(config.tls_cert, "--tls-cert"))
    ]
    client_ca = read_setting_file(config.tls_client_ca, "--tls-client-ca") if config.tls_client_ca else None
    _check_tls_files(config)
    if client_ca is not None:
        return grpc.ssl_server_credentials(pair, root_certificates=client_ca, require_client_auth=True)
    return grpc.ssl_server_credentials(pair)


async def create_server(config: ServiceConfig, services: Sequence[ServiceDefinition]) -> RunningServer:
    """Build, bind and start a server for `services`; port 0 binds any free port (tests).

    Raises ValueError for an inconsistent TLS configuration and OSError for an unreadable certificate
    or a port that cannot be bound.
    """
    credentials = server_credentials(config)
    metrics = RpcMetrics()
    interceptors: list[grpc.aio.ServerInterceptor] = []
    # --- auth: first, on the headers, so a refused call costs no parsing and gets the same answer
    # for any method name; its refusals are counted here (served method, or one "unknown" label).
    if config.auth_token:

        def count_refusal(method: str, code: grpc.StatusCode) -> None:
            metrics.observe(method, code.name, 0.0)

        interceptors.append(
            BearerTokenInterceptor(config.auth_token, config.read_only_token, on_refusal=count_refusal)
        )
    # --- end auth
    interceptors += [MetricsInterceptor(metrics), ErrorInterceptor()]
    options = [
        ("grpc.max_receive_message_length", config.max_message_bytes),
        ("grpc.max_send_message_length", config.max_message_bytes),
        ("grpc.keepalive_time_ms", config.keepalive_time_ms),
        ("grpc.keepalive_timeout_ms", config.keepalive_timeout_ms),
        # The least interval at which clients may ping an idle connection before they are told to stop.
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
    try:
        if credentials is None:
            port = server.add_insecure_port(address)
        else:
            port = server.add_secure_port(address, credentials)
    except RuntimeError as exc:  # grpc raises RuntimeError("Failed to bind ...") when the port is taken
        raise OSError(f"cannot bind {address}: {exc}") from exc
    if port == 0:
        raise OSError(f"cannot bind {address}")
    await server.start()
    try:
        for name in names:
            await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
        await health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
        for definition in services:
            if isinstance(definition.servicer, ReportsHealth):
                definition.servicer.watch_health(_health_setter(health_servicer, definition.full_name))
        metrics_http = None
        if config.metrics_port >= 0:
            metrics_http = start_metrics_http(metrics, config.host, config.metrics_port)
    except BaseException:
        await server.stop(0)
        raise
    return RunningServer(
        server,
        port,
        health_servicer,
        list(services),
        metrics,
        None if metrics_http is None else metrics_http.port,
        config.grace_seconds,
        host=config.host,
        drain_seconds=config.drain_seconds,
        metrics_http=metrics_http,
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
    # Handlers first: a SIGTERM that arrives while the service builds, or just after "serving" is
    # logged, must still mean a graceful stop rather than death by the default handler.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    services, cleanup = await build(config)
    try:
        running = await create_server(config, services)
        log.info(
            "serving",
            extra={
                "address": f"{config.host}:{running.port}",
                "port": running.port,
                "metrics_port": running.metrics_port,
                "services": ",".join(d.full_name for d in services),
            },
        )
        await stop.wait()
        log.info("shutting down", extra={"grace_seconds": config.grace_seconds})
        await running.stop()
    finally:
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
