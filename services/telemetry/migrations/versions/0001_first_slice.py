"""The first slice's schema: string source ids, wide samples keyed (source_id, port_id, time_ns).

This is what `metadata.create_all` made before migrations existed (commit f5b891b). A database that
has these tables but no version table is stamped at this revision and upgraded from here
(`services.telemetry.migrate`). Frozen: later schema changes are new revisions, never edits here.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

# The metric columns as they were at this revision.
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


def upgrade() -> None:
    op.create_table(
        "telemetry_sources",
        sa.Column("id", sa.String(63), primary_key=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("display_name", sa.Text, nullable=False),
        sa.Column("fabric", sa.Text, nullable=False),
        sa.Column("simulation", sa.Text, nullable=False),
        sa.Column("retention_ns", sa.BigInteger, nullable=False),
        sa.Column("create_time_ns", sa.BigInteger, nullable=False),
        sa.Column("sample_count", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "telemetry_ports",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column(
            "source_id",
            sa.String(63),
            sa.ForeignKey("telemetry_sources.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("name", sa.Text, nullable=False),
        sa.UniqueConstraint("source_id", "name", name="uq_telemetry_ports_source_name"),
    )
    op.create_table(
        "telemetry_samples",
        sa.Column("source_id", sa.String(63), nullable=False),
        sa.Column("port_id", sa.Integer, nullable=False),
        sa.Column("time_ns", sa.BigInteger, nullable=False),
        *(sa.Column(name, sa.Double, nullable=True) for name in METRICS),
        sa.PrimaryKeyConstraint("source_id", "port_id", "time_ns", name="pk_telemetry_samples"),
        sqlite_with_rowid=False,
    )
    op.create_index("ix_telemetry_samples_source_time", "telemetry_samples", ["source_id", "time_ns"])
    op.create_table(
        "telemetry_counter_state",
        sa.Column("source_id", sa.String(63), nullable=False),
        sa.Column("port_id", sa.Integer, nullable=False),
        sa.Column("metric", sa.String(32), nullable=False),
        sa.Column("time_ns", sa.BigInteger, nullable=False),
        sa.Column("reading", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("source_id", "port_id", "metric", name="pk_telemetry_counter_state"),
    )


def downgrade() -> None:
    for table in ("telemetry_counter_state", "telemetry_samples", "telemetry_ports", "telemetry_sources"):
        op.drop_table(table)
