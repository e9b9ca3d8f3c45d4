"""One simulation from spec to outcome: check (core callers only), build the workload, hand it to
the engine of its fidelity (engines.py), which routes, runs and assembles.

The service checks at StartSimulation (checks.py) and runs `run_in_worker` in a worker process
(services.common.workers.WorkerPool), which does not check again; core tests and benchmarks call
`run_simulation`, which checks as the service does first. Everything is plain Python and picklable.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import Any

from services.common.errors import FabricTwinError, InvalidArgument
from services.common.snapshot import FabricSnapshot
from services.simulator.cancel import Cancelled, setup_stage
from services.simulator.checks import check_routes, check_simulation
from services.simulator.engine import Progress, RunFabric, WhatIfRoutings
from services.simulator.engines import engine_for
from services.simulator.results import FLOW_RESULTS_LIMIT, SimulationOutcome
from services.simulator.spec import SimulationSpec
from services.simulator.workload import Workload, build_workload

__all__ = ["WorkerFailure", "run_in_worker", "run_simulation", "simulate"]


@dataclasses.dataclass
class WorkerFailure:
    """A domain error raised in a worker, carried back as data (code name and message)."""

    code: str
    message: str


def run_simulation(
    spec: SimulationSpec | Mapping[str, Any],
    snapshot: FabricSnapshot,
    progress: Progress | None = None,
    what_if: WhatIfRoutings | None = None,
) -> SimulationOutcome:
    """Check `spec` on `snapshot` as StartSimulation does, then simulate it (FLOW, or PACKET with
    `what_if` routes for LINK_DOWN faults): for core callers (tests, benchmarks).

    `progress(fraction)` is called now and then; returning False cancels (raises Cancelled).
    Raises InvalidArgument / FailedPrecondition naming the offending field, host or link.
    """
    if not isinstance(spec, SimulationSpec):
        spec = SimulationSpec.from_dict(spec)
    fabric = RunFabric(snapshot, what_if or {})
    started = time.perf_counter()
    check_simulation(spec, snapshot)
    check_routes(spec, fabric)
    workload = build_workload(spec, snapshot)
    checked = time.perf_counter() - started
    outcome = simulate(spec, fabric, progress, workload)
    outcome.phase_seconds = {"checks_and_workload": checked, **outcome.phase_seconds}
    return outcome


def simulate(
    spec: SimulationSpec,
    fabric: RunFabric,
    progress: Progress | None = None,
    workload: Workload | None = None,
) -> SimulationOutcome:
    """Run a spec that passed every check (checks.py) on the engine of its fidelity (`workload`: its
    workload if the caller built it, else built here)."""
    if workload is None:
        setup_stage(progress, "building the workload")
        workload = build_workload(spec, fabric.snapshot)
    return engine_for(spec.fidelity).simulate(spec, fabric, workload, progress)


def run_in_worker(
    spec: SimulationSpec | Mapping[str, Any],
    snapshot: FabricSnapshot,
    progress: Progress | None = None,
    what_if: WhatIfRoutings | None = None,
) -> SimulationOutcome | WorkerFailure:
    """`simulate` for a worker process, on a spec StartSimulation checked (it is not checked again):
    domain errors come back as a WorkerFailure value.

    (Domain exceptions take two constructor arguments and do not survive pickling.) Fields named
    by InvalidArgument are prefixed with `spec.`, as the service's caller knows them.
    """
    try:
        if progress is not None and not progress(0.0):  # tells the service the run has started
            raise Cancelled()
        if not isinstance(spec, SimulationSpec):
            spec = SimulationSpec.from_dict(spec)
        outcome = simulate(spec, RunFabric(snapshot, what_if or {}), progress)
        # The service shows at most FLOW_RESULTS_LIMIT flows: the rest would only cross the pipe
        # and sit in its memory (8.4M flows, 1.99 GB in the service process at k=32).
        outcome.flows = outcome.flows.first(FLOW_RESULTS_LIMIT)
        return outcome
    except Cancelled:
        return WorkerFailure("CANCELLED", "cancelled")
    except InvalidArgument as exc:  # fields of the spec, named as in the request
        return WorkerFailure(exc.code, f"spec.{exc}")
    except FabricTwinError as exc:
        return WorkerFailure(exc.code, str(exc))
