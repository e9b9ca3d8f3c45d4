"""The channels each flow of a workload crosses: pinned flows on their paths, every other flow as
its load-balancing mode splits it (modes/: ECMP pins a flow by its hash, ADAPTIVE and SPRAY split it
evenly over the equal-cost groups at FLOW fidelity).

Pinned flows (`Workload.pinned_offsets` / `pinned_channels`: SHARP's hops between neighbouring
tree nodes, see sharp.py, and POINT_TO_POINT flows given a path, see pinning.py) are not routed:
whatever the mode, each distinct pinned path gets one row of its channels in order (fraction 1 each),
with the latency of those hops, after the rows of the routed flows.

The walking itself is routes.py; the names re-exported here (`FlowRoutes`, `pin_flows_by_hash`,
`split_flows_evenly`, `pinned_path_rows`, `unique_rows`, `hop_latency_ns`) keep older importers
working; new code imports them from routes.py.
"""

from __future__ import annotations

import numpy as np

from services.common.snapshot import FabricSnapshot
from services.simulator.modes import mode_of
from services.simulator.routes import (
    FlowRoutes,
    hop_latency_ns,
    pin_flows_by_hash,
    pinned_path_rows,
    split_flows_evenly,
    unique_rows,
)
from services.simulator.spec import LoadBalancingSpec
from services.simulator.workload import Workload

__all__ = [
    "FlowRoutes",
    "hop_latency_ns",
    "pin_flows_by_hash",
    "pinned_path_rows",
    "route_workload",
    "split_flows_evenly",
    "unique_rows",
]


def route_workload(
    load_balancing: LoadBalancingSpec, snapshot: FabricSnapshot, workload: Workload, switch_latency_ns: int
) -> tuple[FlowRoutes, np.ndarray]:
    """Route every flow of a workload; returns the routes and each flow's row in them.

    Flows with the same header fields (every step of a connection's QP) share one row: ECMP
    gives them the same path, which is what pins sequential flowlets. Pinned flows share one row
    per distinct pinned path, after the routed rows.
    """
    pinned = workload.pinned
    if pinned.all():
        routed = FlowRoutes(
            np.zeros(1, dtype=np.int64), np.zeros(0, np.int32), np.zeros(0), np.zeros(0, np.int64), True
        )
        flow_route = np.zeros(workload.flow_count, dtype=np.int64)
    else:
        routed, flow_route = _route_between_hosts(
            load_balancing, snapshot, workload, None if not pinned.any() else ~pinned, switch_latency_ns
        )
    if not pinned.any():
        return routed, flow_route
    offsets, channels, row = pinned_path_rows(workload, pinned)
    flow_route[pinned] = len(routed.latency_ns) + row
    hop_ns = hop_latency_ns(snapshot, switch_latency_ns)
    routes = FlowRoutes(
        offsets=np.r_[routed.offsets, routed.offsets[-1] + offsets[1:]],
        channels=np.r_[routed.channels, channels].astype(np.int32),
        fractions=np.r_[routed.fractions, np.ones(len(channels))],
        latency_ns=np.r_[routed.latency_ns, np.add.reduceat(hop_ns[channels], offsets[:-1])],
        pinned=routed.pinned,
    )
    return routes, flow_route


def _route_between_hosts(
    load_balancing: LoadBalancingSpec,
    snapshot: FabricSnapshot,
    workload: Workload,
    which: np.ndarray | None,
    switch_latency_ns: int,
) -> tuple[FlowRoutes, np.ndarray]:
    """Routes of the flows selected by `which` (bool [F]; None: all); the others get row 0 here.

    Flows the mode cannot tell apart (the same `route_key_columns`) share one row.
    """
    mode = mode_of(load_balancing)
    columns = mode.route_key_columns(load_balancing, workload)
    keys, rows = unique_rows(columns if which is None else [column[which] for column in columns])
    routes = mode.flow_routes(load_balancing, snapshot, keys, switch_latency_ns)
    if which is None:
        return routes, rows
    flow_route = np.zeros(len(which), dtype=np.int64)
    flow_route[which] = rows
    return routes, flow_route
