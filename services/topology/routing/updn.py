"""updn: min-hop routes restricted to up*/down* paths from root switches, so deadlock-free.

Roots are chosen as OpenSM 3.3 chooses them (`osm_ucast_updn.c`): the switches a root GUID list
names (OpenSM's `root_guid_file`), else its min-hop detection (`updn_find_root_nodes_by_min_hop`,
`detect_roots` below): a switch is a root when the histogram of its hop distances to the CA ports,
over the usable links, has exactly one bar above 90% of the CA ports and one above 5% (it sees
nearly every host at the same distance: a core). Tiers an importer inferred play no part. When the
detection finds none, OpenSM disables updn and routes with its fallback, minhop; so does the twin
(`EngineRefused`, and the routes say why).

Ranks are hop distances from the roots. A channel goes *up* when it reaches a lower rank, or at
equal rank a lower node GUID (OpenSM's `updn_get_dir`); a channel between two roots goes down both
ways (OpenSM's special case for roots cabled to each other).

A route may climb and then descend, never descend and climb again (that turn is what closes a
credit loop). Tables are per destination, not per packet, so, like OpenSM's BFS with directions,
each switch is in one mode per destination: *down* (its route only descends: it may receive
packets from above) or *up* (it climbs first). Breadth-first from the destination's switches, a
switch joins in down mode through a down channel to a down-mode switch, or in up mode through an up
channel to any switch; at equal hops down mode wins. A down-mode switch's group holds only down
channels to down-mode switches, an up-mode switch's only up channels, so every path the tables
allow is up*/down*.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from services.common.errors import InvalidArgument
from services.topology.fabric import Fabric, LinkState, NodeKind
from services.topology.routing.balance import balanced_lft, node_guid_keys
from services.topology.routing.classbased import ClassEngine, ClassState, EngineRefused
from services.topology.routing.graph import ChannelGraph, RowLayout
from services.topology.routing.minhop import UNREACHABLE, class_distances, row_candidates
from services.topology.routing.updn_hops import NO_HOPS, SwitchPorts, updn_port_hops

__all__ = [
    "ClimbOrder",
    "Ranking",
    "UpDown",
    "UpDownRoutes",
    "check_roots_reach",
    "detect_roots",
    "rank_switches",
    "ranking_from",
    "root_nodes",
]

_BFS_ELEMENTS = 1 << 24
_NO_RANK = np.iinfo(np.int64).max // 4


class ClimbOrder(Protocol):
    """The engine state up*/down* routes read: which channels climb (updn's Ranking, ftree's layout)."""

    def is_up(self, source: np.ndarray, target: np.ndarray) -> np.ndarray: ...


@dataclasses.dataclass(frozen=True, eq=False)
class Ranking:
    """Roots and ranks of the switches; `order` [N] sorts nodes so that lower means further up."""

    roots: np.ndarray  # int64 switch nodes
    rank: np.ndarray  # int64 [S], hop distance from the nearest root (_NO_RANK if none)
    order: np.ndarray  # int64 [N], rank * N + GUID rank (hosts below everything)
    is_root: np.ndarray  # bool [N]
    source: str = "detected"  # how the roots were found: "detected" or "given"

    def is_up(self, source: np.ndarray, target: np.ndarray) -> np.ndarray:
        """Whether channels source->target climb (between two roots: never)."""
        return (self.order[target] < self.order[source]) & ~(self.is_root[source] & self.is_root[target])


def detect_roots(graph: ChannelGraph, layout: RowLayout) -> np.ndarray:
    """OpenSM's root detection (see the module docstring): switch nodes, in node order."""
    switches = layout.switch_nodes
    num = switches.shape[0]
    into = graph.usable & graph.is_host[graph.source] & ~graph.is_host[graph.target]
    cas = np.bincount(layout.switch_index[graph.target[into]], minlength=num)  # CA ports per switch
    cas_num = int(cas.sum())
    leaves = np.flatnonzero(cas)
    if not leaves.size:
        return np.zeros(0, dtype=np.int64)
    seeds = np.zeros((leaves.shape[0], num), dtype=bool)
    seeds[np.arange(leaves.shape[0]), leaves] = True
    hops = class_distances(graph, layout, seeds).astype(np.int64)  # [leaves, S], 1 at the leaf itself
    reachable = hops < UNREACHABLE
    bins = int(hops[reachable].max(initial=0)) + 1
    weight = np.broadcast_to(cas[leaves][:, None], hops.shape)
    key = (np.arange(num)[None, :] * bins + hops)[reachable]
    histogram = np.bincount(key, weights=weight[reachable], minlength=num * bins).reshape(num, bins)
    over_90 = (10 * histogram > 9 * cas_num).sum(axis=1)  # OpenSM: bar > 0.9 x CAs
    over_5 = (20 * histogram > cas_num).sum(axis=1)  # and > 0.05 x CAs
    return switches[(over_90 == 1) & (over_5 == 1)].astype(np.int64)


def root_nodes(fabric: Fabric, guids: Sequence[int], field: str = "routing_roots") -> np.ndarray:
    """Switch nodes of root GUIDs (a node's GUID, or the synthetic one exports give where it has none);
    InvalidArgument naming `field[i]` for a GUID that is no switch of the fabric, or given twice."""
    keys = node_guid_keys(fabric)
    by_guid = {int(g): i for i, g in enumerate(keys.tolist())}
    out: list[int] = []
    for i, guid in enumerate(guids):
        node = by_guid.get(int(guid))
        if node is None:
            raise InvalidArgument(f"{field}[{i}]", f"no node of this fabric has GUID {int(guid):#018x}")
        if fabric.node_kind[node] != NodeKind.SWITCH:
            raise InvalidArgument(
                f"{field}[{i}]", f"GUID {int(guid):#018x} is {fabric.node_names[node]}, a CA, not a switch"
            )
        if node in out:
            raise InvalidArgument(f"{field}[{i}]", f"GUID {int(guid):#018x} is given twice")
        out.append(node)
    return np.array(out, dtype=np.int64)


def check_roots_reach(fabric: Fabric, roots: np.ndarray, field: str = "routing_roots") -> None:
    """InvalidArgument naming the first switch (by name) that no root reaches over the fabric's cables
    (whatever their state): such a switch would get no rank, and no route through it."""
    cabled = ChannelGraph.of(
        dataclasses.replace(fabric, link_state=np.full_like(fabric.link_state, LinkState.UP))
    )
    layout = RowLayout.of(fabric, cabled)
    seeds = np.zeros((1, layout.switch_nodes.shape[0]), dtype=bool)
    seeds[0, layout.switch_index[roots]] = True
    hops = class_distances(cabled, layout, seeds)[0]
    cut_off = layout.switch_nodes[hops >= UNREACHABLE]
    if cut_off.size:
        raise InvalidArgument(
            field,
            f"no root reaches switch {fabric.node_names[int(cut_off[0])]} "
            f"({int(node_guid_keys(fabric)[cut_off[0]]):#018x})"
            + (f" and {cut_off.size - 1} more" if cut_off.size > 1 else "")
            + "; every switch needs a path from some root",
        )


def rank_switches(
    fabric: Fabric, graph: ChannelGraph, layout: RowLayout, roots: np.ndarray | None = None
) -> Ranking:
    """Roots (`roots`, switch nodes, or OpenSM's detection when None) and ranks over the usable
    switch links; EngineRefused when the detection finds no root."""
    found = detect_roots(graph, layout) if roots is None else np.asarray(roots, dtype=np.int64)
    if layout.switch_nodes.size and not found.size:
        raise EngineRefused(
            "updn found no root switches: no switch sees nearly every CA at one hop distance "
            '(OpenSM: "disabling UPDN algorithm, no root nodes were found"); give roots to use updn'
        )
    return ranking_from(fabric, graph, layout, found, "detected" if roots is None else "given")


def ranking_from(
    fabric: Fabric, graph: ChannelGraph, layout: RowLayout, roots: np.ndarray, source: str
) -> Ranking:
    """The ranks (hop distance from the nearest of `roots`) and the climbing order they give."""
    seeds = np.zeros((1, layout.switch_nodes.shape[0]), dtype=bool)
    seeds[0, layout.switch_index[roots]] = True
    hops = class_distances(graph, layout, seeds)[0].astype(np.int64)
    rank = np.where(hops < UNREACHABLE, hops - 1, _NO_RANK)
    # Unranked switches (cut off from every root) sort below all ranked ones; hosts below those.
    # Within a rank, by node GUID (OpenSM compares GUIDs: the bigger one is further down).
    n, lowest = graph.num_nodes, int(hops.shape[0]) + 1
    guid_rank = np.empty(n, dtype=np.int64)
    guid_rank[np.argsort(node_guid_keys(fabric), kind="stable")] = np.arange(n)
    order = np.full(n, (lowest + 1) * n, dtype=np.int64) + guid_rank
    order[layout.switch_nodes] = np.minimum(rank, lowest) * n + guid_rank[layout.switch_nodes]
    is_root = np.zeros(n, dtype=bool)
    is_root[roots] = True
    return Ranking(roots=roots, rank=rank, order=order, is_root=is_root, source=source)


def updn_states(graph: ChannelGraph, layout: RowLayout, ranking: ClimbOrder, seeds: np.ndarray):
    """(hops [c, S] int16, down mode [c, S] bool) toward each class, given its switches `seeds`."""
    channels = graph.switch_channels()
    source, target = graph.source[channels], graph.target[channels]
    up = ranking.is_up(source, target)
    hops = np.where(seeds, np.int16(1), UNREACHABLE).astype(np.int16)
    down_mode = seeds.copy()
    lists = []
    for mask in (~up, up):  # channels stay sorted by source within each list
        src = layout.switch_index[source[mask]]
        dst = layout.switch_index[target[mask]]
        reaching, starts = np.unique(src, return_index=True)
        lists.append((reaching, starts, dst))
    batch = max(1, _BFS_ELEMENTS // max(1, channels.shape[0]))
    for lo in range(0, hops.shape[0], batch):
        block, mode = hops[lo : lo + batch], down_mode[lo : lo + batch]
        level = 1
        while channels.size:
            at_level = block == level
            reached = []
            for (reaching, starts, dst), frontier in zip(lists, (at_level & mode, at_level), strict=True):
                out = np.zeros(block.shape, dtype=bool)
                if dst.size:
                    out[:, reaching] = np.logical_or.reduceat(frontier[:, dst], starts, axis=1)
                reached.append(out)
            free = block == UNREACHABLE
            joins_down = reached[0] & free
            joins_up = reached[1] & free & ~joins_down
            if not (joins_down.any() or joins_up.any()):
                break
            block[joins_down | joins_up] = level + 1
            mode |= joins_down
            level += 1
    return hops, down_mode


class UpDownRoutes(ClassEngine):
    """Min-hop routes along up*/down* paths, the groups of updn and ftree; each of them names its
    engine state (a ClimbOrder, in `ClassState.extra`) and how it picks the LFT port in a group."""

    def class_state(self, state: ClassState, columns: np.ndarray) -> dict[str, np.ndarray]:
        layout = state.layout
        seeds = state.classes.attachment(layout.switch_index, layout.switch_nodes.shape[0], columns)
        hops, down_mode = updn_states(state.graph, layout, state.extra, seeds)
        return {"hops": hops, "down_mode": down_mode}

    def candidates(
        self, state: ClassState, lo: int, hi: int, columns: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        layout, graph = state.layout, state.graph
        hops = state.per_class["hops"][columns]
        mode = state.per_class["down_mode"][columns].T  # [S, c]
        toward, own, _, deliver = row_candidates(state, lo, hi, hops)
        padded = layout.padded[lo:hi]
        channel = np.maximum(padded, 0)
        target = graph.target[channel]
        nodes = layout.row_nodes[lo:hi]
        switch_rows = layout.is_switch_row[lo:hi]
        climbs = state.extra.is_up(np.repeat(nodes[:, None], padded.shape[1], axis=1), target)
        climbs |= ~switch_rows[:, None]  # a host's uplinks climb
        far_down = mode[np.maximum(layout.switch_index[target], 0)]  # [n, W, c]
        own_down = np.zeros(own.shape, dtype=bool)
        own_down[switch_rows] = mode[layout.switch_index[nodes[switch_rows]]]
        legal = np.where(own_down[:, None, :], ~climbs[:, :, None] & far_down, climbs[:, :, None])
        routed = (own >= 2) & (own < UNREACHABLE)
        valid = (toward == (own - 1)[:, None, :]) & routed[:, None, :] & legal
        return valid, deliver

    def up_effects(self, state: ClassState, channel: int) -> tuple[np.ndarray, np.ndarray]:
        graph, index = state.graph, state.layout.switch_index
        a, b = graph.source[channel], graph.target[channel]
        hops = state.per_class["hops"].astype(np.int32)
        mode = state.per_class["down_mode"]
        here, there = hops[:, index[a]], hops[:, index[b]]
        here_down, there_down = mode[:, index[a]], mode[:, index[b]]
        reachable = there < UNREACHABLE
        if state.extra.is_up(np.array([a]), np.array([b]))[0]:
            # Climbing: a better hop count changes a's state; an equal one joins an up-mode group.
            return reachable & (there + 1 < here), reachable & (there + 1 == here) & ~here_down
        # Descending: only into a down-mode switch; at equal hops it turns an up-mode a into down mode.
        usable = reachable & there_down
        shorter = usable & ((there + 1 < here) | ((there + 1 == here) & ~here_down))
        return shorter, usable & (there + 1 == here) & here_down


@dataclasses.dataclass(frozen=True, eq=False)
class UpdnLayout:
    """updn's engine state: the ranking and the usable switch ports its walk goes over."""

    ranking: Ranking
    ports: SwitchPorts
    guid: np.ndarray  # uint64 [S], each switch's GUID (OpenSM's tie-break at equal rank)


class UpDown(ClassEngine):
    """OpenSM's `updn` engine: up*/down* min-hop routes from root switches, balanced like minhop.

    Its groups are the ports OpenSM's own walk gives the least hop count (updn_hops.py), which is
    not always the set of every up*/down* shortest path (a switch the walk reaches from two sides
    keeps the ports of both), so it takes its candidates from that walk, not from modes."""

    name = "updn"
    recompute_every_class = True

    def __init__(self, roots: Sequence[int] = ()) -> None:
        self.root_guids = tuple(int(guid) for guid in roots)  # empty: OpenSM's detection

    def engine_state(self, fabric: Fabric, graph: ChannelGraph, layout: RowLayout) -> UpdnLayout:
        roots = root_nodes(fabric, self.root_guids) if self.root_guids else None
        ranking = rank_switches(fabric, graph, layout, roots)
        return UpdnLayout(ranking, SwitchPorts(graph, layout), node_guid_keys(fabric)[layout.switch_nodes])

    def roots(self, extra: UpdnLayout) -> Ranking:
        return extra.ranking

    def same_engine_state(self, old: UpdnLayout, new: UpdnLayout) -> bool:
        return bool(np.array_equal(old.ranking.order, new.ranking.order)) and bool(
            np.array_equal(old.ranking.is_root, new.ranking.is_root)
        )

    def class_state(self, state: ClassState, columns: np.ndarray) -> dict[str, np.ndarray]:
        """Per class (destination switches; a multi-homed host's class takes the best of its
        switches): every usable switch port's hop count, and each switch's least, plus one."""
        layout, extra = state.layout, state.extra
        ranking, classes = extra.ranking, state.classes
        starts, ends = classes.switch_offsets[columns], classes.switch_offsets[columns + 1]
        counts = ends - starts
        members = np.repeat(starts - np.cumsum(counts) + counts, counts) + np.arange(int(counts.sum()))
        targets = layout.switch_index[classes.switches[members]]
        dests, inverse = np.unique(targets, return_inverse=True)
        is_root = ranking.is_root[layout.switch_nodes]
        hops, least = updn_port_hops(extra.ports, dests, ranking.rank, extra.guid, is_root)
        owner = np.repeat(np.arange(columns.shape[0]), counts)
        port_hops = np.full((columns.shape[0], hops.shape[1]), NO_HOPS, dtype=np.uint8)
        best = np.full((columns.shape[0], least.shape[1]), NO_HOPS, dtype=np.uint8)
        np.minimum.at(port_hops, owner, hops[inverse])
        np.minimum.at(best, owner, least[inverse])
        level = np.where(best == NO_HOPS, UNREACHABLE, best.astype(np.int16) + 1).astype(np.int16)
        return {"port_hops": port_hops, "hops": level}

    def candidates(
        self, state: ClassState, lo: int, hi: int, columns: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        hops = state.per_class["hops"][columns]  # [c, S], 1 at the class's switches
        toward, own, _, deliver = row_candidates(state, lo, hi, hops)
        routed = (own >= 2) & (own < UNREACHABLE)
        valid = (toward == (own - 1)[:, None, :]) & routed[:, None, :]  # host rows (as minhop)
        switch_rows = state.layout.is_switch_row[lo:hi]
        if switch_rows.any():
            padded = state.layout.padded[lo:hi][switch_rows]
            entry = np.where(padded >= 0, state.extra.ports.entry_of_channel[np.maximum(padded, 0)], -1)
            port_hops = state.per_class["port_hops"][columns]  # [c, entries], then a column of "none"
            port_hops = np.concatenate(
                [port_hops, np.full((port_hops.shape[0], 1), NO_HOPS, np.uint8)], axis=1
            )
            through = np.moveaxis(port_hops[:, entry], 0, -1).astype(np.int16)  # [n, W, c]
            exact = (entry >= 0)[:, :, None] & (through + 1 == own[switch_rows][:, None, :])
            valid[switch_rows] = exact & routed[switch_rows][:, None, :]
        return valid, deliver

    def up_effects(self, state: ClassState, channel: int) -> tuple[np.ndarray, np.ndarray]:
        none = np.zeros(state.classes.num_classes, dtype=bool)
        return none, none  # every class is recomputed (recompute_every_class)

    def lft(self, state: ClassState, group_ids: np.ndarray, rows: np.ndarray) -> np.ndarray:
        return balanced_lft(
            state.groups,
            group_ids,
            rows,
            state.classes.host_class,
            state.routing_order_hosts,
            state.graph.port,
            state.delivery(),
        )
