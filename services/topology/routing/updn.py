"""updn: min-hop routes restricted to up*/down* paths from root switches, so deadlock-free.

Roots are the top-tier switches; when tiers are unknown (some switch has tier 0), OpenSM's automatic
detection: a switch is a root when its min-hop histogram toward the hosts has exactly one bar above
90% of the hosts and one above 5% (it sees nearly every host at the same distance: a core). Ranks
are hop distances from the roots; a channel goes *up* when it reaches a lower (rank, node) pair, so
the up relation is acyclic.

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
from typing import Protocol

import numpy as np

from services.common.errors import FailedPrecondition
from services.topology.fabric import Fabric
from services.topology.routing.balance import balanced_lft
from services.topology.routing.classbased import ClassEngine, ClassState
from services.topology.routing.graph import ChannelGraph, RowLayout
from services.topology.routing.minhop import UNREACHABLE, class_distances, row_candidates

__all__ = ["ClimbOrder", "Ranking", "UpDown", "UpDownRoutes", "rank_switches"]

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
    order: np.ndarray  # int64 [N], rank * N + node (hosts below everything)

    def is_up(self, source: np.ndarray, target: np.ndarray) -> np.ndarray:
        """Whether channels source->target climb."""
        return self.order[target] < self.order[source]


def _roots(fabric: Fabric, graph: ChannelGraph, layout: RowLayout) -> np.ndarray:
    switches = layout.switch_nodes
    tiers = fabric.node_tier[switches]
    if switches.size and (tiers >= 1).all():
        return switches[tiers == tiers.max()]
    from services.topology.routing.classes import DestinationClasses  # OpenSM's detection

    classes = DestinationClasses.of(fabric, graph)
    columns = np.arange(classes.num_classes)
    hops = class_distances(graph, layout, classes.attachment(layout.switch_index, switches.shape[0], columns))
    hosts = int(classes.size.sum())
    roots = []
    for s in range(switches.shape[0]):
        reachable = hops[:, s] < UNREACHABLE
        histogram = np.bincount(hops[reachable, s], weights=classes.size[reachable])
        if (histogram > 0.9 * hosts).sum() == 1 and (histogram > 0.05 * hosts).sum() == 1:
            roots.append(switches[s])
    return np.array(roots, dtype=np.int64)


def rank_switches(fabric: Fabric, graph: ChannelGraph, layout: RowLayout) -> Ranking:
    """Roots and ranks over the usable switch links; FailedPrecondition when there is no root."""
    roots = _roots(fabric, graph, layout)
    if layout.switch_nodes.size and not roots.size:
        raise FailedPrecondition(
            "updn found no root switches (no switch has tiers, and none sees nearly every host "
            "at one distance); give the switches tiers or use minhop"
        )
    seeds = np.zeros((1, layout.switch_nodes.shape[0]), dtype=bool)
    seeds[0, layout.switch_index[roots]] = True
    hops = class_distances(graph, layout, seeds)[0].astype(np.int64)
    rank = np.where(hops < UNREACHABLE, hops - 1, _NO_RANK)
    # Unranked switches (cut off from every root) sort below all ranked ones; hosts below those.
    n, lowest = graph.num_nodes, int(hops.shape[0]) + 1
    order = np.full(n, (lowest + 1) * n, dtype=np.int64) + np.arange(n)
    order[layout.switch_nodes] = np.minimum(rank, lowest) * n + layout.switch_nodes
    return Ranking(roots=roots, rank=rank, order=order)


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


class UpDown(UpDownRoutes):
    """OpenSM's `updn` engine: up*/down* min-hop routes from root switches, balanced like minhop."""

    name = "updn"

    def engine_state(self, fabric: Fabric, graph: ChannelGraph, layout: RowLayout) -> Ranking:
        return rank_switches(fabric, graph, layout)

    def same_engine_state(self, old: Ranking, new: Ranking) -> bool:
        return bool(np.array_equal(old.order, new.order))

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
