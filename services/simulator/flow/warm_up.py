"""Compile the FLOW engines ahead of their first run: `python -m services.simulator.flow.warm_up`.

The compiled loop (`loop.py`) takes about 20 s to compile on two cores the first time (numba caches
it next to the source); `make venv` and `make run` call this so that no simulation waits for it. It
runs one flow and a two-rank ring between two hosts through one switch (`warm_fabric.warm_up_run`);
then FLOW_STEADY's kernels (steady.py) on the ring alone. With the cache in place it takes well
under a second.
"""

from __future__ import annotations

import sys
import time

from services.simulator.engine import RunFabric
from services.simulator.flow.engine import FlowEngine, SteadyFlowEngine
from services.simulator.spec import SimulationSpec
from services.simulator.warm_fabric import warm_up_run
from services.simulator.workload import build_workload

__all__ = ["warm_up"]


def warm_up() -> None:
    """Run the FLOW engines once on the smallest fabric (compiling them if they are not cached)."""
    snapshot, run = warm_up_run("FLOW")
    spec = SimulationSpec.from_dict(run)
    FlowEngine().simulate(spec, RunFabric(snapshot, {}), build_workload(spec, snapshot), None)
    ring = SimulationSpec.from_dict({**run, "fidelity": "FLOW_STEADY", "jobs": run["jobs"][1:]})
    SteadyFlowEngine().simulate(ring, RunFabric(snapshot, {}), build_workload(ring, snapshot), None)


def main() -> int:
    start = time.perf_counter()
    warm_up()
    print(f"flow engine: ready in {time.perf_counter() - start:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
