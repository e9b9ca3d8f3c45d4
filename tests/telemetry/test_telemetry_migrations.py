"""Alembic migrations: an empty database reaches head, the result is the schema the code uses, and a
database made by the first slice (no version table) keeps its rows through the upgrade."""

from __future__ import annotations

import numpy as np
import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from services.common.db import make_engine
from services.telemetry.migrate import HEAD, VERSION_TABLE, _config, current_revision, migrate_to_head
from services.telemetry.schema import metadata
from services.telemetry.store import SourceKind, SourceRecord, TelemetryStore

BOTH = pytest.mark.parametrize(
    "empty_database_url", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)], indirect=True
)
TABLES = {
    "telemetry_sources",
    "telemetry_ports",
    "telemetry_samples",
    "telemetry_rollups",
    "telemetry_counter_log",
    "telemetry_fabric_links",
}
NEW_METRICS = ("carrier_changes", "out_of_sequence", "packet_seq_errors")  # 0003


@BOTH
def test_an_empty_database_migrates_to_head(empty_database_url: str):
    engine = make_engine(empty_database_url)
    try:
        with engine.connect() as connection:
            assert current_revision(connection) is None
            assert not set(sa.inspect(connection).get_table_names()) & TABLES
        assert migrate_to_head(engine) == HEAD
        with engine.connect() as connection:
            assert set(sa.inspect(connection).get_table_names()) >= TABLES | {VERSION_TABLE}
        assert migrate_to_head(engine) == HEAD  # a second start changes nothing
    finally:
        engine.dispose()


@BOTH
def test_the_migrated_schema_is_the_one_the_code_reads_and_writes(empty_database_url: str):
    engine = make_engine(empty_database_url)
    try:
        migrate_to_head(engine)
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
            differences = compare_metadata(context, metadata)
            if connection.dialect.name == "sqlite":  # BRIN is PostgreSQL's (ddl_if), SQLite has none
                differences = [d for d in differences if d[1].name != "ix_telemetry_samples_time_brin"]
        assert differences == []
    finally:
        engine.dispose()


@BOTH
def test_a_postgresql_source_gets_its_own_partitions(empty_database_url: str):
    store = TelemetryStore.open(empty_database_url)
    try:
        created = store.create_source(SourceRecord("pod-a", SourceKind.LIVE))
        with store.engine.connect() as connection:
            tables = set(sa.inspect(connection).get_table_names())
        partitions = {f"telemetry_samples_s{created.key}", f"telemetry_rollups_s{created.key}"}
        if store.sqlite:
            assert not partitions & tables
        else:
            assert partitions <= tables
            store.delete_source("pod-a")
            with store.engine.connect() as connection:
                assert not partitions & set(sa.inspect(connection).get_table_names())
    finally:
        store.close()


def _first_slice_database(url: str) -> None:
    """The tables the first slice created with metadata.create_all: revision 0001, no version table."""
    engine = make_engine(url)
    with engine.begin() as connection:
        command.upgrade(_config(connection), "0001")
        connection.execute(sa.text(f"DROP TABLE {VERSION_TABLE}"))
        connection.execute(
            sa.text(
                "INSERT INTO telemetry_sources VALUES "
                "('old-pod', 'live', 'old pod', 'fabrics/f', '', 0, 5, 3), "
                "('old-run', 'simulated', '', '', '', 0, 6, 0)"
            )
        )
        connection.execute(
            sa.text("INSERT INTO telemetry_ports (id, source_id, name) VALUES (7, 'old-pod', 'leaf-0/p1')")
        )
        connection.execute(
            sa.text(
                "INSERT INTO telemetry_samples (source_id, port_id, time_ns, utilisation) VALUES "
                "('old-pod', 7, 10, 0.5), ('old-pod', 7, 20, 0.25), ('old-pod', 7, 30, 0.75)"
            )
        )
        connection.execute(
            sa.text("INSERT INTO telemetry_counter_state VALUES ('old-pod', 7, 'rx_bytes', 30, 1000)")
        )
    engine.dispose()


@BOTH
def test_a_first_slice_database_is_upgraded_keeping_its_rows(empty_database_url: str):
    _first_slice_database(empty_database_url)
    store = TelemetryStore.open(empty_database_url)  # stamps 0001, upgrades to head
    try:
        with store.engine.connect() as connection:
            assert current_revision(connection) == HEAD
        old = store.get_source("old-pod")
        assert (old.sample_count, old.port_count, old.newest_time_ns, old.fabric) == (3, 1, 30, "fabrics/f")
        series = store.query_series("old-pod", "utilisation").series
        assert [(s.port, s.time_ns.tolist(), s.values.tolist()) for s in series] == [
            ("leaf-0/p1", [10, 20, 30], [0.5, 0.25, 0.75])
        ]
        assert store.get_source("old-run").kind is SourceKind.SIMULATED
        # New ports get ids after the copied ones, and the counter state carried over:
        # 1000 -> 1600 is a delta of 600 on the old port.
        outcome = store.ingest(
            "old-pod",
            ["leaf-0/p1", "leaf-0/p2"],
            np.array([0, 1]),
            np.array([40, 40]),
            {"rx_bytes": np.array([1600, 5], dtype=np.uint64)},
            {"rx_bytes": 2},
        )
        assert outcome.stored == 2
        assert store.query_series("old-pod", "rx_bytes", port_patterns=["leaf-0/p1"]).series[
            0
        ].values.tolist() == [600.0]
        assert store.get_source("old-pod").port_count == 2
    finally:
        store.close()


@BOTH
def test_a_0002_database_gains_the_new_metric_columns_on_existing_sources(empty_database_url: str):
    # 0003 adds carrier_changes, out_of_sequence and packet_seq_errors (and their roll-up columns) to
    # the parents; on PostgreSQL the partitions of sources made before the upgrade must have them too.
    engine = make_engine(empty_database_url)
    try:
        with engine.begin() as connection:
            command.upgrade(_config(connection), "0002")
            connection.execute(
                sa.text(
                    "INSERT INTO telemetry_sources (id, kind, display_name, fabric, simulation, "
                    "retention_ns, create_time_ns, sample_count, newest_time_ns, metrics_mask, "
                    "rolled_up_until_ns, retained_from_ns, fabric_version) "
                    "VALUES ('pod-0002', 'live', '', '', '', 0, 1, 1, 10, 4, 0, 0, 0)"
                )
            )
            key = connection.execute(sa.text("SELECT key FROM telemetry_sources")).scalar_one()
            if connection.dialect.name == "postgresql":
                for table in ("telemetry_samples", "telemetry_rollups"):
                    connection.execute(
                        sa.text(f"CREATE TABLE {table}_s{key} PARTITION OF {table} FOR VALUES IN ({key})")
                    )
            connection.execute(sa.text(f"INSERT INTO telemetry_ports (source_key, name) VALUES ({key}, 'a')"))
            connection.execute(
                sa.text(
                    "INSERT INTO telemetry_samples (source_key, port_id, time_ns, rx_bytes) "
                    f"VALUES ({key}, 1, 10, 5)"
                )
            )
            assert current_revision(connection) == "0002"
    finally:
        engine.dispose()
    store = TelemetryStore.open(empty_database_url)  # upgrades 0002 -> head
    try:
        with store.engine.connect() as connection:
            assert current_revision(connection) == HEAD
            inspector = sa.inspect(connection)
            tables = ["telemetry_samples", "telemetry_rollups"]
            if connection.dialect.name == "postgresql":
                tables += [f"telemetry_samples_s{key}", f"telemetry_rollups_s{key}"]
            for table in tables:
                names = {c["name"] for c in inspector.get_columns(table)}
                if "rollups" in table:
                    expected = {f"{m}_{a}" for m in NEW_METRICS for a in ("count", "sum", "min", "max")}
                else:
                    expected = set(NEW_METRICS)
                assert expected <= names, table
        assert store.query_series("pod-0002", "rx_bytes").series[0].values.tolist() == [5.0]
        outcome = store.ingest(
            "pod-0002", ["a"], np.array([0]), np.array([20]), {m: np.array([1.0]) for m in NEW_METRICS}
        )
        assert outcome.stored == 1
        for metric in NEW_METRICS:
            series = store.query_series("pod-0002", metric).series[0]
            assert (series.time_ns.tolist(), series.values.tolist()) == ([20], [1.0])
    finally:
        store.close()


@BOTH
def test_a_0003_databases_counter_state_carries_over_to_the_log_and_back(empty_database_url: str):
    # 0004 packs telemetry_counter_state's rows (one per port and metric) into one log row per source;
    # the next reading of each is still a delta, and a downgrade unpacks the newest readings again.
    engine = make_engine(empty_database_url)
    try:
        with engine.begin() as connection:
            command.upgrade(_config(connection), "0003")
            for name in ("pod-a", "pod-b"):
                connection.execute(
                    sa.text(
                        "INSERT INTO telemetry_sources (id, kind, display_name, fabric, simulation, "
                        "retention_ns, create_time_ns, sample_count, newest_time_ns, metrics_mask, "
                        "rolled_up_until_ns, retained_from_ns, fabric_version) "
                        f"VALUES ('{name}', 'live', '', '', '', 0, 1, 0, NULL, 0, 0, 0, 0)"
                    )
                )
                if connection.dialect.name == "postgresql":
                    key = connection.execute(
                        sa.text(f"SELECT key FROM telemetry_sources WHERE id = '{name}'")
                    ).scalar_one()
                    for table in ("telemetry_samples", "telemetry_rollups"):
                        connection.execute(
                            sa.text(f"CREATE TABLE {table}_s{key} PARTITION OF {table} FOR VALUES IN ({key})")
                        )
            keys = dict(connection.execute(sa.text("SELECT id, key FROM telemetry_sources")).all())
            connection.execute(
                sa.text(
                    "INSERT INTO telemetry_ports (source_key, name) VALUES "
                    f"({keys['pod-a']}, 'a1'), ({keys['pod-a']}, 'a2'), ({keys['pod-b']}, 'b1')"
                )
            )
            ids = dict(connection.execute(sa.text("SELECT name, id FROM telemetry_ports")).all())
            # A 64-bit reading above 2^63 is stored as the int64 with the same bits.
            connection.execute(
                sa.text(
                    "INSERT INTO telemetry_counter_state VALUES "
                    f"({keys['pod-a']}, {ids['a1']}, 'rx_bytes', 30, {2**64 - 10 - 2**64}), "
                    f"({keys['pod-a']}, {ids['a1']}, 'tx_bytes', 30, 500), "
                    f"({keys['pod-a']}, {ids['a2']}, 'rx_bytes', 20, 7), "
                    f"({keys['pod-b']}, {ids['b1']}, 'rx_bytes', 40, 1000)"
                )
            )
    finally:
        engine.dispose()
    store = TelemetryStore.open(empty_database_url)  # upgrades 0003 -> head
    try:
        kinds = {"rx_bytes": 2, "tx_bytes": 2}
        outcome = store.ingest(
            "pod-a",
            ["a1", "a2"],
            np.array([0, 1]),
            np.array([50, 50]),
            {"rx_bytes": np.array([2**64 - 4, 9], np.uint64), "tx_bytes": np.array([800, 1], np.uint64)},
            kinds,
        )
        assert outcome.stored == 2
        rx = {s.port: s.values.tolist() for s in store.query_series("pod-a", "rx_bytes").series}
        tx = {s.port: s.values.tolist() for s in store.query_series("pod-a", "tx_bytes").series}
        assert rx == {"a1": [6.0], "a2": [2.0]}
        assert tx == {"a1": [300.0], "a2": []}  # a2 had no tx_bytes reading: its first has no delta
        store.ingest(
            "pod-b", ["b1"], np.array([0]), np.array([60]), {"rx_bytes": np.array([1500], np.uint64)}, kinds
        )
        assert store.query_series("pod-b", "rx_bytes").series[0].values.tolist() == [500.0]
    finally:
        store.close()
    engine = make_engine(empty_database_url)
    try:
        with engine.begin() as connection:
            command.downgrade(_config(connection), "0003")
            rows = connection.execute(
                sa.text("SELECT source_key, port_id, metric, time_ns, reading FROM telemetry_counter_state")
            ).all()
        assert sorted(tuple(row) for row in rows) == sorted(
            [
                (keys["pod-a"], ids["a1"], "rx_bytes", 50, -4),
                (keys["pod-a"], ids["a1"], "tx_bytes", 50, 800),
                (keys["pod-a"], ids["a2"], "rx_bytes", 50, 9),
                (keys["pod-a"], ids["a2"], "tx_bytes", 50, 1),
                (keys["pod-b"], ids["b1"], "rx_bytes", 60, 1500),
            ]
        )
    finally:
        engine.dispose()
