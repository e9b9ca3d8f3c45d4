"""Fixtures of the SDK tests: real FabricTwin servers on port 0, served from a background thread.

The SDK is synchronous (blocking gRPC channels) and the servers are grpc.aio: a blocking call from the
test thread into a server on the same event loop would deadlock, so each server runs its own event
loop in a thread (`BackgroundServer`), built exactly as `python -m services.<name>` builds it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

import pytest

from services.common.config import ServiceConfig
from services.common.server import ServiceDefinition, serving

Build = Callable[[ServiceConfig], Awaitable[tuple[Sequence[ServiceDefinition], Any]]]


class BackgroundServer:
    """`with BackgroundServer(build, config) as server:` serves `build(config)` at `server.address`."""

    def __init__(self, build: Build, config: ServiceConfig) -> None:
        self._build = build
        self._config = config
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"server-{config.service}", daemon=True)
        self.address = ""

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._serve())
        except BaseException as exc:  # reported to the test thread by __enter__
            self._error = exc
        finally:
            self._ready.set()
            self._loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        definitions, cleanup = await self._build(self._config)
        try:
            async with serving(self._config, definitions) as running:
                self.address = running.address
                self._ready.set()
                await self._stop.wait()
        finally:
            if cleanup is not None:
                await cleanup()

    def __enter__(self) -> BackgroundServer:
        self._thread.start()
        if not self._ready.wait(120):
            raise TimeoutError(f"{self._config.service} did not start within 120 s")
        if self._error is not None:
            raise RuntimeError(f"{self._config.service} failed to start") from self._error
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._stop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(60)


def definitions_build(definitions: Sequence[ServiceDefinition]) -> Build:
    """A build function serving fixed definitions (test doubles) with no cleanup."""

    async def build(_config: ServiceConfig) -> tuple[Sequence[ServiceDefinition], None]:
        return definitions, None

    return build


def config(service: str, data_dir: str, **overrides: Any) -> ServiceConfig:
    """A port-0 config with SQLite under `data_dir`."""
    return dataclasses.replace(ServiceConfig(service=service, port=0, data_dir=data_dir), **overrides)


@pytest.fixture
def serve() -> Iterator[Callable[[Build, ServiceConfig], BackgroundServer]]:
    """Start BackgroundServers that stop at the end of the test."""
    started: list[BackgroundServer] = []

    def start(build: Build, cfg: ServiceConfig) -> BackgroundServer:
        server = BackgroundServer(build, cfg).__enter__()
        started.append(server)
        return server

    yield start
    for server in reversed(started):
        server.__exit__(None, None, None)


@pytest.fixture
def services(tmp_path: Any) -> Iterator[dict[str, str]]:
    """A topology and a telemetry service (maintenance off) on one data directory: their addresses."""
    from services.telemetry.__main__ import build as build_telemetry
    from services.topology.__main__ import build as build_topology

    data = str(tmp_path / "data")
    with BackgroundServer(build_topology, config("topology", data)) as topology:
        telemetry_config = config(
            "telemetry", data, topology_address=topology.address, extra={"maintenance_interval_seconds": 0}
        )
        with BackgroundServer(build_telemetry, telemetry_config) as telemetry:
            yield {"topology": topology.address, "telemetry": telemetry.address}
