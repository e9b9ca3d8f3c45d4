"""OpenSM's ftree routing done the slow, obvious way, to check the twin's closed form against.

Learnt from osm_ucast_ftree.c (OpenSM 3.3.23; the real thing is checked on ibsim by tests/lab) and
written step by step as OpenSM walks: destinations leaf by leaf in tuple order, each one routed
down-going by climbing (main path through the least-used up-going group, lowest tuple on a tie,
then every other up-going group as a secondary path) and up-going by descending from each switch
reached (least-used port of every down-going group, unless the switch below already has an equal
or shorter path). Counters live on port groups and ports exactly where OpenSM keeps them. Only
what host destinations need: no switch LIDs, no siblings, no reverse hops, one port per CA.
Tuples come from the twin's `tuple_indexing` (checked on its own against OpenSM's log).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from services.topology.fabric import Fabric, NodeKind
from services.topology.routing.ftree_indexing import net_order_keys, tuple_indexing


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


class OpenSMFtree:
    """LFT entries {switch node: {host index: port}} of OpenSM's ftree on `fabric` (all cables)."""

    def __init__(self, fabric: Fabric) -> None:
        self.fabric = fabric
        is_switch = fabric.node_kind == NodeKind.SWITCH
        self.cables: dict[int, list[tuple[int, int, int]]] = {}  # node -> (port, remote, remote port)
        for link in range(fabric.num_links):
            a, b = int(fabric.link_a[link]), int(fabric.link_b[link])
            pa, pb = int(fabric.link_port_a[link]), int(fabric.link_port_b[link])
            self.cables.setdefault(a, []).append((pa, b, pb))
            self.cables.setdefault(b, []).append((pb, a, pa))
        for cables in self.cables.values():
            cables.sort()
        switches = [int(s) for s in np.flatnonzero(is_switch)]
        leaves = [s for s in switches if any(not is_switch[r] for _, r, _ in self.cables.get(s, []))]
        distance = {s: 0 for s in leaves}
        frontier = list(leaves)
        while frontier:
            nxt = []
            for s in frontier:
                for _, r, _ in self.cables.get(s, []):
                    if is_switch[r] and r not in distance:
                        distance[r] = distance[s] + 1
                        nxt.append(r)
            frontier = nxt
        top = max(distance.values())
        self.rank = {s: top - d for s, d in distance.items()}
        neighbours = {
            s: list(dict.fromkeys(r for _, r, _ in self.cables.get(s, []) if is_switch[r])) for s in switches
        }
        keys = net_order_keys(fabric)
        start = min(leaves, key=lambda s: int(keys[s]))
        self.tuples = tuple_indexing(start, self.rank, top, neighbours)
        self.up: dict[int, list[_Group]] = {}
        self.down: dict[int, list[_Group]] = {}
        for s in switches:
            up: dict[int, _Group] = {}
            down: dict[int, _Group] = {}
            for port, remote, remote_port in self.cables.get(s, []):
                if not is_switch[remote]:
                    side = down
                elif self.rank[remote] < self.rank[s]:
                    side = up
                else:
                    side = down
                side.setdefault(remote, _Group(remote, [])).ports.append(_Port(port, remote_port))
            self.up[s] = sorted(up.values(), key=lambda g: self.tuples[g.remote])
            switch_down = sorted(
                (g for g in down.values() if is_switch[g.remote]), key=lambda g: self.tuples[g.remote]
            )
            self.down[s] = [g for g in down.values() if not is_switch[g.remote]] + switch_down
        self.is_switch = is_switch
        self.leaves = sorted(leaves, key=self.tuples.__getitem__)
        self.lft: dict[int, dict[int, int]] = {s: {} for s in switches}
        self.hops: dict[int, dict[int, int]] = {s: {} for s in switches}
        self._route()

    def _route(self) -> None:
        host_of = self.fabric.node_host
        cas = {leaf: [g for g in self.down[leaf] if not self.is_switch[g.remote]] for leaf in self.leaves}
        most = max(len(v) for v in cas.values())
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
        if self.rank[sw] == 0:
            return created
        ups = self.up[sw]
        ups.sort(key=lambda g: (g.counter_down, self.tuples[g.remote]))
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
