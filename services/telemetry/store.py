"""The telemetry store: sources, idempotent batch ingest, queries and the sweep over SQL. No gRPC here.

One class over one SQLAlchemy engine, SQLite (laptop) or PostgreSQL (production); opening it
migrates the database to head. Every method is blocking; the servicer runs them in threads. A
database that cannot be reached raises `Unavailable` from any method (`availability`). Details
live in `sources`, `batches`, `ingest` and `counter_state` (writes), `selection`, `queries` and
`diagnostics` (reads), `maintenance` (roll-ups and retention).
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import psycopg
import sqlalchemy as sa
from sqlalchemy import Connection, Engine, event
from sqlalchemy.pool import ConnectionPoolEntry

from services.common.db import make_engine
from services.common.errors import InvalidArgument, NotFound
from services.common.pinning import DEFAULT_RULE, PinningRule
from services.telemetry import sources as source_sql
from services.telemetry.aggregates import Aggregation, PortSet
from services.telemetry.availability import database_errors
from services.telemetry.batches import BatchRejected, PreparedBatch, Rejection, batch_rows, prepare_batch
from services.telemetry.counters import CounterKind
from services.telemetry.diagnostics import LossHistory, Skew, loss_history, utilisation_skew
from services.telemetry.fabric_links import load_links, save_links
from services.telemetry.groups import FabricLinks, is_group
from services.telemetry.ingest import Remembered, StoredBatch, store_batch
from services.telemetry.maintenance import SweepOutcome, sweep_source
from services.telemetry.migrate import migrate_to_head
from services.telemetry.port_health import PortHealth, port_health
from services.telemetry.queries import DEFAULT_MAX_POINTS, SeriesPage, port_series, top_ports
from services.telemetry.schema import METRIC_COLUMNS, sources
from services.telemetry.selection import select_ports
from services.telemetry.sources import SourceKind, SourceRecord

__all__ = ["IngestOutcome", "PortValue", "SourceKind", "SourceRecord", "TelemetryStore", "TopLinks"]

_RETRIED_SQLSTATES = {"40P01", "40001"}  # deadlock detected, serialization failure: retry the batch
_WRITE_ATTEMPTS = 3


@dataclasses.dataclass(frozen=True)
class IngestOutcome:
    """What became of one batch: every row is stored, a duplicate, or (with the batch) rejected."""

    stored: int = 0
    duplicates: int = 0
    rejected: int = 0
    reasons: tuple[Rejection, ...] = ()


class PortValue(NamedTuple):
    """A port and its aggregate over a window."""

    port: str
    value: float


class TopLinks(NamedTuple):
    """The top ports, highest first, and the roll-up width that served whole minutes (0: raw only)."""

    ports: list[PortValue]
    rollup_ns: int


MAX_HEALTH_WINDOW_NS = 10**15  # GetPortHealth.window_ns: as every simulated or stored time, at most 1e15 ns


def _check_window(start_ns: int, end_ns: int) -> None:
    if start_ns < 0:
        raise InvalidArgument("time_range.start_ns", f"{start_ns} is negative")
    if end_ns < 0:
        raise InvalidArgument("time_range.end_ns", f"{end_ns} is negative")
    if end_ns and end_ns <= start_ns:
        raise InvalidArgument(
            "time_range",
            f"end_ns {end_ns} is not after start_ns {start_ns} (end_ns 0 means the newest sample)",
        )


def _check_column(column: str) -> None:
    if column not in METRIC_COLUMNS.values():
        raise InvalidArgument("metric", f"{column!r} is not a metric column")


def _check_step(step_ns: int) -> None:
    if step_ns < 0:
        raise InvalidArgument("step_ns", f"{step_ns} is negative")


def _sqlstate(error: sa.exc.DBAPIError) -> str:
    return getattr(error.orig, "sqlstate", "") or ""


class TelemetryStore:
    """Sources, ingest, queries and the sweep on one database."""

    def __init__(
        self, engine: Engine, max_points: int = DEFAULT_MAX_POINTS, probe_engine: Engine | None = None
    ) -> None:
        self.engine = engine
        # `ping` reads on a pool of its own: a busy service must not look unreachable to its probe.
        self._probe_engine = probe_engine or engine
        self.max_points = max_points
        # SQLite has one writer at a time; queueing writes here avoids "database is locked" retries.
        self.sqlite = engine.dialect.name == "sqlite"
        self._write_lock: contextlib.AbstractContextManager = (
            threading.Lock() if self.sqlite else contextlib.nullcontext()
        )
        # Port ids, counter states and link rates by source key, learned from committed batches. A
        # key is never reused, so entries of a deleted source are never mistaken for another's.
        self._remembered = Remembered()
        self._links: dict[tuple[str, int], FabricLinks] = {}  # fabric versions are immutable

    @classmethod
    def open(cls, url: str, max_points: int = DEFAULT_MAX_POINTS) -> TelemetryStore:
        """A store on `url`, migrated to the schema's head revision."""
        engine = make_engine(url)
        if engine.dialect.name == "postgresql":
            # JIT compilation of a window aggregate costs more (~0.5 s) than the scan it speeds up.
            @event.listens_for(engine, "connect")
            def _no_jit(dbapi_connection: psycopg.Connection[Any], _record: ConnectionPoolEntry) -> None:
                with dbapi_connection.cursor() as cursor:
                    cursor.execute("SET jit = off")

        migrate_to_head(engine)
        # An in-memory SQLite database exists once per engine: its probe must share the engine.
        return cls(engine, max_points, engine if ":memory:" in url else make_engine(url))

    def close(self) -> None:
        """Close the engines' connections."""
        self.engine.dispose()
        if self._probe_engine is not self.engine:
            self._probe_engine.dispose()

    def ping(self) -> None:
        """Read a row of the sources table; Unavailable when the database cannot be reached."""
        with database_errors(), self._probe_engine.connect() as connection:
            connection.execute(sa.select(sources.c.key).limit(1)).all()

    @contextlib.contextmanager
    def _reading(self) -> Iterator[Connection]:
        with database_errors(), self.engine.connect() as connection:
            yield connection

    @contextlib.contextmanager
    def _writing(self) -> Iterator[Connection]:
        with database_errors(), self._write_lock, self.engine.begin() as connection:
            yield connection

    # Sources

    def create_source(self, source: SourceRecord) -> SourceRecord:
        """Store a new source; its create time is now. ALREADY_EXISTS if the id is taken."""
        with self._writing() as connection:
            return source_sql.insert_source(connection, source)

    def get_source(self, source_id: str) -> SourceRecord:
        """The source with its counts; NOT_FOUND if there is none."""
        with self._reading() as connection:
            return source_sql.read_source(connection, source_id)

    def list_sources(self, offset: int = 0, limit: int = 50) -> tuple[list[SourceRecord], int | None]:
        """Sources by id from `offset`; returns them and the next offset (None on the last page)."""
        with self._reading() as connection:
            return source_sql.list_sources(connection, offset, limit)

    def update_source(self, source_id: str, changes: Mapping[str, str | int]) -> SourceRecord:
        """Change `display_name` and/or `retention_ns`."""
        with self._writing() as connection:
            return source_sql.update_source(connection, source_id, changes)

    def delete_source(self, source_id: str) -> None:
        """Delete a source, its ports, samples and roll-ups in one transaction."""
        with self._writing() as connection:
            key = source_sql.delete_source(connection, source_id)
        self._remembered.forget(key)

    # Ingest

    def prepare(
        self,
        ports: Sequence[str],
        port_index: np.ndarray,
        time_ns: np.ndarray,
        columns: Mapping[str, np.ndarray],
        counter_kinds: Mapping[str, CounterKind] | None = None,
        port_rate_bps: np.ndarray | None = None,
    ) -> PreparedBatch:
        """Validate a batch without touching the database (BatchRejected names the field)."""
        return prepare_batch(
            ports, np.asarray(port_index), np.asarray(time_ns), columns, counter_kinds, port_rate_bps
        )

    def write(self, source_id: str, batch: PreparedBatch) -> IngestOutcome:
        """Store a prepared batch in one transaction, whole or not at all."""
        for attempt in range(_WRITE_ATTEMPTS):
            try:
                with self._writing() as connection:
                    done: StoredBatch = store_batch(connection, source_id, batch, self._remembered)
            except BatchRejected as exc:
                return IngestOutcome(rejected=batch.rows, reasons=(exc.rejection,))
            except sa.exc.DBAPIError as exc:
                if _sqlstate(exc) not in _RETRIED_SQLSTATES or attempt + 1 == _WRITE_ATTEMPTS:
                    raise
                time.sleep(0.01 * (attempt + 1))  # two streams crossed on the same rows; go again
                continue
            self._remembered.keep(done)  # committed
            return IngestOutcome(stored=done.stored, duplicates=done.duplicates)
        raise AssertionError("unreachable")

    def ingest(
        self,
        source_id: str,
        ports: Sequence[str],
        port_index: np.ndarray,
        time_ns: np.ndarray,
        columns: Mapping[str, np.ndarray],
        counter_kinds: Mapping[str, CounterKind] | None = None,
        port_rate_bps: np.ndarray | None = None,
    ) -> IngestOutcome:
        """Store one columnar batch whole, or none of it.

        Row i is (ports[port_index[i]], time_ns[i], columns[c][i] for every column c). Rows whose
        (port, time) is stored already, or repeated within the batch, are counted as duplicates;
        cumulative columns (per `counter_kinds`, default DELTA) are stored as per-interval deltas.
        A batch with any bad row is rejected whole: `rejected` counts its rows and `reasons` says why,
        naming the field as in fabrictwin.v1.SampleBatch (`columns[2].values`, `time_ns`, `source`).
        `port_rate_bps` (per port, bits/s) lets cumulative tx_bytes yield utilisation.
        """
        try:
            batch = self.prepare(ports, port_index, time_ns, columns, counter_kinds, port_rate_bps)
        except BatchRejected as exc:
            return IngestOutcome(rejected=batch_rows(np.asarray(time_ns)), reasons=(exc.rejection,))
        return self.write(source_id, batch)

    # Fabric links (port groups)

    def fabric_links(self, source: SourceRecord, connection: Connection) -> FabricLinks | None:
        """The links a source's ports resolve against, None before `bind_fabric` (or without a fabric)."""
        if not source.fabric or not source.fabric_version:
            return None
        key = (source.fabric, source.fabric_version)
        if key not in self._links:
            links = load_links(connection, *key)
            if links is None:
                return None
            self._links[key] = links
        return self._links[key]

    def bind_fabric(self, source_id: str, links: FabricLinks) -> SourceRecord:
        """Store a fabric version's links and bind the source to them (once: a bound source stays)."""
        with self._writing() as connection:
            source = source_sql.read_source(connection, source_id, lock=True)
            if source.fabric_version:
                return source
            if links.fabric != source.fabric:
                raise InvalidArgument("source.fabric", f"links of {links.fabric}, not {source.fabric}")
            save_links(connection, links)
            connection.execute(
                sa.update(sources).where(sources.c.key == source.key).values(fabric_version=links.version)
            )
            return dataclasses.replace(source, fabric_version=links.version)

    # Queries

    def _selection(
        self, connection: Connection, source: SourceRecord, patterns: Sequence[str]
    ) -> tuple[list[tuple[int, str]], bool]:
        links = self.fabric_links(source, connection) if any(map(is_group, patterns)) else None
        if links is None and source.fabric and any(map(is_group, patterns)):
            raise InvalidArgument("ports.patterns", f"the links of {source.fabric} are not loaded yet")
        return select_ports(
            connection, source.key, source.name, patterns, links, port_count=source.port_count
        )

    def query_series(
        self,
        source_id: str,
        column: str,
        *,
        start_ns: int = 0,
        end_ns: int = 0,
        port_patterns: Sequence[str] = (),
        aggregation: Aggregation = Aggregation.AVG,
        step_ns: int = 0,
        offset: int = 0,
        limit: int = 100,
    ) -> SeriesPage:
        """One series per selected port (by name, paged), raw when step_ns is 0, else bucketed."""
        _check_column(column)
        _check_window(start_ns, end_ns)
        _check_step(step_ns)
        with self._reading() as connection:
            source = source_sql.read_source(connection, source_id)
            selected, everything = self._selection(connection, source, port_patterns)
            return port_series(
                connection,
                source.for_query(),
                selected,
                column,
                start_ns,
                end_ns,
                step_ns,
                aggregation,
                offset,
                limit,
                self.max_points,
                every_port=everything,
            )

    def top_links(
        self,
        source_id: str,
        column: str,
        *,
        start_ns: int = 0,
        end_ns: int = 0,
        port_patterns: Sequence[str] = (),
        aggregation: Aggregation = Aggregation.AVG,
        limit: int = 10,
    ) -> TopLinks:
        """The `limit` ports with the highest aggregate of `column` in the window, highest first."""
        _check_column(column)
        _check_window(start_ns, end_ns)
        if limit < 1:
            raise InvalidArgument("limit", f"must be at least 1, got {limit}")
        with self._reading() as connection:
            source = source_sql.read_source(connection, source_id)
            selected, everything = self._selection(connection, source, port_patterns)
            names = dict(selected)
            ports = PortSet(list(names), everything)
            top, rollup_ns = top_ports(
                connection, source.for_query(), ports, column, start_ns, end_ns, aggregation, limit
            )
        return TopLinks([PortValue(names[port_id], value) for port_id, value in top], rollup_ns)

    def utilisation_skew(
        self,
        source_id: str,
        *,
        start_ns: int = 0,
        end_ns: int = 0,
        port_patterns: Sequence[str] = (),
        step_ns: int = 0,
        rule: PinningRule = DEFAULT_RULE,
    ) -> Skew:
        """Utilisation skew of the selected ports per interval of `step_ns` (0: the whole window), and
        whether `rule` finds them pinned in each."""
        _check_window(start_ns, end_ns)
        _check_step(step_ns)
        with self._reading() as connection:
            source = source_sql.read_source(connection, source_id)
            selected, everything = self._selection(connection, source, port_patterns)
            ports = PortSet([port_id for port_id, _ in selected], everything)
            return utilisation_skew(
                connection,
                source.for_query(),
                ports,
                start_ns,
                end_ns,
                step_ns,
                rule,
                self.max_points,
            )

    def loss_history(
        self, source_id: str, port: str, *, start_ns: int = 0, end_ns: int = 0, step_ns: int = 0
    ) -> LossHistory:
        """Drops, errors and the estimated BER of one port per interval of `step_ns` (0: the window)."""
        _check_window(start_ns, end_ns)
        _check_step(step_ns)
        if not port:
            raise InvalidArgument("port", "required: the name of one port")
        with self._reading() as connection:
            source = source_sql.read_source(connection, source_id)
            selected, _ = select_ports(connection, source.key, source.name, [], None)
            port_id = dict((name, port_id) for port_id, name in selected).get(port)
            if port_id is None:
                raise NotFound(f"port: {source.name} has no port {port!r}")
            return loss_history(
                connection, source.for_query(), port_id, start_ns, end_ns, step_ns, self.max_points
            )

    def port_health(
        self,
        source_id: str,
        *,
        start_ns: int = 0,
        end_ns: int = 0,
        window_ns: int = 0,
        port_patterns: Sequence[str] = (),
    ) -> tuple[list[PortHealth], int, int]:
        """Every selected port's health over [start_ns, end_ns), or over the last `window_ns` up to
        the newest sample; the ports and the window read."""
        _check_window(start_ns, end_ns)
        if window_ns:
            if start_ns or end_ns:
                raise InvalidArgument("window_ns", "give either time_range or window_ns, not both")
            if not 0 < window_ns <= MAX_HEALTH_WINDOW_NS:
                raise InvalidArgument(
                    "window_ns", f"must be in 1..{MAX_HEALTH_WINDOW_NS} ns, got {window_ns}"
                )
        with self._reading() as connection:
            source = source_sql.read_source(connection, source_id)
            query = source.for_query()
            if query.newest_time_ns is None:
                return [], 0, 0
            if window_ns:
                end_ns = query.newest_time_ns + 1
                start_ns = max(0, end_ns - window_ns)
            end_ns = query.end(start_ns, end_ns)
            selected, everything = self._selection(connection, source, port_patterns)
            names = dict(selected)
            found = port_health(connection, query, PortSet(list(names), everything), names, start_ns, end_ns)
        return found, start_ns, end_ns

    # Roll-ups and retention

    def sweep(self, source_id: str) -> SweepOutcome:
        """Roll up whole minutes and apply retention for one source (see `maintenance`)."""
        with self._writing() as connection:
            return sweep_source(connection, source_id)

    def sweep_all(self) -> dict[str, SweepOutcome]:
        """Sweep every source, each in its own transaction; a source deleted meanwhile is skipped."""
        with self._reading() as connection:
            ids = [row.id for row in connection.execute(sa.select(sources.c.id).order_by(sources.c.id))]
        outcomes = {}
        for source_id in ids:
            with contextlib.suppress(NotFound):
                outcomes[source_id] = self.sweep(source_id)
        return outcomes
