"""The simulator keeps finished simulations' results in memory within a byte budget, oldest out first."""

from __future__ import annotations

import dataclasses

import numpy as np

from services.simulator.registry import SimulationRegistry, SimulationState, outcome_bytes


@dataclasses.dataclass
class Series:
    values: np.ndarray


@dataclasses.dataclass
class Outcome:
    series: Series
    notes: list[str]


def finished(registry: SimulationRegistry, name: str, megabytes: int) -> None:
    registry.create(name, None, 1)
    outcome = Outcome(Series(np.zeros(megabytes << 17, dtype=np.float64)), ["a note"])
    registry.update(name, state=SimulationState.SUCCEEDED, outcome=outcome)


def test_an_outcome_is_measured_by_its_arrays():
    outcome = Outcome(Series(np.zeros(1000, dtype=np.float64)), ["x"] * 10)
    assert 8_000 <= outcome_bytes(outcome) < 10_000


def test_finished_results_beyond_the_byte_budget_go_oldest_first():
    registry = SimulationRegistry(capacity=1000, budget_bytes=10 << 20)
    for i in range(4):
        finished(registry, f"simulations/s{i}", 4)  # 4 MiB each: two fit the 10 MiB budget
    kept = [record.name for record in registry.page(0, 10)[0]]
    assert kept == ["simulations/s3", "simulations/s2"]


def test_a_running_simulation_is_never_evicted_for_the_budget():
    registry = SimulationRegistry(capacity=1000, budget_bytes=1 << 20)
    registry.create("simulations/running", None, 1)
    finished(registry, "simulations/big", 4)
    names = [record.name for record in registry.page(0, 10)[0]]
    assert "simulations/running" in names
