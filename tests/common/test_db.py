"""make_engine: SQLite in WAL mode with foreign keys enforced; PostgreSQL through psycopg 3."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from services.common.db import make_engine, make_sessionmaker, normalise_url


def test_sqlite_runs_in_wal_mode_with_foreign_keys_on(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'twin.db'}")
    with engine.connect() as connection:
        assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert connection.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL
    engine.dispose()


def test_sqlite_refuses_a_row_that_points_at_nothing(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'twin.db'}")
    metadata = sa.MetaData()
    fabrics = sa.Table("fabrics", metadata, sa.Column("id", sa.String, primary_key=True))
    sa.Table(
        "links",
        metadata,
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("fabric", sa.ForeignKey(fabrics.c.id)),
    )
    metadata.create_all(engine)
    with pytest.raises(IntegrityError), engine.begin() as connection:
        connection.execute(metadata.tables["links"].insert().values(id=1, fabric="no-such-fabric"))
    engine.dispose()


def test_in_memory_sqlite_has_foreign_keys_but_no_wal():
    engine = make_engine("sqlite:///:memory:")
    with engine.connect() as connection:
        assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "memory"
        assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
    engine.dispose()


def test_sessions_keep_objects_usable_after_commit(tmp_path):
    sessionmaker = make_sessionmaker(make_engine(f"sqlite:///{tmp_path / 'twin.db'}"))
    assert sessionmaker.kw["expire_on_commit"] is False


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgresql://u:p@db:5432/twin", "postgresql+psycopg://u:p@db:5432/twin"),
        ("postgres://u:p@db/twin", "postgresql+psycopg://u:p@db/twin"),
        ("postgresql+psycopg://u@db/twin", "postgresql+psycopg://u@db/twin"),
        ("sqlite:///twin.db", "sqlite:///twin.db"),
    ],
)
def test_normalise_url_maps_bare_postgresql_to_psycopg_3(url, expected):
    assert normalise_url(url) == expected


@pytest.mark.postgres
def test_a_postgresql_connection_works(postgres_url):
    engine = make_engine(postgres_url)
    try:
        assert engine.dialect.driver == "psycopg"
        with engine.connect() as connection:
            assert connection.execute(sa.text("select 1")).scalar() == 1
    finally:
        engine.dispose()
