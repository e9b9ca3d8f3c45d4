"""ftree: fat-tree routing; a shift permutation gets one distinct path per destination.

Equal-cost groups are updn's (minimal up*/down* paths from the top tier, so deadlock-free). The LFT
choice within a group is OpenSM's ftree wherever the twin can reproduce it:

- on a full fat-tree (`ftree_indexing.FullFatTree`: two switch levels, or three with pods and
  columns) each switch forwards a destination to the switch OpenSM's ftree picks, derived from the
  cabling and GUIDs alone: OpenSM's tuple indexing orders the destinations, its counters send the
  t-th destination climbing from a switch through its up-neighbour number t mod n in tuple order,
  and every other switch follows the first switch that reached it. Parallel cables are taken in
  the order OpenSM's port counters reach them. Checked entry for entry against OpenSM 3.3.23 on
  ibsim, in cabling order and with records and GUIDs shuffled (tests/lab);
- elsewhere, and in cells whose wanted switch is not in the group (a failed link), D-mod-k (Zahavi
  et al., "Optimized InfiniBand fat-tree routing for shift all-to-all communication patterns",
  2010): destinations are numbered by (leaf switch, leaf port); a switch at level l (leaves are
  level 1) sends destination d up through port (d // W_l) mod (group size), where W_1 = 1 and W_l
  is the product of the up-degrees of the levels below. Down groups (only wider than one port with
  parallel cables) spread destinations by d mod (group size).

Either way, on a k-ary fat-tree destination d climbs through a unique core, so for any shift
i -> i+s in the routing order no two flows share a channel.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import threading
from collections.abc import Sequence

import numpy as np

from services.common.snapshot import DELIVER
from services.topology.fabric import Fabric
from services.topology.routing.balance import node_guid_keys
from services.topology.routing.classbased import ClassState
from services.topology.routing.ftree_check import check_fat_tree
from services.topology.routing.ftree_indexing import FullFatTree
from services.topology.routing.ftree_walk import FtreeWalk
from services.topology.routing.graph import ChannelGraph, RowLayout
from services.topology.routing.groups import GroupTable
from services.topology.routing.routes import Routes
from services.topology.routing.updn import Ranking, UpDownRoutes, ranking_from, root_nodes

__all__ = ["FatTree", "FatTreeLayout"]

_ROWS_PER_CHUNK = 64  # rows per block of [rows, hosts] arrays: bounds the peak memory
_INDEXINGS: collections.OrderedDict[bytes, FullFatTree | None] = collections.OrderedDict()
_INDEXINGS_KEPT = 4
_INDEXINGS_LOCK = threading.Lock()


@dataclasses.dataclass(frozen=True, eq=False)
class FatTreeLayout:
    """updn's ranking, OpenSM's view of a full fat-tree, and what D-mod-k needs where that is None or
    does not apply: destination numbers and per-row divisors."""

    ranking: Ranking
    host_position: np.ndarray  # int64 [H], destination number by (leaf, leaf port)
    divisor: np.ndarray  # int64 [R], W of each row's level
    rotation: np.ndarray  # int64 [R], added to the destination number before dividing by W
    full: FullFatTree | None  # OpenSM's indexing and main paths; cabling and GUIDs only
    walk: FtreeWalk | None = None  # OpenSM's routing walked, where `full` is None

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


def _indexing(fabric: Fabric, graph: ChannelGraph) -> FullFatTree | None:
    """FullFatTree.of over the usable links (a CA whose cable is down is no destination to OpenSM),
    kept for the last few fabrics: it depends on cabling, link states and GUIDs only."""
    digest = hashlib.blake2b(digest_size=16)
    for array in (fabric.node_kind, fabric.node_guid, fabric.link_a, fabric.link_b, graph.port, graph.usable):
        digest.update(np.ascontiguousarray(array).tobytes())
    key = digest.digest()
    with _INDEXINGS_LOCK:
        if key in _INDEXINGS:
            _INDEXINGS.move_to_end(key)
            return _INDEXINGS[key]
    found = FullFatTree.of(fabric, graph)
    with _INDEXINGS_LOCK:
        _INDEXINGS[key] = found
        while len(_INDEXINGS) > _INDEXINGS_KEPT:
            _INDEXINGS.popitem(last=False)
    return found


def _levels(ranking: Ranking) -> np.ndarray:
    """[S] level of each switch: 1 for the leaves (deepest rank) up to the roots."""
    finite = ranking.rank < np.iinfo(np.int64).max // 4
    deepest = int(ranking.rank[finite].max(initial=0))
    return np.where(finite, deepest - ranking.rank + 1, 1)


class _GroupMembers:
    """Group elements by (group, target node), parallel cables in the far end's port order."""

    def __init__(self, offsets: np.ndarray, channels: np.ndarray, graph: ChannelGraph) -> None:
        group = np.repeat(np.arange(offsets.shape[0] - 1), np.diff(offsets))
        keys = group * graph.num_nodes + graph.target[channels]
        self._order = np.lexsort((graph.port[channels ^ 1], keys))  # channel c ^ 1 is c reversed
        self._keys = keys[self._order]
        self._n = graph.num_nodes

    def find(self, group: np.ndarray, node: np.ndarray, cable: np.ndarray, default: np.ndarray) -> np.ndarray:
        """Element index of cable number `cable` (modulo the cables) of `group` toward `node`, in the
        port order of `node`'s end; `default` where the group has no channel toward `node`."""
        if not self._keys.size:
            return default
        key = group * self._n + np.maximum(node, 0)
        first = np.searchsorted(self._keys, key)
        count = np.searchsorted(self._keys, key, side="right") - first
        hit = (count > 0) & (node >= 0)
        at = np.minimum(first + cable % np.maximum(count, 1), self._keys.shape[0] - 1)
        return np.where(hit, self._order[at], default)


class FatTree(UpDownRoutes):
    """OpenSM's `ftree` engine: updn groups; OpenSM's choice on a full fat-tree, D-mod-k elsewhere."""

    name = "ftree"

    def __init__(self, roots: Sequence[int] = ()) -> None:
        self.root_guids = tuple(int(guid) for guid in roots)  # empty: ftree's own ranking

    def engine_state(self, fabric: Fabric, graph: ChannelGraph, layout: RowLayout) -> FatTreeLayout:
        """OpenSM's checks first (EngineRefused when it would fall back), then the layout."""
        physical = dataclasses.replace(graph, usable=np.ones_like(graph.usable))
        given = root_nodes(fabric, self.root_guids) if self.root_guids else None
        ranks = check_fat_tree(fabric, graph, given)
        ranking = ranking_from(fabric, graph, layout, ranks.roots, "detected" if given is None else "given")
        divisor = _divisors(graph, layout, ranking)
        full = _indexing(fabric, graph)
        return FatTreeLayout(
            ranking=ranking,
            host_position=_host_positions(fabric, physical),
            divisor=divisor,
            rotation=_rotations(physical, layout, ranking, divisor),
            full=full,
            walk=FtreeWalk(fabric, graph, ranks.rank) if full is None else None,
        )

    def roots(self, extra: FatTreeLayout) -> Ranking:
        return extra.ranking

    def reroute(self, fabric: Fabric, previous: Routes) -> Routes:
        """OpenSM's ftree writes its tables whole at every sweep, from its own walk: routed afresh (its
        fallback, minhop, where the changed fabric is no fat-tree to it)."""
        return self.compute(fabric)

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
        members = _GroupMembers(groups.offsets, groups.channels, graph)
        walk: FtreeWalk | None = state.extra.walk
        masks = groups.masks() if walk is not None else np.zeros((0, 1), dtype=np.uint64)
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
            if state.extra.full is not None:
                hosts = np.arange(host_class.shape[0])
                wanted, cable = state.extra.full.wanted_next(state.layout.row_nodes[chunk], hosts)
                slot = np.where(cells >= 0, members.find(safe, wanted, cable, slot), slot)
            if groups.channels.size:
                chosen = groups.channels[np.minimum(slot, groups.channels.size - 1)]
                ports = np.where(cells >= 0, graph.port[chosen], 0)
            else:
                ports = np.zeros(cells.shape, dtype=np.int64)
            if walk is not None:  # OpenSM's walked choice wherever it is in the group
                walked = walk.ports(state.layout.row_nodes[chunk], host_class.shape[0])
                column = state.layout.port_columns(graph, chunk, walked)
                inside = (cells >= 0) & GroupTable.contains(masks, safe, column)
                ports = np.where(inside, walked, ports)
            row, column = np.nonzero(cells == DELIVER)
            ports[row, column] = delivery(chunk[row], column)
            out[lo : lo + chunk.shape[0]] = ports
        return out
