"""Where a run's wall time went: SimulationOutcome.phase_seconds, which the scale benchmarks report."""

from __future__ import annotations

import pytest

from services.simulator.runner import run_simulation
from tests.simulator.fabrics import fat_tree

FABRIC = fat_tree(4)
PACKET_PHASES = ["checks_and_workload", "routes", "engine_setup", "event_loop", "engine_report", "results"]


@pytest.mark.parametrize(
    ("fidelity", "phases"),
    [
        ("PACKET", PACKET_PHASES),
        ("FLOW", ["checks_and_workload", "engine"]),
    ],
)
def test_a_run_says_where_its_time_went_in_the_order_the_phases_ran(fidelity, phases):
    job = {"collective": "ALL_REDUCE", "size_bytes": 1 << 20, "rank_count": 16}
    spec = {"fabric": FABRIC.fabric, "fidelity": fidelity, "jobs": [job], "load_balancing": {"mode": "ECMP"}}
    outcome = run_simulation(spec, FABRIC)
    assert list(outcome.phase_seconds) == phases
    assert all(seconds >= 0 for seconds in outcome.phase_seconds.values())
    # The engine's phases and its results add up to the outcome's wall time; the checks ran before it.
    engine = sum(seconds for name, seconds in outcome.phase_seconds.items() if name != "checks_and_workload")
    assert engine == pytest.approx(outcome.wall_seconds, rel=1e-6, abs=1e-6)
