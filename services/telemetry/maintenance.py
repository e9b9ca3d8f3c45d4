"""The sweep of one source: roll up whole minutes, then apply the source's retention.

Run periodically by the service (`--maintenance-interval-seconds`) and callable on demand:

1. Roll-ups advance to the start of the newest sample's minute: every earlier minute is rolled up
   once (a late row into a rolled-up minute is recomputed by ingest, see `rollups`).
2. With retention_ns > 0, raw samples older than (newest sample - retention_ns), floored to a minute
   and never past the roll-ups, are deleted; the roll-ups stay. Retention is measured from the
   source's newest sample, not the wall clock, so it means the same for live clusters (epoch times)
   and simulated runs (times from 0); a source that stopped reporting keeps its last window.

The sweep holds the source row's lock (SELECT ... FOR UPDATE on PostgreSQL; SQLite has one writer)
for its transaction, which orders it against ingest's update of the same row.
"""

from __future__ import annotations

import dataclasses

import sqlalchemy as sa
from sqlalchemy import Connection

from services.common.errors import NotFound
from services.telemetry.rollups import bucket_start, roll_up
from services.telemetry.schema import samples, sources

__all__ = ["SweepOutcome", "sweep_source"]


@dataclasses.dataclass(frozen=True)
class SweepOutcome:
    """What one sweep did to a source."""

    rollup_rows: int
    rolled_up_until_ns: int
    deleted_samples: int
    retained_from_ns: int


def sweep_source(connection: Connection, source_id: str) -> SweepOutcome:
    """Roll up and apply retention for one source, inside the caller's transaction."""
    row = connection.execute(
        sa.select(
            sources.c.key,
            sources.c.newest_time_ns,
            sources.c.metrics_mask,
            sources.c.rolled_up_until_ns,
            sources.c.retained_from_ns,
            sources.c.retention_ns,
        )
        .where(sources.c.id == source_id)
        .with_for_update()
    ).first()
    if row is None:
        raise NotFound(f"sources/{source_id} does not exist")
    until, retained_from = int(row.rolled_up_until_ns), int(row.retained_from_ns)
    if row.newest_time_ns is None:
        return SweepOutcome(0, until, 0, retained_from)
    target = bucket_start(int(row.newest_time_ns))
    rollup_rows = 0
    if target > until:
        rollup_rows = roll_up(connection, row.key, int(row.metrics_mask), until, target)
        until = target
    deleted = 0
    if row.retention_ns > 0:
        cutoff = min(bucket_start(max(int(row.newest_time_ns) - int(row.retention_ns), 0)), until)
        if cutoff > retained_from:
            result = connection.execute(
                sa.delete(samples).where(samples.c.source_key == row.key, samples.c.time_ns < cutoff),
                execution_options={"preserve_rowcount": True},
            )
            deleted, retained_from = int(result.rowcount), cutoff
    connection.execute(
        sa.update(sources)
        .where(sources.c.key == row.key)
        .values(
            rolled_up_until_ns=until,
            retained_from_ns=retained_from,
            sample_count=sources.c.sample_count - deleted,
        )
    )
    return SweepOutcome(rollup_rows, until, deleted, retained_from)
