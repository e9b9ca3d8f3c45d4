"""Telemetry fixtures: a store on SQLite (tmp_path) and, where available, on PostgreSQL."""

from __future__ import annotations

import contextlib

import psycopg
import pytest
from sqlalchemy.engine import make_url

from services.common.db import normalise_url
from services.common.errors import NotFound
from services.common.resources import new_id
from services.telemetry.store import SourceKind, SourceRecord, TelemetryStore


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path) -> str:
    """SQLite in a temporary directory, then the test PostgreSQL (skipped with a reason if none)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'telemetry.db'}"
    return request.getfixturevalue("postgres_url")


@pytest.fixture
def store(database_url: str):
    """A store whose tables exist; PostgreSQL tests are isolated by unique source ids."""
    telemetry = TelemetryStore.open(database_url)
    yield telemetry
    telemetry.close()


@pytest.fixture
def new_source(store: TelemetryStore):
    """Creates live sources with unique ids and deletes them after the test."""
    created: list[str] = []

    def create(prefix: str = "cluster") -> str:
        record = store.create_source(SourceRecord(new_id(prefix), SourceKind.LIVE))
        created.append(record.id)
        return record.id

    yield create
    for source_id in created:
        with contextlib.suppress(NotFound):
            store.delete_source(source_id)


@pytest.fixture
def source_id(new_source) -> str:
    """One fresh live source."""
    return new_source()


@pytest.fixture
def empty_database_url(request: pytest.FixtureRequest, tmp_path) -> str:
    """An EMPTY database: a new SQLite file, or a PostgreSQL database created for the test and dropped after.

    Parametrise the test with `database_kind` ("sqlite" or "postgresql").
    """
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'empty.db'}"
        return
    server_url = request.getfixturevalue("postgres_url")
    name = new_id("telemetry-migrate").replace("-", "_")
    with psycopg.connect(_psycopg_url(server_url), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield str(
            make_url(normalise_url(server_url)).set(database=name).render_as_string(hide_password=False)
        )
    finally:
        with psycopg.connect(_psycopg_url(server_url), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _psycopg_url(url: str) -> str:
    """A libpq URL (psycopg) from a SQLAlchemy one."""
    return make_url(normalise_url(url)).set(drivername="postgresql").render_as_string(hide_password=False)
