"""LINK_DOWN faults as the packet engine runs them: link events and routing epochs.

A LINK_DOWN fault takes its link down at `start_ns` and, if `end_ns` is set, back up then. Each
change is followed, after the fault's routing-reaction delay (packet/transport.py), by a
routing epoch: from then on switches forward by the routes the fabric's routing engine computes
with the links down at the time of the change (a what-if snapshot from the topology service, with
its measured recompute time). Until the epoch, packets routed to a down link are discarded
(PortXmitDiscards) and the transport recovers them.

The servicer fetches the what-if snapshots (`down_sets` says which) before the run; the core never
calls a service.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from services.common.errors import FailedPrecondition, InvalidArgument
from services.common.snapshot import FabricSnapshot
from services.simulator.engine import WhatIfRoutings
from services.simulator.faults import FaultKind, RerouteModel, resolve_link
from services.simulator.packet.config import LinkEvent, RoutingEpoch
from services.simulator.packet.transport import reroute_delay_ns
from services.simulator.paths import route_workload
from services.simulator.pinning import pinned_flows_by_link
from services.simulator.placement import HostDirectory
from services.simulator.spec import SimulationSpec
from services.simulator.workload import Workload

__all__ = ["check_routes_survive", "down_sets", "link_fault_plan"]

_NODE_KIND_SWITCH, _LINK_STATE_DOWN = 2, 2


@dataclasses.dataclass(frozen=True)
class _Change:
    time_ns: int
    link: int
    up: bool
    fault: int  # index in spec.faults


def _changes(spec: SimulationSpec, snapshot: FabricSnapshot) -> list[_Change]:
    changes = []
    for i, fault in enumerate(spec.faults):
        if fault.kind != FaultKind.LINK_DOWN:
            continue
        link = resolve_link(snapshot, fault.link, f"faults[{i}].link")
        changes.append(_Change(fault.start_ns, link, False, i))
        if fault.end_ns:
            changes.append(_Change(fault.end_ns, link, True, i))
    changes.sort(key=lambda c: (c.time_ns, c.up))
    # A fault ending as another on the same link starts: the link stays down (the event heap does not
    # order events of one instant, so the pair would otherwise flap it).
    ending = {(c.time_ns, c.link): c for c in changes if c.up}
    starting = {(c.time_ns, c.link): c for c in changes if not c.up}
    abutting = ending.keys() & starting.keys()
    return [c for c in changes if (c.time_ns, c.link) not in abutting]


def _down_after_each(changes: list[_Change]) -> list[tuple[int, ...]]:
    down: dict[int, int] = {}  # link -> faults holding it down
    after = []
    for change in changes:
        down[change.link] = down.get(change.link, 0) + (-1 if change.up else 1)
        after.append(tuple(sorted(link for link, n in down.items() if n > 0)))
    return after


def down_sets(spec: SimulationSpec, snapshot: FabricSnapshot) -> list[tuple[int, ...]]:
    """The sets of down links whose routes the run needs (empty: no LINK_DOWN fault).

    A link taken down for good that a pinned flow crosses is refused: a pinned flow is never
    rerouted, so it could never finish.
    """
    changes = _changes(spec, snapshot)
    if changes and any(flow.pinned for job in spec.jobs for flow in job.flows):
        pinned = pinned_flows_by_link(spec, snapshot)
        for change in changes:
            fault = spec.faults[change.fault]
            if not change.up and not fault.end_ns and change.link in pinned:
                raise InvalidArgument(
                    f"faults[{change.fault}].link",
                    f"{snapshot.link_names[change.link]} goes down for good, but {pinned[change.link][0]} is "
                    "pinned across it and a pinned flow is never rerouted: it could never finish; set end_ns",
                )
    return sorted({s for s in _down_after_each(changes) if s})


def _reach(snapshot: FabricSnapshot, down: tuple[int, ...]) -> dict[int, set[int]]:
    """Host node -> the connected parts of the switch fabric it reaches, with links `down` DOWN too
    (hosts do not forward: parts are joined through switches only)."""
    up = snapshot.link_state != _LINK_STATE_DOWN
    up[list(down)] = False
    a, b = snapshot.link_a.astype(np.int64), snapshot.link_b.astype(np.int64)
    switch = snapshot.node_kind == _NODE_KIND_SWITCH
    inner = up & switch[a] & switch[b]
    label = np.arange(snapshot.num_nodes)
    while True:  # smallest node index of each part, by propagation along switch links
        spread = label.copy()
        np.minimum.at(spread, a[inner], label[b[inner]])
        np.minimum.at(spread, b[inner], label[a[inner]])
        spread = spread[spread]
        if np.array_equal(spread, label):
            break
        label = spread
    reach: dict[int, set[int]] = {int(h): set() for h in snapshot.host_nodes}
    for x, y in ((a, b), (b, a)):
        attach = up & ~switch[x] & switch[y]
        for host, part in zip(x[attach].tolist(), label[y[attach]].tolist(), strict=True):
            reach.setdefault(host, set()).add(part)
    return reach


def check_routes_survive(spec: SimulationSpec, snapshot: FabricSnapshot, placed: list[np.ndarray]) -> None:
    """Refuse a LINK_DOWN for good (no end_ns) after which some routed flow's hosts no longer reach
    each other: the collective could never finish (InvalidArgument naming the fault's link).

    Connectivity stands for the routes the topology service would recompute, which reach whatever
    is connected; `link_fault_plan` still refuses, in the worker, a routing that does not.
    """
    changes = _changes(spec, snapshot)
    if not any(not c.up and not spec.faults[c.fault].end_ns for c in changes):
        return
    directory = HostDirectory(snapshot)
    host_nodes = snapshot.host_nodes
    for change, down in zip(changes, _down_after_each(changes), strict=True):
        if change.up or spec.faults[change.fault].end_ns:
            continue
        reach = _reach(snapshot, down)
        for j, (job, hosts) in enumerate(zip(spec.jobs, placed, strict=True)):
            if job.flows:
                pairs = [
                    (directory.lookup(f.source, ""), directory.lookup(f.destination, ""))
                    for f in job.flows
                    if not f.pinned
                ]
            else:
                common = set.intersection(*(reach[int(host_nodes[h])] for h in hosts)) if len(hosts) else {0}
                pairs = [] if common else [(int(hosts[0]), int(h)) for h in hosts[1:]]
            for source, destination in pairs:
                if reach[int(host_nodes[source])] & reach[int(host_nodes[destination])]:
                    continue
                names = snapshot.node_names
                raise InvalidArgument(
                    f"faults[{change.fault}].link",
                    f"taking {snapshot.link_names[change.link]} down for good leaves no route from "
                    f"{names[host_nodes[source]]} to {names[host_nodes[destination]]} (jobs[{j}]); the "
                    "collective could never finish: set end_ns",
                )


def link_fault_plan(
    spec: SimulationSpec, snapshot: FabricSnapshot, workload: Workload, what_if: WhatIfRoutings
) -> tuple[tuple[LinkEvent, ...], tuple[RoutingEpoch, ...], list[str]]:
    """The link events and routing epochs of the run, and notes on what the routing could not do."""
    changes = _changes(spec, snapshot)
    if not changes:
        return (), (), []
    lb = spec.load_balancing
    assert lb is not None
    events, epochs, notes = [], [], []
    pinned = pinned_flows_by_link(spec, snapshot) if workload.pinned.any() else {}
    for link in sorted({c.link for c in changes if c.link in pinned}):
        flows = pinned[link]
        notes.append(
            f"{', '.join(flows[:3])}{' and others' if len(flows) > 3 else ''} pinned across link "
            f"{snapshot.link_names[link]}, which a LINK_DOWN fault takes down: their packets to it are "
            "discarded until it comes back (a pinned flow is never rerouted)."
        )
    order: list[int] = []  # change order of each epoch
    for change, down in zip(changes, _down_after_each(changes), strict=True):
        events.append(LinkEvent(change.time_ns, change.link, change.up))
        fault = spec.faults[change.fault]
        assert fault.reroute is not None
        if down:
            if down not in what_if:
                raise FailedPrecondition(f"no what-if routing was fetched for links {list(down)} down")
            routing, measured_s = what_if[down]
        else:
            routing, measured_s = snapshot, what_if.get((change.link,), (snapshot, 0.0))[1]
        delay = reroute_delay_ns(fault.reroute, fault.reroute_delay_ns, measured_s)
        try:
            routes, flow_route = route_workload(lb, routing, workload, spec.switch_latency_ns)
        except FailedPrecondition as exc:
            if not change.up and not fault.end_ns:
                raise InvalidArgument(
                    f"faults[{change.fault}].link",
                    f"taking {snapshot.link_names[change.link]} down for good leaves no route ({exc}); "
                    "the collective could never finish: set end_ns",
                ) from exc
            notes.append(
                f"faults[{change.fault}]: no route around link {change.link} ({exc}); traffic that needs it "
                "waits for it to come back."
            )
            continue
        epochs.append(RoutingEpoch(change.time_ns + delay, routing, routes, np.asarray(flow_route)))
        uses_measure = fault.reroute == RerouteModel.SUBNET_MANAGER and not fault.reroute_delay_ns
        measured = f" (measured recompute {measured_s * 1e3:.2f} ms)" if uses_measure else ""
        notes.append(
            f"faults[{change.fault}]: link {snapshot.link_names[change.link]} "
            f"{'up' if change.up else 'down'} at {change.time_ns} ns; {fault.reroute.value} reroute "
            f"takes effect {delay} ns later{measured}."
        )
        order.append(len(order))
    # A slower reaction to an earlier change must not undo a faster one to a later change: in time
    # order, an epoch older (by change) than one already installed is superseded.
    kept, newest = [], -1
    for epoch, rank in sorted(zip(epochs, order, strict=True), key=lambda pair: pair[0].time_ns):
        if rank > newest:
            kept.append(epoch)
            newest = rank
    return tuple(events), tuple(kept), notes
