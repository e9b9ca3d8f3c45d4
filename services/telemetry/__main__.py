"""`python -m services.telemetry`: the telemetry service on SQLite (default) or PostgreSQL.

The database comes from --database-url / FABRICTWIN_DATABASE_URL, else SQLite under --data-dir.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from fabrictwin.v1 import telemetry_pb2_grpc

from services.common.config import ServiceConfig
from services.common.server import Cleanup, ServiceDefinition, run_service
from services.telemetry.servicer import TelemetryServicer
from services.telemetry.store import TelemetryStore

__all__ = ["build", "main"]

SERVICE_NAME = "fabrictwin.v1.TelemetryService"


async def build(config: ServiceConfig) -> tuple[list[ServiceDefinition], Cleanup]:
    """The telemetry servicer on its store, and the cleanup that closes the store's engine."""
    store = await asyncio.to_thread(TelemetryStore.open, config.resolved_database_url())

    async def cleanup() -> None:
        await asyncio.to_thread(store.close)

    definition = ServiceDefinition(
        SERVICE_NAME, TelemetryServicer(store), telemetry_pb2_grpc.add_TelemetryServiceServicer_to_server
    )
    return [definition], cleanup


def main(argv: Sequence[str] | None = None) -> None:
    """Serve until SIGTERM or Ctrl-C."""
    run_service("telemetry", build, argv)


if __name__ == "__main__":
    main()
