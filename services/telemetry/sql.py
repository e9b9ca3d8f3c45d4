"""The SQL that differs between SQLite and PostgreSQL: upserts and the bulk insert of samples.

`insert_samples` is the ingest hot path. It returns how many rows were new; a row already stored
(same source, port, time) is never stored twice.

- PostgreSQL, fast path: rows go by binary COPY straight into the source's partition
  (`telemetry_samples_s{key}`) inside a savepoint. Every COPY field is fixed-width, so numpy encodes
  the whole batch as one structured array (no Python per row). If any row is stored already, the
  primary key refuses the COPY (unique violation), the savepoint is rolled back and the batch takes
  the slow path. A live stream sends new rows, so re-sends are what pays for the slow path.
- PostgreSQL, slow path (a re-sent or overlapping batch, or NULLs from first counter readings):
  COPY into a per-session temporary staging table, then one INSERT ... SELECT ... ON CONFLICT DO
  NOTHING, whose row count is the rows that were new.
- SQLite: executemany of INSERT ... ON CONFLICT DO NOTHING, compiled once per column set, with
  parameter rows built by numpy (one `tolist()` per column, zipped in C).
"""

from __future__ import annotations

import functools
import itertools
import struct
from typing import Any

import numpy as np
import psycopg
import sqlalchemy as sa
from sqlalchemy import Connection
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.schema import CreateTable

from services.telemetry.partitions import partition_name
from services.telemetry.schema import METRIC_COLUMNS, samples

__all__ = ["copy_rows", "dialect_insert", "insert_samples"]

_KEY = ("source_key", "port_id", "time_ns")

# Session-private staging table of the PostgreSQL slow path; emptied at every commit.
_staging = sa.Table(
    "telemetry_samples_staging",
    sa.MetaData(),
    sa.Column("port_id", sa.Integer),
    sa.Column("time_ns", sa.BigInteger),
    *(sa.Column(name, sa.Double) for name in METRIC_COLUMNS.values()),
    prefixes=["TEMPORARY"],
    postgresql_on_commit="DELETE ROWS",
)
_CREATE_STAGING = str(CreateTable(_staging, if_not_exists=True).compile(dialect=postgresql.dialect()))
_COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack("!ii", 0, 0)  # signature, flags, no extension
_COPY_TRAILER = struct.pack("!h", -1)


def dialect_insert(connection: Connection, table: sa.Table) -> postgresql.Insert | sqlite.Insert:
    """INSERT with the ON CONFLICT clauses of the connection's database (SQLite or PostgreSQL)."""
    if connection.dialect.name == "postgresql":
        return postgresql.insert(table)
    if connection.dialect.name == "sqlite":
        return sqlite.insert(table)
    raise NotImplementedError(f"telemetry needs SQLite or PostgreSQL, not {connection.dialect.name}")


def _psycopg(connection: Connection) -> psycopg.Connection[Any]:
    """The psycopg connection under a PostgreSQL `connection`: COPY is the driver's own API."""
    driver = connection.connection.driver_connection
    if driver is None:
        raise sa.exc.ResourceClosedError("the database connection is closed")
    return driver


@functools.lru_cache(maxsize=256)
def _sqlite_insert(columns: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    """Driver SQL with positional parameters for inserting `columns`, and the parameters' order."""
    statement = sqlite.insert(samples).on_conflict_do_nothing(index_elements=list(_KEY))
    compiled = statement.compile(dialect=sqlite.pysqlite.dialect(), column_keys=[*_KEY, *columns])
    return compiled.string, tuple(compiled.positiontup or ())


def _nullable(values: np.ndarray) -> list:
    """Values as Python floats, NaN (a counter's first reading has no delta) as None (NULL)."""
    missing = np.isnan(values)
    if not missing.any():
        return values.tolist()
    boxed = values.astype(object)
    boxed[missing] = None
    return boxed.tolist()


def _insert_by_executemany(
    connection: Connection, source_key: int, port_id: np.ndarray, time_ns: np.ndarray, values: dict
) -> int:
    sql, order = _sqlite_insert(tuple(values))
    parameters = {
        "source_key": itertools.repeat(source_key, time_ns.shape[0]),
        "port_id": port_id.tolist(),
        "time_ns": time_ns.tolist(),
        **{name: _nullable(column) for name, column in values.items()},
    }
    rows = list(zip(*(parameters[name] for name in order), strict=False))
    result = connection.exec_driver_sql(sql, rows, execution_options={"preserve_rowcount": True})
    return int(result.rowcount)


def copy_rows(
    port_id: np.ndarray, time_ns: np.ndarray, values: dict[str, np.ndarray], source_key: int | None = None
) -> bytes:
    """PostgreSQL binary COPY data of rows ([source_key int4,] port_id int4, time_ns int8, float8...).

    Each row is a field count, then per field its byte length and big-endian value. NaN stays NaN
    here (it has a fixed width); only the slow path turns it into NULL.
    """
    fields = [("count", ">i2")]
    if source_key is not None:
        fields += [("source_key_size", ">i4"), ("source_key", ">i4")]
    fields += [("port_id_size", ">i4"), ("port_id", ">i4"), ("time_ns_size", ">i4"), ("time_ns", ">i8")]
    for name in values:
        fields += [(f"{name}_size", ">i4"), (name, ">f8")]
    rows = np.empty(time_ns.shape[0], dtype=np.dtype(fields))
    rows["count"] = 2 + len(values) + (source_key is not None)
    if source_key is not None:
        rows["source_key_size"], rows["source_key"] = 4, source_key
    rows["port_id_size"], rows["port_id"] = 4, port_id
    rows["time_ns_size"], rows["time_ns"] = 8, time_ns
    for name, column in values.items():
        rows[f"{name}_size"], rows[name] = 8, column
    return _COPY_HEADER + rows.tobytes() + _COPY_TRAILER


def _copy_into_partition(
    connection: Connection, source_key: int, port_id: np.ndarray, time_ns: np.ndarray, values: dict
) -> bool:
    """The fast path: COPY into the source's partition; False (nothing stored) if a row exists."""
    driver = _psycopg(connection)  # inside the caller's transaction
    table = partition_name("telemetry_samples", source_key)
    copy_sql = f"COPY {table} (source_key, port_id, time_ns, {', '.join(values)}) FROM STDIN (FORMAT BINARY)"
    with driver.cursor() as cursor:
        cursor.execute("SAVEPOINT telemetry_copy")
        try:
            with cursor.copy(copy_sql) as copy:
                copy.write(copy_rows(port_id, time_ns, values, source_key))
        except psycopg.errors.UniqueViolation:
            cursor.execute("ROLLBACK TO SAVEPOINT telemetry_copy")
            return False
        cursor.execute("RELEASE SAVEPOINT telemetry_copy")
    return True


def _insert_by_staging(
    connection: Connection, source_key: int, port_id: np.ndarray, time_ns: np.ndarray, values: dict
) -> int:
    names = list(values)
    driver = _psycopg(connection)
    with driver.cursor() as cursor:
        cursor.execute(_CREATE_STAGING)
        cursor.execute(f"TRUNCATE {_staging.name}")  # empty even if this transaction staged rows before
        copy_sql = f"COPY {_staging.name} (port_id, time_ns, {', '.join(names)}) FROM STDIN (FORMAT BINARY)"
        with cursor.copy(copy_sql) as copy:
            copy.write(copy_rows(port_id, time_ns, values))
    nan = sa.literal("NaN", sa.Double)
    moved = sa.select(
        sa.literal(source_key, sa.Integer),
        _staging.c.port_id,
        _staging.c.time_ns,
        *(sa.func.nullif(_staging.c[name], nan) for name in names),
    )
    statement = postgresql.insert(samples).from_select([*_KEY, *names], moved)
    statement = statement.on_conflict_do_nothing(index_elements=list(_KEY))
    stored = connection.execute(statement, execution_options={"preserve_rowcount": True}).rowcount
    return int(stored)


def insert_samples(
    connection: Connection,
    source_key: int,
    port_id: np.ndarray,
    time_ns: np.ndarray,
    values: dict[str, np.ndarray],
) -> int:
    """Insert rows (source, port_id[i], time_ns[i], values[*][i]); returns how many were new.

    Rows must be sorted by (port_id, time_ns) and unique: the order of the primary key.
    """
    if time_ns.shape[0] == 0:
        return 0
    if connection.dialect.name != "postgresql":
        return _insert_by_executemany(connection, source_key, port_id, time_ns, values)
    # NaN marks a missing delta, which must be stored as NULL: only the staging path does that.
    has_missing = any(np.isnan(column).any() for column in values.values())
    if not has_missing and _copy_into_partition(connection, source_key, port_id, time_ns, values):
        return int(time_ns.shape[0])
    return _insert_by_staging(connection, source_key, port_id, time_ns, values)
