"""Bucketed aggregates in SQL, from raw samples and, where they can serve, one-minute roll-ups.

A query asks for metrics per (port, bucket) over [start, end) with a step (0: the whole window is
one bucket) and an aggregation. Buckets are aligned to time 0: bucket = t - t % step.

When the aggregation is AVG, MIN, MAX or SUM and the step is a multiple of the roll-up width, every
step bucket is a union of whole minutes, so the window splits into
  [start, rs)  raw samples  |  [rs, re)  roll-ups  |  [re, end)  raw samples
with rs the first minute edge at or after start and re the last minute edge before end, capped at
the source's `rolled_up_until_ns`. One SQL statement reads the three parts as (sum, count, min, max)
rows (UNION ALL) and combines them per bucket. Otherwise (a finer step, P50/P99) it reads raw
samples only. Raw parts that reach into samples deleted by retention are refused, naming the field.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from services.common.errors import InvalidArgument
from services.telemetry.rollups import bucket_start
from services.telemetry.schema import ROLLUP_NS, rollup_column, rollups, samples

__all__ = [
    "QUANTILES",
    "Aggregation",
    "PortSet",
    "Window",
    "bucketed",
    "raw_rows",
    "rollup_aggregations",
    "window_plan",
]

# SQLite refuses statements with more than 32,766 parameters.
MAX_SQLITE_PORTS = 30_000


class Aggregation(enum.Enum):
    """How the samples of a bucket (or of a window) are reduced to one value."""

    AVG = "avg"
    MIN = "min"
    MAX = "max"
    SUM = "sum"
    P50 = "p50"
    P99 = "p99"


QUANTILES = {Aggregation.P50: 0.5, Aggregation.P99: 0.99}
rollup_aggregations = frozenset({Aggregation.AVG, Aggregation.MIN, Aggregation.MAX, Aggregation.SUM})
_DIRECT: dict[Aggregation, Callable[[sa.ColumnElement[Any]], sa.FunctionElement[Any]]] = {
    Aggregation.AVG: sa.func.avg,
    Aggregation.MIN: sa.func.min,
    Aggregation.MAX: sa.func.max,
    Aggregation.SUM: sa.func.sum,
}


@dataclasses.dataclass(frozen=True)
class PortSet:
    """The ports a query reads: their ids, and whether they are all the source's ports."""

    ids: list[int]
    everything: bool = False


@dataclasses.dataclass(frozen=True)
class Window:
    """[start_ns, end_ns) split into the parts served by roll-ups and by raw samples."""

    start_ns: int
    end_ns: int
    rollup: tuple[int, int] | None  # [rs, re) read from roll-ups
    raw: tuple[tuple[int, int], ...]  # parts read from raw samples

    @property
    def empty(self) -> bool:
        """True when the window holds no time at all."""
        return self.end_ns <= self.start_ns


def window_plan(
    start_ns: int,
    end_ns: int,
    step_ns: int,
    aggregation: Aggregation,
    rolled_up_until_ns: int,
    retained_from_ns: int,
) -> Window:
    """Which parts of [start_ns, end_ns) roll-ups serve; step 0 is one bucket for the whole window.

    A start of 0 reads raw samples from the retention horizon on; an explicit start before it is
    answered from roll-ups alone, or refused naming `time_range.start_ns`.
    """
    rollup = None
    raw: tuple[tuple[int, int], ...] = ((start_ns, end_ns),)
    if aggregation in rollup_aggregations and step_ns % ROLLUP_NS == 0:
        first = -(-start_ns // ROLLUP_NS) * ROLLUP_NS
        last = min(bucket_start(end_ns), rolled_up_until_ns)
        if first < last:
            rollup = (first, last)
            raw = tuple(part for part in ((start_ns, first), (last, end_ns)) if part[0] < part[1])
    if start_ns == 0 and retained_from_ns:
        # An open start means "from the oldest data kept": raw samples from the retention horizon.
        raw = tuple((max(low, retained_from_ns), high) for low, high in raw if high > retained_from_ns)
    for low, _high in raw:
        if low < retained_from_ns:
            raise InvalidArgument(
                "time_range.start_ns",
                f"raw samples before {retained_from_ns} ns were deleted by the source's retention; "
                "older windows are kept as one-minute roll-ups: ask with step_ns a multiple of "
                f"{ROLLUP_NS} and AVG, MIN, MAX or SUM, and minute-aligned start_ns and end_ns",
            )
    return Window(start_ns, end_ns, rollup, raw)


def _port_condition(column: sa.ColumnElement, ports: PortSet, dialect: str) -> sa.ColumnElement[bool] | None:
    if ports.everything and dialect == "postgresql":
        return None  # the partition holds only this source's rows
    if dialect == "postgresql":
        ids = sa.bindparam("port_ids", value=list(ports.ids), type_=postgresql.ARRAY(sa.Integer), unique=True)
        return column == sa.any_(ids)
    if len(ports.ids) > MAX_SQLITE_PORTS:
        raise InvalidArgument(
            "ports.patterns",
            f"selects {len(ports.ids)} ports; on SQLite one query reads at most {MAX_SQLITE_PORTS} "
            "(PostgreSQL has no such limit)",
        )
    # Even "all ports" is listed: SQLite then seeks each port's key range instead of the source's.
    return column.in_(list(ports.ids))


def _bucket(time: sa.ColumnElement, start_ns: int, step_ns: int) -> sa.ColumnElement:
    if step_ns == 0:
        return sa.literal(start_ns, sa.BigInteger)
    step = sa.literal(step_ns, sa.BigInteger)
    return time - time % step


def _raw_where(window: Window, source_key: int, ports: PortSet, dialect: str) -> list:
    parts = [sa.and_(samples.c.time_ns >= low, samples.c.time_ns < high) for low, high in window.raw]
    conditions = [samples.c.source_key == source_key, sa.or_(sa.false(), *parts)]  # no parts: no rows
    port = _port_condition(samples.c.port_id, ports, dialect)
    return conditions + ([port] if port is not None else [])


def _direct(
    window: Window,
    source_key: int,
    ports: PortSet,
    metrics: Sequence[str],
    aggregation: Aggregation,
    step_ns: int,
    dialect: str,
) -> sa.Select:
    """Raw samples only: one aggregate per metric, grouped by port and bucket."""
    bucket = _bucket(samples.c.time_ns, window.start_ns, step_ns).label("bucket")
    values = []
    for i, name in enumerate(metrics):
        column = samples.c[name]
        if aggregation in _DIRECT:
            values.append(_DIRECT[aggregation](column).label(f"value_{i}"))
        else:  # PostgreSQL only; SQLite percentiles are computed by the caller from raw rows
            values.append(
                sa.func.percentile_cont(QUANTILES[aggregation]).within_group(column).label(f"value_{i}")
            )
    conditions = _raw_where(window, source_key, ports, dialect)
    if len(metrics) == 1:
        conditions.append(samples.c[metrics[0]].is_not(None))
    query = sa.select(samples.c.port_id, bucket, *values).where(*conditions)
    return query.group_by(samples.c.port_id, bucket)


def _combined(
    window: Window,
    source_key: int,
    ports: PortSet,
    metrics: Sequence[str],
    aggregation: Aggregation,
    step_ns: int,
    dialect: str,
) -> sa.Select:
    """Raw edges and roll-ups as (sum, count, min, max) rows, combined per port and bucket."""
    raw_columns, rollup_columns = [], []
    for i, name in enumerate(metrics):
        value = samples.c[name]
        present = sa.case((value.is_(None), 0), else_=1)
        raw_columns += [
            value.label(f"s{i}"),
            present.label(f"c{i}"),
            value.label(f"lo{i}"),
            value.label(f"hi{i}"),
        ]
        rollup_columns += [
            rollups.c[rollup_column(name, "sum")].label(f"s{i}"),
            rollups.c[rollup_column(name, "count")].label(f"c{i}"),
            rollups.c[rollup_column(name, "min")].label(f"lo{i}"),
            rollups.c[rollup_column(name, "max")].label(f"hi{i}"),
        ]
    parts = []
    if window.raw:
        raw = sa.select(
            samples.c.port_id,
            _bucket(samples.c.time_ns, window.start_ns, step_ns).label("bucket"),
            *raw_columns,
        ).where(*_raw_where(window, source_key, ports, dialect))
        if len(metrics) == 1:
            raw = raw.where(samples.c[metrics[0]].is_not(None))
        parts.append(raw)
    low, high = window.rollup or (0, 0)
    conditions = [rollups.c.source_key == source_key, rollups.c.bucket_ns >= low, rollups.c.bucket_ns < high]
    port = _port_condition(rollups.c.port_id, ports, dialect)
    conditions += [port] if port is not None else []
    if len(metrics) == 1:
        conditions.append(rollups.c[rollup_column(metrics[0], "count")] > 0)
    parts.append(
        sa.select(
            rollups.c.port_id,
            _bucket(rollups.c.bucket_ns, window.start_ns, step_ns).label("bucket"),
            *rollup_columns,
        ).where(*conditions)
    )
    union = sa.union_all(*parts).subquery("parts")
    values = []
    for i in range(len(metrics)):
        total, count = sa.func.sum(union.c[f"s{i}"]), sa.func.sum(union.c[f"c{i}"])
        aggregate = {
            Aggregation.AVG: total / sa.func.nullif(count, 0),
            Aggregation.SUM: sa.case((count > 0, total), else_=None),
            Aggregation.MIN: sa.func.min(union.c[f"lo{i}"]),
            Aggregation.MAX: sa.func.max(union.c[f"hi{i}"]),
        }[aggregation]
        values.append(sa.cast(aggregate, sa.Double).label(f"value_{i}"))
    query = sa.select(union.c.port_id, union.c.bucket, *values)
    return query.group_by(union.c.port_id, union.c.bucket)


def bucketed(
    window: Window,
    source_key: int,
    ports: PortSet,
    metrics: Sequence[str],
    aggregation: Aggregation,
    step_ns: int,
    dialect: str,
) -> sa.Select:
    """SELECT port_id, bucket, value_0.. per (port, bucket) of the window; not ordered.

    Percentiles are for PostgreSQL only (SQLite's come from `raw_rows` and numpy).
    """
    if window.rollup is None:
        return _direct(window, source_key, ports, metrics, aggregation, step_ns, dialect)
    return _combined(window, source_key, ports, metrics, aggregation, step_ns, dialect)


def raw_rows(
    window: Window, source_key: int, ports: PortSet, metric: str, step_ns: int, dialect: str
) -> sa.Select:
    """SELECT port_id, bucket, value of raw samples, ordered by port, bucket and value (for quantiles)."""
    bucket = _bucket(samples.c.time_ns, window.start_ns, step_ns).label("bucket")
    value = samples.c[metric]
    query = sa.select(samples.c.port_id, bucket, value.label("value"))
    query = query.where(*_raw_where(window, source_key, ports, dialect), value.is_not(None))
    return query.order_by(samples.c.port_id, bucket, value)
