"""OpenSM's ftree routing walked step by step, for the fat-trees `FullFatTree` has no closed form for.

OpenSM 3.3's ftree (`osm_ucast_ftree.c`, `fabric_route_to_cns`) accepts any fabric its checks pass
(ftree_check.py): quasi fat-trees whose leaves reach other subsets of the spines, deeper trees, trees
without pods. On those the twin walks the routing as OpenSM does: destinations leaf by leaf in tuple
order, each one routed *down-going* by climbing (the main path through the least-used up-going
group, lowest tuple on a tie, then every other up-going group as a secondary path) and *up-going* by
descending from each switch reached (least-used port of every down-going group, unless the switch
below already has an equal or shorter path); "dummy" destinations pad every leaf to the most CAs any
leaf has, moving the counters without writing entries. Counters live on port groups and ports where
OpenSM keeps them. Only what host destinations need: no switch LIDs, no sibling links, one port per
CA. Checked entry for entry against OpenSM 3.3.23 on ibsim (tests/lab) and against the closed form
on full fat-trees (tests/topology/test_ftree.py).

It is a walk in Python, one destination at a time: fine for the clusters that reach it (full
fat-trees, however large, take the closed form).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from services.topology.fabric import Fabric, NodeKind
from services.topology.routing.ftree_indexing import net_order_keys, tuple_indexing
from services.topology.routing.graph import ChannelGraph

__all__ = ["FtreeWalk"]


@dataclasses.dataclass
class _Port:
    port: int  # on this switch
    remote_port: int
    counter_up: int = 0
    counter_down: int = 0


@dataclasses.dataclass
class _Group:
    remote: int
    ports: list[_Port]
    counter_up: int = 0
    counter_down: int = 0


class FtreeWalk:
    """LFT entries `lft` {switch node: {host index: port}} of OpenSM's ftree over `graph`'s usable
    cables, given OpenSM's ranks (`rank` [N], -1 for switches it left out; roots 0, leaves deepest)."""

    def __init__(self, fabric: Fabric, graph: ChannelGraph, rank: np.ndarray) -> None:
        self.fabric = fabric
        is_switch = fabric.node_kind == NodeKind.SWITCH
        usable = graph.usable & (graph.source != graph.target)
        self.cables: dict[int, list[tuple[int, int, int]]] = {}  # node -> (port, remote, remote port)
        reverse_port = graph.port[np.arange(graph.port.shape[0]) ^ 1]  # channel c ^ 1 is c reversed
        for c in np.flatnonzero(usable).tolist():
            self.cables.setdefault(int(graph.source[c]), []).append(
                (int(graph.port[c]), int(graph.target[c]), int(reverse_port[c]))
            )
        for cables in self.cables.values():
            cables.sort()
        switches = [int(s) for s in np.flatnonzero(is_switch & (rank >= 0))]
        self.rank = {s: int(rank[s]) for s in switches}
        deepest = max(self.rank.values())
        leaves = [s for s in switches if any(not is_switch[r] for _, r, _ in self.cables.get(s, []))]
        neighbours = {
            s: list(dict.fromkeys(r for _, r, _ in self.cables.get(s, []) if r in self.rank))
            for s in switches
        }
        keys = net_order_keys(fabric)
        start = min(leaves, key=lambda s: int(keys[s]))
        self.tuples = tuple_indexing(start, self.rank, deepest, neighbours)
        missing = (255,) * 8
        self.up: dict[int, list[_Group]] = {}
        self.down: dict[int, list[_Group]] = {}
        for s in switches:
            up: dict[int, _Group] = {}
            down: dict[int, _Group] = {}
            for port, remote, remote_port in self.cables.get(s, []):
                if not is_switch[remote]:
                    side = down
                elif remote not in self.rank or self.rank[remote] == self.rank[s]:
                    continue  # left out, or a sibling: ftree routes no host through them
                elif self.rank[remote] < self.rank[s]:
                    side = up
                else:
                    side = down
                side.setdefault(remote, _Group(remote, [])).ports.append(_Port(port, remote_port))
            self.up[s] = sorted(up.values(), key=lambda g: self.tuples.get(g.remote, missing))
            switch_down = sorted(
                (g for g in down.values() if is_switch[g.remote]),
                key=lambda g: self.tuples.get(g.remote, missing),
            )
            self.down[s] = [g for g in down.values() if not is_switch[g.remote]] + switch_down
        self.is_switch = is_switch
        self.leaves = sorted(
            (s for s in leaves if self.rank[s] == deepest), key=lambda s: self.tuples.get(s, missing)
        )
        self.lft: dict[int, dict[int, int]] = {s: {} for s in switches}
        self.hops: dict[int, dict[int, int]] = {s: {} for s in switches}
        self._route()

    def ports(self, nodes: np.ndarray, hosts: int) -> np.ndarray:
        """[len(nodes), hosts] the walked LFT port of each node toward each host (0: none)."""
        out = np.zeros((nodes.shape[0], hosts), dtype=np.int64)
        for row, node in enumerate(nodes.tolist()):
            for host, port in self.lft.get(node, {}).items():
                out[row, host] = port
        return out

    def _route(self) -> None:
        host_of = self.fabric.node_host
        cas = {leaf: [g for g in self.down[leaf] if not self.is_switch[g.remote]] for leaf in self.leaves}
        most = max((len(v) for v in cas.values()), default=0)
        for leaf in self.leaves:
            for group in cas[leaf]:
                host = int(host_of[group.remote])
                self.lft[leaf][host] = group.ports[0].port
                self.hops[leaf][host] = 1
                self._down_by_climbing(leaf, None, host, True, 1)
            for _ in range(most - len(cas[leaf])):  # dummies: counters only
                self._down_by_climbing(leaf, None, None, True, 1)

    def _up_by_descending(self, sw: int, prev: int | None, host: int | None, main: bool, hops: int) -> bool:
        groups = self.down[sw]
        if not groups:
            return False
        groups.sort(key=lambda g: g.counter_up)  # stable, as OpenSM's bubble sort
        created = False
        for group in list(groups):
            if not self.is_switch[group.remote]:
                created = True
                continue
            if group.remote == prev:
                continue
            port = min(group.ports, key=lambda p: p.counter_up)  # first of the least used
            below = group.remote
            if host is not None and host in self.hops[below] and hops + 1 >= self.hops[below][host]:
                continue
            if host is not None:
                self.lft[below][host] = port.remote_port
                self.hops[below][host] = hops + 1
            if self._up_by_descending(below, None, host, main, hops + 1):
                created = True
                port.counter_up += 1
                group.counter_up += 1
        return created

    def _down_by_climbing(self, sw: int, prev: int | None, host: int | None, main: bool, hops: int) -> bool:
        created = self._up_by_descending(sw, prev, host, main, hops)
        ups = self.up[sw]
        if self.rank[sw] == 0 or not ups:
            return created
        ups.sort(key=lambda g: (g.counter_down, self.tuples.get(g.remote, (255,) * 8)))
        if main:
            group = ups[0]
            port = min(group.ports, key=lambda p: p.counter_down)
            group.counter_down += 1
            port.counter_down += 1
            above = group.remote
            if host is None:  # a dummy climbs on, moving counters (OpenSM 3.3.23, measured on ibsim)
                created |= self._down_by_climbing(above, sw, host, main, hops + 1)
            elif host not in self.lft[above] or hops + 1 < self.hops[above][host]:
                self.lft[above][host] = port.remote_port
                self.hops[above][host] = hops + 1
                created |= self._down_by_climbing(above, sw, host, main, hops + 1)
        if host is None:
            return created
        for group in ups[1 if main else 0 :]:
            above = group.remote
            if host in self.lft[above] and hops + 1 >= self.hops[above][host]:
                continue
            port = min(group.ports, key=lambda p: p.counter_down)
            self.lft[above][host] = port.remote_port
            self.hops[above][host] = hops + 1
            created |= self._down_by_climbing(above, sw, host, False, hops + 1)
        return created
