"""Cumulative counters become per-interval deltas: wraps, resets, InfiniBand's 4-octet units."""

from __future__ import annotations

import numpy as np
import pytest
import sqlalchemy as sa

from services.common.resources import new_id
from services.telemetry.counters import CounterKind, InvalidReading, counter_deltas, counter_readings
from services.telemetry.store import SourceKind, SourceRecord, TelemetryStore


def _deltas(kind: CounterKind, readings: list[int]) -> list[float]:
    values = np.array(readings, dtype=np.uint64)
    previous = np.concatenate([[0], values[:-1]]).astype(np.uint64)
    has_previous = np.arange(len(readings)) > 0
    return counter_deltas(kind, values, previous, has_previous).tolist()


def test_a_32_bit_counter_that_wraps_counts_across_the_wrap():
    assert _deltas(CounterKind.CUMULATIVE_32, [2**32 - 10, 5, 25])[1:] == [15.0, 20.0]


def test_a_64_bit_counter_that_drops_was_reset_and_counts_from_zero():
    assert _deltas(CounterKind.CUMULATIVE_64, [1000, 1500, 30, 40])[1:] == [500.0, 30.0, 10.0]


def test_infiniband_data_counters_count_four_octets_per_unit():
    assert _deltas(CounterKind.IB_DATA_32, [2**32 - 1, 1])[1:] == [8.0]
    assert _deltas(CounterKind.IB_DATA_64, [100, 150])[1:] == [200.0]


def test_a_16_bit_symbol_error_counter_wraps_at_65536():
    assert _deltas(CounterKind.CUMULATIVE_16, [65530, 4])[1:] == [10.0]


def test_an_8_bit_link_downed_counter_wraps_at_256():
    assert _deltas(CounterKind.CUMULATIVE_8, [250, 3])[1:] == [9.0]


def test_a_ports_first_reading_has_no_delta():
    assert np.isnan(_deltas(CounterKind.CUMULATIVE_64, [7, 9])[0])


@pytest.mark.parametrize(
    ("values", "kind", "row"),
    [
        (np.array([1.0, 2.5]), CounterKind.CUMULATIVE_64, 1),
        (np.array([1, -2], dtype=np.int64), CounterKind.CUMULATIVE_64, 1),
        (np.array([2**32], dtype=np.uint64), CounterKind.CUMULATIVE_32, 0),
        (np.array([3.0, 70000.0]), CounterKind.CUMULATIVE_16, 1),
        (np.array([np.nan]), CounterKind.IB_DATA_64, 0),
    ],
)
def test_readings_a_counter_cannot_hold_are_refused_naming_the_row(values, kind, row):
    with pytest.raises(InvalidReading) as caught:
        counter_readings(values, kind)
    assert caught.value.row == row


def _ingest_readings(store: TelemetryStore, source_id: str, ports, port_index, time_ns, readings, kind):
    return store.ingest(
        source_id,
        ports,
        np.asarray(port_index),
        np.asarray(time_ns),
        {"rx_bytes": np.asarray(readings, dtype=np.uint64)},
        {"rx_bytes": kind},
    )


def _stored(store: TelemetryStore, source_id: str, port: str) -> list[float]:
    """The stored deltas of a port; a first reading has none (NULL), so it is not in the series."""
    return store.query_series(source_id, "rx_bytes", port_patterns=[port]).series[0].values.tolist()


def test_cumulative_readings_are_stored_as_deltas_across_batches(store: TelemetryStore, source_id: str):
    kind = CounterKind.IB_DATA_32
    # Rows of the two ports arrive interleaved inside the batch; each port's rows are in time order.
    first = _ingest_readings(
        store, source_id, ["a", "b"], [1, 0, 0, 1], [10, 10, 20, 20], [500, 100, 300, 800], kind
    )
    assert (first.stored, first.rejected) == (4, 0)
    _ingest_readings(store, source_id, ["a", "b"], [0, 1], [30, 30], [2**32 - 100, 5], kind)
    _ingest_readings(store, source_id, ["a"], [0], [40], [50], kind)
    # a reads 100, 300, 2^32-100, 50: 4 octets per unit, and across the wrap.
    assert _stored(store, source_id, "a") == [800.0, (2**32 - 100 - 300) * 4.0, 150 * 4.0]
    # b reads 500, 800, 5: the drop of a 32-bit counter is a wrap.
    assert _stored(store, source_id, "b") == [1200.0, 4.0 * ((5 - 800) % 2**32)]
    assert store.get_source(source_id).sample_count == 7  # first readings are rows too


def test_a_resent_cumulative_batch_is_duplicates_and_leaves_the_deltas_right(
    store: TelemetryStore, source_id: str
):
    kind = CounterKind.CUMULATIVE_64
    _ingest_readings(store, source_id, ["a"], [0, 0], [10, 20], [100, 160], kind)
    again = _ingest_readings(store, source_id, ["a"], [0, 0], [10, 20], [100, 160], kind)
    assert (again.stored, again.duplicates, again.rejected) == (0, 2, 0)
    _ingest_readings(store, source_id, ["a"], [0], [30], [200], kind)
    assert _stored(store, source_id, "a") == [60.0, 40.0]


def test_64_bit_readings_above_2_to_the_63_stay_exact(store: TelemetryStore, source_id: str):
    kind = CounterKind.CUMULATIVE_64
    _ingest_readings(store, source_id, ["a"], [0], [10], [2**64 - 10], kind)
    _ingest_readings(store, source_id, ["a"], [0], [20], [2**64 - 4], kind)
    assert _stored(store, source_id, "a") == [6.0]


def test_a_late_cumulative_reading_rejects_its_batch_naming_the_time(store: TelemetryStore, source_id: str):
    kind = CounterKind.CUMULATIVE_32
    _ingest_readings(store, source_id, ["a"], [0, 0], [10, 30], [1, 3], kind)
    late = _ingest_readings(store, source_id, ["a"], [0, 0], [20, 40], [2, 4], kind)
    assert (late.stored, late.rejected) == (0, 2)
    assert late.reasons[0].field == "time_ns"
    assert "not after the last stored reading" in late.reasons[0].problem
    assert late.reasons[0].row == 0
    assert _stored(store, source_id, "a") == [2.0]


def test_transmitted_bytes_of_a_port_with_a_known_rate_give_its_utilisation(
    store: TelemetryStore, source_id: str
):
    # 100 Gb/s ports read once a second; PortXmitData counts 4-octet units.
    rates = np.array([100e9, 0.0])
    units = np.array([0, 0, 625_000_000, 100, 1_250_000_000, 200], dtype=np.uint64)
    first = store.ingest(
        source_id,
        ["leaf-0/p1", "leaf-0/p2"],
        np.array([0, 1, 0, 1, 0, 1]),
        np.array([0, 0, 1, 1, 2, 2]) * 1_000_000_000,
        {"tx_bytes": units},
        {"tx_bytes": CounterKind.IB_DATA_64},
        port_rate_bps=rates,
    )
    assert first.stored == 6
    page = store.query_series(source_id, "utilisation")
    # 625e6 units x 4 octets x 8 bits in 1 s on 100 Gb/s = 20 %; the port with no rate has none.
    assert [(s.port, s.values.tolist()) for s in page.series] == [
        ("leaf-0/p1", [0.2, 0.2]),
        ("leaf-0/p2", []),
    ]
    # The rate is remembered: a later batch without rates still yields utilisation.
    store.ingest(
        source_id, ["leaf-0/p1"], np.array([0]), np.array([3_000_000_000]),
        {"tx_bytes": np.array([3_750_000_000], dtype=np.uint64)}, {"tx_bytes": CounterKind.IB_DATA_64},
    )  # fmt: skip
    series = store.query_series(source_id, "utilisation", port_patterns=["leaf-0/p1"]).series[0]
    assert series.values.tolist() == [0.2, 0.2, 0.8]


def test_a_rate_that_is_not_a_rate_rejects_the_batch(store: TelemetryStore, source_id: str):
    outcome = store.ingest(
        source_id, ["a"], np.array([0]), np.array([0]), {"drops": np.ones(1)}, port_rate_bps=np.array([-1.0])
    )
    assert outcome.reasons[0].field == "port_rate_bps"


def test_a_rate_changed_through_one_replica_is_the_rate_the_other_derives_utilisation_with(
    database_url: str,
):
    # Two services on one database: each must notice a rate the other stored, however recently it
    # read the rates itself (1 s intervals; IB_DATA_64 counts 4-octet units).
    kinds = {"tx_bytes": CounterKind.IB_DATA_64}
    source_id = new_id("rates")

    def poll(store: TelemetryStore, second: int, units: int, rate: float | None) -> None:
        outcome = store.ingest(
            source_id,
            ["leaf-0/p1"],
            np.array([0]),
            np.array([second * 1_000_000_000]),
            {"tx_bytes": np.array([units], dtype=np.uint64)},
            kinds,
            port_rate_bps=None if rate is None else np.array([rate]),
        )
        assert outcome.stored == 1, outcome.reasons

    first, second = TelemetryStore.open(database_url), TelemetryStore.open(database_url)
    try:
        first.create_source(SourceRecord(source_id, SourceKind.LIVE))
        poll(first, 0, 0, 100e9)
        poll(first, 1, 625_000_000, None)  # 20% of 100 Gb/s
        poll(second, 2, 1_250_000_000, 200e9)  # the link was changed to 200 Gb/s: 10%
        poll(first, 3, 1_875_000_000, None)  # still 200 Gb/s: 10%
        poll(first, 4, 2_500_000_000, 100e9)  # back to 100 Gb/s, as `first` had it before: 20%
        poll(second, 5, 3_125_000_000, None)  # `second` must read 100 Gb/s again: 20%
        series = first.query_series(source_id, "utilisation").series[0]
        assert series.values.tolist() == [0.2, 0.1, 0.1, 0.2, 0.2]
    finally:
        first.delete_source(source_id)
        first.close()
        second.close()


def test_rates_changed_by_another_replica_during_a_batch_are_read_again(database_url: str):
    # While `first` stores a rate of p1, `second` commits a new rate of p2 (PostgreSQL lets both
    # run at once); `first` must not take the rates it read before that for the newest ones.
    if database_url.startswith("sqlite"):
        pytest.skip("SQLite has one writer: the two batches cannot overlap")
    kinds = {"tx_bytes": CounterKind.IB_DATA_64}
    source_id = new_id("rates")
    ports = ["leaf-0/p1", "leaf-0/p2"]
    first, second = TelemetryStore.open(database_url), TelemetryStore.open(database_url)

    interleaved = []

    def interleave(_conn, _cursor, statement: str, _parameters, _context, _many) -> None:
        if statement.startswith("UPDATE telemetry_ports SET rate_bps") and not interleaved:
            interleaved.append(statement)
            second.ingest(
                source_id, ports[1:], np.array([0]), np.array([0]), {"drops": np.zeros(1)},
                port_rate_bps=np.array([200e9]),
            )  # fmt: skip

    try:
        first.create_source(SourceRecord(source_id, SourceKind.LIVE))
        first.ingest(source_id, ports, np.array([0, 1]), np.array([0, 0]), {"drops": np.zeros(2)},
                     port_rate_bps=np.array([100e9, 100e9]))  # fmt: skip
        sa.event.listen(first.engine, "before_cursor_execute", interleave)
        first.ingest(source_id, ports[:1], np.array([0]), np.array([1]), {"drops": np.zeros(1)},
                     port_rate_bps=np.array([400e9]))  # fmt: skip
        assert interleaved
        for second_ns in (1, 2):  # p2 at 200 Gb/s: 625e6 units of 4 octets a second is 10%
            outcome = first.ingest(
                source_id, ports[1:], np.array([0]), np.array([second_ns * 1_000_000_000]),
                {"tx_bytes": np.array([second_ns * 625_000_000], np.uint64)}, kinds,
            )  # fmt: skip
            assert outcome.stored == 1
        series = first.query_series(source_id, "utilisation", port_patterns=ports[1:]).series[0]
        assert series.values.tolist() == [0.1]
    finally:
        first.delete_source(source_id)
        first.close()
        second.close()
