"""One-minute roll-ups and retention: queries that read roll-ups answer exactly what raw samples say,
late rows are folded in, and retention deletes raw samples while old windows stay answerable."""

from __future__ import annotations

import numpy as np
import pytest

from services.common.errors import InvalidArgument
from services.telemetry.aggregates import Aggregation
from services.telemetry.store import TelemetryStore

S = 1_000_000_000
MINUTE = 60 * S
PORTS = ["leaf-0/p1", "leaf-0/p2", "spine-0/p1"]


@pytest.fixture
def ten_minutes(store: TelemetryStore, source_id: str):
    """Three ports sampled every second for ten minutes (times 0 .. 599 s)."""
    rng = np.random.default_rng(11)
    time_ns = np.tile(np.arange(600, dtype=np.int64) * S, len(PORTS))
    port_index = np.repeat(np.arange(len(PORTS)), 600)
    values = {"utilisation": rng.random(time_ns.size), "tx_bytes": rng.integers(0, 10**9, time_ns.size) * 1.0}
    assert store.ingest(source_id, PORTS, port_index, time_ns, values).stored == time_ns.size
    return port_index, time_ns, values


def _numpy(port_index, time_ns, values, port, start, end, step, reduce):
    mine = (port_index == port) & (time_ns >= start) & (time_ns < end)
    buckets = time_ns[mine] - time_ns[mine] % step
    starts = np.unique(buckets)
    return starts, np.array([reduce(values[mine][buckets == b]) for b in starts])


REDUCE = {Aggregation.AVG: np.mean, Aggregation.MIN: np.min, Aggregation.MAX: np.max, Aggregation.SUM: np.sum}


def test_the_sweep_rolls_up_every_minute_before_the_newest_samples_minute(store, source_id, ten_minutes):
    outcome = store.sweep(source_id)
    assert outcome.rolled_up_until_ns == 9 * MINUTE  # the newest sample (599 s) is in minute 9
    assert outcome.rollup_rows == 9 * len(PORTS)
    assert store.sweep(source_id).rollup_rows == 0  # nothing new to roll up
    assert store.get_source(source_id).rolled_up_until_ns == 9 * MINUTE


@pytest.mark.parametrize("aggregation", list(REDUCE))
def test_a_minute_step_reads_roll_ups_and_answers_what_raw_samples_say(
    store, source_id, ten_minutes, aggregation
):
    port_index, time_ns, values = ten_minutes
    before = store.query_series(source_id, "utilisation", step_ns=2 * MINUTE, aggregation=aggregation)
    assert before.rollup_ns == 0
    store.sweep(source_id)
    # Edges that cut minutes in half come from raw samples, whole minutes from roll-ups.
    start, end = 30 * S, 570 * S
    page = store.query_series(
        source_id, "utilisation", start_ns=start, end_ns=end, step_ns=2 * MINUTE, aggregation=aggregation
    )
    assert page.rollup_ns == MINUTE
    for port, series in enumerate(page.series):
        buckets, expected = _numpy(
            port_index, time_ns, values["utilisation"], port, start, end, 2 * MINUTE, REDUCE[aggregation]
        )
        np.testing.assert_array_equal(series.time_ns, buckets)
        np.testing.assert_allclose(series.values, expected, rtol=1e-12)


def test_a_finer_step_or_a_percentile_reads_raw_samples(store, source_id, ten_minutes):
    store.sweep(source_id)
    assert store.query_series(source_id, "utilisation", step_ns=30 * S).rollup_ns == 0
    assert (
        store.query_series(source_id, "utilisation", step_ns=MINUTE, aggregation=Aggregation.P99).rollup_ns
        == 0
    )


def test_top_links_over_whole_minutes_read_roll_ups(store, source_id, ten_minutes):
    port_index, time_ns, values = ten_minutes
    raw = store.top_links(source_id, "tx_bytes", aggregation=Aggregation.SUM, start_ns=15 * S, end_ns=580 * S)
    store.sweep(source_id)
    rolled = store.top_links(
        source_id, "tx_bytes", aggregation=Aggregation.SUM, start_ns=15 * S, end_ns=580 * S
    )
    assert (raw.rollup_ns, rolled.rollup_ns) == (0, MINUTE)
    assert [p.port for p in rolled.ports] == [p.port for p in raw.ports]
    np.testing.assert_allclose([p.value for p in rolled.ports], [p.value for p in raw.ports], rtol=1e-12)
    window = (time_ns >= 15 * S) & (time_ns < 580 * S)
    expected = {PORTS[p]: values["tx_bytes"][window & (port_index == p)].sum() for p in range(3)}
    assert {p.port: p.value for p in rolled.ports} == pytest.approx(expected, rel=1e-12)


def test_a_late_row_in_a_rolled_up_minute_is_folded_into_its_roll_up(store, source_id, ten_minutes):
    port_index, _, values = ten_minutes
    store.sweep(source_id)
    late = store.ingest(
        source_id, ["leaf-0/p1"], np.array([0]), np.array([100 * S + 500]), {"utilisation": np.array([7.0])}
    )
    assert late.stored == 1
    page = store.query_series(source_id, "utilisation", step_ns=MINUTE, port_patterns=["leaf-0/p1"])
    assert page.rollup_ns == MINUTE
    mine = port_index == 0
    minute_1 = np.append(values["utilisation"][mine][60:120], 7.0)
    assert page.series[0].values[1] == pytest.approx(minute_1.mean(), rel=1e-12)


def test_retention_deletes_old_raw_samples_and_keeps_their_roll_ups(store, source_id, ten_minutes):
    port_index, time_ns, values = ten_minutes
    store.update_source(source_id, {"retention_ns": 300 * S})
    outcome = store.sweep(source_id)
    # newest 599 s - 300 s = 299 s, floored to the minute: raw samples before 240 s go.
    assert (outcome.retained_from_ns, outcome.deleted_samples) == (4 * MINUTE, 240 * len(PORTS))
    source = store.get_source(source_id)
    assert (source.retained_from_ns, source.sample_count) == (4 * MINUTE, 360 * len(PORTS))

    page = store.query_series(source_id, "utilisation", step_ns=MINUTE, port_patterns=["spine-0/p1"])
    buckets, expected = _numpy(port_index, time_ns, values["utilisation"], 2, 0, 600 * S, MINUTE, np.mean)
    np.testing.assert_array_equal(page.series[0].time_ns, buckets)
    np.testing.assert_allclose(page.series[0].values, expected, rtol=1e-12)

    with pytest.raises(InvalidArgument, match=r"^time_range\.start_ns: raw samples before 240000000000 ns"):
        store.query_series(source_id, "utilisation", start_ns=MINUTE, step_ns=S)
    with pytest.raises(InvalidArgument, match=r"^time_range\.start_ns"):
        store.query_series(
            source_id, "utilisation", start_ns=MINUTE, step_ns=MINUTE, aggregation=Aggregation.P50
        )
    # An open start (0) means the oldest data kept: raw samples from the retention horizon.
    for start in (0, 4 * MINUTE):
        raw = store.query_series(source_id, "utilisation", start_ns=start, port_patterns=["leaf-0/p1"])
        assert raw.series[0].time_ns[0] == 4 * MINUTE and raw.series[0].time_ns.size == 360

    expired = store.ingest(
        source_id, ["leaf-0/p1"], np.array([0]), np.array([100 * S]), {"utilisation": np.array([0.5])}
    )
    assert (expired.stored, expired.rejected, expired.reasons[0].field) == (0, 1, "time_ns")
    assert "retention" in expired.reasons[0].problem


def test_a_source_without_retention_keeps_every_raw_sample(store, source_id, ten_minutes):
    outcome = store.sweep(source_id)
    assert (outcome.deleted_samples, outcome.retained_from_ns) == (0, 0)
    assert store.get_source(source_id).sample_count == 600 * len(PORTS)


def test_sweeping_every_source_sweeps_each(store, new_source):
    first, second = new_source(), new_source()
    for source_id in (first, second):
        store.ingest(
            source_id, ["a"], np.array([0, 0]), np.array([0, 2 * MINUTE]), {"drops": np.array([1.0, 2.0])}
        )
    outcomes = store.sweep_all()
    assert outcomes[first].rolled_up_until_ns == outcomes[second].rolled_up_until_ns == 2 * MINUTE
