"""One PostgreSQL partition per source of the sample and roll-up tables (SQLite: no partitions).

`telemetry_samples` and `telemetry_rollups` are LIST-partitioned by source_key. A source's partitions
are created with it and dropped with it: deleting a source with millions of rows is a DROP TABLE,
and ingest COPYs straight into `telemetry_samples_s{key}`, skipping partition routing. The
partitions inherit the parents' primary keys and the BRIN index on time_ns.
"""

from __future__ import annotations

from sqlalchemy import Connection

__all__ = ["PARTITIONED_TABLES", "create_partitions", "drop_partitions", "partition_name"]

PARTITIONED_TABLES = ("telemetry_samples", "telemetry_rollups")


def partition_name(table: str, source_key: int) -> str:
    """The partition of `table` holding one source's rows on PostgreSQL.

    >>> partition_name("telemetry_samples", 7)
    'telemetry_samples_s7'
    """
    return f"{table}_s{int(source_key)}"


def create_partitions(connection: Connection, source_key: int) -> None:
    """Create the source's partitions (PostgreSQL; nothing on SQLite) inside the caller's transaction."""
    if connection.dialect.name != "postgresql":
        return
    key = int(source_key)  # an integer from our own sequence: safe to format into DDL
    for table in PARTITIONED_TABLES:
        connection.exec_driver_sql(
            f"CREATE TABLE {partition_name(table, key)} PARTITION OF {table} FOR VALUES IN ({key})"
        )


def drop_partitions(connection: Connection, source_key: int) -> bool:
    """Drop the source's partitions (PostgreSQL); False on SQLite, where the caller deletes rows."""
    if connection.dialect.name != "postgresql":
        return False
    for table in PARTITIONED_TABLES:
        connection.exec_driver_sql(f"DROP TABLE IF EXISTS {partition_name(table, int(source_key))}")
    return True
