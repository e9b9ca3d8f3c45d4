"""The channel graph routing engines walk: every usable direction of every link, grouped by node.

A link carries routes unless it is DOWN, a loopback, or joins two hosts (hosts are endpoints, never
transit). DEGRADED links stay routable: a marginal transceiver loses packets without going down,
which is exactly what the twin must be able to show.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from services.topology.fabric import Fabric, LinkState, NodeKind

__all__ = ["ChannelGraph"]


@dataclasses.dataclass(frozen=True)
class ChannelGraph:
    """Usable channels of a fabric as CSR by source node, each node's channels in port order."""

    num_nodes: int
    is_host: np.ndarray  # bool [N]
    source: np.ndarray  # int32 [2L], node each channel leaves
    target: np.ndarray  # int32 [2L], node each channel reaches
    port: np.ndarray  # int32 [2L], port the channel leaves its source by
    out_offsets: np.ndarray  # int64 [N+1]
    out_channels: np.ndarray  # int32, usable channels sorted by (source, port)

    @classmethod
    def of(cls, fabric: Fabric) -> ChannelGraph:
        """The graph of `fabric`'s current link states."""
        n = fabric.num_nodes
        is_host = fabric.node_kind == NodeKind.HOST
        source = np.empty(2 * fabric.num_links, dtype=np.int32)
        target = np.empty_like(source)
        source[0::2], source[1::2] = fabric.link_a, fabric.link_b
        target[0::2], target[1::2] = fabric.link_b, fabric.link_a
        port = fabric.channel_port()
        link_ok = (
            (fabric.link_state != LinkState.DOWN)
            & (fabric.link_a != fabric.link_b)
            & ~(is_host[fabric.link_a] & is_host[fabric.link_b])
        )
        usable = np.flatnonzero(np.repeat(link_ok, 2))
        order = np.lexsort((port[usable], source[usable]))
        out_channels = usable[order].astype(np.int32)
        counts = np.bincount(source[out_channels], minlength=n)
        out_offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(counts, out=out_offsets[1:])
        return cls(n, is_host, source, target, port, out_offsets, out_channels)

    @property
    def out_degree(self) -> np.ndarray:
        """[N] number of usable channels leaving each node."""
        return np.diff(self.out_offsets)

    def padded_out_channels(self, start: int, stop: int) -> np.ndarray:
        """[stop-start, max degree] usable channels of nodes start..stop-1 in port order, -1 padded."""
        degree = self.out_degree[start:stop]
        width = int(degree.max(initial=0))
        out = np.full((stop - start, width), -1, dtype=np.int32)
        column = np.arange(width)
        mask = column[None, :] < degree[:, None]
        lo, hi = int(self.out_offsets[start]), int(self.out_offsets[stop])
        out[mask] = self.out_channels[lo:hi]
        return out
