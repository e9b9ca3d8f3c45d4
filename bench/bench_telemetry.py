"""Telemetry benchmarks: streaming ingest through the real gRPC service, into SQLite and PostgreSQL.

The service runs as its own process (as deployed); the client streams columnar batches of 50,000
rows. `samples_stored` is read back from the service, so a lost sample shows as a shortfall.
PostgreSQL runs when FABRICTWIN_BENCH_POSTGRES_URL (or FABRICTWIN_TEST_POSTGRES_URL) is set.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

import numpy as np
from fabrictwin import Client
from fabrictwin.v1 import telemetry_pb2

from bench.registry import benchmark
from services.common.arrays import to_numeric_array
from services.stack import free_port

PORTS = 1_000
TIMES = 1_000
ROWS_PER_BATCH = 50_000


def _batches(source: str):
    names = [f"leaf-{p // 32}/p{p % 32 + 1}" for p in range(PORTS)]
    rng = np.random.default_rng(1)
    times_per_batch = ROWS_PER_BATCH // PORTS
    for first in range(0, TIMES, times_per_batch):
        t = (np.arange(first, first + times_per_batch, dtype=np.int64) * 1_000_000_000).repeat(PORTS)
        port_index = np.tile(np.arange(PORTS, dtype=np.int32), times_per_batch)
        columns = []
        for metric in (
            telemetry_pb2.METRIC_TX_BYTES,
            telemetry_pb2.METRIC_RX_BYTES,
            telemetry_pb2.METRIC_UTILISATION,
            telemetry_pb2.METRIC_DROPS,
        ):
            columns.append(
                telemetry_pb2.SampleColumn(
                    metric=metric,
                    counter_kind=telemetry_pb2.COUNTER_KIND_DELTA,
                    values=to_numeric_array(rng.random(t.size)),
                )
            )
        yield telemetry_pb2.SampleBatch(
            source=source,
            ports=names,
            port_index=to_numeric_array(port_index),
            time_ns=to_numeric_array(t),
            columns=columns,
        )


def _ingest(database_url: str) -> dict:
    with tempfile.TemporaryDirectory() as data_dir:
        port = free_port()
        env = {**os.environ, "FABRICTWIN_DATA_DIR": data_dir, "FABRICTWIN_LOG_FORMAT": "json"}
        if database_url:
            env["FABRICTWIN_DATABASE_URL"] = database_url
        server = subprocess.Popen(
            [sys.executable, "-m", "services.telemetry", "--port", str(port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            with Client(telemetry=f"127.0.0.1:{port}", timeout=600) as client:
                deadline = time.monotonic() + 30
                while client.health(["telemetry"])["telemetry"] != "SERVING":
                    if time.monotonic() > deadline:
                        raise TimeoutError("telemetry did not start")
                    time.sleep(0.1)
                source_id = f"bench-{os.getpid()}-{int(time.time())}"
                client.telemetry.create_source(source_id)
                batches = list(_batches(f"sources/{source_id}"))  # encoded before the clock starts
                start = time.perf_counter()
                reply = client.telemetry.ingest(batches)
                seconds = time.perf_counter() - start
                stored = client.telemetry.get_source(source_id).sample_count
                client.telemetry.delete_source(source_id)
        finally:
            server.terminate()
            server.wait(30)
    sent = PORTS * TIMES
    if stored != sent or reply.stored != sent:
        raise AssertionError(f"sent {sent} samples, stored {stored} (reply said {reply.stored})")
    return {
        "samples_sent": sent,
        "samples_stored": int(stored),
        "seconds": round(seconds, 3),
        "samples_per_s": round(sent / seconds),
    }


@benchmark("telemetry.ingest.sqlite")
def ingest_sqlite() -> dict:
    return _ingest("")


@benchmark("telemetry.ingest.postgresql")
def ingest_postgresql() -> dict:
    url = os.environ.get("FABRICTWIN_BENCH_POSTGRES_URL") or os.environ.get("FABRICTWIN_TEST_POSTGRES_URL")
    if not url:
        raise RuntimeError("set FABRICTWIN_BENCH_POSTGRES_URL to a PostgreSQL database to run this benchmark")
    return _ingest(url)
