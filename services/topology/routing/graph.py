"""The channel graph engines walk, and the static layout of routing rows.

`ChannelGraph` holds every direction of every link and which of them carry routes for the current
link states (the rule is `services.common.snapshot.usable_links`: not DOWN, not a loopback, not host
to host; DEGRADED links stay routable). `RowLayout` depends only on the cabling, never on link
state, so group masks keep their meaning across reroutes: its rows are the switches plus the hosts
cabled to more than one switch, and row r's columns are all channels leaving its node in port order.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from services.common.snapshot import usable_links
from services.topology.fabric import Fabric, NodeKind

__all__ = ["ChannelGraph", "RowLayout"]


@dataclasses.dataclass(frozen=True, eq=False)
class ChannelGraph:
    """Channels of a fabric (channel 2l is link l a->b, 2l+1 is b->a) and which are usable now."""

    num_nodes: int
    is_host: np.ndarray  # bool [N]
    source: np.ndarray  # int64 [2L], node each channel leaves
    target: np.ndarray  # int64 [2L], node each channel reaches
    port: np.ndarray  # int64 [2L], port the channel leaves its source by
    usable_link: np.ndarray  # bool [L]
    usable: np.ndarray  # bool [2L]

    @classmethod
    def of(cls, fabric: Fabric) -> ChannelGraph:
        """The graph of `fabric`'s current link states."""
        is_host = fabric.node_kind == NodeKind.HOST
        usable_link = usable_links(fabric.node_kind, fabric.link_a, fabric.link_b, fabric.link_state)
        return cls(
            num_nodes=fabric.num_nodes,
            is_host=is_host,
            source=np.stack([fabric.link_a, fabric.link_b], axis=1).ravel().astype(np.int64),
            target=np.stack([fabric.link_b, fabric.link_a], axis=1).ravel().astype(np.int64),
            port=fabric.channel_port().astype(np.int64),
            usable_link=usable_link,
            usable=np.repeat(usable_link, 2),
        )

    def switch_channels(self) -> np.ndarray:
        """Usable channels between two switches, sorted by (source, port)."""
        chosen = np.flatnonzero(self.usable & ~self.is_host[self.source] & ~self.is_host[self.target])
        return chosen[np.lexsort((self.port[chosen], self.source[chosen]))]


@dataclasses.dataclass(frozen=True, eq=False)
class RowLayout:
    """Routing rows of a fabric and, per row, every channel leaving its node in port order."""

    row_nodes: np.ndarray  # int64 [R]
    node_row: np.ndarray  # int32 [N], -1 for hosts without a row
    is_switch_row: np.ndarray  # bool [R]
    padded: np.ndarray  # int64 [R, W], channels of each row in port order, -1 padded
    width: np.ndarray  # int64 [R], number of channels of each row
    switch_nodes: np.ndarray  # int64 [S]
    switch_index: np.ndarray  # int64 [N], position among switches, -1 for hosts

    @classmethod
    def of(cls, fabric: Fabric, graph: ChannelGraph) -> RowLayout:
        is_host = graph.is_host
        switches = np.flatnonzero(~is_host)
        cabled = (graph.source != graph.target) & is_host[graph.source] & ~is_host[graph.target]
        pairs = np.unique(graph.source[cabled] * graph.num_nodes + graph.target[cabled])
        multi = np.flatnonzero(np.bincount(pairs // graph.num_nodes, minlength=graph.num_nodes) > 1)
        rows = np.concatenate([switches, multi]).astype(np.int64)
        node_row = np.full(graph.num_nodes, -1, dtype=np.int32)
        node_row[rows] = np.arange(rows.shape[0])
        channel_row = node_row[graph.source]
        owned = np.flatnonzero(channel_row >= 0)
        owned = owned[np.lexsort((graph.port[owned], channel_row[owned]))]
        width = np.bincount(channel_row[owned], minlength=rows.shape[0]).astype(np.int64)
        padded = np.full((rows.shape[0], int(width.max(initial=0))), -1, dtype=np.int64)
        column = np.arange(owned.shape[0]) - np.repeat(np.cumsum(width) - width, width)
        padded[channel_row[owned], column] = owned
        switch_index = np.full(graph.num_nodes, -1, dtype=np.int64)
        switch_index[switches] = np.arange(switches.shape[0])
        return cls(
            row_nodes=rows,
            node_row=node_row,
            is_switch_row=~is_host[rows],
            padded=padded,
            width=width,
            switch_nodes=switches.astype(np.int64),
            switch_index=switch_index,
        )

    @property
    def num_rows(self) -> int:
        return int(self.row_nodes.shape[0])

    def port_columns(self, graph: ChannelGraph, rows: np.ndarray, ports: np.ndarray) -> np.ndarray:
        """[len(rows), K] the layout column of each row's port in `ports` [len(rows), K] (-1 where the
        row has no such port, or the port is 0)."""
        highest = int(graph.port.max(initial=0))
        if highest < 1024:  # the usual switch: one dense row of columns by port
            table = np.full((rows.shape[0], highest + 2), -1, dtype=np.int64)
            padded = self.padded[rows]
            held = padded >= 0
            owner = np.nonzero(held)[0]
            table[owner, graph.port[padded[held]]] = np.nonzero(held)[1]
            column = table[np.arange(rows.shape[0])[:, None], np.clip(ports, 0, highest + 1)]
            return np.where(ports > 0, column, -1)
        padded = self.padded[rows]
        port_of = np.where(padded >= 0, graph.port[np.maximum(padded, 0)], -1)  # ascending, -1 last
        width = max(padded.shape[1], 1)
        span = int(max(port_of.max(initial=0), ports.max(initial=0))) + 2
        lead = np.arange(rows.shape[0])[:, None] * span
        keys = (lead + np.where(port_of >= 0, port_of, span - 1)).ravel()
        wanted = (lead + ports).ravel()
        if not keys.size:
            return np.full(ports.shape, -1, dtype=np.int64)
        at = np.minimum(np.searchsorted(keys, wanted), keys.shape[0] - 1)
        hit = (keys[at] == wanted) & (ports.ravel() > 0)
        return np.where(hit, at % width, -1).reshape(ports.shape)

    def chunks(self, columns: int, budget: int = 1 << 24) -> list[tuple[int, int]]:
        """Row ranges whose [rows, width, columns] block stays within `budget` elements."""
        per_row = max(1, self.padded.shape[1] * max(columns, 1))
        step = max(1, budget // per_row)
        return [(lo, min(lo + step, self.num_rows)) for lo in range(0, self.num_rows, step)]
