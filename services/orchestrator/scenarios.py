"""Scenarios: how big a run is, and its expansion into one simulation per mode and sweep point.

Expansion takes the cartesian product of the sweeps and, for each point, one simulation per mode, so
that every mode of a point sees exactly the same workload, faults and seed. The specs themselves are
built at the edge (`messages.build_spec`), which alone knows the SimulationSpec fields a sweep sets.
"""

from __future__ import annotations

import itertools
import math

from services.common.errors import ResourceExhausted
from services.orchestrator.model import PlannedSimulation, Scenario

__all__ = [
    "DEFAULT_MAX_SIMULATIONS_PER_RUN",
    "check_run_size",
    "expand",
    "simulation_count",
]

# Simulations one run may start (--max-simulations-per-run; 0: no limit). A run keeps one result per
# simulation in memory and in its record, and every simulation is a call to a simulator replica:
# 10,000 is hours of simulator time and a record of a few megabytes.
DEFAULT_MAX_SIMULATIONS_PER_RUN = 10_000


def simulation_count(scenario: Scenario) -> int:
    """Simulations a run of the scenario starts: sweep points (the product of the sweeps' lengths)
    times modes, computed from the lengths alone.

    >>> from services.orchestrator.model import Mode, Opaque, Sweep
    >>> modes = (Mode("ECMP", Opaque()), Mode("ADAPTIVE", Opaque()))
    >>> seeds = Sweep("seed", ("1", "2", "3"))
    >>> simulation_count(Scenario("scenarios/s", "fabrics/f", modes, Opaque(), sweeps=(seeds,)))
    6
    """
    return math.prod(len(sweep.values) for sweep in scenario.sweeps) * len(scenario.simulated)


def check_run_size(scenario: Scenario, max_simulations: int, field: str = "scenario") -> None:
    """ResourceExhausted when a run would start more than `max_simulations` simulations (0: no limit)."""
    if max_simulations <= 0:
        return
    count = simulation_count(scenario)
    if count <= max_simulations:
        return
    points = " x ".join(f"{len(sweep.values):,}" for sweep in scenario.sweeps) or "1"
    modes = len(scenario.simulated)
    what = "variant" if scenario.variants else "mode"
    raise ResourceExhausted(
        f"{field}.sweeps: a run would start {count:,} simulations ({points} sweep point"
        f"{'s' if count != modes else ''} x {modes} "
        f"{what}{'s' if modes != 1 else ''}), above this orchestrator's limit of {max_simulations:,} "
        "simulations per run (--max-simulations-per-run); sweep fewer values or split the scenario"
    )


def expand(
    scenario: Scenario, max_simulations: int = DEFAULT_MAX_SIMULATIONS_PER_RUN
) -> list[PlannedSimulation]:
    """Every (sweep point, mode) pair, sweep points outermost, in the order of the run's results.

    A run above `max_simulations` (0: no limit) is refused before any point is built.
    """
    check_run_size(scenario, max_simulations)
    axes = [[(sweep.parameter, value) for value in sweep.values] for sweep in scenario.sweeps]
    planned: list[PlannedSimulation] = []
    for point in itertools.product(*axes):
        for mode in scenario.simulated:
            planned.append(PlannedSimulation(len(planned), mode, dict(point)))
    return planned
