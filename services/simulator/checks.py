"""Every check a spec must pass before StartSimulation accepts it, in one place, in two stages.

`check_simulation` runs them in order: the spec's own checks (`validate_spec`, validation.py:
numbers in range first, then what needs no fabric), the fabric's numbers, placement (hosts, rails,
pinned paths, SHARP trees), the engine's refusals once the jobs are placed and sized
(`Engine.check_placed`: how many sample intervals the series can hold; at PACKET also packets per
flow, PFC thresholds against the buffer, LINK_DOWN faults), and last admission control
(admission.py). It returns the sets of down links whose routings the run needs (the engine says).

`check_routes`, once those routings are at hand, routes every distinct flow of the workload as the
engine will (`workload.connection_workload`: one transfer per connection, since every step, chunk
and iteration reuses the connections' QPs; the whole workload of a large ring would hold gigabytes
in the service process): a pair of hosts with no route (or routes that loop) is FailedPrecondition
naming them, a route across a link of rate 0 FailedPrecondition naming the link, and then the
engine's own refusals (`Engine.check`: PACKET routes every LINK_DOWN epoch).

The servicer runs both before StartSimulation returns, and `run_simulation` runs both for core
callers; the worker runs neither again (runner.simulate): nothing a spec can fail is left for it.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from services.common.errors import FailedPrecondition
from services.common.snapshot import FabricSnapshot
from services.simulator.admission import CostEstimate, SimulationLimits, estimate_cost
from services.simulator.bounds import MAX_LATENCY_NS
from services.simulator.engine import PlacedRun, RunFabric
from services.simulator.engines import engine_for
from services.simulator.paths import route_workload
from services.simulator.spec import SimulationSpec
from services.simulator.validation import validate_spec
from services.simulator.workload import connection_workload, place_jobs

__all__ = ["Accepted", "check_routes", "check_simulation"]

_NODE_KIND_SWITCH = 2


@dataclasses.dataclass(frozen=True)
class Accepted:
    """What the checks found: each job's hosts, the cost estimate, the what-if routings needed."""

    placed: list[np.ndarray]
    estimate: CostEstimate
    down_sets: list[tuple[int, ...]]


def check_simulation(
    spec: SimulationSpec,
    snapshot: FabricSnapshot,
    limits: SimulationLimits | None = None,
    *,
    spec_checked: bool = False,
) -> Accepted:
    """Run every check (module doc); InvalidArgument names the field relative to the spec,
    ResourceExhausted (with `limits`) names each estimate above its limit. `spec_checked`: the
    caller has run `validate_spec` already (the servicer does, before it fetches the snapshot)."""
    if not spec_checked:
        validate_spec(spec)
    _check_fabric(snapshot)
    placed = place_jobs(spec, snapshot)
    estimate = estimate_cost(spec, snapshot, placed)
    sized = PlacedRun(placed, [job.largest_flow_bytes for job in estimate.jobs], estimate.shortest_ns)
    down = engine_for(spec.fidelity).check_placed(spec, snapshot, sized)
    if limits is not None:
        estimate.admit(limits)
    return Accepted(placed, estimate, down)


def _check_fabric(snapshot: FabricSnapshot) -> None:
    """Numbers of the fabric the engines' arithmetic relies on (the topology service bounds them too)."""
    latency = snapshot.link_latency_ns
    if (len(latency) and int(latency.max()) > MAX_LATENCY_NS) or (latency < 0).any():
        link = int(np.argmax((latency > MAX_LATENCY_NS) | (latency < 0)))
        raise FailedPrecondition(
            f"{snapshot.fabric}: link {snapshot.link_names[link]} has a latency of {int(latency[link])} ns; "
            f"the simulator models links of 0..{MAX_LATENCY_NS} ns"
        )
    if (snapshot.link_rate_bps < 0).any():
        link = int(np.argmax(snapshot.link_rate_bps < 0))
        raise FailedPrecondition(f"{snapshot.fabric}: link {snapshot.link_names[link]} has a negative rate")


def check_routes(spec: SimulationSpec, fabric: RunFabric) -> None:
    """The checks that need the workload's routes (module doc); `spec` passed `check_simulation`."""
    snapshot = fabric.snapshot
    assert spec.load_balancing is not None
    workload = connection_workload(spec, snapshot)
    routes, _ = route_workload(spec.load_balancing, snapshot, workload, spec.switch_latency_ns)
    crossed = np.unique(routes.channels)
    dead = crossed[snapshot.channel_rate_bps()[crossed] <= 0]
    if len(dead):
        link = int(dead[0]) // 2
        raise FailedPrecondition(
            f"{snapshot.fabric}: link {snapshot.link_names[link]} has a rate of 0 and the workload's routes "
            "cross it; nothing could ever arrive"
        )
    engine_for(spec.fidelity).check(spec, fabric, workload)
