"""Telemetry benchmarks through the real gRPC service (its own process, as deployed): SQLite, PostgreSQL.

- `telemetry.ingest.<db>`: 2,000,000 samples (1,000 ports x 2,000 times, four metric columns) streamed
  by ONE client in columnar batches of 50,000 rows over one IngestSamples stream. Proof that nothing
  is lost: the reply's `stored`, the source's `sample_count` and a COUNT(*) of the rows in SQL must
  all equal the samples sent.
- `telemetry.query.link_hour.<db>` and `telemetry.query.top10.<db>`: a source of 4,096 links sampled
  every second for 12,208 s (50,003,968 rows), generated in SQL (`bench_telemetry_data`), rolled up
  by the sweep. link_hour: one link's one-hour history at 1 s resolution (QuerySeries, step 1 s, 3,600
  points), median over 20 links. top10: TopLinks by mean utilisation over all 4,096 links for one
  hour, median of 5 runs; also timed without roll-ups (P50 cannot use them), for the record.

PostgreSQL runs when FABRICTWIN_BENCH_POSTGRES_URL (or FABRICTWIN_TEST_POSTGRES_URL) is set.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import sqlalchemy as sa
from fabrictwin import Client
from fabrictwin.v1 import telemetry_pb2

from bench.registry import benchmark
from services.common.arrays import to_numeric_array
from services.common.db import make_engine
from services.common.errors import NotFound
from services.stack import free_port
from services.telemetry.partitions import partition_name
from services.telemetry.rollups import bucket_start
from services.telemetry.schema import metric_bit, ports, sources
from services.telemetry.store import SourceKind, SourceRecord, TelemetryStore

PORTS = 1_000
TIMES = 2_000
ROWS_PER_BATCH = 50_000
S = 1_000_000_000
HOUR_NS = 3600 * S

DATASET_SOURCE = "bench-links-50m"
LINKS = 4_096
SECONDS = 12_208  # x 4,096 links = 50,003,968 rows
# Link l runs at 5 % + 90 % x base(l), where base is a permutation of k/4096 (2654435761 is odd, so
# multiplying by it permutes the residues mod 4096), plus a ripple that is the same for every link:
# the hottest links over any whole number of minutes are known in advance.
_UTILISATION = "0.05 + 0.9 * ((link * 2654435761) % 4096) / 4096.0 + 0.04 * ((t % 60) / 60.0)"
_TX_BYTES = f"50000000000.0 * ({_UTILISATION})"  # bytes per second of a 400 Gb/s link


@dataclasses.dataclass(frozen=True)
class Dataset:
    """The 50M-row source: how big, and what making it cost (None when an earlier run made it)."""

    rows: int
    generate_s: float | None
    rollup_s: float | None

    @property
    def hours(self) -> int:
        return SECONDS // 3600

    def figures(self) -> dict:
        made = {"dataset_generate_s": round(self.generate_s, 1)} if self.generate_s is not None else {}
        if self.rollup_s is not None:
            made["dataset_rollup_s"] = round(self.rollup_s, 1)
        return made or {"dataset": "reused from an earlier run"}

    @staticmethod
    def hottest(n: int) -> list[str]:
        base = (np.arange(LINKS, dtype=np.int64) * 2654435761) % 4096
        return [f"link-{link}" for link in np.argsort(-base, kind="stable")[:n].tolist()]


def _fill_postgresql(store: TelemetryStore, key: int) -> None:
    """50M rows in time order (as a poller writes them), indexed after the fill and attached."""
    part = partition_name("telemetry_samples", key)
    statements = [
        "CREATE TEMPORARY TABLE bench_links AS SELECT id AS port_id, substr(name, 6)::int AS link "
        f"FROM telemetry_ports WHERE source_key = {key}",
        f"DROP TABLE {part}",
        f"CREATE TABLE {part} (LIKE telemetry_samples INCLUDING DEFAULTS)",
        f"INSERT INTO {part} (source_key, port_id, time_ns, utilisation, tx_bytes) "
        f"SELECT {key}, l.port_id, t * {S}::bigint, {_UTILISATION}, {_TX_BYTES} "
        f"FROM generate_series(0, {SECONDS - 1}) t CROSS JOIN LATERAL (SELECT port_id, link FROM bench_links "
        "WHERE t >= 0) l",
        f"ALTER TABLE {part} ADD PRIMARY KEY (source_key, port_id, time_ns)",
        f"CREATE INDEX ON {part} USING brin (time_ns) WITH (pages_per_range = 32, autosummarize = on)",
        f"ALTER TABLE {part} ADD CONSTRAINT {part}_key CHECK (source_key = {key})",  # attach without a scan
        f"ALTER TABLE telemetry_samples ATTACH PARTITION {part} FOR VALUES IN ({key})",
        f"ALTER TABLE {part} DROP CONSTRAINT {part}_key",
    ]
    with store.engine.begin() as connection:
        for statement in statements:
            connection.exec_driver_sql(statement.replace("%", "%%"))  # psycopg: % starts a placeholder
    with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        connection.exec_driver_sql(f"VACUUM ANALYZE {part}")


def _fill_sqlite(store: TelemetryStore, key: int) -> None:
    """50M rows in primary-key order: SQLite's CROSS JOIN keeps the ports as the outer loop."""
    with store.engine.begin() as connection:
        connection.exec_driver_sql(
            "WITH RECURSIVE seconds(t) AS "
            f"(SELECT 0 UNION ALL SELECT t + 1 FROM seconds WHERE t < {SECONDS - 1}), "
            f"links AS (SELECT id AS port_id, CAST(substr(name, 6) AS INTEGER) AS link FROM telemetry_ports "
            f"WHERE source_key = {key} ORDER BY id) "
            "INSERT INTO telemetry_samples (source_key, port_id, time_ns, utilisation, tx_bytes) "
            f"SELECT {key}, port_id, t * {S}, {_UTILISATION}, {_TX_BYTES} FROM links CROSS JOIN seconds"
        )
    with store.engine.connect() as connection:
        connection.exec_driver_sql("ANALYZE")


def generated_source(
    database_url: str,
    source_id: str,
    port_names: Sequence[str],
    newest_ns: int,
    metrics: Sequence[str],
    fill: Callable[[TelemetryStore, int], None],
) -> tuple[float | None, float | None]:
    """A LIVE source of `port_names` whose rows `fill(store, key)` writes in SQL, one per port and
    second up to `newest_ns`, rolled up by the sweep; (generate s, roll-up s), or (None, None) when an
    earlier run left it complete in `database_url`."""
    rows = len(port_names) * (newest_ns // S + 1)
    store = TelemetryStore.open(database_url)
    try:
        with contextlib.suppress(NotFound):
            found = store.get_source(source_id)
            if found.sample_count == rows and found.rolled_up_until_ns == bucket_start(newest_ns):
                return None, None
            store.delete_source(source_id)
        begin = time.perf_counter()
        key = store.create_source(SourceRecord(source_id, SourceKind.LIVE)).key
        with store.engine.begin() as connection:
            connection.execute(sa.insert(ports), [{"source_key": key, "name": name} for name in port_names])
        fill(store, key)
        mask = 0
        for metric in metrics:
            mask |= metric_bit(metric)
        with store.engine.begin() as connection:
            connection.execute(
                sa.update(sources)
                .where(sources.c.key == key)
                .values(sample_count=rows, newest_time_ns=newest_ns, metrics_mask=mask)
            )
        generated = time.perf_counter() - begin
        begin = time.perf_counter()
        store.sweep(source_id)
        return generated, time.perf_counter() - begin
    finally:
        store.close()


def dataset(database_url: str, sqlite: bool) -> Dataset:
    """The 50M-row source in `database_url`, made (and rolled up) unless an earlier run left it there."""
    generated, rolled_up = generated_source(
        database_url,
        DATASET_SOURCE,
        [f"link-{link}" for link in range(LINKS)],
        (SECONDS - 1) * S,
        ("utilisation", "tx_bytes"),
        _fill_sqlite if sqlite else _fill_postgresql,
    )
    return Dataset(LINKS * SECONDS, generated, rolled_up)


def _postgres_url() -> str:
    url = os.environ.get("FABRICTWIN_BENCH_POSTGRES_URL") or os.environ.get("FABRICTWIN_TEST_POSTGRES_URL")
    if not url:
        raise RuntimeError("set FABRICTWIN_BENCH_POSTGRES_URL to a PostgreSQL database to run this benchmark")
    return url


@contextlib.contextmanager
def _service(database_url: str) -> Iterator[Client]:
    """The telemetry service as its own process on `database_url`, and a client of it."""
    with tempfile.TemporaryDirectory() as data_dir:
        port = free_port()
        env = {**os.environ, "FABRICTWIN_DATA_DIR": data_dir, "FABRICTWIN_LOG_FORMAT": "json"}
        env["FABRICTWIN_DATABASE_URL"] = database_url
        env["FABRICTWIN_MAINTENANCE_INTERVAL_SECONDS"] = "0"
        server = subprocess.Popen(
            [sys.executable, "-m", "services.telemetry", "--port", str(port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            with Client(telemetry=f"127.0.0.1:{port}", timeout=600) as client:
                deadline = time.monotonic() + 60
                while client.health(["telemetry"])["telemetry"] != "SERVING":
                    if time.monotonic() > deadline:
                        raise TimeoutError("telemetry did not start")
                    time.sleep(0.1)
                yield client
        finally:
            server.terminate()
            server.wait(30)


def _batches(source: str) -> Iterator[telemetry_pb2.SampleBatch]:
    names = [f"leaf-{p // 32}/p{p % 32 + 1}" for p in range(PORTS)]
    rng = np.random.default_rng(1)
    times_per_batch = ROWS_PER_BATCH // PORTS
    for first in range(0, TIMES, times_per_batch):
        t = (np.arange(first, first + times_per_batch, dtype=np.int64) * S).repeat(PORTS)
        port_index = np.tile(np.arange(PORTS, dtype=np.int32), times_per_batch)
        columns = [
            telemetry_pb2.SampleColumn(
                metric=metric,
                counter_kind=telemetry_pb2.COUNTER_KIND_DELTA,
                values=to_numeric_array(rng.random(t.size)),
            )
            for metric in (
                telemetry_pb2.METRIC_TX_BYTES,
                telemetry_pb2.METRIC_RX_BYTES,
                telemetry_pb2.METRIC_UTILISATION,
                telemetry_pb2.METRIC_DROPS,
            )
        ]
        yield telemetry_pb2.SampleBatch(
            source=source,
            ports=names,
            port_index=to_numeric_array(port_index),
            time_ns=to_numeric_array(t),
            columns=columns,
        )


def _rows_in_sql(database_url: str, source_id: str) -> int:
    engine = make_engine(database_url)
    try:
        with engine.connect() as connection:
            query = sa.text(
                "SELECT count(*) FROM telemetry_samples s JOIN telemetry_sources o ON o.key = s.source_key "
                "WHERE o.id = :id"
            )
            return int(connection.execute(query, {"id": source_id}).scalar_one())
    finally:
        engine.dispose()


def _ingest(database_url: str) -> dict:
    with _service(database_url) as client:
        source_id = f"bench-ingest-{os.getpid()}"
        client.telemetry.create_source(source_id)
        batches = list(_batches(f"sources/{source_id}"))  # encoded before the clock starts
        start = time.perf_counter()
        reply = client.telemetry.ingest(batches)
        seconds = time.perf_counter() - start
        stored = client.telemetry.get_source(source_id).sample_count
        in_sql = _rows_in_sql(database_url, source_id)
        client.telemetry.delete_source(source_id)
    sent = PORTS * TIMES
    if not stored == in_sql == reply.stored == sent or reply.rejected or reply.duplicates:
        raise AssertionError(
            f"sent {sent} samples; reply {reply.stored}, sample_count {stored}, rows {in_sql}"
        )
    return {
        "samples_sent": sent,
        "samples_stored": int(stored),
        "rows_in_sql": in_sql,
        "seconds": round(seconds, 3),
        "samples_per_s": round(sent / seconds),
    }


@benchmark("telemetry.ingest.sqlite")
def ingest_sqlite() -> dict:
    with tempfile.TemporaryDirectory() as directory:
        return _ingest(f"sqlite:///{directory}/telemetry.db")


@benchmark("telemetry.ingest.postgresql")
def ingest_postgresql() -> dict:
    return _ingest(_postgres_url())


def _link_hour(database_url: str, sqlite: bool) -> dict:
    prepared = dataset(database_url, sqlite)
    rng = np.random.default_rng(3)
    timings = []
    with _service(database_url) as client:
        for link in rng.choice(LINKS, size=21, replace=False).tolist():
            start_ns = int(rng.integers(0, prepared.hours - 1)) * HOUR_NS
            begin = time.perf_counter()
            (series,) = client.telemetry.query_series(
                DATASET_SOURCE, "utilisation", ports=[f"link-{link}"], start_ns=start_ns,
                end_ns=start_ns + HOUR_NS, step_ns=S,
            )  # fmt: skip
            timings.append((time.perf_counter() - begin) * 1000)
            if len(series.values) != 3600:
                raise AssertionError(f"link-{link}: {len(series.values)} points, expected 3600")
    first, rest = timings[0], timings[1:]
    return {
        "rows_stored": prepared.rows,
        "points": 3600,
        "ms": round(statistics.median(rest), 2),
        "ms_max": round(max(rest), 2),
        "ms_first_call": round(first, 2),
        **prepared.figures(),
    }


def _top10(database_url: str, sqlite: bool) -> dict:
    prepared = dataset(database_url, sqlite)
    start_ns, end_ns = HOUR_NS, 2 * HOUR_NS
    with _service(database_url) as client:
        timings = []
        for _ in range(5):
            begin = time.perf_counter()
            top = client.telemetry.top_links(
                DATASET_SOURCE, "utilisation", limit=10, start_ns=start_ns, end_ns=end_ns
            )
            timings.append((time.perf_counter() - begin) * 1000)
        begin = time.perf_counter()
        raw = client.telemetry.top_links(
            DATASET_SOURCE, "utilisation", limit=10, aggregation="p50", start_ns=start_ns, end_ns=end_ns
        )
        raw_ms = (time.perf_counter() - begin) * 1000
    expected = prepared.hottest(10)
    if [p.port for p in top] != expected or [p.port for p in raw] != expected:
        raise AssertionError(f"top 10 {[p.port for p in top]}, expected {expected}")
    return {
        "links": LINKS,
        "rows_in_window": LINKS * 3600,
        "rows_stored": prepared.rows,
        "ms": round(statistics.median(timings), 1),
        "ms_without_rollups_p50": round(raw_ms, 1),
        **prepared.figures(),
    }


def _sqlite_dataset_url() -> str:
    directory = os.environ.get("FABRICTWIN_BENCH_DATA_DIR", os.path.join(".fabrictwin", "bench"))
    os.makedirs(directory, exist_ok=True)
    return f"sqlite:///{os.path.join(directory, 'telemetry-50m.db')}"


@benchmark("telemetry.query.link_hour.sqlite")
def link_hour_sqlite() -> dict:
    return _link_hour(_sqlite_dataset_url(), True)


@benchmark("telemetry.query.link_hour.postgresql")
def link_hour_postgresql() -> dict:
    return _link_hour(_postgres_url(), False)


@benchmark("telemetry.query.top10.sqlite")
def top10_sqlite() -> dict:
    return _top10(_sqlite_dataset_url(), True)


@benchmark("telemetry.query.top10.postgresql")
def top10_postgresql() -> dict:
    return _top10(_postgres_url(), False)
