"""`scenario.sweep.replicas` end to end, small: 2 points behind 1 and then 2 real simulator replicas.

The benchmark's own code path (every service its own process, the orchestrator pointed at the
replicas, the run timed to its end, every process stopped), with a small job so it takes seconds.
"""

from __future__ import annotations

import json

import pytest

from bench.bench_sweep import run_sweep_replicas
from bench.registry import BENCHMARKS

pytestmark = pytest.mark.system


def test_a_small_sweep_completes_behind_one_and_two_replicas():
    figures = run_sweep_replicas(points=2, replica_counts=(1, 2), ranks=16, size_bytes=1 << 20, qps=1)

    json.dumps(figures)  # the bench prints it as one JSON line
    assert figures["points"] == 2
    assert figures["cpu_count"] >= 1
    assert [run["replicas"] for run in figures["runs"]] == [1, 2]
    for run in figures["runs"]:
        assert run["points"] == run["points_succeeded"] == 2
        assert run["wall_s"] > 0
        assert run["speedup"] > 0
        assert sum(run["points_per_replica"]) == 2
        assert len(run["points_per_replica"]) == len(run["replica_done_s"]) == run["replicas"]
        assert 0 < max(run["replica_done_s"]) <= run["wall_s"] + 1
        assert run["cpu_s"] > 0  # the replicas' workers did the work
        assert run["other_cpu_s"] >= 0
    assert figures["runs"][0]["speedup"] == 1.0
    assert figures["runs"][1]["points_per_replica"] == [1, 1]  # round-robin: one point each
    assert "scenario.sweep.replicas" in BENCHMARKS
