"""The seam between the simulator and its engines: the `Engine` Protocol and what it is given.

An engine turns a validated spec, the fabric as the run sees it and the workload (both engines
consume the same one) into a `SimulationOutcome`, through the shared assembler (assemble.py), so
the servicer, telemetry export, scenarios and comparisons never know which engine ran. engines.py
names the engine of each fidelity.

An engine's refusals come in two stages, both run by checks.py before StartSimulation returns:
`check_placed` once the jobs are placed and sized (before the workload is built; it also says which
what-if routings the run needs), `check` once the workload is routed and those routings are at hand.
`simulate` may assume both passed (the worker does not check again). `series_memory_bytes` is the
engine's share of admission control's memory estimate (admission.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

import numpy as np

from services.common.snapshot import FabricSnapshot
from services.simulator.results import SimulationOutcome
from services.simulator.spec import SimulationSpec
from services.simulator.workload import Workload

__all__ = ["Engine", "PlacedRun", "Progress", "RunFabric", "WhatIfRoutings"]

# Progress callback: called now and then with the fraction done; returning False cancels (the
# engine raises services.simulator.cancel.Cancelled).
Progress = Callable[[float], bool]
# The routings of the sets of links LINK_DOWN faults take down: down links -> (snapshot with those
# routes, measured reroute seconds), as the topology service computes them (its what-if snapshots).
WhatIfRoutings = Mapping[tuple[int, ...], tuple[FabricSnapshot, float]]


@dataclasses.dataclass(frozen=True)
class RunFabric:
    """The fabric as a run sees it: its snapshot, and the routings its LINK_DOWN faults need."""

    snapshot: FabricSnapshot
    what_if: WhatIfRoutings = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class PlacedRun:
    """What the shared checks know of a run before its workload is built (checks.py)."""

    hosts: Sequence[np.ndarray]  # each job's hosts, in rank order (placement.py)
    largest_flow_bytes: Sequence[int]  # each job's largest QP flow (admission.py's estimate)
    shortest_ns: int  # no run of the spec ends before this (admission.makespan_lower_bound_ns)


class Engine(Protocol):
    """One fidelity's simulator (module doc)."""

    def check_placed(
        self, spec: SimulationSpec, snapshot: FabricSnapshot, placed: PlacedRun
    ) -> list[tuple[int, ...]]:
        """Raise the domain error of anything this engine refuses once the jobs are placed and sized;
        return the sets of down links (sorted link indices) whose routings `RunFabric.what_if` must
        hold for `check` and `simulate` (empty: none)."""
        ...

    def series_memory_bytes(self, spec: SimulationSpec, snapshot: FabricSnapshot, shortest_ns: int) -> int:
        """What this engine's series of a run lasting at least `shortest_ns` take in memory at first."""
        ...

    def flow_memory_bytes(
        self, spec: SimulationSpec, snapshot: FabricSnapshot, flows: int, connections: Sequence[int]
    ) -> int:
        """What this engine keeps per (flow, link) beyond the per-flow arrays admission counts
        (`connections`: each job's, admission.JobCost)."""
        ...

    def check(self, spec: SimulationSpec, fabric: RunFabric, workload: Workload) -> None:
        """Raise the domain error (InvalidArgument naming the field) of anything this engine refuses."""
        ...

    def simulate(
        self, spec: SimulationSpec, fabric: RunFabric, workload: Workload, progress: Progress | None
    ) -> SimulationOutcome:
        """Run the workload; the spec has passed every check, this engine's `check` included."""
        ...
