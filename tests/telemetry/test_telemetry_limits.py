"""Responses stay under a point limit: pages shrink to fit, and one series above it names step_ns."""

from __future__ import annotations

import numpy as np
import pytest

from services.common.errors import InvalidArgument
from services.telemetry.store import TelemetryStore

PORTS = [f"leaf-0/p{i}" for i in range(1, 6)]


@pytest.fixture
def small_limit(store: TelemetryStore, source_id: str) -> TelemetryStore:
    """The same database, answering at most 100 points per response; 5 ports x 60 samples each."""
    port_index = np.repeat(np.arange(len(PORTS)), 60)
    time_ns = np.tile(np.arange(60, dtype=np.int64) * 10, len(PORTS))
    store.ingest(source_id, PORTS, port_index, time_ns, {"tx_bytes": np.ones(time_ns.size)})
    return TelemetryStore(store.engine, max_points=100)


def test_a_bucketed_page_holds_as_many_ports_as_fit_under_the_limit(small_limit: TelemetryStore, source_id):
    seen, offset, pages = [], 0, 0
    while offset is not None:
        page = small_limit.query_series(source_id, "tx_bytes", step_ns=20, offset=offset)  # 30 buckets a port
        assert sum(s.time_ns.size for s in page.series) <= 100
        seen += [s.port for s in page.series]
        offset, pages = page.next_offset, pages + 1
    assert (seen, pages) == (PORTS, 2)  # 3 ports (90 points), then 2


def test_a_raw_page_is_cut_by_counting_samples_first(small_limit: TelemetryStore, source_id):
    page = small_limit.query_series(source_id, "tx_bytes")
    assert [s.port for s in page.series] == PORTS[:1]  # 60 + 60 would pass 100
    assert page.next_offset == 1


def test_one_port_read_raw_is_cut_at_the_limit_and_named(store: TelemetryStore, source_id):
    time_ns = np.arange(150, dtype=np.int64)
    outcome = store.ingest(
        source_id, ["leaf-9/p1"], np.zeros(150, dtype=np.int32), time_ns, {"tx_bytes": np.ones(150)}
    )
    assert outcome.stored == 150
    limited = TelemetryStore(store.engine, max_points=150)
    (series,) = limited.query_series(source_id, "tx_bytes", port_patterns=["leaf-9/p1"]).series
    assert series.time_ns.size == 150  # exactly the limit: still one page
    limited = TelemetryStore(store.engine, max_points=149)
    with pytest.raises(InvalidArgument, match=r"^step_ns: port 'leaf-9/p1' alone has 150 points"):
        limited.query_series(source_id, "tx_bytes", port_patterns=["leaf-9/p1"])


def test_a_step_that_would_return_more_points_than_the_limit_names_step_ns(
    small_limit: TelemetryStore, source_id
):
    with pytest.raises(InvalidArgument, match=r"^step_ns: port 'leaf-0/p1' alone has 591 points"):
        small_limit.query_series(source_id, "tx_bytes", step_ns=1)
    with pytest.raises(InvalidArgument, match=r"^step_ns: 591 intervals"):
        small_limit.utilisation_skew(source_id, step_ns=1)
    with pytest.raises(InvalidArgument, match=r"^step_ns"):
        small_limit.loss_history(source_id, "leaf-0/p1", step_ns=1)


def test_a_reversed_time_range_names_time_range(store: TelemetryStore, source_id):
    for call in (
        lambda: store.query_series(source_id, "tx_bytes", start_ns=10, end_ns=5),
        lambda: store.top_links(source_id, "tx_bytes", start_ns=10, end_ns=10),
        lambda: store.utilisation_skew(source_id, start_ns=10, end_ns=5),
        lambda: store.loss_history(source_id, "x", start_ns=10, end_ns=5),
    ):
        with pytest.raises(InvalidArgument, match=r"^time_range: end_ns"):
            call()
