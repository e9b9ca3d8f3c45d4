"""Forwarding tables of one switch read out of Routes: LFT port and ECMP ports per destination host."""

from __future__ import annotations

import dataclasses

import numpy as np

from services.topology.fabric import Fabric
from services.topology.routing.routes import Routes

__all__ = ["ForwardingTable", "forwarding_table"]


@dataclasses.dataclass(frozen=True)
class ForwardingTable:
    """Entries for every destination host the node has a route to, in LID (host) order."""

    node: int
    hosts: np.ndarray  # int32 [E] destination host indices
    lft_ports: np.ndarray  # int32 [E] the single port the engine chose
    port_offsets: np.ndarray  # int64 [E+1] ECMP ports of entry e: ports[port_offsets[e]:port_offsets[e+1]]
    ports: np.ndarray  # int32, LFT port first, then the others in port order

    def ecmp_ports(self, entry: int) -> np.ndarray:
        return self.ports[self.port_offsets[entry] : self.port_offsets[entry + 1]]


def forwarding_table(fabric: Fabric, routes: Routes, node: int) -> ForwardingTable:
    """The forwarding table of `node` (any node; hosts have their uplinks)."""
    hosts = routes.num_hosts
    offsets = routes.offsets[node * hosts : (node + 1) * hosts + 1]
    sizes = np.diff(offsets)
    reachable = np.flatnonzero(sizes > 0).astype(np.int32)
    ports = fabric.channel_port()[routes.next_channels[offsets[0] : offsets[-1]]]
    local = offsets - offsets[0]
    port_offsets = np.concatenate([[0], np.cumsum(sizes[reachable])]).astype(np.int64)
    return ForwardingTable(
        node=node,
        hosts=reachable,
        lft_ports=ports[local[reachable]].astype(np.int32),
        port_offsets=port_offsets,
        ports=ports.astype(np.int32),
    )
