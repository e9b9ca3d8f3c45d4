"""updn's hop tables exactly as OpenSM builds them: a breadth-first walk with directions, per port.

OpenSM 3.3's `updn_bfs_by_node` (osm_ucast_updn.c) walks from each destination switch D outward and
keeps, for every switch port, the hop count to D through that port (`osm_switch_set_hops`); the LFT
then takes among the ports whose count is the switch's least (`osm_switch_recommend_path`). The
walk's rules, which this reproduces step for step:

- D starts with direction UP and 0 hops. A switch u taken from the queue offers `least(u) + 1` to
  each neighbour over each of its ports in port order; the step's direction is UP when the neighbour
  has the lower rank (at equal rank: when u has the bigger GUID; between two roots: always UP), DOWN
  otherwise, and a step UP after u was reached going DOWN is not taken (it would close a credit loop).
- The neighbour's port toward u records the offer when it beats what that port holds. If the
  neighbour is not waiting in the queue it joins its end, with the step's direction, even when it
  was reached before: so a switch reached again from another side is walked again in the other
  direction, and the ports that walk opens count as well.

The per-port result depends on that order (which switch is walked first, in which direction), so it
is computed by a compiled walk (numba, one destination at a time, about 40 thousand port visits per
destination at k=32) rather than by array operations over levels.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from services.topology.routing.graph import ChannelGraph, RowLayout

__all__ = ["NO_HOPS", "SwitchPorts", "updn_port_hops"]

NO_HOPS = 255  # OpenSM's OSM_NO_PATH for hop counts
_UNRANKED = np.iinfo(np.int64).max // 4

_kernel: Any = njit(cache=True, _nrt=False)  # type: ignore[call-overload]


class SwitchPorts:
    """The usable switch-to-switch channels of each switch in port order (CSR), with the index of the
    channel that comes back (the far end's port toward this switch)."""

    def __init__(self, graph: ChannelGraph, layout: RowLayout) -> None:
        channels = graph.switch_channels()  # sorted by (source, port)
        self.channels = channels
        self.source = layout.switch_index[graph.source[channels]]
        self.target = layout.switch_index[graph.target[channels]]
        num = layout.switch_nodes.shape[0]
        self.offsets = np.zeros(num + 1, dtype=np.int64)
        np.cumsum(np.bincount(self.source, minlength=num), out=self.offsets[1:])
        position = np.full(graph.source.shape[0], -1, dtype=np.int64)
        position[channels] = np.arange(channels.shape[0])
        self.back = position[channels ^ 1]  # channel c ^ 1 is c reversed; usable both ways or neither
        self.entry_of_channel = position  # [2L] entry of each channel, -1 if not a usable switch channel


@_kernel
def _walk(dests, offsets, target, back, rank, guid, is_root, hops, least, direction, queued, queue):
    for k in range(dests.shape[0]):
        d = dests[k]
        row_hops = hops[k]
        row_least = least[k]
        for i in range(row_hops.shape[0]):
            row_hops[i] = 255
        for s in range(row_least.shape[0]):
            row_least[s] = 255
            queued[s] = False
        row_least[d] = 0
        direction[d] = 1  # 1: UP, 0: DOWN
        size = queue.shape[0]  # a ring: a switch waits in it at most once at a time
        head, count = 0, 1
        queue[0] = d
        while count:
            u = queue[head]
            head = (head + 1) % size
            count -= 1
            queued[u] = False
            here = row_least[u]
            for e in range(offsets[u], offsets[u + 1]):
                v = target[e]
                if is_root[u] and is_root[v]:
                    step = 1
                elif rank[u] < rank[v]:
                    step = 0
                elif rank[u] > rank[v]:
                    step = 1
                else:
                    step = 1 if guid[u] > guid[v] else 0
                if direction[u] == 0 and step == 1:
                    continue
                offer = here + 1
                port = back[e]
                if offer < row_hops[port]:
                    row_hops[port] = offer
                    if offer < row_least[v]:
                        row_least[v] = offer
                    if not queued[v]:
                        direction[v] = step
                        queued[v] = True
                        queue[(head + count) % size] = v
                        count += 1


def updn_port_hops(
    ports: SwitchPorts, dests: np.ndarray, rank: np.ndarray, guid: np.ndarray, is_root: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(hops [D, entries] uint8, least [D, S] uint8) of OpenSM's walk toward each destination switch
    (`dests`, switch indices); `rank`, `guid`, `is_root` per switch index (unranked: a huge rank)."""
    num = ports.offsets.shape[0] - 1
    hops = np.empty((dests.shape[0], ports.target.shape[0]), dtype=np.uint8)
    least = np.empty((dests.shape[0], num), dtype=np.uint8)
    queue = np.empty(num + 1, dtype=np.int64)
    _walk(
        dests.astype(np.int64),
        ports.offsets,
        ports.target.astype(np.int64),
        ports.back.astype(np.int64),
        np.minimum(rank, _UNRANKED).astype(np.int64),
        guid.astype(np.uint64),
        is_root.astype(np.bool_),
        hops,
        least,
        np.zeros(num, dtype=np.int64),
        np.zeros(num, dtype=np.bool_),
        queue,
    )
    return hops, least
