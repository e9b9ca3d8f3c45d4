"""Queries run side by side and never wait behind writes: a write held up by the database (another
transaction holding its lock) leaves queries their own threads and connections."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import Iterator

import grpc
import numpy as np
import psycopg
from fabrictwin.v1 import common_pb2, telemetry_pb2, telemetry_pb2_grpc
from sqlalchemy.engine import make_url

from services.common.config import ServiceConfig
from services.common.db import normalise_url
from services.common.resources import new_id
from services.common.server import serving
from services.telemetry.__main__ import build
from tests.telemetry.batches import sample_batch

M = telemetry_pb2
WRITERS = 16  # more ingest calls than the connection pool and the default thread pool hold


@contextlib.contextmanager
def _write_lock_held(database_url: str) -> Iterator[None]:
    """Another client holds the lock every ingest transaction needs, as a long transaction would."""
    if database_url.startswith("sqlite"):
        path = make_url(database_url).database
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # the one writer's lock; WAL readers go on
        try:
            yield
        finally:
            other.execute("ROLLBACK")
            other.close()
        return
    url = make_url(normalise_url(database_url)).set(drivername="postgresql")
    with psycopg.connect(url.render_as_string(hide_password=False)) as other:
        # Conflicts with ingest's UPDATE of its source row, not with SELECTs.
        other.execute("LOCK TABLE telemetry_sources IN EXCLUSIVE MODE")
        try:
            yield
        finally:
            other.rollback()


def _batch(source: str, first_time: int) -> telemetry_pb2.SampleBatch:
    ports = [f"leaf-1/p{p}" for p in range(1, 9)]
    port_index = np.tile(np.arange(8), 10)
    time_ns = np.repeat(np.arange(first_time, first_time + 10, dtype=np.int64), 8)
    return sample_batch(source, ports, port_index, time_ns, {M.METRIC_UTILISATION: np.full(80, 0.5)})


async def test_queries_are_answered_while_writes_wait_for_the_database(database_url, tmp_path):
    config = ServiceConfig(
        service="telemetry",
        port=0,
        database_url=database_url,
        data_dir=str(tmp_path),
        extra={"maintenance_interval_seconds": 0},
    )
    definitions, cleanup = await build(config)
    try:
        async with (
            serving(config, definitions) as running,
            grpc.aio.insecure_channel(running.address) as channel,
        ):
            stub = telemetry_pb2_grpc.TelemetryServiceStub(channel)
            name = (
                await stub.CreateSource(
                    M.CreateSourceRequest(source_id=new_id("held"), source=M.Source(kind=1))
                )
            ).name
            await stub.IngestSamples(iter([M.IngestSamplesRequest(batch=_batch(name, 0))]))
            query = M.QuerySeriesRequest(
                source=name, metric=M.METRIC_UTILISATION, time_range=common_pb2.TimeRange(end_ns=10)
            )
            with _write_lock_held(database_url):
                writes = [
                    asyncio.ensure_future(
                        stub.IngestSamples(iter([M.IngestSamplesRequest(batch=_batch(name, 10 * w + 10))]))
                    )
                    for w in range(WRITERS)
                ]
                await asyncio.sleep(0.5)  # every write is now waiting for the lock
                began = time.monotonic()
                answers = await asyncio.wait_for(
                    asyncio.gather(*(stub.QuerySeries(query) for _ in range(8))), timeout=5
                )
                source = await asyncio.wait_for(stub.GetSource(M.GetSourceRequest(name=name)), timeout=5)
                waited = time.monotonic() - began
                assert not any(write.done() for write in writes)
            assert all(len(answer.series) == 8 for answer in answers)
            assert source.sample_count == 80 and waited < 5
            replies = await asyncio.wait_for(asyncio.gather(*writes), timeout=60)
            assert sum(reply.stored for reply in replies) == WRITERS * 80
            await stub.DeleteSource(M.DeleteSourceRequest(name=name))
    finally:
        await cleanup()
