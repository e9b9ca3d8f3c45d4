"""`python -m services.telemetry`: the telemetry service on SQLite (default) or PostgreSQL.

The database comes from --database-url / FABRICTWIN_DATABASE_URL, else SQLite under --data-dir; it
is migrated to the schema's head on start. Service flags (each also FABRICTWIN_<NAME>):

- --ingest-parallelism: batch transactions in flight per ingest stream (default 2 on PostgreSQL;
  SQLite has one writer, so 1 there);
- --maintenance-interval-seconds: how often every source is rolled up and its retention applied
  (default 60; 0 turns the sweep off);
- --max-points: points per query response (default 1,000,000);
- --query-threads: queries answered at once, each on a thread and a database connection of its own
  (default 6); writes get --ingest-parallelism + 1 threads of their own, so queries never wait
  behind them;
- --database-probe-interval-seconds: how often the database is checked; health is NOT_SERVING
  while it cannot be reached, SERVING again when it can (default 2; 0 turns the probe off).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
from collections.abc import Sequence

from fabrictwin.v1 import telemetry_pb2_grpc

from services.common.config import ServiceConfig
from services.common.errors import Unavailable
from services.common.peers import peer_auth
from services.common.server import Cleanup, ServiceDefinition, run_service
from services.telemetry.availability import DatabaseProbe
from services.telemetry.peers import TopologyLinks
from services.telemetry.queries import DEFAULT_MAX_POINTS
from services.telemetry.servicer import TelemetryServicer
from services.telemetry.store import TelemetryStore
from services.telemetry.threads import DEFAULT_QUERY_THREADS, StoreThreads

__all__ = ["build", "extra_flags", "main"]

SERVICE_NAME = "fabrictwin.v1.TelemetryService"
log = logging.getLogger("fabrictwin.telemetry")


def extra_flags(parser: argparse.ArgumentParser) -> None:
    """The telemetry service's own flags (see the module docstring)."""
    parser.add_argument("--ingest-parallelism", type=int, default=0, help="0: 2 on PostgreSQL, 1 on SQLite")
    parser.add_argument("--maintenance-interval-seconds", type=float, default=60.0)
    parser.add_argument("--max-points", type=int, default=DEFAULT_MAX_POINTS)
    parser.add_argument("--query-threads", type=int, default=DEFAULT_QUERY_THREADS)
    parser.add_argument("--database-probe-interval-seconds", type=float, default=2.0)


async def _sweep_forever(store: TelemetryStore, threads: StoreThreads, interval_s: float) -> None:
    while True:
        await asyncio.sleep(interval_s)
        try:
            await threads.write(store.sweep_all)
        except Unavailable as exc:  # the probe reports the outage; the next sweep catches up
            log.warning("telemetry sweep skipped: %s", exc)
        except Exception:  # a failed sweep is retried at the next interval; the service keeps serving
            log.exception("telemetry sweep failed")


async def build(config: ServiceConfig) -> tuple[list[ServiceDefinition], Cleanup]:
    """The telemetry servicer on its store, the periodic sweep, and the cleanup that stops both."""
    max_points = int(config.extra.get("max_points", DEFAULT_MAX_POINTS))
    store = await asyncio.to_thread(TelemetryStore.open, config.resolved_database_url(), max_points)
    parallelism = int(config.extra.get("ingest_parallelism", 0)) or (1 if store.sqlite else 2)
    threads = StoreThreads(
        int(config.extra.get("query_threads", DEFAULT_QUERY_THREADS)), write_threads=parallelism + 1
    )
    interval = float(config.extra.get("maintenance_interval_seconds", 60.0))
    probe_interval = float(config.extra.get("database_probe_interval_seconds", 2.0))
    probe = DatabaseProbe(store.ping, probe_interval) if probe_interval > 0 else None
    tasks = [asyncio.create_task(_sweep_forever(store, threads, interval))] if interval > 0 else []
    if probe is not None:
        tasks.append(asyncio.create_task(probe.run()))
    topology = TopologyLinks(config.topology_address, peer_auth(config))

    async def cleanup() -> None:
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if probe is not None:
            await probe.close()
        await topology.close()
        threads.close()
        await asyncio.to_thread(store.close)

    servicer = TelemetryServicer(store, topology, parallelism, threads, probe)
    definition = ServiceDefinition(
        SERVICE_NAME, servicer, telemetry_pb2_grpc.add_TelemetryServiceServicer_to_server
    )
    return [definition], cleanup


def main(argv: Sequence[str] | None = None) -> None:
    """Serve until SIGTERM or Ctrl-C."""
    run_service("telemetry", build, argv, extra_flags)


if __name__ == "__main__":
    main()
