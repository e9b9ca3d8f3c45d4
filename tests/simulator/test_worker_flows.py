"""What a worker sends back to the service: per-flow results only as many as the API ever shows.

The measured failure: a 2,048-rank k=32 ring sent back 8.4M per-flow results, which the service
process unpickled and kept with the simulation (its peak: 1.99 GB), while GetSimulation shows at
most FLOW_RESULTS_LIMIT of them; the rest only ever counted toward the registry's byte budget.
"""

from __future__ import annotations

import numpy as np

from services.simulator import runner
from services.simulator.convert import result_to_proto
from services.simulator.results import FLOW_RESULTS_LIMIT
from services.simulator.runner import run_in_worker, run_simulation
from tests.simulator.fabrics import fat_tree

FABRIC = fat_tree(4)
SPEC = {
    "fabric": FABRIC.fabric,
    "fidelity": "PACKET",
    "jobs": [{"collective": "ALL_REDUCE", "size_bytes": 1 << 16, "rank_count": 16, "iterations": 3}],
    "load_balancing": {"mode": "ECMP"},
}


def test_a_worker_sends_back_the_flows_the_api_shows_and_counts_the_rest(monkeypatch):
    everything = run_simulation(SPEC, FABRIC).flows
    total = len(everything.job)  # 3 iterations x 30 steps x 16 ranks
    monkeypatch.setattr(runner, "FLOW_RESULTS_LIMIT", 100)
    outcome = run_in_worker(SPEC, FABRIC)
    flows = outcome.flows
    assert len(flows.job) == 100 and flows.count == total
    for name in ("job", "source", "destination", "size_bytes", "start_ns", "finish_ns", "udp_source_port"):
        assert np.array_equal(getattr(flows, name), getattr(everything, name)[:100]), name
    for f in range(100):  # each kept flow's links, as before
        mine = flows.path_links[flows.path_offsets[flows.route[f]] : flows.path_offsets[flows.route[f] + 1]]
        all_ = everything.path_links[
            everything.path_offsets[everything.route[f]] : everything.path_offsets[everything.route[f] + 1]
        ]
        assert np.array_equal(mine, all_)
    for name, values in flows.counters.items():
        assert np.array_equal(values, everything.counters[name][:100]), name


def test_the_result_says_how_many_flows_it_leaves_out(monkeypatch):
    monkeypatch.setattr(runner, "FLOW_RESULTS_LIMIT", 100)
    outcome = run_in_worker(SPEC, FABRIC)
    message = result_to_proto(outcome, with_flows=True)
    assert len(message.flows) == min(100, FLOW_RESULTS_LIMIT)
    assert any(f"of {outcome.flows.count} flows" in note for note in message.model_notes)
