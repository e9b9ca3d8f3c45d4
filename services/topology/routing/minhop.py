"""minhop: shortest paths by hop count, every equal-hop port in the ECMP group, LFT balanced like OpenSM.

Per destination class, a breadth-first search over the usable switch-to-switch channels gives every
switch its hop distance to the class's switches (1 at those switches, which deliver to the host);
all classes are searched at once as array operations. A channel of row n is a candidate toward a
class when it leads to a switch one hop closer. Hosts are never transit.
"""

from __future__ import annotations

import numpy as np

from services.topology.routing.balance import balanced_lft
from services.topology.routing.classbased import ClassEngine, ClassState
from services.topology.routing.graph import ChannelGraph, RowLayout

__all__ = ["UNREACHABLE", "MinHop", "class_distances", "row_candidates"]

UNREACHABLE = np.int16(30_000)  # hop count meaning "no path"
_BFS_ELEMENTS = 1 << 24  # [classes, switch channels] handled per BFS batch


def class_distances(graph: ChannelGraph, layout: RowLayout, seeds: np.ndarray) -> np.ndarray:
    """[c, S] int16 hops from every switch to each class, given `seeds` [c, S] (the class's switches).

    A switch is one hop further than its nearest neighbour on the frontier; UNREACHABLE if none.
    """
    channels = graph.switch_channels()
    src = layout.switch_index[graph.source[channels]]
    dst = layout.switch_index[graph.target[channels]]
    reaching, starts = np.unique(src, return_index=True)
    distance = np.where(seeds, np.int16(1), UNREACHABLE).astype(np.int16)
    batch = max(1, _BFS_ELEMENTS // max(1, dst.shape[0]))
    for lo in range(0, distance.shape[0], batch):
        block = distance[lo : lo + batch]
        level = 1
        while src.size:
            reached = np.logical_or.reduceat(block[:, dst] == level, starts, axis=1)
            current = block[:, reaching]
            new = reached & (current == UNREACHABLE)
            if not new.any():
                break
            current[new] = level + 1
            block[:, reaching] = current
            level += 1
    return distance


def row_candidates(
    state: ClassState, lo: int, hi: int, metric: np.ndarray, allowed: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Shared by the class engines: per rows lo..hi-1 and classes (`metric` [c, S], hops to each class).

    Returns (toward [n, W, c] hops of each column's far switch, the row's own hops [n, c], switch
    columns [n, W] usable toward a switch, and deliver [n, c]). A host row's hops are one more than
    its best uplink. `allowed` [n, W] further restricts the columns.
    """
    layout, graph = state.layout, state.graph
    padded = layout.padded[lo:hi]
    channel = np.maximum(padded, 0)
    target = graph.target[channel]
    to_switch = (padded >= 0) & graph.usable[channel] & ~graph.is_host[target]
    if allowed is not None:
        to_switch &= allowed
    by_switch = metric.T  # [S, c]
    toward = by_switch[np.maximum(layout.switch_index[target], 0)]  # [n, W, c]
    toward = np.where(to_switch[:, :, None], toward, UNREACHABLE)
    nodes = layout.row_nodes[lo:hi]
    switch_rows = layout.is_switch_row[lo:hi]
    own = np.empty((hi - lo, metric.shape[0]), dtype=np.int16)
    own[switch_rows] = by_switch[layout.switch_index[nodes[switch_rows]]]
    if (~switch_rows).any():  # multi-homed hosts: one more than their best uplink
        best = toward[~switch_rows].min(axis=1)
        own[~switch_rows] = np.where(best < UNREACHABLE, best + 1, UNREACHABLE)
    deliver = switch_rows[:, None] & (own == 1)
    return toward, own, to_switch, deliver


class MinHop(ClassEngine):
    """OpenSM's `minhop` engine: shortest paths, equal-hop ports balanced per switch."""

    name = "minhop"

    def class_state(self, state: ClassState, columns: np.ndarray) -> dict[str, np.ndarray]:
        seeds = state.classes.attachment(
            state.layout.switch_index, state.layout.switch_nodes.shape[0], columns
        )
        return {"hops": class_distances(state.graph, state.layout, seeds)}

    def candidates(
        self, state: ClassState, lo: int, hi: int, columns: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        toward, own, _, deliver = row_candidates(state, lo, hi, state.per_class["hops"][columns])
        routed = (own >= 2) & (own < UNREACHABLE)
        valid = (toward == (own - 1)[:, None, :]) & routed[:, None, :]
        return valid, deliver

    def up_effects(self, state: ClassState, channel: int) -> tuple[np.ndarray, np.ndarray]:
        index = state.layout.switch_index
        hops = state.per_class["hops"].astype(np.int32)
        here = hops[:, index[state.graph.source[channel]]]
        there = hops[:, index[state.graph.target[channel]]]
        shorter = (there < UNREACHABLE) & (there + 1 < here)
        equal = (there + 1 == here) & (here >= 2)
        return shorter, equal

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
