"""ftree: fat-tree routing; a shift permutation gets one distinct path per destination.

Equal-cost groups are updn's (minimal up*/down* paths from the top tier, so deadlock-free); the LFT
choice within a group is D-mod-k (Zahavi et al., "Optimized InfiniBand fat-tree routing for shift
all-to-all communication patterns", 2010), the deterministic rule OpenSM's ftree reduces to on a full
fat-tree: destinations are numbered by (leaf switch, leaf port); a switch at level l (leaves are
level 1) sends destination d up through port (d // W_l) mod (group size), where W_1 = 1 and W_l is
the product of the up-degrees of the levels below. On a k-ary fat-tree, destination d then climbs
through a unique core, so for any shift i -> i+s no two flows share a channel. Down groups (only
wider than one port with parallel cables) spread destinations by d mod (group size).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from services.common.snapshot import DELIVER
from services.topology.fabric import Fabric
from services.topology.routing.balance import node_guid_keys
from services.topology.routing.classbased import ClassState
from services.topology.routing.graph import ChannelGraph, RowLayout
from services.topology.routing.updn import Ranking, UpDownRoutes, rank_switches

__all__ = ["FatTree", "FatTreeLayout"]

_ROWS_PER_CHUNK = 256


@dataclasses.dataclass(frozen=True, eq=False)
class FatTreeLayout:
    """updn's ranking plus what D-mod-k needs: destination numbers and per-row divisors."""

    ranking: Ranking
    host_position: np.ndarray  # int64 [H], destination number by (leaf, leaf port)
    divisor: np.ndarray  # int64 [R], W of each row's level
    rotation: np.ndarray  # int64 [R], added to the destination number before dividing by W

    def is_up(self, source: np.ndarray, target: np.ndarray) -> np.ndarray:
        return self.ranking.is_up(source, target)


def _host_positions(fabric: Fabric, graph: ChannelGraph) -> np.ndarray:
    """Destination numbers: hosts sorted by the (switch, port) of their first cable (all cables)."""
    cabled = graph.is_host[graph.target] & ~graph.is_host[graph.source]
    host = fabric.node_host[graph.target[cabled]].astype(np.int64)
    leaf_rank = np.argsort(np.argsort(node_guid_keys(fabric), kind="stable"), kind="stable")
    key = leaf_rank[graph.source[cabled]] * (int(graph.port.max(initial=0)) + 1) + graph.port[cabled]
    first = np.full(fabric.num_hosts, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, host, key)
    order = np.lexsort((np.arange(fabric.num_hosts), first))
    position = np.empty(fabric.num_hosts, dtype=np.int64)
    position[order] = np.arange(fabric.num_hosts)
    return position


def _divisors(graph: ChannelGraph, layout: RowLayout, ranking: Ranking) -> np.ndarray:
    """W per row: 1 at the leaves (level 1), times the typical up-degree of each level below."""
    switches = layout.switch_nodes
    channels = np.flatnonzero(~graph.is_host[graph.source] & ~graph.is_host[graph.target])
    climbing = channels[ranking.is_up(graph.source[channels], graph.target[channels])]
    up_degree = np.bincount(layout.switch_index[graph.source[climbing]], minlength=switches.shape[0])
    level = _levels(ranking)
    deepest = int(level.max(initial=1)) - 1
    divisor_of_level = np.ones(deepest + 2, dtype=np.int64)
    for lvl in range(2, deepest + 2):
        below = up_degree[level == lvl - 1]
        typical = int(np.median(below)) if below.size else 1
        divisor_of_level[lvl] = divisor_of_level[lvl - 1] * max(1, typical)
    out = np.ones(layout.num_rows, dtype=np.int64)
    switch_rows = layout.is_switch_row
    out[switch_rows] = divisor_of_level[level[layout.switch_index[layout.row_nodes[switch_rows]]]]
    return out


def _rotations(graph: ChannelGraph, layout: RowLayout, ranking: Ranking, divisor: np.ndarray) -> np.ndarray:
    """[R] what each row adds to the destination number before D-mod-k's division.

    OpenSM's ftree balances each up-going port group by counters: an aggregation switch (level 2)
    takes destinations in order and moves to its next up port right after each destination whose
    main path climbs through it, i.e. after destination numbers d = a (mod W_2), where a is the
    index of the up port by which the leaves reach it. That is port ((d + W_2 - 1 - a) // W_2): the
    D-mod-k pattern rotated by one per aggregation switch (measured against OpenSM 3.3.23 on ibsim,
    tests/lab). Other levels: no rotation (leaves have W_1 = 1; deeper levels are not measured).
    """
    out = np.zeros(layout.num_rows, dtype=np.int64)
    channels = np.flatnonzero(~graph.is_host[graph.source] & ~graph.is_host[graph.target])
    climbing = channels[ranking.is_up(graph.source[channels], graph.target[channels])]
    if climbing.size == 0:
        return out
    climbing = climbing[np.lexsort((graph.port[climbing], graph.source[climbing]))]
    source = graph.source[climbing]
    first = np.r_[0, np.flatnonzero(source[1:] != source[:-1]) + 1]
    index = np.arange(climbing.shape[0]) - np.repeat(first, np.diff(np.r_[first, climbing.shape[0]]))
    level = _levels(ranking)
    from_leaf = level[layout.switch_index[source]] == 1
    residue = np.full(graph.num_nodes, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(residue, graph.target[climbing[from_leaf]], index[from_leaf])
    rows = np.flatnonzero(layout.is_switch_row)
    nodes = layout.row_nodes[rows]
    aggregation = (level[layout.switch_index[nodes]] == 2) & (residue[nodes] < divisor[rows])
    out[rows[aggregation]] = divisor[rows[aggregation]] - 1 - residue[nodes[aggregation]]
    return out


def _levels(ranking: Ranking) -> np.ndarray:
    """[S] level of each switch: 1 for the leaves (deepest rank) up to the roots."""
    finite = ranking.rank < np.iinfo(np.int64).max // 4
    deepest = int(ranking.rank[finite].max(initial=0))
    return np.where(finite, deepest - ranking.rank + 1, 1)


class FatTree(UpDownRoutes):
    """OpenSM's `ftree` engine: updn groups, D-mod-k LFT choice."""

    name = "ftree"

    def engine_state(self, fabric: Fabric, graph: ChannelGraph, layout: RowLayout) -> FatTreeLayout:
        physical = dataclasses.replace(graph, usable=np.ones_like(graph.usable))
        ranking = rank_switches(fabric, graph, layout)
        divisor = _divisors(graph, layout, ranking)
        return FatTreeLayout(
            ranking=ranking,
            host_position=_host_positions(fabric, physical),
            divisor=divisor,
            rotation=_rotations(physical, layout, ranking, divisor),
        )

    def same_engine_state(self, old: FatTreeLayout, new: FatTreeLayout) -> bool:
        return (
            bool(np.array_equal(old.ranking.order, new.ranking.order))
            and bool(np.array_equal(old.divisor, new.divisor))
            and bool(np.array_equal(old.rotation, new.rotation))
        )

    def lft(self, state: ClassState, group_ids: np.ndarray, rows: np.ndarray) -> np.ndarray:
        groups, graph = state.groups, state.graph
        host_class = state.classes.host_class
        position = state.extra.host_position
        climbs = np.zeros(groups.num_groups, dtype=bool)
        if groups.num_groups:
            first = groups.channels[groups.offsets[:-1]]
            climbs = state.extra.is_up(graph.source[first], graph.target[first])
            climbs |= graph.is_host[graph.source[first]]
        delivery = state.delivery()
        out = np.zeros((rows.shape[0], host_class.shape[0]), dtype=np.int64)
        if group_ids.shape[1] == 0:
            return out
        for lo in range(0, rows.shape[0], _ROWS_PER_CHUNK):
            chunk = rows[lo : lo + _ROWS_PER_CHUNK]
            cells = np.where(host_class >= 0, group_ids[chunk][:, np.maximum(host_class, 0)], -1)
            safe = np.maximum(cells, 0)
            size = np.maximum(groups.sizes[safe], 1)
            rotated = position[None, :] + state.extra.rotation[chunk][:, None]
            spread = np.where(climbs[safe], rotated // state.extra.divisor[chunk][:, None], position)
            slot = groups.offsets[safe] + spread % size
            if groups.channels.size:
                chosen = groups.channels[np.minimum(slot, groups.channels.size - 1)]
                ports = np.where(cells >= 0, graph.port[chosen], 0)
            else:
                ports = np.zeros(cells.shape, dtype=np.int64)
            row, column = np.nonzero(cells == DELIVER)
            ports[row, column] = delivery(chunk[row], column)
            out[lo : lo + chunk.shape[0]] = ports
        return out
