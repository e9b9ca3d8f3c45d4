"""Alembic environment of the telemetry schema.

`services.telemetry.migrate` hands over an open connection (config.attributes["connection"]); run by
hand (`alembic -c services/telemetry/alembic.ini ...`) it connects to FABRICTWIN_DATABASE_URL or the
ini file's URL. The version table is `telemetry_alembic_version`, so the four services can share one
PostgreSQL database, each with its own migration history.
"""

from __future__ import annotations

import os

from alembic import context
from sqlalchemy import Connection

from services.common.db import make_engine

VERSION_TABLE = "telemetry_alembic_version"


def _run(connection: Connection) -> None:
    context.configure(connection=connection, version_table=VERSION_TABLE, transactional_ddl=True)
    with context.begin_transaction():
        context.run_migrations()


connection = context.config.attributes.get("connection")
if connection is not None:
    _run(connection)
else:
    url = os.environ.get("FABRICTWIN_DATABASE_URL") or context.config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("no database to migrate: set FABRICTWIN_DATABASE_URL or sqlalchemy.url")
    engine = make_engine(url)
    with engine.begin() as opened:
        _run(opened)
    engine.dispose()
