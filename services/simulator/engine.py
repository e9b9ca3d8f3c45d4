"""The seam between the simulator and its engines: the `Engine` Protocol and what it is given.

An engine turns a validated spec, the fabric as the run sees it and the workload (both engines
consume the same one) into a `SimulationOutcome`, through the shared assembler (assemble.py), so
the servicer, telemetry export, scenarios and comparisons never know which engine ran. engines.py
names the engine of each fidelity.

`check` holds the refusals only that engine makes; checks.py runs it before StartSimulation
returns, and `simulate` may assume it passed (the worker does not check again).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Protocol

from services.common.snapshot import FabricSnapshot
from services.simulator.results import SimulationOutcome
from services.simulator.spec import SimulationSpec
from services.simulator.workload import Workload

__all__ = ["Engine", "Progress", "RunFabric", "WhatIfRoutings"]

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


class Engine(Protocol):
    """One fidelity's simulator (module doc)."""

    def check(self, spec: SimulationSpec, fabric: RunFabric, workload: Workload) -> None:
        """Raise the domain error (InvalidArgument naming the field) of anything this engine refuses."""
        ...

    def simulate(
        self, spec: SimulationSpec, fabric: RunFabric, workload: Workload, progress: Progress | None
    ) -> SimulationOutcome:
        """Run the workload; the spec has passed every check, this engine's `check` included."""
        ...
