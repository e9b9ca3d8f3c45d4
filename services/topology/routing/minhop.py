"""minhop: shortest paths by hop count, every equal-hop port in the ECMP group, LFT balanced like OpenSM.

Distances come from one breadth-first search per *attachment group* (the set of switches a host is
cabled to, normally its one leaf), run for all groups at once as array operations over the
switch-to-switch channels; a host's distance to another host follows from its uplinks. Hosts are
never transit. A channel is a candidate for node n toward host h when it leads one hop closer.
"""

from __future__ import annotations

import time

import numpy as np

from services.common.errors import ResourceExhausted
from services.topology.fabric import MAX_NODE_HOST_PAIRS, Fabric
from services.topology.routing.graph import ChannelGraph
from services.topology.routing.routes import Routes, routes_from_candidates

__all__ = ["UNREACHABLE", "MinHop", "hop_distances"]

UNREACHABLE = np.int16(30_000)  # hop count meaning "no path"
_BFS_ELEMENTS = 1 << 24  # [groups, switch channels] handled per BFS batch


def _attachment_groups(
    fabric: Fabric, graph: ChannelGraph
) -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
    """Group hosts by the switches they are cabled to.

    Returns host_group [H] (-1: no usable uplink), each group's switches, and the uplinks as
    (host index, switch node) pairs sorted by host.
    """
    channels = graph.out_channels
    source, target = graph.source[channels], graph.target[channels]
    uplink = graph.is_host[source]  # host-host links are never usable, so targets are switches
    up_host, up_switch = fabric.node_host[source[uplink]], target[uplink]
    hosts = fabric.num_hosts
    host_group = np.full(hosts, -1, dtype=np.int64)
    count = np.bincount(up_host, minlength=hosts)
    attached = np.flatnonzero(count)
    starts = (np.cumsum(count) - count)[attached]
    lowest = np.minimum.reduceat(up_switch, starts) if attached.size else up_switch[:0]
    highest = np.maximum.reduceat(up_switch, starts) if attached.size else up_switch[:0]
    single = lowest == highest
    leaves, inverse = np.unique(lowest[single], return_inverse=True)
    host_group[attached[single]] = inverse
    groups = [np.array([leaf]) for leaf in leaves.tolist()]
    multi: dict[tuple[int, ...], int] = {}
    for i in np.flatnonzero(~single).tolist():  # multi-homed hosts: rare, a plain loop is fine
        lo, hi = int(starts[i]), int(starts[i] + count[attached[i]])
        key = tuple(np.unique(up_switch[lo:hi]).tolist())
        if key not in multi:
            multi[key] = len(groups)
            groups.append(np.array(key))
        host_group[attached[i]] = multi[key]
    return host_group, groups, np.stack([up_host, up_switch])


def _switch_distances(graph: ChannelGraph, switches: np.ndarray, groups: list[np.ndarray]) -> np.ndarray:
    """[G, S] hops from each switch to the hosts of each group (1 at the group's own switches)."""
    index = np.full(graph.num_nodes, -1, dtype=np.int64)
    index[switches] = np.arange(switches.shape[0])
    channels = graph.out_channels
    source, target = graph.source[channels], graph.target[channels]
    inner = ~graph.is_host[source] & ~graph.is_host[target]
    src, dst = index[source[inner]], index[target[inner]]  # already sorted by source
    reaching, starts = np.unique(src, return_index=True)
    distance = np.full((len(groups), switches.shape[0]), UNREACHABLE, dtype=np.int16)
    for g, members in enumerate(groups):
        distance[g, index[members]] = 1
    batch = max(1, _BFS_ELEMENTS // max(1, dst.shape[0]))
    for lo in range(0, len(groups), batch):
        block = distance[lo : lo + batch]
        level = 1
        while src.size:
            frontier = block == level
            # A switch is one hop further than its nearest neighbour on the frontier.
            reached = np.logical_or.reduceat(frontier[:, dst], starts, axis=1)
            current = block[:, reaching]
            new = reached & (current == UNREACHABLE)
            if not new.any():
                break
            current[new] = level + 1
            block[:, reaching] = current
            level += 1
    return distance


def hop_distances(fabric: Fabric, graph: ChannelGraph) -> np.ndarray:
    """[N, H] int16 hops from every node to every host over usable links; UNREACHABLE if none."""
    hosts, n = fabric.num_hosts, fabric.num_nodes
    host_group, groups, (up_host, up_switch) = _attachment_groups(fabric, graph)
    switches = np.flatnonzero(~graph.is_host)
    by_group = _switch_distances(graph, switches, groups)
    padded = np.vstack([by_group, np.full((1, switches.shape[0]), UNREACHABLE, dtype=np.int16)])
    distance = np.full((n, hosts), UNREACHABLE, dtype=np.int16)
    distance[switches] = padded.T[:, np.where(host_group >= 0, host_group, len(groups))]
    if up_host.size:
        count = np.bincount(up_host, minlength=hosts)
        attached = np.flatnonzero(count)
        if (count <= 1).all():  # single uplinks (the usual case): no reduction needed
            nearest = distance[up_switch]
        else:
            nearest = np.minimum.reduceat(distance[up_switch], (np.cumsum(count) - count)[attached], axis=0)
        distance[fabric.host_nodes[attached]] = np.where(nearest >= UNREACHABLE, UNREACHABLE, nearest + 1)
    distance[fabric.host_nodes, np.arange(hosts)] = 0
    return distance


class MinHop:
    """OpenSM's `minhop` engine: shortest paths, equal-hop ports balanced per switch."""

    name = "minhop"

    def compute(self, fabric: Fabric) -> Routes:
        """Routes of `fabric` over its usable links."""
        started = time.perf_counter_ns()
        hosts = fabric.num_hosts
        if fabric.num_nodes * hosts > MAX_NODE_HOST_PAIRS:
            raise ResourceExhausted(
                f"{fabric.num_nodes} nodes x {hosts} hosts exceeds the {MAX_NODE_HOST_PAIRS} pairs "
                "routes can hold"
            )
        graph = ChannelGraph.of(fabric)
        distance = hop_distances(fabric, graph)
        host_rows = distance[fabric.host_nodes]
        unreachable = int(np.count_nonzero(host_rows >= UNREACHABLE))
        node_host = fabric.node_host

        def candidates(start: int, stop: int, padded: np.ndarray) -> np.ndarray:
            present = padded >= 0
            target = graph.target[np.maximum(padded, 0)]  # [n, width]
            here = distance[start:stop]  # [n, H]
            valid = distance[target] == (here - 1)[:, None, :]
            valid &= ((here > 0) & (here < UNREACHABLE))[:, None, :]
            valid &= present[:, :, None]
            # A channel into a host serves that host only: hosts are not transit.
            row, col = np.nonzero(present & graph.is_host[target])
            if row.size:
                dest = node_host[target[row, col]]
                keep = valid[row, col, dest]
                valid[row, col, :] = False
                valid[row, col, dest] = keep
            return valid

        return routes_from_candidates(self.name, graph, hosts, candidates, unreachable, started)
