"""Ingest through the store: round trips, idempotence, atomicity and reasons that name the field."""

from __future__ import annotations

import numpy as np
import pytest

from services.common.errors import AlreadyExists, InvalidArgument, NotFound
from services.telemetry.aggregates import Aggregation
from services.telemetry.counters import CounterKind
from services.telemetry.store import SourceKind, SourceRecord, TelemetryStore

PORTS = ["leaf-1/p1", "leaf-1/p2", "spine-1/p1"]


def _rows(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """n rows over the three ports at distinct times, with tx_bytes and utilisation."""
    rng = np.random.default_rng(seed)
    port_index = np.arange(n, dtype=np.int32) % len(PORTS)
    time_ns = (np.arange(n, dtype=np.int64) // len(PORTS)) * 1_000_000
    columns = {"tx_bytes": rng.integers(0, 10**9, n).astype(np.float64), "utilisation": rng.random(n)}
    return port_index, time_ns, columns


def test_a_batch_round_trips_through_the_store(store: TelemetryStore, source_id: str):
    port_index, time_ns, columns = _rows(300)
    outcome = store.ingest(source_id, PORTS, port_index, time_ns, columns)
    assert (outcome.stored, outcome.duplicates, outcome.rejected) == (300, 0, 0)
    page = store.query_series(source_id, "utilisation")
    assert [s.port for s in page.series] == sorted(PORTS)
    for series in page.series:
        mine = port_index == PORTS.index(series.port)
        np.testing.assert_array_equal(series.time_ns, time_ns[mine])
        np.testing.assert_array_equal(series.values, columns["utilisation"][mine])
    assert store.get_source(source_id).sample_count == 300


def test_a_resent_batch_is_counted_as_duplicates_and_not_stored_twice(store: TelemetryStore, source_id: str):
    port_index, time_ns, columns = _rows(90)
    store.ingest(source_id, PORTS, port_index, time_ns, columns)
    again = store.ingest(source_id, PORTS, port_index, time_ns, columns)
    assert (again.stored, again.duplicates, again.rejected) == (0, 90, 0)
    assert store.get_source(source_id).sample_count == 90
    series = store.query_series(source_id, "tx_bytes", port_patterns=["leaf-1/p1"]).series[0]
    assert series.time_ns.size == 30


def test_a_half_new_batch_stores_only_the_new_half(store: TelemetryStore, source_id: str):
    port_index, time_ns, columns = _rows(60)
    store.ingest(source_id, PORTS, port_index[:30], time_ns[:30], {k: v[:30] for k, v in columns.items()})
    outcome = store.ingest(source_id, PORTS, port_index, time_ns, columns)
    assert (outcome.stored, outcome.duplicates) == (30, 30)


def test_repeated_rows_inside_a_batch_keep_the_first_and_count_the_rest(
    store: TelemetryStore, source_id: str
):
    outcome = store.ingest(
        source_id, PORTS, np.array([0, 0, 1, 0]), np.array([5, 5, 5, 5]), {"drops": np.array([1.0, 2, 3, 4])}
    )
    assert (outcome.stored, outcome.duplicates) == (2, 2)
    series = store.query_series(source_id, "drops", port_patterns=[PORTS[0]]).series[0]
    assert series.values.tolist() == [1.0]


def test_a_batch_with_one_bad_row_stores_nothing(store: TelemetryStore, source_id: str):
    port_index, time_ns, columns = _rows(50)
    columns["utilisation"][37] = np.nan
    outcome = store.ingest(source_id, PORTS, port_index, time_ns, columns)
    assert (outcome.stored, outcome.rejected) == (0, 50)
    assert outcome.reasons[0].row == 37
    assert outcome.reasons[0].reason.startswith("columns[1].values:")
    assert store.get_source(source_id).sample_count == 0
    assert all(s.time_ns.size == 0 for s in store.query_series(source_id, "tx_bytes").series)


def test_a_batch_that_fails_in_the_database_leaves_no_new_ports(store: TelemetryStore, source_id: str):
    # The cumulative column is rejected only after ports were created inside the transaction.
    kinds = {"tx_bytes": CounterKind.CUMULATIVE_64}
    store.ingest(
        source_id, ["a"], np.array([0]), np.array([100]), {"tx_bytes": np.array([5], np.uint64)}, kinds
    )
    late = store.ingest(
        source_id,
        ["a", "new-port"],
        np.array([0, 1]),
        np.array([50, 50]),
        {"tx_bytes": np.array([1, 1], np.uint64)},
        kinds,
    )
    assert late.rejected == 2
    assert [s.port for s in store.query_series(source_id, "tx_bytes").series] == ["a"]


@pytest.mark.parametrize(
    ("change", "field", "row"),
    [
        (lambda b: b.update(port_index=np.array([0, 1, 3])), "port_index", 2),
        (lambda b: b.update(port_index=np.array([0, 1])), "port_index", -1),
        (lambda b: b.update(time_ns=np.array([0, -5, 10])), "time_ns", 1),
        (lambda b: b.update(time_ns=np.array([0.0, 1.0, 2.0])), "time_ns", -1),
        (lambda b: b.update(ports=["a", "a", "b"]), "ports[1]", -1),
        (lambda b: b.update(ports=["a", "", "b"]), "ports[1]", -1),
        (lambda b: b["columns"].update(rx_bytes=np.ones(2)), "columns[1].values", -1),
        (lambda b: b["columns"].update(tx_bytes=np.array([1.0, np.inf, 3.0])), "columns[0].values", 1),
        (lambda b: b["columns"].update(bogus=np.ones(3)), "columns[1]", -1),
        (lambda b: b.update(columns={}), "columns", -1),
    ],
)
def test_bad_input_is_rejected_whole_with_a_reason_naming_the_field(
    store: TelemetryStore, source_id: str, change, field: str, row: int
):
    batch = {
        "ports": ["a", "b", "c"],
        "port_index": np.array([0, 1, 2]),
        "time_ns": np.array([0, 5, 10]),
        "columns": {"tx_bytes": np.array([1.0, 2.0, 3.0])},
    }
    change(batch)
    outcome = store.ingest(source_id, **batch)
    assert outcome.stored == 0 and outcome.rejected == 3
    assert outcome.reasons[0].reason.startswith(f"{field}:"), outcome.reasons[0].reason
    assert outcome.reasons[0].row == row


def test_a_batch_for_an_unknown_source_is_rejected_naming_the_source(store: TelemetryStore):
    outcome = store.ingest("no-such-source", ["a"], np.array([0]), np.array([0]), {"drops": np.array([1.0])})
    assert outcome.rejected == 1
    assert outcome.reasons[0].reason == "source: sources/no-such-source does not exist"


def test_sources_are_created_listed_and_deleted_with_their_samples(store: TelemetryStore, new_source):
    first = new_source("aaa")
    second = store.create_source(
        SourceRecord(f"{first}-run", SourceKind.SIMULATED, fabric="fabrics/f1", simulation="simulations/s1")
    )
    with pytest.raises(AlreadyExists):
        store.create_source(SourceRecord(first, SourceKind.LIVE))
    with pytest.raises(InvalidArgument, match="source_id"):
        store.create_source(SourceRecord("Not_An_Id", SourceKind.LIVE))
    with pytest.raises(InvalidArgument, match=r"source\.fabric"):
        store.create_source(SourceRecord("fine-id", SourceKind.LIVE, fabric="f1"))
    store.ingest(second.id, ["a"], np.array([0]), np.array([0]), {"drops": np.array([1.0])})
    assert store.get_source(second.id).simulation == "simulations/s1"

    listed, offset, ids = [], 0, []
    while offset is not None:
        listed, offset = store.list_sources(offset, 1)
        ids += [s.id for s in listed]
    assert first in ids and second.id in ids and ids == sorted(ids)

    store.delete_source(second.id)
    with pytest.raises(NotFound):
        store.get_source(second.id)
    with pytest.raises(NotFound):
        store.delete_source(second.id)
    # A new source with the old id starts empty.
    store.create_source(SourceRecord(second.id, SourceKind.SIMULATED))
    assert store.query_series(second.id, "drops").series == []
    store.delete_source(second.id)


def test_samples_going_back_in_time_within_a_port_reject_the_batch_naming_time_ns(
    store: TelemetryStore, source_id: str
):
    # Ports may interleave; within port "b" the third row (time 5) comes after time 9.
    outcome = store.ingest(
        source_id, ["a", "b"], np.array([0, 1, 1, 0, 1]), np.array([1, 9, 5, 2, 12]), {"drops": np.ones(5)}
    )
    assert (outcome.stored, outcome.rejected) == (0, 5)
    assert outcome.reasons[0].field == "time_ns" and outcome.reasons[0].row == 2
    assert "port 'b' must be sent in time order" in outcome.reasons[0].problem
    assert store.get_source(source_id).sample_count == 0


def test_a_negative_amount_rejects_the_batch_naming_the_column(store: TelemetryStore, source_id: str):
    outcome = store.ingest(
        source_id,
        ["a"],
        np.zeros(3, dtype=np.int64),
        np.arange(3),
        {"utilisation": np.ones(3), "drops": np.array([0, -1.0, 2])},
    )
    assert (outcome.stored, outcome.rejected) == (0, 3)
    assert (outcome.reasons[0].field, outcome.reasons[0].row) == ("columns[1].values", 1)


def test_a_port_named_like_a_group_is_refused(store: TelemetryStore, source_id: str):
    outcome = store.ingest(source_id, ["group:uplinks"], np.array([0]), np.array([0]), {"drops": np.ones(1)})
    assert outcome.reasons[0].field == "ports[0]"


NEW_METRICS = (
    "carrier_changes",
    "out_of_sequence",
    "packet_seq_errors",
)  # Metric 20, 21, 22 (migration 0003)


def test_carrier_and_roce_sequence_counters_are_stored_rolled_up_and_queried_back(
    store: TelemetryStore, source_id: str
):
    # Cumulative 64-bit readings, as the Ethernet importers send them: one minute and a second at 1 s
    # on two ports, so the sweep rolls up minute 0 and a 1-minute step reads the roll-ups.
    S = 1_000_000_000
    ports = ["gpu-0/eth0", "gpu-0/eth1"]
    time_ns = np.tile(np.arange(61, dtype=np.int64) * S, 2)
    port_index = np.repeat(np.arange(2), 61)
    base = {name: np.uint64(10**12 * (i + 1)) for i, name in enumerate(NEW_METRICS)}  # large: 64-bit
    columns = {
        name: base[name]
        + np.concatenate([np.arange(61) * (i + 1), np.arange(61) * 3 * (i + 1)]).astype(np.uint64)
        for i, name in enumerate(NEW_METRICS)
    }
    kinds = dict.fromkeys(NEW_METRICS, CounterKind.CUMULATIVE_64)
    outcome = store.ingest(source_id, ports, port_index, time_ns, columns, kinds)
    assert (outcome.stored, outcome.rejected) == (122, 0)
    for i, name in enumerate(NEW_METRICS):
        series = {s.port: s for s in store.query_series(source_id, name, limit=10).series}
        # The first reading of a port has no delta (NULL), the others are the per-second increments.
        assert series["gpu-0/eth0"].values.tolist() == [float(i + 1)] * 60
        assert series["gpu-0/eth1"].values.tolist() == [3.0 * (i + 1)] * 60
        assert series["gpu-0/eth0"].time_ns.tolist() == list(range(S, 61 * S, S))
    assert store.sweep(source_id).rolled_up_until_ns == 60 * S
    for i, name in enumerate(NEW_METRICS):
        page = store.query_series(
            source_id,
            name,
            end_ns=60 * S,
            step_ns=60 * S,
            aggregation=Aggregation.SUM,
            port_patterns=["*eth1"],
        )
        assert page.rollup_ns == 60 * S  # answered from the roll-up columns 0003 added
        assert page.series[0].values.tolist() == [59 * 3.0 * (i + 1)]
