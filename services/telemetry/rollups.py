"""One-minute roll-ups: count, sum, min and max of every stored metric, per port and minute.

A source's roll-ups cover every minute bucket that starts before its `rolled_up_until_ns`, and for
those buckets they always equal the aggregates of the raw samples:

- the sweep (`maintenance.sweep_source`) rolls up whole buckets that end before the newest sample's
  bucket, under the source row's lock;
- ingest of a late row (time before `rolled_up_until_ns`) recomputes the buckets it touches, for the
  ports it touches, in the ingest transaction, after taking the same lock (`refresh_rollups`);
- the retention sweep deletes raw samples only before `rolled_up_until_ns`, so roll-ups outlive
  them, and ingest refuses rows older than the retention horizon (they would be rolled up alone).

Only the metrics a source has ever stored (its `metrics_mask`) are aggregated; the others stay NULL.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy import Connection

from services.telemetry.schema import METRIC_COLUMNS, ROLLUP_NS, metric_bit, rollup_column, rollups, samples

__all__ = ["bucket_start", "masked_metrics", "refresh_rollups", "roll_up"]


def bucket_start(time_ns: int, width_ns: int = ROLLUP_NS) -> int:
    """Start of the bucket holding `time_ns` (buckets aligned to time 0).

    >>> bucket_start(61_000_000_000)
    60000000000
    """
    return time_ns - time_ns % width_ns


def masked_metrics(mask: int) -> list[str]:
    """The metric columns whose bits are set in a source's metrics_mask."""
    return [name for name in METRIC_COLUMNS.values() if mask & metric_bit(name)]


def _aggregates(metrics: Sequence[str], start_ns: int, end_ns: int, source_key: int, port_ids) -> sa.Select:
    width = sa.literal(ROLLUP_NS, sa.BigInteger)
    bucket = (samples.c.time_ns - samples.c.time_ns % width).label("bucket_ns")
    aggregates = []
    for name in metrics:
        column = samples.c[name]
        aggregates += [
            sa.func.count(column).label(rollup_column(name, "count")),
            sa.func.sum(column).label(rollup_column(name, "sum")),
            sa.func.min(column).label(rollup_column(name, "min")),
            sa.func.max(column).label(rollup_column(name, "max")),
        ]
    query = sa.select(
        sa.literal(source_key, sa.Integer).label("source_key"), samples.c.port_id, bucket, *aggregates
    )
    query = query.where(
        samples.c.source_key == source_key, samples.c.time_ns >= start_ns, samples.c.time_ns < end_ns
    )
    if port_ids is not None:
        query = query.where(samples.c.port_id.in_(list(port_ids)))
    return query.group_by(samples.c.port_id, bucket)


def _insert(connection: Connection, query: sa.Select) -> int:
    names = [column.name for column in query.selected_columns]
    statement = sa.insert(rollups).from_select(names, query)
    return int(connection.execute(statement, execution_options={"preserve_rowcount": True}).rowcount)


def roll_up(connection: Connection, source_key: int, mask: int, start_ns: int, end_ns: int) -> int:
    """Add the roll-ups of every port for buckets in [start_ns, end_ns) (both on bucket edges).

    Those buckets must not be rolled up yet. Returns the roll-up rows written.
    """
    metrics = masked_metrics(mask)
    if not metrics or end_ns <= start_ns:
        return 0
    return _insert(connection, _aggregates(metrics, start_ns, end_ns, source_key, None))


def refresh_rollups(
    connection: Connection, source_key: int, mask: int, port_ids: Sequence[int], start_ns: int, end_ns: int
) -> int:
    """Recompute the roll-ups of `port_ids` for buckets in [bucket_start(start_ns), end_ns)."""
    metrics = masked_metrics(mask)
    start = bucket_start(start_ns)
    if not metrics or not port_ids or end_ns <= start:
        return 0
    connection.execute(
        sa.delete(rollups).where(
            rollups.c.source_key == source_key,
            rollups.c.port_id.in_(list(port_ids)),
            rollups.c.bucket_ns >= start,
            rollups.c.bucket_ns < end_ns,
        )
    )
    return _insert(connection, _aggregates(metrics, start, end_ns, source_key, port_ids))
