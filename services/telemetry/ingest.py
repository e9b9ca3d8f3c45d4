"""Ingest of one columnar sample batch: validation, de-duplication, counter conversion, one transaction.

`prepare_batch` is plain numpy: it checks a batch, drops repeated (port, time) rows (the first one
wins) and sorts the rows by port then time. `store_batch` writes a prepared batch inside the
caller's transaction: it resolves port names to ids (creating new ports), turns cumulative counters
into deltas against each port's last stored reading, inserts the rows with ON CONFLICT DO NOTHING
(a row already stored is a duplicate, never stored twice) and keeps the source's sample count.
Anything wrong raises BatchRejected, and the caller's transaction rolls the whole batch back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np
import sqlalchemy as sa
from sqlalchemy import Connection

from services.telemetry.counters import CounterKind, InvalidReading, counter_deltas, counter_readings
from services.telemetry.schema import METRIC_COLUMNS, counter_state, ports, samples, sources
from services.telemetry.sql import dialect_insert, insert_samples

__all__ = ["BatchRejected", "PreparedBatch", "Rejection", "batch_rows", "prepare_batch", "store_batch"]

_KNOWN_COLUMNS = frozenset(METRIC_COLUMNS.values())
_MAX_INT64 = np.iinfo(np.int64).max
# Ports are few; past this many, a source's whole port list is read instead of a long IN list
# (SQLite and psycopg limit the number of parameters of one statement).
_MAX_IN_LIST = 500


@dataclasses.dataclass(frozen=True)
class Rejection:
    """Why a batch was rejected: `reason` starts with the field (`columns[2].values: ...`)."""

    row: int  # the first offending row of the batch, or -1 for the batch as a whole
    reason: str


class BatchRejected(Exception):
    """A batch that is stored not at all."""

    def __init__(self, field: str, problem: str, row: int = -1) -> None:
        super().__init__(f"{field}: {problem}")
        self.rejection = Rejection(row, f"{field}: {problem}")


@dataclasses.dataclass(frozen=True)
class PreparedBatch:
    """A validated batch whose rows are unique per (port, time) and sorted by port, then time."""

    port_names: list[str]  # the ports the rows use; `port` indexes this list
    port: np.ndarray  # int64 per row
    time_ns: np.ndarray  # int64 per row
    values: dict[str, np.ndarray]  # per column: float64 amounts, or uint64 readings if cumulative
    kinds: dict[str, CounterKind]
    batch_row: np.ndarray  # int64 per row: its row number in the batch as sent (for reasons)
    rows: int  # rows as sent
    duplicates: int  # rows dropped because an earlier row of the batch had the same port and time


def batch_rows(time_ns: np.ndarray) -> int:
    """Rows in a batch as sent (the length of its time column), for counting a rejected batch."""
    return int(time_ns.shape[0]) if time_ns.ndim >= 1 else 0


def _integers(values: np.ndarray, field: str, rows: int | None) -> np.ndarray:
    if values.ndim != 1:
        raise BatchRejected(field, f"must be one-dimensional, got shape {list(values.shape)}")
    if values.dtype.kind not in "iu":
        raise BatchRejected(field, f"dtype {values.dtype.str} is not an integer type")
    if rows is not None and values.shape[0] != rows:
        raise BatchRejected(field, f"{values.shape[0]} values, expected {rows} (one per row of time_ns)")
    if values.dtype == np.uint64 and values.size and values.max() > _MAX_INT64:
        row = int(np.argmax(values > _MAX_INT64))
        raise BatchRejected(field, f"{int(values[row])} does not fit a signed 64-bit integer", row)
    return values.astype(np.int64, copy=False)


def _check_ports(names: Sequence[str]) -> None:
    seen: dict[str, int] = {}
    for i, name in enumerate(names):
        if not name:
            raise BatchRejected(f"ports[{i}]", "a port name must not be empty")
        if name in seen:
            raise BatchRejected(f"ports[{i}]", f"{name!r} is listed twice (also ports[{seen[name]}])")
        seen[name] = i


def _column_values(values: np.ndarray, kind: CounterKind, field: str, rows: int) -> np.ndarray:
    if values.ndim != 1 or values.shape[0] != rows:
        raise BatchRejected(f"{field}.values", f"{values.size} values, expected {rows} (one per row)")
    if kind.is_cumulative:
        try:
            return counter_readings(values, kind)
        except InvalidReading as exc:
            raise BatchRejected(f"{field}.values", f"{exc} ({kind.name} counter)", exc.row) from None
    if values.dtype.kind not in "iuf":
        raise BatchRejected(f"{field}.values", f"dtype {values.dtype.str} is not numeric")
    amounts = values.astype(np.float64, copy=False)
    finite = np.isfinite(amounts)
    if not finite.all():
        row = int(np.argmin(finite))
        raise BatchRejected(f"{field}.values", f"{amounts[row]} is not a finite value", row)
    return amounts


def prepare_batch(
    port_names: Sequence[str],
    port_index: np.ndarray,
    time_ns: np.ndarray,
    columns: Mapping[str, np.ndarray],
    counter_kinds: Mapping[str, CounterKind] | None = None,
) -> PreparedBatch:
    """Validate a columnar batch; row i is (port_names[port_index[i]], time_ns[i], columns[*][i]).

    Field names in a BatchRejected are those of fabrictwin.v1.SampleBatch, with a column named by
    its position in `columns` (`columns[2].values`).
    """
    time = _integers(time_ns, "time_ns", None)
    rows = time.shape[0]
    negative = time < 0
    if negative.any():
        row = int(np.argmax(negative))
        raise BatchRejected("time_ns", f"{int(time[row])} is negative; times are ns >= 0", row)
    port = _integers(port_index, "port_index", rows)
    _check_ports(port_names)
    outside = (port < 0) | (port >= len(port_names))
    if outside.any():
        row = int(np.argmax(outside))
        raise BatchRejected(
            "port_index", f"{int(port[row])} is not an index into the {len(port_names)} ports", row
        )
    if not columns:
        raise BatchRejected("columns", "a batch needs at least one metric column")
    kinds = {name: CounterKind((counter_kinds or {}).get(name, CounterKind.DELTA)) for name in columns}
    values: dict[str, np.ndarray] = {}
    for i, (name, column) in enumerate(columns.items()):
        if name not in _KNOWN_COLUMNS:
            raise BatchRejected(f"columns[{i}]", f"{name!r} is not a metric column")
        values[name] = _column_values(np.asarray(column), kinds[name], f"columns[{i}]", rows)

    # np.lexsort is stable, so among rows with the same (port, time) the first one sent is kept.
    order = np.lexsort((time, port))
    sorted_port, sorted_time = port[order], time[order]
    repeat = np.zeros(rows, dtype=bool)
    repeat[1:] = (sorted_port[1:] == sorted_port[:-1]) & (sorted_time[1:] == sorted_time[:-1])
    keep = order[~repeat]
    used, local_port = np.unique(port[keep], return_inverse=True)
    return PreparedBatch(
        port_names=[port_names[i] for i in used.tolist()],
        port=local_port.astype(np.int64),
        time_ns=time[keep],
        values={name: column[keep] for name, column in values.items()},
        kinds=kinds,
        batch_row=keep.astype(np.int64),
        rows=rows,
        duplicates=int(repeat.sum()),
    )


def _port_ids(connection: Connection, source_id: str, names: list[str]) -> np.ndarray:
    """Database ids of `names` (ports of `source_id`), creating the ports that are new."""

    def lookup(wanted: list[str]) -> dict[str, int]:
        query = sa.select(ports.c.name, ports.c.id).where(ports.c.source_id == source_id)
        if len(wanted) <= _MAX_IN_LIST:
            query = query.where(ports.c.name.in_(wanted))
        return {name: port_id for name, port_id in connection.execute(query)}

    found = lookup(names)
    missing = [name for name in names if name not in found]
    if missing:
        create = dialect_insert(connection, ports).on_conflict_do_nothing(
            index_elements=["source_id", "name"]
        )
        connection.execute(create, [{"source_id": source_id, "name": name} for name in missing])
        found.update(lookup(missing))
    return np.array([found[name] for name in names], dtype=np.int64)


def _already_stored(
    connection: Connection, source_id: str, port_id: np.ndarray, time_ns: np.ndarray
) -> np.ndarray:
    """Which of these (port, time) rows the samples table holds already (re-sent cumulative rows)."""
    query = sa.select(samples.c.port_id, samples.c.time_ns).where(
        samples.c.source_id == source_id,
        samples.c.port_id.in_(np.unique(port_id).tolist()),
        samples.c.time_ns.between(int(time_ns.min()), int(time_ns.max())),
    )
    existing = {(port, time) for port, time in connection.execute(query)}
    # A Python loop, but only over rows re-sent at or before a port's last reading: not the hot path.
    keys = zip(port_id.tolist(), time_ns.tolist(), strict=True)
    return np.array([key in existing for key in keys], dtype=bool)


def _convert_cumulative(
    connection: Connection, source_id: str, batch: PreparedBatch, port_ids: np.ndarray
) -> tuple[np.ndarray, dict[str, np.ndarray], list[dict]]:
    """Deltas of the cumulative columns; returns (rows to insert, values, new counter state rows)."""
    cumulative = [name for name, kind in batch.kinds.items() if kind.is_cumulative]
    if not cumulative:
        return np.ones(batch.time_ns.shape[0], dtype=bool), dict(batch.values), []
    n_ports = len(port_ids)
    last_time = {name: np.full(n_ports, -1, dtype=np.int64) for name in cumulative}
    last_reading = {name: np.zeros(n_ports, dtype=np.uint64) for name in cumulative}
    local = {port_id: i for i, port_id in enumerate(port_ids.tolist())}
    state = sa.select(
        counter_state.c.port_id, counter_state.c.metric, counter_state.c.time_ns, counter_state.c.reading
    ).where(counter_state.c.source_id == source_id, counter_state.c.metric.in_(cumulative))
    if n_ports <= _MAX_IN_LIST:
        state = state.where(counter_state.c.port_id.in_(port_ids.tolist()))
    for port_id, metric, time_ns, reading in connection.execute(state):
        if port_id not in local:
            continue
        last_time[metric][local[port_id]] = time_ns
        last_reading[metric][local[port_id]] = np.array(reading, dtype=np.int64).view(np.uint64)

    # Rows at or before a port's last reading are either re-sent (already stored: duplicates) or
    # late, and a late reading cannot be turned into a delta without rewriting the next one.
    stale = np.zeros(batch.time_ns.shape[0], dtype=bool)
    for name in cumulative:
        stale |= batch.time_ns <= last_time[name][batch.port]
    keep = ~stale
    if stale.any():
        stored = _already_stored(connection, source_id, port_ids[batch.port[stale]], batch.time_ns[stale])
        if not stored.all():
            late = np.flatnonzero(stale)[~stored][0]
            name = next(n for n in cumulative if batch.time_ns[late] <= last_time[n][batch.port[late]])
            raise BatchRejected(
                f"columns[{list(batch.values).index(name)}].counter_kind",
                f"{batch.kinds[name].name} reading of port {batch.port_names[batch.port[late]]!r} at "
                f"{int(batch.time_ns[late])} ns is not after the last stored reading "
                f"({int(last_time[name][batch.port[late]])} ns); send cumulative counters in time order",
                int(batch.batch_row[late]),
            )

    port, time = batch.port[keep], batch.time_ns[keep]
    first = np.ones(port.shape[0], dtype=bool)
    first[1:] = port[1:] != port[:-1]
    last = np.ones(port.shape[0], dtype=bool)
    last[:-1] = first[1:]
    values = {name: column[keep] for name, column in batch.values.items()}
    new_state: list[dict] = []
    for name in cumulative:
        readings = values[name]
        previous = np.empty_like(readings)
        previous[1:] = readings[:-1]
        previous[first] = last_reading[name][port[first]]
        has_previous = ~first
        has_previous[first] = last_time[name][port[first]] >= 0
        values[name] = counter_deltas(batch.kinds[name], readings, previous, has_previous)
        new_state += [
            {"source_id": source_id, "port_id": port_id, "metric": name, "time_ns": at, "reading": reading}
            for port_id, at, reading in zip(
                port_ids[port[last]].tolist(),
                time[last].tolist(),
                readings[last].view(np.int64).tolist(),  # uint64 bits kept exactly in a BIGINT
                strict=True,
            )
        ]
    return keep, values, new_state


def _save_counter_state(connection: Connection, rows: list[dict]) -> None:
    if not rows:
        return
    upsert = dialect_insert(connection, counter_state)
    upsert = upsert.on_conflict_do_update(
        index_elements=["source_id", "port_id", "metric"],
        set_={"time_ns": upsert.excluded.time_ns, "reading": upsert.excluded.reading},
        where=upsert.excluded.time_ns > counter_state.c.time_ns,  # never move a counter back in time
    )
    connection.execute(upsert, rows)


def store_batch(connection: Connection, source_id: str, batch: PreparedBatch) -> tuple[int, int]:
    """Store a prepared batch inside the caller's transaction; returns (stored, duplicates)."""
    exists = connection.execute(sa.select(sources.c.id).where(sources.c.id == source_id)).first()
    if exists is None:
        raise BatchRejected("source", f"sources/{source_id} does not exist")
    if batch.time_ns.shape[0] == 0:
        return 0, batch.duplicates
    port_ids = _port_ids(connection, source_id, batch.port_names)
    keep, values, new_state = _convert_cumulative(connection, source_id, batch, port_ids)
    stored = insert_samples(connection, source_id, port_ids[batch.port[keep]], batch.time_ns[keep], values)
    _save_counter_state(connection, new_state)
    if stored:
        connection.execute(
            sa.update(sources)
            .where(sources.c.id == source_id)
            .values(sample_count=sources.c.sample_count + stored)
        )
    return stored, batch.rows - stored
