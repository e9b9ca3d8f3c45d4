"""Every check a spec must pass before StartSimulation accepts it, in one place, in two stages.

`check_simulation` runs them in order: the spec's own checks (`validate_spec`, validation.py:
numbers in range first, then what needs no fabric), the fabric's numbers, placement (hosts, rails,
pinned paths, SHARP trees), the checks that need the spec's size (packets per flow, how many
sample intervals the series can hold), PFC thresholds against the buffer, LINK_DOWN faults (links,
pinned flows, routes that a link down for good would leave), and last admission control
(admission.py). It returns the sets of down links whose routings the run needs.

`check_routes`, once those routings are at hand, builds the workload and routes it as the engine
will: a pair of hosts with no route (or routes that loop) is FailedPrecondition naming them, a
route across a link of rate 0 FailedPrecondition naming the link, and then the engine's own
refusals (`Engine.check`: PACKET routes every LINK_DOWN epoch).

The servicer runs both before StartSimulation returns, and `run_simulation` runs both for core
callers; the worker runs neither again (runner.simulate): nothing a spec can fail is left for it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from services.common.errors import FailedPrecondition, InvalidArgument
from services.common.snapshot import FabricSnapshot
from services.simulator.admission import CostEstimate, SimulationLimits, estimate_cost
from services.simulator.bounds import MAX_LATENCY_NS
from services.simulator.engine import RunFabric
from services.simulator.engines import engine_for
from services.simulator.packet.engine import MAX_PACKETS_PER_FLOW, MAX_SERIES_BYTES, series_cell_bytes
from services.simulator.packet.link_faults import check_routes_survive, down_sets
from services.simulator.packet.transport import pfc_thresholds
from services.simulator.paths import route_workload
from services.simulator.series import MAX_SERIES_VALUES
from services.simulator.spec import Fidelity, SimulationSpec
from services.simulator.validation import validate_spec
from services.simulator.workload import Workload, build_workload, place_jobs

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
    _check_packets_per_flow(spec, estimate)
    _check_series(spec, snapshot, placed, estimate)
    pfc_thresholds(spec, snapshot)
    down = down_sets(spec, snapshot)
    check_routes_survive(spec, snapshot, placed)
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


def _check_packets_per_flow(spec: SimulationSpec, estimate: CostEstimate) -> None:
    """The packet engine numbers at most MAX_PACKETS_PER_FLOW - 1 packets per QP flow."""
    if spec.fidelity != Fidelity.PACKET:
        return
    for i, (job, cost) in enumerate(zip(spec.jobs, estimate.jobs, strict=True)):
        packets = -(-cost.largest_flow_bytes // spec.mtu_bytes)
        if packets < MAX_PACKETS_PER_FLOW:
            continue
        field = f"jobs[{i}].size_bytes"
        if job.flows:
            largest = max(range(len(job.flows)), key=lambda k: job.flows[k].size_bytes)
            field = f"jobs[{i}].flows[{largest}].size_bytes"
        raise InvalidArgument(
            field,
            f"a QP flow of {cost.largest_flow_bytes} bytes is {packets} packets of "
            f"mtu_bytes={spec.mtu_bytes}; "
            f"the packet engine carries at most {MAX_PACKETS_PER_FLOW - 1} per flow: use a larger mtu_bytes, "
            "more chunks or more qps_per_connection",
        )


def _check_series(
    spec: SimulationSpec, snapshot: FabricSnapshot, placed: Sequence[np.ndarray], estimate: CostEstimate
) -> None:
    """Refuse a sample interval whose series cannot fit however the run goes (it lasts at least
    `estimate.shortest_ns`); a run that turns out longer than its series can hold gets a wider
    interval instead, which its model notes report."""
    interval = spec.sample_interval_ns
    if not interval:
        return
    shortest = estimate.shortest_ns
    intervals = -(-shortest // interval)
    if spec.fidelity == Fidelity.PACKET:  # one series row per link direction of the fabric
        channels = snapshot.num_channels
        cell = series_cell_bytes(bool(spec.faults or spec.pfc or spec.dcqcn))
        fits = channels * intervals * cell <= MAX_SERIES_BYTES
        most = MAX_SERIES_BYTES // max(1, channels * cell)
    else:  # a row per link direction that carries traffic: at least one per sending host
        senders = [
            len({f.source for f in job.flows}) if job.flows else len(hosts) - 1
            for job, hosts in zip(spec.jobs, placed, strict=True)
        ]
        channels = max(1, *senders)
        fits = channels * (intervals + 1) <= MAX_SERIES_VALUES
        most = MAX_SERIES_VALUES // max(1, channels) - 1
    if fits:
        return
    coarsest = -(-shortest // max(1, most))
    raise InvalidArgument(
        "sample_interval_ns",
        f"{interval} ns gives at least {intervals:,} intervals for each of {channels:,} link directions "
        f"(the run lasts at least {shortest:,} ns), more than the series can hold; use at least "
        f"{coarsest:,} ns (or 0: chosen from the run's length)",
    )


def check_routes(spec: SimulationSpec, fabric: RunFabric) -> Workload:
    """The checks that need the workload and its routes (module doc); `spec` passed `check_simulation`.
    Returns the workload it built (a core caller simulates it; the service's worker builds its own)."""
    snapshot = fabric.snapshot
    assert spec.load_balancing is not None
    workload = build_workload(spec, snapshot)
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
    return workload
