"""Fixtures of the topology tests: a real TopologyService on port 0 over SQLite in a temporary directory."""

from __future__ import annotations

import contextlib
import pathlib
from collections.abc import AsyncIterator

import grpc
import pytest
from fabrictwin.v1 import topology_pb2_grpc

from services.common.config import ServiceConfig
from services.common.server import serving
from services.topology.__main__ import build


@contextlib.asynccontextmanager
async def topology_server(database: pathlib.Path) -> AsyncIterator[topology_pb2_grpc.TopologyServiceStub]:
    """A stub of a real topology server on the SQLite `database` (built as `python -m
    services.topology` builds it), stopped when the block ends: start it again on the same file to
    see what a restart keeps."""
    config = ServiceConfig(service="topology", port=0, database_url=f"sqlite:///{database}")
    services, cleanup = await build(config)
    try:
        async with (
            serving(config, services) as running,
            grpc.aio.insecure_channel(running.address) as channel,
        ):
            yield topology_pb2_grpc.TopologyServiceStub(channel)
    finally:
        await cleanup()


@pytest.fixture
async def topology(tmp_path):
    """A stub of a real topology server (built as `python -m services.topology` builds it)."""
    async with topology_server(tmp_path / "topology.db") as stub:
        yield stub


# Small enough that a test reaches every limit with a request of a few KB.
SMALL_LIMITS = {"max_fabric_nodes": 40, "max_fabric_links": 60, "max_label_bytes": 100}


@pytest.fixture
async def small_topology(tmp_path):
    """A real topology server configured (as by --max-fabric-nodes etc.) with SMALL_LIMITS."""
    config = ServiceConfig(
        service="topology",
        port=0,
        database_url=f"sqlite:///{tmp_path / 'topology.db'}",
        extra=SMALL_LIMITS,
    )
    services, cleanup = await build(config)
    async with serving(config, services) as running, grpc.aio.insecure_channel(running.address) as channel:
        yield topology_pb2_grpc.TopologyServiceStub(channel)
    await cleanup()
