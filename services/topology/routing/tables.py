"""Forwarding tables of one switch read out of Routes: LFT port and ECMP ports per destination host."""

from __future__ import annotations

import dataclasses

import numpy as np

from services.topology.fabric import Fabric
from services.topology.routing.routes import Routes

__all__ = ["ForwardingTable", "forwarding_table"]


@dataclasses.dataclass(frozen=True)
class ForwardingTable:
    """Entries for every destination host the node has a route to, in host (LID) order."""

    node: int
    hosts: np.ndarray  # int32 [E] destination host indices
    lft_ports: np.ndarray  # int32 [E] the single port the engine chose
    port_offsets: np.ndarray  # int64 [E+1] ECMP ports of entry e: ports[port_offsets[e]:port_offsets[e+1]]
    ports: np.ndarray  # int32, per entry the LFT port first, then the others in cyclic port order

    def ecmp_ports(self, entry: int) -> np.ndarray:
        return self.ports[self.port_offsets[entry] : self.port_offsets[entry + 1]]


def forwarding_table(fabric: Fabric, routes: Routes, node: int) -> ForwardingTable:
    """The forwarding table of `node` (any node; a host's table lists its uplinks)."""
    lookup = routes.lookup(fabric)
    hosts = np.arange(routes.num_hosts, dtype=np.int64)
    start, size = lookup.groups(np.full(hosts.shape[0], node, dtype=np.int64), hosts)
    reachable = np.flatnonzero(size > 0)
    sizes = size[reachable]
    offsets = np.zeros(reachable.shape[0] + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    member = np.arange(offsets[-1]) - np.repeat(offsets[:-1], sizes)
    channels = lookup.channels[np.repeat(start[reachable], sizes) + member]
    ports = fabric.channel_port()[channels].astype(np.int32)
    return ForwardingTable(
        node=node,
        hosts=reachable.astype(np.int32),
        lft_ports=ports[offsets[:-1]] if reachable.size else np.zeros(0, dtype=np.int32),
        port_offsets=offsets,
        ports=ports,
    )
