"""Integer source keys, per-source partitions (PostgreSQL), one-minute roll-ups, fabric links.

- telemetry_ports gains the link rate of the port (to derive utilisation from byte counters).
- telemetry_sources gains an integer `key` (samples carry it instead of the string id), the newest
  sample time, the mask of metrics stored, the roll-up and retention marks and the fabric version.
- telemetry_samples is keyed (source_key, port_id, time_ns); on PostgreSQL it is LIST-partitioned by
  source_key with a BRIN index on time_ns, and the (source_id, time_ns) B-tree is gone.
- telemetry_rollups (per port and minute: count, sum, min, max of every metric) and
  telemetry_fabric_links (the links of a fabric version, with tiers) are new.

Existing rows are kept: they are copied into temporary tables, the old tables are dropped, the new
ones created and the rows copied back with their port ids. One-way: there is no downgrade.
Frozen: the table definitions below are this revision's, not imported from schema.py.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

METRICS = (
    "tx_bytes",
    "rx_bytes",
    "tx_packets",
    "rx_packets",
    "utilisation",
    "drops",
    "xmit_discards",
    "symbol_errors",
    "rcv_errors",
    "pause_tx",
    "pause_rx",
    "pause_duration_ns",
    "ecn_marked",
    "cnp_sent",
    "cnp_handled",
    "xmit_wait",
    "retransmitted_packets",
    "queue_depth_bytes",
    "link_downed",
)
ALL_METRICS_MASK = sum(1 << number for number in range(1, len(METRICS) + 1))
LEGACY = ("telemetry_sources", "telemetry_ports", "telemetry_samples", "telemetry_counter_state")


def _create_tables(postgresql: bool) -> None:
    op.create_table(
        "telemetry_sources",
        sa.Column("key", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("id", sa.String(63), nullable=False, unique=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("display_name", sa.Text, nullable=False),
        sa.Column("fabric", sa.Text, nullable=False),
        sa.Column("simulation", sa.Text, nullable=False),
        sa.Column("retention_ns", sa.BigInteger, nullable=False),
        sa.Column("create_time_ns", sa.BigInteger, nullable=False),
        sa.Column("sample_count", sa.BigInteger, nullable=False),
        sa.Column("newest_time_ns", sa.BigInteger, nullable=True),
        sa.Column("metrics_mask", sa.BigInteger, nullable=False),
        sa.Column("rolled_up_until_ns", sa.BigInteger, nullable=False),
        sa.Column("retained_from_ns", sa.BigInteger, nullable=False),
        sa.Column("fabric_version", sa.BigInteger, nullable=False),
        sqlite_autoincrement=True,
    )
    op.create_table(
        "telemetry_ports",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column(
            "source_key",
            sa.Integer,
            sa.ForeignKey("telemetry_sources.key", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("rate_bps", sa.Double, nullable=True),
        sa.UniqueConstraint("source_key", "name", name="uq_telemetry_ports_source_name"),
        sqlite_autoincrement=True,
    )
    partitioned: dict[str, Any] = {"postgresql_partition_by": "LIST (source_key)"}
    op.create_table(
        "telemetry_samples",
        sa.Column("source_key", sa.Integer, nullable=False),
        sa.Column("port_id", sa.Integer, nullable=False),
        sa.Column("time_ns", sa.BigInteger, nullable=False),
        *(sa.Column(name, sa.Double, nullable=True) for name in METRICS),
        sa.PrimaryKeyConstraint("source_key", "port_id", "time_ns", name="pk_telemetry_samples"),
        sqlite_with_rowid=False,
        **partitioned,
    )
    if postgresql:
        op.create_index(
            "ix_telemetry_samples_time_brin",
            "telemetry_samples",
            ["time_ns"],
            postgresql_using="brin",
            postgresql_with={"pages_per_range": 32, "autosummarize": "on"},
        )
    rollup_columns = []
    for name in METRICS:
        rollup_columns.append(sa.Column(f"{name}_count", sa.Integer, nullable=True))
        rollup_columns += [sa.Column(f"{name}_{a}", sa.Double, nullable=True) for a in ("sum", "min", "max")]
    op.create_table(
        "telemetry_rollups",
        sa.Column("source_key", sa.Integer, nullable=False),
        sa.Column("port_id", sa.Integer, nullable=False),
        sa.Column("bucket_ns", sa.BigInteger, nullable=False),
        *rollup_columns,
        sa.PrimaryKeyConstraint("source_key", "port_id", "bucket_ns", name="pk_telemetry_rollups"),
        sqlite_with_rowid=False,
        **partitioned,
    )
    op.create_table(
        "telemetry_counter_state",
        sa.Column("source_key", sa.Integer, nullable=False),
        sa.Column("port_id", sa.Integer, nullable=False),
        sa.Column("metric", sa.String(32), nullable=False),
        sa.Column("time_ns", sa.BigInteger, nullable=False),
        sa.Column("reading", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("source_key", "port_id", "metric", name="pk_telemetry_counter_state"),
    )
    op.create_table(
        "telemetry_fabric_links",
        sa.Column("fabric", sa.Text, nullable=False),
        sa.Column("version", sa.BigInteger, nullable=False),
        sa.Column("link_index", sa.Integer, nullable=False),
        sa.Column("node_a", sa.Text, nullable=False),
        sa.Column("port_a", sa.Integer, nullable=False),
        sa.Column("tier_a", sa.SmallInteger, nullable=False),
        sa.Column("node_b", sa.Text, nullable=False),
        sa.Column("port_b", sa.Integer, nullable=False),
        sa.Column("tier_b", sa.SmallInteger, nullable=False),
        sa.PrimaryKeyConstraint("fabric", "version", "link_index", name="pk_telemetry_fabric_links"),
    )


def upgrade() -> None:
    bind = op.get_bind()
    postgresql = bind.dialect.name == "postgresql"
    for table in LEGACY:
        op.execute(f"CREATE TEMPORARY TABLE legacy_{table} AS SELECT * FROM {table}")
    for table in reversed(LEGACY):
        op.drop_table(table)
    _create_tables(postgresql)

    metrics = ", ".join(METRICS)
    op.execute(
        "INSERT INTO telemetry_sources (id, kind, display_name, fabric, simulation, retention_ns, "
        "create_time_ns, sample_count, newest_time_ns, metrics_mask, rolled_up_until_ns, retained_from_ns, "
        "fabric_version) "
        "SELECT s.id, s.kind, s.display_name, s.fabric, s.simulation, s.retention_ns, s.create_time_ns, "
        "s.sample_count, (SELECT max(time_ns) FROM legacy_telemetry_samples m WHERE m.source_id = s.id), "
        f"{ALL_METRICS_MASK}, 0, 0, 0 FROM legacy_telemetry_sources s ORDER BY s.id"
    )
    if postgresql:
        for (key,) in bind.execute(sa.text("SELECT key FROM telemetry_sources")):
            for table in ("telemetry_samples", "telemetry_rollups"):
                op.execute(f"CREATE TABLE {table}_s{key} PARTITION OF {table} FOR VALUES IN ({key})")
    op.execute(
        "INSERT INTO telemetry_ports (id, source_key, name) SELECT p.id, s.key, p.name "
        "FROM legacy_telemetry_ports p JOIN telemetry_sources s ON s.id = p.source_id"
    )
    if postgresql:  # the copied ids were explicit: move the sequence past them
        op.execute(
            "SELECT setval(pg_get_serial_sequence('telemetry_ports', 'id'), "
            "coalesce((SELECT max(id) FROM telemetry_ports), 0) + 1, false)"
        )
    op.execute(
        f"INSERT INTO telemetry_samples (source_key, port_id, time_ns, {metrics}) "
        f"SELECT s.key, m.port_id, m.time_ns, {', '.join('m.' + name for name in METRICS)} "
        "FROM legacy_telemetry_samples m JOIN telemetry_sources s ON s.id = m.source_id"
    )
    op.execute(
        "INSERT INTO telemetry_counter_state (source_key, port_id, metric, time_ns, reading) "
        "SELECT s.key, c.port_id, c.metric, c.time_ns, c.reading "
        "FROM legacy_telemetry_counter_state c JOIN telemetry_sources s ON s.id = c.source_id"
    )
    for table in LEGACY:
        op.execute(f"DROP TABLE legacy_{table}")


def downgrade() -> None:
    raise NotImplementedError("0002 is one-way: restore a backup to go back to the first slice's schema")
