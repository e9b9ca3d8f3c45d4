"""Counter state as packed rows: telemetry_counter_state (one row per port and cumulative metric)
becomes telemetry_counter_log (one row per batch: a ports x metrics matrix of packed little-endian
arrays; see services/telemetry/counter_state.py).

Each source's state rows are carried over as one log row at generation 1 holding them all (-1 for
the time of a port without a reading of a metric), so the next reading of every port is still a
delta against the last one stored. On PostgreSQL the packed columns are stored uncompressed
(STORAGE EXTERNAL): pglz on a 1,000-switch poll's few MB took about three times as long as writing
them. The downgrade unpacks each source's newest readings into rows again.
Frozen: the names and packing below are this revision's, not imported from the code.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-14
"""

from __future__ import annotations

import numpy as np
import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

# fabrictwin.v1.Metric numbers of the metric columns at this revision.
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
    "carrier_changes",
    "out_of_sequence",
    "packet_seq_errors",
)
NUMBERS = {name: number for number, name in enumerate(METRICS, start=1)}
PACKING = {"port_id": "<i4", "metric": "<u1", "time_ns": "<i8", "reading": "<u8"}


def _create_log() -> None:
    op.create_table(
        "telemetry_counter_log",
        sa.Column("source_key", sa.Integer, nullable=False),
        sa.Column("generation", sa.BigInteger, nullable=False),
        *(sa.Column(name, sa.LargeBinary, nullable=False) for name in PACKING),
        sa.PrimaryKeyConstraint("source_key", "generation", name="pk_telemetry_counter_log"),
    )
    if op.get_bind().dialect.name == "postgresql":
        for name in PACKING:
            op.execute(f"ALTER TABLE telemetry_counter_log ALTER COLUMN {name} SET STORAGE EXTERNAL")


def _create_state() -> None:
    op.create_table(
        "telemetry_counter_state",
        sa.Column("source_key", sa.Integer, nullable=False),
        sa.Column("port_id", sa.Integer, nullable=False),
        sa.Column("metric", sa.String(32), nullable=False),
        sa.Column("time_ns", sa.BigInteger, nullable=False),
        sa.Column("reading", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("source_key", "port_id", "metric", name="pk_telemetry_counter_state"),
    )


def upgrade() -> None:
    _create_log()
    connection = op.get_bind()
    keys = connection.execute(sa.text("SELECT DISTINCT source_key FROM telemetry_counter_state")).scalars()
    for key in keys.all():
        rows = connection.execute(
            sa.text(
                "SELECT port_id, metric, time_ns, reading FROM telemetry_counter_state "
                "WHERE source_key = :key"
            ),
            {"key": key},
        ).all()
        port_ids = np.array([row[0] for row in rows], dtype=np.int64)
        numbers = np.array([NUMBERS[row[1]] for row in rows], dtype=np.int64)
        ports, port_at = np.unique(port_ids, return_inverse=True)
        metrics, metric_at = np.unique(numbers, return_inverse=True)
        # A metrics x ports matrix; -1: the port has no reading of that metric.
        times = np.full((metrics.shape[0], ports.shape[0]), -1, dtype=np.int64)
        readings = np.zeros((metrics.shape[0], ports.shape[0]), dtype=np.int64)
        times[metric_at, port_at] = [row[2] for row in rows]
        readings[metric_at, port_at] = [row[3] for row in rows]  # the uint64's bits as int64
        packed = {
            "port_id": ports.astype(PACKING["port_id"]).tobytes(),
            "metric": metrics.astype(PACKING["metric"]).tobytes(),
            "time_ns": times.astype(PACKING["time_ns"]).tobytes(),
            "reading": readings.astype("<i8").view(PACKING["reading"]).tobytes(),
        }
        connection.execute(
            sa.text(
                "INSERT INTO telemetry_counter_log (source_key, generation, port_id, metric, time_ns, "
                "reading) VALUES (:key, 1, :port_id, :metric, :time_ns, :reading)"
            ).bindparams(*(sa.bindparam(name, type_=sa.LargeBinary) for name in PACKING)),
            {"key": key, **packed},
        )
    op.drop_table("telemetry_counter_state")


def downgrade() -> None:
    _create_state()
    connection = op.get_bind()
    keys = connection.execute(sa.text("SELECT DISTINCT source_key FROM telemetry_counter_log")).scalars()
    for key in keys.all():
        newest: dict[tuple[int, int], tuple[int, int]] = {}
        rows = connection.execute(
            sa.text(
                "SELECT port_id, metric, time_ns, reading FROM telemetry_counter_log "
                "WHERE source_key = :key ORDER BY generation"
            ),
            {"key": key},
        )
        for row in rows:  # oldest first: a later row's reading replaces an earlier one
            ports, metrics, times, readings = (
                np.frombuffer(value, dtype=packing)
                for value, packing in zip(row, PACKING.values(), strict=True)
            )
            shape = (metrics.shape[0], ports.shape[0])
            times = (
                np.broadcast_to(times, shape) if times.shape[0] == ports.shape[0] else times.reshape(shape)
            )
            readings = readings.view("<i8").reshape(shape)
            for m, metric in enumerate(metrics.tolist()):
                for port_id, time_ns, reading in zip(
                    ports.tolist(), times[m].tolist(), readings[m].tolist(), strict=True
                ):
                    if time_ns != -1:
                        newest[(port_id, metric)] = (time_ns, reading)
        if not newest:
            continue
        connection.execute(
            sa.text(
                "INSERT INTO telemetry_counter_state (source_key, port_id, metric, time_ns, reading) "
                "VALUES (:key, :port_id, :metric, :time_ns, :reading)"
            ),
            [
                {
                    "key": key,
                    "port_id": port_id,
                    "metric": METRICS[metric - 1],
                    "time_ns": time_ns,
                    "reading": reading,
                }
                for (port_id, metric), (time_ns, reading) in newest.items()
            ],
        )
    op.drop_table("telemetry_counter_log")
