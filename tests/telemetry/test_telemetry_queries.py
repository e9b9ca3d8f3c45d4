"""Series and top-N queries: SQL bucketing checked against numpy on the same samples."""

from __future__ import annotations

import numpy as np
import pytest

from services.common.errors import InvalidArgument, NotFound
from services.telemetry.aggregates import Aggregation
from services.telemetry.store import TelemetryStore

PORTS = ["leaf-1/p1", "leaf-1/p2", "leaf-2/p1", "spine-1/p1", "spine-2/p1"]
STEP = 1_000


@pytest.fixture
def random_samples(store: TelemetryStore, source_id: str):
    """Irregular samples: each port gets its own random times, so buckets hold 0 to many values."""
    rng = np.random.default_rng(7)
    port_index, time_ns = [], []
    for port, count in enumerate([1, 2, 40, 300, 3000]):
        port_index.append(np.full(count, port))
        time_ns.append(np.sort(rng.choice(20_000, size=count, replace=False)) + 123)
    port_index, time_ns = np.concatenate(port_index), np.concatenate(time_ns)
    values = np.abs(rng.normal(50.0, 20.0, port_index.size))  # queue depths: bytes, never negative
    outcome = store.ingest(source_id, PORTS, port_index, time_ns, {"queue_depth_bytes": values})
    assert outcome.stored == port_index.size
    return port_index, time_ns, values


def _expected(port_index, time_ns, values, port: int, aggregation: Aggregation, start: int, end: int):
    mine = (port_index == port) & (time_ns >= start) & (time_ns < end)
    buckets = time_ns[mine] - time_ns[mine] % STEP
    reduce = {
        Aggregation.AVG: np.mean,
        Aggregation.MIN: np.min,
        Aggregation.MAX: np.max,
        Aggregation.SUM: np.sum,
        Aggregation.P50: lambda v: np.percentile(v, 50),
        Aggregation.P99: lambda v: np.percentile(v, 99),
    }[aggregation]
    starts = np.unique(buckets)
    return starts, np.array([reduce(values[mine][buckets == b]) for b in starts])


@pytest.mark.parametrize("aggregation", list(Aggregation))
def test_bucketed_aggregates_match_numpy_on_the_same_samples(
    store: TelemetryStore, source_id: str, random_samples, aggregation: Aggregation
):
    port_index, time_ns, values = random_samples
    start, end = 2_500, 17_500  # cuts buckets in half at both ends
    page = store.query_series(
        source_id, "queue_depth_bytes", start_ns=start, end_ns=end, step_ns=STEP, aggregation=aggregation
    )
    assert [s.port for s in page.series] == PORTS
    for port, series in enumerate(page.series):
        buckets, expected = _expected(port_index, time_ns, values, port, aggregation, start, end)
        np.testing.assert_array_equal(series.time_ns, buckets)
        np.testing.assert_allclose(series.values, expected, rtol=1e-12, atol=1e-9)


def test_raw_samples_come_back_in_time_order_inside_the_window(
    store: TelemetryStore, source_id, random_samples
):
    port_index, time_ns, values = random_samples
    series = store.query_series(
        source_id, "queue_depth_bytes", start_ns=1_000, end_ns=5_000, port_patterns=["spine-2/p1"]
    ).series[0]
    mine = (port_index == 4) & (time_ns >= 1_000) & (time_ns < 5_000)
    np.testing.assert_array_equal(series.time_ns, time_ns[mine])
    np.testing.assert_array_equal(series.values, values[mine])


@pytest.mark.parametrize(
    ("patterns", "expected"),
    [
        ([], PORTS),
        (["spine-*"], ["spine-1/p1", "spine-2/p1"]),
        (["leaf-1/p?", "spine-2/*"], ["leaf-1/p1", "leaf-1/p2", "spine-2/p1"]),
        (["leaf-2/p1"], ["leaf-2/p1"]),
        (["*/p2"], ["leaf-1/p2"]),
        (["LEAF-*"], []),
    ],
)
def test_globs_select_ports_by_name(
    store: TelemetryStore, source_id: str, random_samples, patterns, expected
):
    page = store.query_series(source_id, "queue_depth_bytes", port_patterns=patterns, step_ns=STEP)
    assert [s.port for s in page.series] == expected


def test_series_are_paged_by_port(store: TelemetryStore, source_id: str, random_samples):
    seen, offset = [], 0
    while offset is not None:
        page = store.query_series(source_id, "queue_depth_bytes", step_ns=STEP, offset=offset, limit=2)
        assert len(page.series) <= 2
        seen += [s.port for s in page.series]
        offset = page.next_offset
    assert seen == PORTS


def test_a_port_without_samples_in_the_window_gets_an_empty_series(store: TelemetryStore, source_id: str):
    store.ingest(
        source_id, ["a", "b"], np.array([0, 1]), np.array([10, 5_000]), {"drops": np.array([1.0, 2.0])}
    )
    page = store.query_series(source_id, "drops", start_ns=0, end_ns=1_000)
    assert [(s.port, s.values.tolist()) for s in page.series] == [("a", [1.0]), ("b", [])]


def test_a_metric_never_sent_has_no_values(store: TelemetryStore, source_id: str, random_samples):
    page = store.query_series(source_id, "cnp_sent", step_ns=STEP)
    assert all(s.values.size == 0 for s in page.series)


@pytest.mark.parametrize("aggregation", [Aggregation.AVG, Aggregation.MAX, Aggregation.P99])
def test_top_links_are_the_highest_ports_highest_first(store: TelemetryStore, source_id: str, aggregation):
    rng = np.random.default_rng(3)
    names = [f"spine-{i}/p1" for i in range(8)] + ["leaf-0/p1"]
    level = np.array([0.9, 0.1, 0.5, 0.7, 0.2, 0.95, 0.3, 0.6, 1.0])
    port_index = np.repeat(np.arange(len(names)), 50)
    time_ns = np.tile(np.arange(50) * 100, len(names))
    utilisation = level[port_index] + rng.uniform(-0.01, 0.01, port_index.size)
    store.ingest(source_id, names, port_index, time_ns, {"utilisation": utilisation})

    top = store.top_links(
        source_id, "utilisation", port_patterns=["spine-*"], aggregation=aggregation, limit=3
    ).ports
    assert [p.port for p in top] == ["spine-5/p1", "spine-0/p1", "spine-3/p1"]
    mine = port_index == 5
    expected = {
        Aggregation.AVG: np.mean(utilisation[mine]),
        Aggregation.MAX: np.max(utilisation[mine]),
        Aggregation.P99: np.percentile(utilisation[mine], 99),
    }[aggregation]
    assert top[0].value == pytest.approx(expected, rel=1e-12)
    everything = store.top_links(source_id, "utilisation", aggregation=aggregation, limit=100).ports
    assert [p.port for p in everything][:2] == ["leaf-0/p1", "spine-5/p1"] and len(everything) == 9


def test_top_links_over_a_window_ignore_samples_outside_it(store: TelemetryStore, source_id: str):
    store.ingest(
        source_id,
        ["a", "b"],
        np.array([0, 1, 0, 1]),
        np.array([0, 0, 100, 100]),
        {"drops": np.array([9.0, 1, 1, 5])},
    )
    top = store.top_links(source_id, "drops", start_ns=50, end_ns=150, aggregation=Aggregation.SUM).ports
    assert [(p.port, p.value) for p in top] == [("b", 5.0), ("a", 1.0)]


def test_queries_refuse_what_they_cannot_answer(store: TelemetryStore, source_id: str):
    with pytest.raises(NotFound):
        store.query_series("no-such-source", "drops")
    with pytest.raises(InvalidArgument, match=r"^time_range: "):
        store.query_series(source_id, "drops", start_ns=10, end_ns=5)
    with pytest.raises(InvalidArgument, match=r"ports\.patterns\[1\]: .* has no fabric"):
        store.query_series(source_id, "drops", port_patterns=["*", "group:uplinks"])
    with pytest.raises(InvalidArgument, match="step_ns"):
        store.query_series(source_id, "drops", step_ns=-1)
    with pytest.raises(InvalidArgument, match="limit"):
        store.top_links(source_id, "drops", limit=0)
