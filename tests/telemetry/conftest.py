"""Telemetry fixtures: a store on SQLite (tmp_path) and, where available, on PostgreSQL."""

from __future__ import annotations

import contextlib

import pytest

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
