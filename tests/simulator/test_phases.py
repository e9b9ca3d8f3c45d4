"""Where a run's wall time went: SimulationOutcome.phase_seconds, which the scale benchmarks report."""

from __future__ import annotations

import pytest

from services.simulator.cancel import Cancelled
from services.simulator.checks import check_simulation
from services.simulator.engine import RunFabric
from services.simulator.runner import run_simulation, simulate
from services.simulator.spec import SimulationSpec
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


@pytest.mark.parametrize("fidelity", ["PACKET", "FLOW"])
def test_a_cancel_during_setup_stops_the_run_before_its_engine_starts(fidelity):
    """The setup phases (workload, routes, the engine's arrays) take seconds at scale and make no
    progress: between them the run asks its progress callback whether to go on, so a cancelled
    run's worker stops by itself instead of waiting to be killed."""
    job = {"collective": "ALL_REDUCE", "size_bytes": 1 << 20, "rank_count": 16}
    spec = {"fabric": FABRIC.fabric, "fidelity": fidelity, "jobs": [job], "load_balancing": {"mode": "ECMP"}}
    asked: list[float] = []

    def progress(fraction: float) -> bool:
        asked.append(fraction)
        return False

    checked = SimulationSpec.from_dict(spec)
    check_simulation(checked, FABRIC)
    with pytest.raises(Cancelled):
        simulate(checked, RunFabric(FABRIC, {}), progress)  # builds its own workload, as a worker does
    assert asked == [0.0]  # stopped at the first question, before any event was handled


class RecordingProgress:
    """A worker's progress as the service sees it: the stages the run reported, in order, and the
    stage each fraction was reported under."""

    def __init__(self) -> None:
        self.stage, self.stages, self.fractions = "", [], []

    def __call__(self, fraction: float) -> bool:
        self.fractions.append((self.stage, fraction))
        return True

    def report_stage(self, stage: str) -> None:
        self.stage = stage
        self.stages.append(stage)


@pytest.mark.parametrize(
    ("fidelity", "stages"),
    [
        ("PACKET", ["building the workload", "routing", "setting up the engine", "", "assembling results"]),
        ("FLOW", ["building the workload", "routing", "", "assembling results"]),
    ],
)
def test_a_run_says_which_setup_phase_it_is_in(fidelity, stages):
    """The setup phases take seconds at scale (20 s for a 2,048-rank ring on k=32, where a watch saw
    "simulating" at 0% throughout): each says what it does, and the event loop says "" (simulating).
    After the loop, the results are assembled (5.8 s for 8,192 ranks, where a watch saw the loop's
    last fraction with no change of stage): that says so too."""
    job = {"collective": "ALL_REDUCE", "size_bytes": 1 << 20, "rank_count": 16}
    spec = {"fabric": FABRIC.fabric, "fidelity": fidelity, "jobs": [job], "load_balancing": {"mode": "ECMP"}}
    checked = SimulationSpec.from_dict(spec)
    check_simulation(checked, FABRIC)
    progress = RecordingProgress()
    simulate(checked, RunFabric(FABRIC, {}), progress)
    assert progress.stages == stages
    assert all(stage == "" for stage, fraction in progress.fractions if fraction > 0)
