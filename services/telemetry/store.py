"""The telemetry store: sources, idempotent batch ingest and series queries over SQL. No gRPC here.

One class over one SQLAlchemy engine, SQLite (laptop) or PostgreSQL (production). Every method is
blocking; the servicer runs them in threads. Ingest details live in `ingest` (validation, counter
conversion) and `sql` (the bulk insert); query details in `queries`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import threading
import time
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np
import sqlalchemy as sa
from sqlalchemy import Connection, Engine

from services.common.db import make_engine
from services.common.errors import AlreadyExists, InvalidArgument, NotFound
from services.common.resources import parse_name, validate_id
from services.telemetry.counters import CounterKind
from services.telemetry.ingest import BatchRejected, Rejection, batch_rows, prepare_batch, store_batch
from services.telemetry.queries import Aggregation, port_series, select_ports, top_ports
from services.telemetry.schema import METRIC_COLUMNS, counter_state, create_schema, ports, samples, sources

__all__ = [
    "IngestOutcome",
    "PortValue",
    "Rejection",
    "Series",
    "SeriesPage",
    "SourceKind",
    "SourceRecord",
    "TelemetryStore",
]


class SourceKind(enum.Enum):
    """Where a source's samples come from."""

    LIVE = "live"
    SIMULATED = "simulated"


@dataclasses.dataclass(frozen=True)
class SourceRecord:
    """A telemetry source (`sources/{id}`) as stored."""

    id: str
    kind: SourceKind
    display_name: str = ""
    fabric: str = ""  # fabrics/{fabric}, or "" when unknown
    simulation: str = ""  # simulations/{simulation} for simulated sources
    retention_ns: int = 0  # 0 keeps samples forever (retention itself arrives with issue #6)
    create_time_ns: int = 0
    sample_count: int = 0


@dataclasses.dataclass(frozen=True)
class IngestOutcome:
    """What became of one batch: every row is stored, a duplicate, or (with the batch) rejected."""

    stored: int = 0
    duplicates: int = 0
    rejected: int = 0
    reasons: tuple[Rejection, ...] = ()


@dataclasses.dataclass(frozen=True)
class Series:
    """One port's series: bucket start times (or sample times when raw) and values."""

    port: str
    time_ns: np.ndarray  # int64
    values: np.ndarray  # float64


@dataclasses.dataclass(frozen=True)
class SeriesPage:
    """A page of series, one per selected port; `next_offset` None on the last page."""

    series: list[Series]
    next_offset: int | None


class PortValue(NamedTuple):
    """A port and its aggregate over a window."""

    port: str
    value: float


def _check_window(start_ns: int, end_ns: int) -> None:
    if start_ns < 0:
        raise InvalidArgument("time_range.start_ns", f"{start_ns} is negative")
    if end_ns and end_ns <= start_ns:
        raise InvalidArgument(
            "time_range.end_ns", f"{end_ns} is not after start_ns {start_ns} (0 means open)"
        )


def _check_column(column: str) -> None:
    if column not in METRIC_COLUMNS.values():
        raise InvalidArgument("metric", f"{column!r} is not a metric column")


class TelemetryStore:
    """Sources, ingest and queries on one database."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        # SQLite has one writer at a time; queueing ingests here avoids "database is locked" retries.
        is_sqlite = engine.dialect.name == "sqlite"
        self._write_lock: contextlib.AbstractContextManager = (
            threading.Lock() if is_sqlite else contextlib.nullcontext()
        )

    @classmethod
    def open(cls, url: str) -> TelemetryStore:
        """A store on `url`, with the tables created if they are missing."""
        engine = make_engine(url)
        create_schema(engine)
        return cls(engine)

    def close(self) -> None:
        """Close the engine's connections."""
        self.engine.dispose()

    # Sources

    def create_source(self, source: SourceRecord) -> SourceRecord:
        """Store a new source; its create time is now. ALREADY_EXISTS if the id is taken."""
        validate_id(source.id, "source_id")
        if source.fabric:
            parse_name(source.fabric, "fabrics/{fabric}", "source.fabric")
        if source.simulation:
            parse_name(source.simulation, "simulations/{simulation}", "source.simulation")
        if source.retention_ns < 0:
            raise InvalidArgument("source.retention_ns", f"{source.retention_ns} is negative")
        created = dataclasses.replace(
            source,
            display_name=source.display_name or source.id,
            create_time_ns=time.time_ns(),
            sample_count=0,
        )
        row = dataclasses.asdict(created) | {"kind": created.kind.value}
        try:
            with self._write_lock, self.engine.begin() as connection:
                connection.execute(sa.insert(sources).values(**row))
        except sa.exc.IntegrityError:
            raise AlreadyExists(f"sources/{source.id} already exists") from None
        return created

    def get_source(self, source_id: str) -> SourceRecord:
        """The source with its sample count; NOT_FOUND if there is none."""
        with self.engine.connect() as connection:
            return self._source(connection, source_id)

    def list_sources(self, offset: int = 0, limit: int = 50) -> tuple[list[SourceRecord], int | None]:
        """Sources by id from `offset`; returns them and the next offset (None on the last page)."""
        query = sa.select(sources).order_by(sources.c.id).offset(offset).limit(limit + 1)
        with self.engine.connect() as connection:
            rows = connection.execute(query).mappings().all()
        found = [self._record(row) for row in rows[:limit]]
        return found, (offset + limit if len(rows) > limit else None)

    def delete_source(self, source_id: str) -> None:
        """Delete a source, its ports and all its samples in one transaction."""
        with self._write_lock, self.engine.begin() as connection:
            self._source(connection, source_id)
            for table in (samples, counter_state, ports):
                connection.execute(sa.delete(table).where(table.c.source_id == source_id))
            connection.execute(sa.delete(sources).where(sources.c.id == source_id))

    @staticmethod
    def _record(row: Mapping) -> SourceRecord:
        return SourceRecord(**(dict(row) | {"kind": SourceKind(row["kind"])}))

    def _source(self, connection: Connection, source_id: str) -> SourceRecord:
        row = connection.execute(sa.select(sources).where(sources.c.id == source_id)).mappings().first()
        if row is None:
            raise NotFound(f"sources/{source_id} does not exist")
        return self._record(row)

    # Ingest

    def ingest(
        self,
        source_id: str,
        ports: Sequence[str],
        port_index: np.ndarray,
        time_ns: np.ndarray,
        columns: Mapping[str, np.ndarray],
        counter_kinds: Mapping[str, CounterKind] | None = None,
    ) -> IngestOutcome:
        """Store one columnar batch whole, or none of it.

        Row i is (ports[port_index[i]], time_ns[i], columns[c][i] for every column c). Rows whose
        (port, time) is stored already, or repeated within the batch, are counted as duplicates;
        cumulative columns (per `counter_kinds`, default DELTA) are stored as per-interval deltas.
        A batch with any bad row is rejected whole: `rejected` counts its rows and `reasons` says why,
        naming the field as in fabrictwin.v1.SampleBatch (`columns[2].values`, `source`).
        """
        time_ns, port_index = np.asarray(time_ns), np.asarray(port_index)
        try:
            batch = prepare_batch(ports, port_index, time_ns, columns, counter_kinds)
            with self._write_lock, self.engine.begin() as connection:
                stored, duplicates = store_batch(connection, source_id, batch)
        except BatchRejected as exc:
            return IngestOutcome(rejected=batch_rows(time_ns), reasons=(exc.rejection,))
        return IngestOutcome(stored=stored, duplicates=duplicates)

    # Queries

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
        """One series per selected port (by name, paged), raw when step_ns is 0, else bucketed.

        Every port on the page gets a series, empty when it has no samples in [start_ns, end_ns).
        """
        _check_column(column)
        _check_window(start_ns, end_ns)
        if step_ns < 0:
            raise InvalidArgument("step_ns", f"{step_ns} is negative")
        with self.engine.connect() as connection:
            self._source(connection, source_id)
            selected = select_ports(connection, source_id, port_patterns)
            page = selected[offset : offset + limit]
            found = port_series(
                connection,
                source_id,
                [port_id for port_id, _ in page],
                column,
                start_ns,
                end_ns,
                step_ns,
                aggregation,
            )
        empty = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64))
        series = [Series(name, *found.get(port_id, empty)) for port_id, name in page]
        return SeriesPage(series, offset + limit if offset + limit < len(selected) else None)

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
    ) -> list[PortValue]:
        """The `limit` ports with the highest aggregate of `column` in the window, highest first."""
        _check_column(column)
        _check_window(start_ns, end_ns)
        if limit < 1:
            raise InvalidArgument("limit", f"must be at least 1, got {limit}")
        with self.engine.connect() as connection:
            self._source(connection, source_id)
            selected = select_ports(connection, source_id, port_patterns)
            names = dict(selected)
            port_ids = [port_id for port_id, _ in selected] if port_patterns else None
            top = top_ports(connection, source_id, port_ids, column, start_ns, end_ns, aggregation, limit)
        return [PortValue(names[port_id], value) for port_id, value in top]
