"""The telemetry tables at migration head: sources, ports, wide samples, roll-ups, fabric links.

This module describes the schema the code reads and writes; `migrations/` creates it (Alembic, run
to head on every start), and a test checks that the two agree. Tables are prefixed `telemetry_`
because every service may share one PostgreSQL database.

Why the storage looks the way it does (the README's "Storage choices" says the same):

- Sources have an integer `key` besides their AIP id. Samples carry the 4-byte key, not the id, so
  the primary key (source_key, port_id, time_ns) is 24 bytes per index entry, and every per-port
  time-range scan (QuerySeries, GetLossHistory) is one contiguous range of it.
- On PostgreSQL `telemetry_samples` and `telemetry_rollups` are LIST-partitioned by source_key, one
  partition per source (`partitions.py`): deleting a source drops its partitions instead of deleting
  millions of rows, ingest COPYs straight into the source's partition, a window scan over all ports
  of a source never touches another source's rows, and the B-tree of one source stays small. Each
  sample partition also has a BRIN index on time_ns: live samples arrive in time order, so a few
  kilobytes of block-range summaries let a window scan over all ports (TopLinks, skew) read only
  the window's blocks, at a fraction of the ingest cost of a second B-tree.
- On SQLite the sample and roll-up tables are WITHOUT ROWID: the primary key is the table's own
  B-tree, so a port's rows are stored together in time order.
- No foreign keys on the hot tables: PostgreSQL checks a foreign key with a trigger per inserted
  row. The store resolves ports in the ingest transaction and drops a source's rows with it.
- `telemetry_rollups` keeps, per port and minute, count/sum/min/max of every metric. Queries with a
  step that is a multiple of a minute (and AVG, MIN, MAX, SUM) read them for whole minutes and raw
  samples only at the window's edges; the retention sweep deletes raw samples but keeps roll-ups.
- `telemetry_counter_log` holds each port's last raw reading per cumulative metric, which turns the
  next reading into a delta, as packed arrays: a row per batch (~5 MB for a 1,000-switch poll in
  one INSERT), folded into one row when they grow. One row per (port, metric) cost a 1,000-switch
  poll 247k rows read and upserted (2.1 s of its 3 s of ingest on SQLite, 4.7 s on PostgreSQL);
  the service keeps the state in memory between batches and reads the rows only after a restart
  or when another replica wrote the source (`counter_state`).
- `telemetry_fabric_links` holds the links of a fabric version (ends, port numbers, tiers), copied
  from the topology service once, so port groups (`group:uplinks`) resolve without calling it again.
"""

from __future__ import annotations

import sqlalchemy as sa

from services.common.errors import InvalidArgument

__all__ = [
    "METRIC_COLUMNS",
    "ROLLUP_AGGREGATES",
    "ROLLUP_NS",
    "column_for_metric",
    "counter_log",
    "fabric_links",
    "metadata",
    "metric_bit",
    "ports",
    "rollup_column",
    "rollups",
    "samples",
    "sources",
]

# The one mapping between fabrictwin.v1.Metric numbers and sample columns. Adding a metric means a
# proto value, a line here, and an Alembic migration that adds the sample and roll-up columns.
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
    20: "carrier_changes",
    21: "out_of_sequence",
    22: "packet_seq_errors",
}
_METRIC_NUMBERS = {name: number for number, name in METRIC_COLUMNS.items()}

ROLLUP_NS = 60_000_000_000  # roll-up resolution: one minute
ROLLUP_AGGREGATES = ("count", "sum", "min", "max")

metadata = sa.MetaData()

sources = sa.Table(
    "telemetry_sources",
    metadata,
    sa.Column("key", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("id", sa.String(63), nullable=False, unique=True),
    sa.Column("kind", sa.String(16), nullable=False),  # "live" or "simulated"
    sa.Column("display_name", sa.Text, nullable=False),
    sa.Column("fabric", sa.Text, nullable=False),  # fabrics/{fabric} or ""
    sa.Column("simulation", sa.Text, nullable=False),  # simulations/{simulation} or ""
    sa.Column("retention_ns", sa.BigInteger, nullable=False),
    sa.Column("create_time_ns", sa.BigInteger, nullable=False),
    # Kept by ingest in the same transaction as the rows, so GetSource never counts millions of rows.
    sa.Column("sample_count", sa.BigInteger, nullable=False),
    sa.Column("newest_time_ns", sa.BigInteger, nullable=True),  # NULL until the first sample
    sa.Column("metrics_mask", sa.BigInteger, nullable=False),  # bit m: metric number m was stored
    sa.Column("rolled_up_until_ns", sa.BigInteger, nullable=False),  # roll-ups cover buckets before this
    sa.Column("retained_from_ns", sa.BigInteger, nullable=False),  # raw samples before this were deleted
    sa.Column("fabric_version", sa.BigInteger, nullable=False),  # fabric links it resolves against, 0 none
    # One more for every batch that changed a port's rate_bps: the service's rates in memory are those
    # of this version or read again (`port_rates`).
    sa.Column("port_rates_version", sa.BigInteger, nullable=False, server_default="0"),
    sqlite_autoincrement=True,  # a deleted source's key is never reused (ingest caches port ids by key)
)

ports = sa.Table(
    "telemetry_ports",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("source_key", sa.Integer, sa.ForeignKey(sources.c.key, ondelete="CASCADE"), nullable=False),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("rate_bps", sa.Double, nullable=True),  # link rate as last reported, to derive utilisation
    sa.UniqueConstraint("source_key", "name", name="uq_telemetry_ports_source_name"),
    sqlite_autoincrement=True,
)


def rollup_column(metric: str, aggregate: str) -> str:
    """The roll-up column of a metric's aggregate: `tx_bytes_sum`, `utilisation_count`."""
    return f"{metric}_{aggregate}"


def _rollup_columns() -> list[sa.Column]:
    columns = []
    for name in METRIC_COLUMNS.values():
        columns.append(sa.Column(rollup_column(name, "count"), sa.Integer, nullable=True))
        for aggregate in ROLLUP_AGGREGATES[1:]:
            columns.append(sa.Column(rollup_column(name, aggregate), sa.Double, nullable=True))
    return columns


samples = sa.Table(
    "telemetry_samples",
    metadata,
    sa.Column("source_key", sa.Integer, nullable=False),
    sa.Column("port_id", sa.Integer, nullable=False),
    sa.Column("time_ns", sa.BigInteger, nullable=False),
    *(sa.Column(name, sa.Double, nullable=True) for name in METRIC_COLUMNS.values()),
    sa.PrimaryKeyConstraint("source_key", "port_id", "time_ns", name="pk_telemetry_samples"),
    sa.Index(
        "ix_telemetry_samples_time_brin",
        "time_ns",
        postgresql_using="brin",
        postgresql_with={"pages_per_range": 32, "autosummarize": "on"},
    ).ddl_if(dialect="postgresql"),  # SQLite has no BRIN: its window scans use the primary key per port
    sqlite_with_rowid=False,
    postgresql_partition_by="LIST (source_key)",
)

rollups = sa.Table(
    "telemetry_rollups",
    metadata,
    sa.Column("source_key", sa.Integer, nullable=False),
    sa.Column("port_id", sa.Integer, nullable=False),
    sa.Column("bucket_ns", sa.BigInteger, nullable=False),  # start of the minute
    *_rollup_columns(),
    sa.PrimaryKeyConstraint("source_key", "port_id", "bucket_ns", name="pk_telemetry_rollups"),
    sqlite_with_rowid=False,
    postgresql_partition_by="LIST (source_key)",
)

# Each source's counter state (see `counter_state`): per row, the readings one batch made, or the
# whole state; each column a packed little-endian array, entry i of every column one reading.
counter_log = sa.Table(
    "telemetry_counter_log",
    metadata,
    sa.Column("source_key", sa.Integer, nullable=False),
    sa.Column("generation", sa.BigInteger, nullable=False),  # the batch's place among the source's
    sa.Column("port_id", sa.LargeBinary, nullable=False),  # <i4
    sa.Column("metric", sa.LargeBinary, nullable=False),  # <u1, fabrictwin.v1.Metric numbers
    sa.Column("time_ns", sa.LargeBinary, nullable=False),  # <i8, the time of the reading
    sa.Column("reading", sa.LargeBinary, nullable=False),  # <u8, the raw reading
    sa.PrimaryKeyConstraint("source_key", "generation", name="pk_telemetry_counter_log"),
)

fabric_links = sa.Table(
    "telemetry_fabric_links",
    metadata,
    sa.Column("fabric", sa.Text, nullable=False),  # fabrics/{fabric}
    sa.Column("version", sa.BigInteger, nullable=False),  # the fabric's create time, ns
    sa.Column("link_index", sa.Integer, nullable=False),
    sa.Column("node_a", sa.Text, nullable=False),  # node display names (`leaf-3`)
    sa.Column("port_a", sa.Integer, nullable=False),
    sa.Column("tier_a", sa.SmallInteger, nullable=False),  # 0 host, 1 leaf/edge, 2 spine/aggregation, 3 core
    sa.Column("node_b", sa.Text, nullable=False),
    sa.Column("port_b", sa.Integer, nullable=False),
    sa.Column("tier_b", sa.SmallInteger, nullable=False),
    sa.PrimaryKeyConstraint("fabric", "version", "link_index", name="pk_telemetry_fabric_links"),
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


def metric_bit(column: str) -> int:
    """The bit of a metric column in `telemetry_sources.metrics_mask`.

    >>> metric_bit("rx_bytes")
    4
    """
    return 1 << _METRIC_NUMBERS[column]
