"""The FLOW engine's memory: bounded by what the admission control estimates, whatever the number of
events.

The measured failure: FLOW runs kept every change of every channel's load until the end (52M records
for a 1,024-rank ring on k=16 under ECMP, many more under ADAPTIVE, where every event changes every
channel's rate) and turned them into series only then. The 1,024-rank ring peaked at 4.9 GB (ECMP)
and 12.1 GB (ADAPTIVE) while the admission control estimated 2.7 GB for either, so a request the
simulator accepted could take several times the memory it was sized for. Here the same shape on a
small fabric: a ring repeated 8 times (8x the events) peaked at 682 MB against an estimate of 523 MB.
"""

from __future__ import annotations

import tracemalloc

from services.simulator.checks import check_simulation
from services.simulator.runner import run_simulation
from services.simulator.spec import SimulationSpec
from tests.simulator.fabrics import fat_tree

FABRIC = fat_tree(8)


def ring(iterations: int, mode: str = "ADAPTIVE") -> dict:
    job = {
        "collective": "ALL_REDUCE",
        "size_bytes": 4 << 20,
        "rank_count": 128,
        "placement": "RANDOM",
        "iterations": iterations,
    }
    return {
        "fabric": FABRIC.fabric,
        "fidelity": "FLOW",
        "jobs": [job],
        "load_balancing": {"mode": mode},
        "seed": 1,
    }


def peak_bytes(spec: dict) -> tuple[int, int]:
    """(peak bytes numpy and Python allocated during the run, events)."""
    tracemalloc.start()
    try:
        outcome = run_simulation(spec, FABRIC)
        return tracemalloc.get_traced_memory()[1], outcome.events
    finally:
        tracemalloc.stop()


def test_a_flow_run_stays_within_the_admission_estimate():
    spec = ring(iterations=8)
    estimate = check_simulation(SimulationSpec.from_dict(spec), FABRIC).estimate.memory_bytes
    peak, events = peak_bytes(spec)
    assert events > 10_000
    assert peak <= estimate, f"peak {peak / 1e6:.0f} MB, estimate {estimate / 1e6:.0f} MB"


def test_more_events_take_no_more_memory_than_the_admission_expects():
    specs = [ring(iterations=1), ring(iterations=8)]
    estimates = [check_simulation(SimulationSpec.from_dict(s), FABRIC).estimate.memory_bytes for s in specs]
    (once, events_once), (eight, events_eight) = (peak_bytes(s) for s in specs)
    assert events_eight > 7 * events_once
    # 8x the transfers and flows, which the estimate counts; the records grew with the events (the
    # peak grew by 595 MB where the estimate grew by 273 MB).
    grown, expected = eight - once, estimates[1] - estimates[0]
    assert grown <= expected, f"the peak grew {grown / 1e6:.0f} MB, the estimate {expected / 1e6:.0f} MB"
