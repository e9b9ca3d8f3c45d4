"""The telemetry tables: sources, their ports, and samples as wide rows (one column per metric).

Tables are prefixed `telemetry_` because in production every service may share one PostgreSQL
database. They are created with `metadata.create_all` for now; Alembic migrations arrive with
issue #6, and this module stays the one description of the schema they start from.

Why the indexes look the way they do:

- `telemetry_samples` has the primary key (source_id, port_id, time_ns). It makes ingest idempotent
  (a re-sent row conflicts and is skipped) and serves every per-port time-range scan: QuerySeries
  and TopLinks over selected ports read one contiguous key range per port. On SQLite the table is
  WITHOUT ROWID, so the primary key is the table's own B-tree and a range scan reads rows in order.
- `ix_telemetry_samples_source_time` on (source_id, time_ns) serves window scans over all ports of a
  source (no port selector, "everything in the last minute") and, later, retention deletes.
- `telemetry_counter_state` keeps, per port and cumulative metric, the last raw counter reading, so
  that a cumulative counter is turned into per-interval deltas across batches.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy import Engine

from services.common.errors import InvalidArgument

__all__ = [
    "METRIC_COLUMNS",
    "column_for_metric",
    "counter_state",
    "create_schema",
    "metadata",
    "ports",
    "samples",
    "sources",
]

# The one mapping between fabrictwin.v1.Metric numbers and sample columns. Adding a metric means a
# proto value, a line here, and (from issue #6 on) an Alembic migration that adds the column.
METRIC_COLUMNS: dict[int, str] = {
    1: "tx_bytes",
    2: "rx_bytes",
    3: "tx_packets",
    4: "rx_packets",
    5: "utilisation",
    6: "drops",
    7: "xmit_discards",
    8: "symbol_errors",
    9: "rcv_errors",
    10: "pause_tx",
    11: "pause_rx",
    12: "pause_duration_ns",
    13: "ecn_marked",
    14: "cnp_sent",
    15: "cnp_handled",
    16: "xmit_wait",
    17: "retransmitted_packets",
    18: "queue_depth_bytes",
    19: "link_downed",
}

metadata = sa.MetaData()

sources = sa.Table(
    "telemetry_sources",
    metadata,
    sa.Column("id", sa.String(63), primary_key=True),
    sa.Column("kind", sa.String(16), nullable=False),  # "live" or "simulated"
    sa.Column("display_name", sa.Text, nullable=False, default=""),
    sa.Column("fabric", sa.Text, nullable=False, default=""),  # fabrics/{fabric} or ""
    sa.Column("simulation", sa.Text, nullable=False, default=""),  # simulations/{simulation} or ""
    sa.Column("retention_ns", sa.BigInteger, nullable=False, default=0),
    sa.Column("create_time_ns", sa.BigInteger, nullable=False),
    # Kept by ingest in the same transaction as the rows, so GetSource never counts millions of rows.
    sa.Column("sample_count", sa.BigInteger, nullable=False, default=0),
)

ports = sa.Table(
    "telemetry_ports",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("source_id", sa.String(63), sa.ForeignKey(sources.c.id, ondelete="CASCADE"), nullable=False),
    sa.Column("name", sa.Text, nullable=False),
    sa.UniqueConstraint("source_id", "name", name="uq_telemetry_ports_source_name"),
)

# No foreign keys on the two hot tables: PostgreSQL checks a foreign key with a trigger per inserted
# row, which ingest at 500k rows/s cannot afford. The store resolves ports in the same transaction
# as the rows it inserts and deletes a source's rows explicitly, which keeps them consistent.
samples = sa.Table(
    "telemetry_samples",
    metadata,
    sa.Column("source_id", sa.String(63), nullable=False),
    sa.Column("port_id", sa.Integer, nullable=False),
    sa.Column("time_ns", sa.BigInteger, nullable=False),
    *(sa.Column(name, sa.Double, nullable=True) for name in METRIC_COLUMNS.values()),
    sa.PrimaryKeyConstraint("source_id", "port_id", "time_ns", name="pk_telemetry_samples"),
    sa.Index("ix_telemetry_samples_source_time", "source_id", "time_ns"),
    sqlite_with_rowid=False,
)

counter_state = sa.Table(
    "telemetry_counter_state",
    metadata,
    sa.Column("source_id", sa.String(63), nullable=False),
    sa.Column("port_id", sa.Integer, nullable=False),
    sa.Column("metric", sa.String(32), nullable=False),  # a METRIC_COLUMNS value
    sa.Column("time_ns", sa.BigInteger, nullable=False),  # time of the last reading
    # The raw reading as stored bits: uint64 viewed as int64, so 64-bit counters stay exact.
    sa.Column("reading", sa.BigInteger, nullable=False),
    sa.PrimaryKeyConstraint("source_id", "port_id", "metric", name="pk_telemetry_counter_state"),
)


def column_for_metric(metric: int, field: str) -> str:
    """The sample column of a fabrictwin.v1.Metric number; anything else is INVALID_ARGUMENT on `field`.

    >>> column_for_metric(1, "metric")
    'tx_bytes'
    """
    try:
        return METRIC_COLUMNS[metric]
    except KeyError:
        raise InvalidArgument(field, f"unknown or unspecified metric {metric}") from None


def create_schema(engine: Engine) -> None:
    """Create the tables that are missing (Alembic takes over with issue #6)."""
    metadata.create_all(engine, checkfirst=True)
