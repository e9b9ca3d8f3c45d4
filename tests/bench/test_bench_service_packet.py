"""`service.packet.k16` end to end, small: the k=4 fat-tree, 16 ranks, 1 GiB (a couple of seconds).

The benchmark's own code path (the four services as processes, the SDK, the run to completion with
its series in telemetry, the two cancels and the next run after each, every process stopped).
"""

from __future__ import annotations

import json

import pytest

from bench.bench_service_packet import run_service_packet
from bench.registry import BENCHMARKS

pytestmark = pytest.mark.system


def test_a_small_packet_run_through_the_services_reports_progress_exports_and_cancels():
    figures = run_service_packet(k=4, ranks=16, size_bytes=1 << 30)

    json.dumps(figures)  # the bench prints it as one JSON line
    run = figures["run"]
    assert run["ranks"] == 16 and run["channels"] == 96  # k=4: 48 links
    assert run["series_rows_in_telemetry"] == run["series_rows_expected"] == 96 * run["intervals"] > 0
    assert run["stages"][-2:] == ["storing series", "done"]
    assert run["updates_running"] >= 3  # progress as it goes, not only RUNNING then SUCCEEDED
    assert 0 < run["first_running_s"] <= run["first_progress_s"] <= run["wall_s"]
    assert run["max_gap_running"]["s"] > 0 and run["max_gap_event_loop"]["s"] > 0
    assert run["setup_s_without_progress"] >= 0 and run["export_s"] >= 0
    assert run["completion_ms"] >= run["ideal_ms"] > 0
    assert run["simulator_worker_peak_rss_mb"] > 0 and run["simulator_service_peak_rss_mb"] > 0
    assert figures["next_run_alone_succeeded_ms"] > 0
    for case in ("cancel_while_simulating", "cancel_during_setup"):
        cancel = figures[case]
        assert cancel["cancelled"], cancel  # the run lasts long enough to be cancelled while it runs
        assert cancel["cancel_answer_state"] == cancel["final_state"] == "CANCELLED"
        assert cancel["cancelled_seen_by_watch_ms"] is not None
        assert 0 <= cancel["worker_stopped_ms"] < 1000, cancel
        assert cancel["next_run_succeeded_ms"] > 0
    assert figures["cancel_while_simulating"]["progress_at_cancel"] > 0.2
    assert "service.packet.k16" in BENCHMARKS
