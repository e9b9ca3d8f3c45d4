"""Three more metrics: carrier changes and the RoCE sequence errors (out of sequence, packet seq errors).

- telemetry_samples gains `carrier_changes`, `out_of_sequence` and `packet_seq_errors` (DOUBLE, NULL).
- telemetry_rollups gains their `_count` (INTEGER) and `_sum`, `_min`, `_max` (DOUBLE) columns.

Existing rows read NULL for the new columns (never reported), as any metric a batch did not send.
On PostgreSQL the columns are added to the partitioned parents only: ALTER TABLE ... ADD COLUMN on a
partitioned table adds the column to every partition (the sources' `_s{key}` tables) in the same
statement, and partitions created later take the parent's columns. A nullable column without a
default is a catalogue change on both databases: no table is rewritten, however many rows it holds.
Frozen: the column names below are this revision's, not imported from schema.py.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-10
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

# fabrictwin.v1.Metric 20, 21, 22.
METRICS = ("carrier_changes", "out_of_sequence", "packet_seq_errors")


def upgrade() -> None:
    # Plain op.add_column, not batch_alter_table: SQLite's ADD COLUMN suffices for nullable columns
    # (WITHOUT ROWID tables included), so no table is copied.
    for name in METRICS:
        op.add_column("telemetry_samples", sa.Column(name, sa.Double, nullable=True))
    for name in METRICS:
        op.add_column("telemetry_rollups", sa.Column(f"{name}_count", sa.Integer, nullable=True))
        for aggregate in ("sum", "min", "max"):
            op.add_column("telemetry_rollups", sa.Column(f"{name}_{aggregate}", sa.Double, nullable=True))


def downgrade() -> None:
    for name in reversed(METRICS):
        for aggregate in ("max", "min", "sum", "count"):
            op.drop_column("telemetry_rollups", f"{name}_{aggregate}")
    for name in reversed(METRICS):
        op.drop_column("telemetry_samples", name)
