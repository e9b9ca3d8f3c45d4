"""file: forwarding tables loaded from an `opensm-lfts.dump` (OpenSM's `-R file`).

The dump gives each switch's LFT; there are no equal-cost groups beyond it, so every group is the
LFT port alone (`LFT_ONLY`). Entries whose port's link is DOWN give no route (the file engine does
not route around failures; that is what the other engines are for). A host cabled to several
switches uses its lowest usable uplink. Switches the dump leaves out have no routes; unreachable
pairs are counted by following the LFTs, so a dump with loops shows them as unreachable.
"""

from __future__ import annotations

import dataclasses
import functools
import time

import numpy as np

from services.common.snapshot import LFT_ONLY, RouteTable
from services.topology.fabric import Fabric
from services.topology.lfts_dump import LftDump, parse_lfts_dump, resolve_lfts
from services.topology.routing.classes import DestinationClasses
from services.topology.routing.graph import ChannelGraph, RowLayout
from services.topology.routing.routes import Routes

__all__ = ["FileRouting"]


@dataclasses.dataclass(frozen=True, eq=False)
class _Loaded:
    switches: np.ndarray  # nodes with a table in the dump
    ports: np.ndarray  # [K, H] as loaded


class FileRouting:
    """LFTs from a dump `text` (InvalidArgument naming the line when it cannot be read or resolved)."""

    name = "file"

    def __init__(self, text: str, field: str = "lfts_dump") -> None:
        self.text = text
        self.field = field

    @functools.cached_property
    def dump(self) -> LftDump:
        """The parsed dump (parsed on first use: a reroute reuses the previous routes' tables)."""
        return parse_lfts_dump(self.text, self.field)

    def compute(self, fabric: Fabric) -> Routes:
        started = time.perf_counter_ns()
        switches, ports = resolve_lfts(fabric, self.dump, self.field)
        return _routes(fabric, _Loaded(switches, ports), started)

    def reroute(self, fabric: Fabric, previous: Routes) -> Routes:
        if isinstance(previous.state, _Loaded):
            return _routes(fabric, previous.state, time.perf_counter_ns(), incremental=True)
        return self.compute(fabric)


def _routes(fabric: Fabric, loaded: _Loaded, started: int, incremental: bool = False) -> Routes:
    graph = ChannelGraph.of(fabric)
    layout = RowLayout.of(fabric, graph)
    classes = DestinationClasses.of(fabric, graph)
    n, hosts, width = fabric.num_nodes, fabric.num_hosts, int(graph.port.max(initial=0)) + 1
    lft = np.zeros((layout.num_rows, hosts), dtype=np.int64)
    lft[layout.node_row[loaded.switches]] = loaded.ports
    host_rows = np.flatnonzero(~layout.is_switch_row)
    if host_rows.size:  # multi-homed hosts: their lowest usable uplink, toward every other host
        up = graph.usable & graph.is_host[graph.source] & ~graph.is_host[graph.target]
        lowest = np.full(n, 0, dtype=np.int64)
        channels = np.flatnonzero(up)[np.argsort(-graph.port[up], kind="stable")]
        lowest[graph.source[channels]] = graph.port[channels]
        lft[host_rows] = lowest[layout.row_nodes[host_rows]][:, None]
        lft[host_rows, fabric.node_host[layout.row_nodes[host_rows]]] = 0
    # Ports whose link is unusable give no route; a port's channel is found through a port table.
    channel_of = np.full(n * width, -1, dtype=np.int64)
    channel_of[graph.source * width + graph.port] = np.arange(graph.source.shape[0])
    channel = channel_of[layout.row_nodes[:, None] * width + lft]
    usable = (lft > 0) & (channel >= 0) & graph.usable[np.maximum(channel, 0)]
    lft = np.where(usable, lft, 0)
    next_node = np.where(usable, graph.target[np.maximum(channel, 0)], -1)
    group_ids = np.full((layout.num_rows, classes.num_classes), LFT_ONLY, dtype=np.int32)
    table = RouteTable(
        node_row=layout.node_row,
        dest_class=classes.host_class,
        group_ids=group_ids,
        group_offsets=np.zeros(1, dtype=np.int64),
        group_channels=np.zeros(0, dtype=np.int32),
        lft_ports=lft.astype(np.uint8 if width <= 256 else np.uint16),
    )
    unreachable = _unreachable(fabric, graph, layout, classes, next_node)
    return Routes(
        engine=FileRouting.name,
        table=table,
        unreachable_pairs=unreachable,
        compute_ns=time.perf_counter_ns() - started,
        incremental=incremental,
        state=loaded,
        changed_rows=None,
        group_lineage=FileRouting.name,  # every group is LFT_ONLY: tables compare by LFT alone
    )


def _unreachable(
    fabric: Fabric, graph: ChannelGraph, layout: RowLayout, classes: DestinationClasses, next_node: np.ndarray
) -> int:
    """Ordered host pairs whose LFT walk does not reach the destination."""
    hosts = fabric.num_hosts
    host_nodes = fabric.host_nodes.astype(np.int64)
    reach = next_node == host_nodes[None, :]
    following = np.where(next_node >= 0, layout.node_row[np.maximum(next_node, 0)], -1)
    column = np.arange(hosts)[None, :]
    for _ in range(layout.num_rows):  # a walk is at most R rows long; stops as soon as nothing changes
        grown = reach | ((following >= 0) & reach[np.maximum(following, 0), column])
        if np.array_equal(grown, reach):
            break
        reach = grown
    reach &= (classes.host_class >= 0)[None, :]
    source_row = layout.node_row[host_nodes].astype(np.int64)
    up = np.flatnonzero(graph.usable & graph.is_host[graph.source] & ~graph.is_host[graph.target])
    rowless = layout.node_row[graph.source[up]] < 0
    source_row[fabric.node_host[graph.source[up][rowless]]] = layout.node_row[graph.target[up][rowless]]
    known = source_row >= 0
    reached = int(np.bincount(source_row[known], minlength=layout.num_rows) @ reach.sum(axis=1))
    reached -= int(reach[source_row[known], np.flatnonzero(known)].sum())
    return hosts * (hosts - 1) - reached
