"""telemetry_sources gains `port_rates_version`: one more for every batch that changed a port's
link rate (telemetry_ports.rate_bps), so the service keeps the rates in memory while they are current
(services/telemetry/port_rates.py). Existing sources start at 0; a service that has not read them yet
holds none, so it reads them at its first batch whatever the version. Adding a NOT NULL column with a
constant default rewrites no table on PostgreSQL 11+ or SQLite.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-14
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "telemetry_sources",
        sa.Column("port_rates_version", sa.BigInteger, nullable=False, server_default="0"),
    )


def downgrade() -> None:
    op.drop_column("telemetry_sources", "port_rates_version")  # SQLite: 3.35+, as 0003's downgrade
