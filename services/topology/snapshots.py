"""FabricSnapshot (services/common/snapshot.py) from a fabric and its routes: what the simulator runs on."""

from __future__ import annotations

import numpy as np

from services.common.snapshot import FabricSnapshot
from services.topology.fabric import Fabric
from services.topology.routing import Routes, engine_named

__all__ = ["build_snapshot", "route_and_snapshot"]


def build_snapshot(fabric: Fabric, routes: Routes, name: str, routing_version: int) -> FabricSnapshot:
    """The arrays of `fabric` and `routes` (compact encoding, unused groups dropped) as a snapshot of
    resource `name` (`fabrics/{fabric}`)."""
    if (routes.num_nodes, routes.num_hosts) != (fabric.num_nodes, fabric.num_hosts):
        raise ValueError("routes were computed for another fabric")
    hosts = fabric.host_nodes
    return FabricSnapshot(
        fabric=name,
        routing_version=routing_version,
        node_kind=fabric.node_kind.astype(np.int8),
        node_tier=fabric.node_tier.astype(np.int8),
        node_names=list(fabric.node_names),
        host_nodes=hosts.astype(np.int32),
        host_ip=fabric.node_ip[hosts].astype(np.uint32),
        host_rail=fabric.node_rail[hosts].astype(np.int32),
        link_a=fabric.link_a.astype(np.int32),
        link_b=fabric.link_b.astype(np.int32),
        link_rate_bps=fabric.link_rate_bps.astype(np.int64),
        link_latency_ns=fabric.link_latency_ns.astype(np.int64),
        link_state=fabric.link_state.astype(np.int8),
        link_ber=fabric.link_ber.astype(np.float64),
        link_names=list(fabric.link_names),
        link_port_a=fabric.link_port_a.astype(np.int32),
        link_port_b=fabric.link_port_b.astype(np.int32),
        route_table=routes.table.compacted(),
    )


def route_and_snapshot(fabric: Fabric, name: str = "fabrics/test", engine: str = "minhop") -> FabricSnapshot:
    """Route `fabric` with `engine` and snapshot it at routing version 1 (handy in tests).

    >>> from services.topology.generators import leaf_spine
    >>> snapshot = route_and_snapshot(leaf_spine(2, 2, 2))
    >>> snapshot.next_channels(0, 3).size  # host-0 reaches host-3 through its one uplink
    1
    """
    return build_snapshot(fabric, engine_named(engine).compute(fabric), name, 1)
