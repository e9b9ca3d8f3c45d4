"""Walking routes the slow, obvious way, for tests to check the fast code against."""

from __future__ import annotations

import networkx as nx
import numpy as np

from services.topology.fabric import Fabric, NodeKind
from services.topology.routing import Routes


def channel_target(fabric: Fabric, channel: int) -> int:
    link, back = divmod(int(channel), 2)
    return int(fabric.link_a[link] if back else fabric.link_b[link])


class Groups:
    """Every (node, destination host) group of some routes as Python lists, looked up once."""

    def __init__(self, fabric: Fabric, routes: Routes) -> None:
        lookup = routes.lookup(fabric)
        nodes = np.repeat(np.arange(fabric.num_nodes), fabric.num_hosts)
        hosts = np.tile(np.arange(fabric.num_hosts), fabric.num_nodes)
        start, size = lookup.groups(nodes, hosts)
        channels = lookup.channels.tolist()
        self.hosts = fabric.num_hosts
        self._groups = [channels[a : a + b] for a, b in zip(start.tolist(), size.tolist(), strict=True)]

    def __call__(self, node: int, host: int) -> list[int]:
        return self._groups[node * self.hosts + host]


def lft_path(
    fabric: Fabric, routes: Routes, source_host: int, destination_host: int, groups=None
) -> list[int]:
    """Channels of the LFT path between two host indices; AssertionError on a loop or a dead end."""
    groups = groups or (lambda node, host: routes.group(fabric, node, host).tolist())
    node, goal = int(fabric.host_nodes[source_host]), int(fabric.host_nodes[destination_host])
    channels: list[int] = []
    while node != goal:
        group = groups(node, destination_host)
        assert group, f"{fabric.node_names[node]} has no route to {fabric.node_names[goal]}"
        channels.append(int(group[0]))
        node = channel_target(fabric, group[0])
        assert len(channels) <= fabric.num_nodes, "the LFT path loops"
    return channels


def ecmp_channel_paths(
    fabric: Fabric, routes: Routes, source: int, destination_host: int, groups=None
) -> list[list[int]]:
    """Every channel sequence the equal-cost groups allow from node `source` to a host index."""
    groups = groups or (lambda node, host: routes.group(fabric, node, host).tolist())
    goal = int(fabric.host_nodes[destination_host])
    paths: list[list[int]] = []

    def walk(node: int, sofar: list[int]) -> None:
        assert len(sofar) <= fabric.num_nodes, "the routes loop"
        if node == goal:
            paths.append(list(sofar))
            return
        for channel in groups(node, destination_host):
            nxt = channel_target(fabric, channel)
            assert nxt == goal or fabric.node_kind[nxt] == NodeKind.SWITCH, "a host was used as transit"
            walk(nxt, [*sofar, channel])

    walk(source, [])
    return paths


def physical_graph(fabric: Fabric) -> nx.Graph:
    """Nodes joined by links that carry traffic (not DOWN, not loopbacks, never host to host)."""
    from services.common.snapshot import usable_links

    usable = usable_links(fabric.node_kind, fabric.link_a, fabric.link_b, fabric.link_state)
    graph = nx.Graph()
    graph.add_nodes_from(range(fabric.num_nodes))
    switches = set(np.flatnonzero(fabric.node_kind == NodeKind.SWITCH).tolist())
    graph.add_edges_from(zip(fabric.link_a[usable].tolist(), fabric.link_b[usable].tolist(), strict=True))
    # Hosts are endpoints: drop edges that would let a host relay (host-host links are unusable already).
    assert all(a in switches or b in switches for a, b in graph.edges)
    return graph


def host_pairs_connected(fabric: Fabric, source: int, destination: int, graph: nx.Graph) -> bool:
    """Whether two host nodes are joined by a path whose inner nodes are switches."""
    inner = graph.subgraph(
        [n for n in graph.nodes if n in (source, destination) or fabric.node_kind[n] == NodeKind.SWITCH]
    )
    return nx.has_path(inner, source, destination)
