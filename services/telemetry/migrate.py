"""Bring a database to the telemetry schema's migration head (Alembic), on every service start.

- A database without telemetry tables gets every revision from the first.
- A database made by the first slice (tables created without Alembic, no version table) is stamped at
  revision 0001, the schema it has, and upgraded from there, keeping its rows.
- On PostgreSQL a transaction-scoped advisory lock serialises replicas that start together; every
  revision runs in the one transaction, so a failed upgrade leaves the database as it was.
"""

from __future__ import annotations

import pathlib

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine

__all__ = ["HEAD", "VERSION_TABLE", "current_revision", "migrate_to_head"]

VERSION_TABLE = "telemetry_alembic_version"
HEAD = "0005"
_SCRIPTS = pathlib.Path(__file__).resolve().parent / "migrations"
# pg_advisory_xact_lock key: "fabrictwin telemetry migrations", any constant shared by replicas.
_LOCK_KEY = 0x7E1E_6E7A


def _config(connection: sa.Connection) -> Config:
    config = Config()
    config.set_main_option("script_location", str(_SCRIPTS))
    config.attributes["connection"] = connection
    return config


def current_revision(connection: sa.Connection) -> str | None:
    """The revision the database is at, None before any."""
    context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
    return context.get_current_revision()


def migrate_to_head(engine: Engine) -> str:
    """Upgrade the database behind `engine` to the head revision; returns it."""
    with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            connection.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _LOCK_KEY})
        tables = set(sa.inspect(connection).get_table_names())
        config = _config(connection)
        if "telemetry_samples" in tables and VERSION_TABLE not in tables:
            command.stamp(config, "0001")  # the first slice's tables, made before migrations existed
        command.upgrade(config, "head")
        revision = current_revision(connection)
    return revision or ""
