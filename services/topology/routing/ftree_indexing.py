"""How OpenSM's ftree sees a full fat-tree: its tuple indexing, routing order and main paths.

OpenSM 3.3's ftree (`osm_ucast_ftree.c`; every rule below checked against OpenSM 3.3.23 on ibsim,
tests/lab) works in steps the twin reproduces from the cabling and GUIDs alone:

- *ranks*: switches cabled to CAs are the leaves; the others are ranked by hop distance from them.
- *indexing*: every switch gets a tuple (rank, digits...). The first leaf of OpenSM's switch table
  gets (rank, 0, ..., 0); a breadth-first walk then gives each newly seen neighbour the first free
  tuple one rank down (the digit after the rank varies) or one rank up (the digit at the old rank
  varies), down-going neighbours first, each in port order. The table is keyed by GUID in network
  byte order, so "first" is the lowest byte-swapped GUID on a little-endian host (`net_order_keys`).
  Each switch's port groups (one per neighbour) are then sorted by the neighbour's tuple.
- *routing order*: leaves by tuple; each leaf's CAs in port order, then "dummy" destinations up to
  the most CAs any leaf has: they climb and move every counter a CA would, but write no entry.
- *main paths*: a destination climbs from its leaf through the up-going group with the fewest
  routes so far, the lowest tuple on a tie. A switch's up-going counters move only with the main
  paths that leave it, so the t-th destination climbing from a switch takes its up-neighbour number
  t mod (up-neighbours) in tuple order. Every other switch learns the destination from the first
  switch that reaches it: on a full fat-tree a leaf climbs to the aggregation switch in the column
  of the destination's main aggregation switch, and an aggregation switch of another pod climbs to
  the core its column-mate in the destination's pod takes next.
- *parallel cables* (two levels): within a group OpenSM takes the least used cable, counted at the
  far end: a spine goes down the cable the destination's leaf has climbed least for its own main
  paths; a leaf climbs the cable its spine has sent least destinations down (every earlier main
  path through that spine but this leaf's own). With three levels the twin takes the first cable.

`FullFatTree.of` recognises fabrics of two switch levels (every leaf cabled to every spine) and of
three (pods and columns: each leaf cabled to every aggregation switch of its pod, one aggregation
switch per pod and column, each core to one aggregation switch of its column per pod); anything
else is None and the engine keeps D-mod-k.
"""

from __future__ import annotations

import dataclasses
from collections import deque

import numpy as np

from services.topology.fabric import Fabric
from services.topology.routing.balance import node_guid_keys
from services.topology.routing.graph import ChannelGraph

__all__ = ["FullFatTree", "net_order_keys", "tuple_indexing"]

_TUPLE_LEN = 8  # OpenSM keys its tuple table by 8 bytes: at most 8 ranks, digits below 255
_FREE = 255


def net_order_keys(fabric: Fabric) -> np.ndarray:
    """[N] uint64: each node's GUID as OpenSM's maps order it (the big-endian bytes read natively)."""
    return node_guid_keys(fabric).byteswap()


def _neighbour_groups(graph: ChannelGraph) -> dict[int, list[int]]:
    """Per switch, its neighbour switches in the order of its lowest port toward each."""
    channels = graph.switch_channels()  # sorted by (source, port)
    out: dict[int, list[int]] = {}
    for source, target in zip(graph.source[channels].tolist(), graph.target[channels].tolist(), strict=True):
        seen = out.setdefault(source, [])
        if target != source and target not in seen:
            seen.append(target)
    return out


def tuple_indexing(
    start: int, rank: dict[int, int], leaf_rank: int, neighbours: dict[int, list[int]]
) -> dict[int, tuple[int, ...]]:
    """OpenSM's tuples: a breadth-first walk from `start`, down-going neighbours before up-going."""
    first = [_FREE] * _TUPLE_LEN
    first[0] = rank[start]
    for i in range(1, rank[start] + 1):
        first[i] = 0
    tuples = {start: tuple(first)}
    taken = {tuples[start]}
    queue = deque([start])
    while queue:
        switch = queue.popleft()
        here = tuples[switch]
        for going_down in (True, False):
            if going_down and rank[switch] >= leaf_rank:
                continue  # nothing is indexed below the leaves
            if not going_down and rank[switch] == 0:
                continue
            for other in neighbours.get(switch, []):
                if other in tuples or rank[other] != rank[switch] + (1 if going_down else -1):
                    continue
                candidate = list(here)
                candidate[0] += 1 if going_down else -1
                digit = here[0] + 1 if going_down else here[0]
                for value in range(_FREE):
                    candidate[digit] = value
                    if tuple(candidate) not in taken:
                        break
                tuples[other] = tuple(candidate)
                taken.add(tuples[other])
                queue.append(other)
    return tuples


@dataclasses.dataclass(frozen=True, eq=False)
class _Shape:
    """Levels, pods, columns and tuples of a full fat-tree."""

    levels: int
    level: np.ndarray  # int64 [N]
    pod: np.ndarray  # int64 [N]
    column: np.ndarray  # int64 [N]
    pod_column_switch: np.ndarray  # int64 [pods, columns]
    column_cores: np.ndarray  # int64 [columns, cores per column], in tuple order
    up: dict[int, list[int]]  # up-neighbours of each switch, in tuple order
    leaf_order: list[int]  # leaves in tuple order
    tuples: dict[int, tuple[int, ...]]


@dataclasses.dataclass(frozen=True, eq=False)
class FullFatTree:
    """A full fat-tree as OpenSM's ftree routes it (see the module docstring)."""

    levels: int  # 2 (leaves, spines) or 3 (leaves, aggregation, cores)
    level: np.ndarray  # int64 [N], 1 leaves, 2 aggregation/spines, 3 cores, 0 hosts
    pod: np.ndarray  # int64 [N], pod of leaves and aggregation switches, -1 elsewhere
    column: np.ndarray  # int64 [N], column of aggregation switches (spines), -1 elsewhere
    pod_column_switch: np.ndarray  # int64 [pods, columns], the aggregation switch of each
    column_cores: np.ndarray  # int64 [columns, cores per column], in tuple order
    routing_order: np.ndarray  # int64 [H], hosts in OpenSM's routing order (uncabled ones last)
    leaf_of_host: np.ndarray  # int64 [H], the leaf a host is routed from, -1 if none
    leaf_position: np.ndarray  # int64 [N], place of each leaf in the routing order, -1 elsewhere
    host_pod: np.ndarray  # int64 [H], -1 if not routed
    host_column: np.ndarray  # int64 [H], column of the destination's main aggregation switch
    climbs_before: np.ndarray  # int64 [H, columns], earlier main paths up from each column's
    #                            aggregation switch of the destination's pod
    own_before: np.ndarray  # int64 [H, columns], the same from the destination's own leaf only
    leaf_climbs: np.ndarray  # int64 [N, columns], main paths up from each leaf, all told
    tuples: dict[int, tuple[int, ...]]  # switch node -> its tuple, as OpenSM logs it (2.0.1 is (2, 0, 1))

    @classmethod
    def of(cls, fabric: Fabric, graph: ChannelGraph) -> FullFatTree | None:
        """OpenSM's view of `fabric` over `graph`'s usable channels (a CA whose cable is down is not
        there for it), or None when that is not a full fat-tree of two or three switch levels."""
        to_host = ~graph.is_host[graph.source] & graph.is_host[graph.target] & graph.usable
        shape = _shape(fabric, graph, to_host)
        if shape is None:
            return None
        return _main_paths(fabric, graph, to_host, shape)

    def wanted_next(self, nodes: np.ndarray, hosts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(next [n, h], cable [n, h]): the switch each of `nodes` forwards each host to (-1 where
        this is left to D-mod-k) and which of the parallel cables toward it, counted in the port
        order of that switch's end (see the module docstring)."""
        node = nodes[:, None]
        host_leaf = self.leaf_of_host[hosts][None, :]
        column = self.host_column[hosts][None, :]
        pod = self.host_pod[hosts][None, :]
        shape = (nodes.shape[0], hosts.shape[0])
        routed = (column >= 0) & (host_leaf != node)
        safe_column = np.maximum(column, 0)
        mine = np.maximum(self.column[node], 0)  # [n, 1]
        taken = self.climbs_before[hosts]  # [h, columns]
        leaf = (self.level[node] == 1) & routed
        out = np.where(leaf, self.pod_column_switch[np.maximum(self.pod[node], 0), safe_column], -1)
        cable = np.zeros(shape, dtype=np.int64)
        middle = (self.level[node] == 2) & routed
        if self.levels == 2:
            # A leaf takes the cable its spine's counters reach next: every earlier destination
            # through that spine but those of this leaf. A spine goes down the cable the
            # destination's leaf has used least for its own main paths through it.
            through = np.take_along_axis(taken, np.maximum(column, 0).T, axis=1).T  # [1, h]
            earlier = self.leaf_position[node] < self.leaf_position[host_leaf]
            own = np.where(earlier, self.leaf_climbs[node, safe_column], 0)
            cable = np.where(leaf, through - own, cable)
            out = np.where(middle, host_leaf, out)
            cable = np.where(middle, self.own_before[hosts][:, mine[:, 0]].T, cable)
            return out, cable
        aggregation = middle & (self.pod[node] != pod)
        count = taken[:, mine[:, 0]].T  # [n, h]
        core = self.column_cores[mine, count % self.column_cores.shape[1]]
        return np.where(aggregation, core, out), cable


def _shape(fabric: Fabric, graph: ChannelGraph, to_host: np.ndarray) -> _Shape | None:
    """Levels, pods, columns and OpenSM's tuples; None unless a full fat-tree of 2 or 3 levels."""
    switches = np.flatnonzero(~graph.is_host)
    if switches.size < 2 or not to_host.any():
        return None
    neighbours = _neighbour_groups(graph)
    leaves = np.unique(graph.source[to_host])
    distance = _distances(switches, leaves, neighbours)
    if distance is None or max(distance.values()) not in (1, 2):
        return None
    top = max(distance.values())
    if any(abs(distance[o] - distance[s]) != 1 for s, others in neighbours.items() for o in others):
        return None  # siblings, or leaves that are not at the bottom
    up = {s: [o for o in neighbours.get(s, []) if distance[o] > distance[s]] for s in distance}
    down = {s: [o for o in neighbours.get(s, []) if distance[o] < distance[s]] for s in distance}
    level = np.zeros(graph.num_nodes, dtype=np.int64)
    level[list(distance)] = np.array(list(distance.values()), dtype=np.int64) + 1
    pod = np.full(graph.num_nodes, -1, dtype=np.int64)
    column = np.full(graph.num_nodes, -1, dtype=np.int64)
    grid = _pods_and_columns(leaves, np.flatnonzero(level == 2), up, down, top, pod, column)
    if grid is None:
        return None
    keys = net_order_keys(fabric)
    start = min(leaves.tolist(), key=lambda s: int(keys[s]))
    tuples = tuple_indexing(start, {s: top - d for s, d in distance.items()}, top, neighbours)
    if len(tuples) != len(distance):
        return None
    pod_column_switch, column_cores = grid
    return _Shape(
        levels=top + 1,
        level=level,
        pod=pod,
        column=column,
        pod_column_switch=pod_column_switch,
        column_cores=np.array(
            [sorted(row, key=tuples.__getitem__) for row in column_cores.tolist()], dtype=np.int64
        ).reshape(column_cores.shape),
        up={s: sorted(others, key=tuples.__getitem__) for s, others in up.items()},
        leaf_order=sorted(leaves.tolist(), key=tuples.__getitem__),
        tuples=tuples,
    )


def _main_paths(fabric: Fabric, graph: ChannelGraph, to_host: np.ndarray, shape: _Shape) -> FullFatTree:
    """Routing order, each destination's main aggregation switch, and the counters before it."""
    hosts, columns = fabric.num_hosts, shape.pod_column_switch.shape[1]
    cabled = np.flatnonzero(to_host)
    cabled = cabled[np.lexsort((graph.port[cabled], graph.source[cabled]))]
    cas: dict[int, list[int]] = {}
    for leaf, node in zip(graph.source[cabled].tolist(), graph.target[cabled].tolist(), strict=True):
        cas.setdefault(leaf, []).append(int(fabric.node_host[node]))
    slots = max(len(v) for v in cas.values())  # OpenSM fills every leaf up with dummies
    leaf_of_host = np.full(hosts, -1, dtype=np.int64)
    leaf_position = np.full(graph.num_nodes, -1, dtype=np.int64)
    leaf_climbs = np.zeros((graph.num_nodes, columns), dtype=np.int64)
    slot_host: list[int] = []
    slot_main: list[int] = []  # main aggregation switch (spine) of each slot, dummies included
    for position, leaf in enumerate(shape.leaf_order):
        leaf_position[leaf] = position
        mine = [h for h in cas.get(leaf, []) if leaf_of_host[h] < 0]  # a host routes from one leaf
        leaf_of_host[mine] = leaf
        climbs = shape.up[leaf]
        for j in range(slots):
            slot_host.append(mine[j] if j < len(mine) else -1)
            slot_main.append(climbs[j % len(climbs)])
            leaf_climbs[leaf, shape.column[slot_main[-1]]] += 1
    main = np.array(slot_main, dtype=np.int64)
    real = np.array(slot_host, dtype=np.int64)
    kept = real >= 0
    one_hot = np.zeros((main.shape[0], columns), dtype=np.int64)
    one_hot[np.arange(main.shape[0]), shape.column[main]] = 1
    per_leaf = one_hot.reshape(-1, slots, columns)  # slots are grouped by leaf
    own_before = (np.cumsum(per_leaf, axis=1) - per_leaf).reshape(-1, columns)
    slot_pod = shape.pod[main]
    before = np.zeros_like(one_hot)
    for p in np.unique(slot_pod).tolist():
        rows = np.flatnonzero(slot_pod == p)
        before[rows] = np.cumsum(one_hot[rows], axis=0) - one_hot[rows]
    host_pod = np.full(hosts, -1, dtype=np.int64)
    host_column = np.full(hosts, -1, dtype=np.int64)
    climbs_before = np.zeros((hosts, columns), dtype=np.int64)
    own = np.zeros((hosts, columns), dtype=np.int64)
    host_pod[real[kept]] = slot_pod[kept]
    host_column[real[kept]] = shape.column[main[kept]]
    climbs_before[real[kept]] = before[kept]
    own[real[kept]] = own_before[kept]
    order = real[kept]
    return FullFatTree(
        levels=shape.levels,
        level=shape.level,
        pod=shape.pod,
        column=shape.column,
        pod_column_switch=shape.pod_column_switch,
        column_cores=shape.column_cores,
        routing_order=np.concatenate([order, np.setdiff1d(np.arange(hosts), order)]),
        leaf_of_host=leaf_of_host,
        leaf_position=leaf_position,
        host_pod=host_pod,
        host_column=host_column,
        climbs_before=climbs_before,
        own_before=own,
        leaf_climbs=leaf_climbs,
        tuples={s: tuple(v for v in t if v != _FREE) for s, t in shape.tuples.items()},
    )


def _distances(
    switches: np.ndarray, leaves: np.ndarray, neighbours: dict[int, list[int]]
) -> dict[int, int] | None:
    """Hop distance of every switch from the nearest leaf; None if some switch is cut off."""
    distance = {int(s): 0 for s in leaves.tolist()}
    queue = deque(distance)
    while queue:
        s = queue.popleft()
        for o in neighbours.get(s, []):
            if o not in distance:
                distance[o] = distance[s] + 1
                queue.append(o)
    if len(distance) != switches.shape[0]:
        return None
    return distance


def _pods_and_columns(
    leaves: np.ndarray,
    middle: np.ndarray,
    up: dict[int, list[int]],
    down: dict[int, list[int]],
    top: int,
    pod: np.ndarray,
    column: np.ndarray,
) -> tuple[np.ndarray, np.ndarray] | None:
    """Fill `pod` and `column`; ([pods, columns] switch, [columns, cores]) or None if not full."""
    pods: dict[frozenset[int], int] = {}
    for leaf in leaves.tolist():
        pod[leaf] = pods.setdefault(frozenset(up[leaf]), len(pods))
    pod_leaves = {p: frozenset(int(x) for x in leaves[pod[leaves] == p]) for p in pods.values()}
    for members, p in pods.items():
        for m in members:
            if pod[m] >= 0 or frozenset(down[m]) != pod_leaves[p]:
                return None
            pod[m] = p
    if top == 1:
        if len(pods) != 1:
            return None
        spines = sorted(middle.tolist())
        for i, s in enumerate(spines):
            column[s] = i
        return np.array([spines], dtype=np.int64), np.zeros((len(spines), 0), dtype=np.int64)
    columns: dict[frozenset[int], int] = {}
    for m in middle.tolist():
        column[m] = columns.setdefault(frozenset(up[m]), len(columns))
    grid = np.full((len(pods), len(columns)), -1, dtype=np.int64)
    for m in middle.tolist():
        if pod[m] < 0 or grid[pod[m], column[m]] >= 0:
            return None
        grid[pod[m], column[m]] = m
    if (grid < 0).any():
        return None
    cores = [sorted(group) for group in columns]  # dicts keep insertion order: by column
    if len({len(c) for c in cores}) != 1:
        return None
    for c, group in enumerate(cores):
        for core in group:
            if sorted(down[core]) != sorted(grid[:, c].tolist()):
                return None
    return grid, np.array(cores, dtype=np.int64)
