"""FabricSnapshot: the arrays form of a fabric and its routes, shared by topology (producer) and simulator.

Conventions (also in topology.proto): nodes 0..N-1, links 0..L-1, hosts 0..H-1 with `host_nodes[h]`
the node of host h; every link is full duplex, channel 2*l runs a->b and channel 2*l+1 runs b->a.

Routes come in one of two encodings (`route_encoding`):

1. CSR over (node, destination host): the equal-cost next channels of node n toward host h are
   `route_next_channels[route_offsets[n*H+h] : route_offsets[n*H+h+1]]`, LFT choice first. Simple, but
   N*H offsets: 1.4 GB for a k=32 fat-tree, far over a 64 MB message. Still read (hand-built test
   snapshots use it); the topology service no longer writes it.
2. Compact (`RouteTable`), which is what the topology service writes. Two observations make it small:
   - ECMP groups depend on the destination only through its *class*: the set of switches its host
     is cabled to (a k=32 fat-tree has 8,192 hosts but 1,024 classes), except on the last hop, where
     a switch delivers straight to the host and the group follows from adjacency. So groups are ids
     per (routing row, class), `group_ids` [R, C] (int32, 5 MB at k=32), into a table of distinct
     groups (`group_offsets`, `group_channels`, each in port order; 33k groups at k=32).
   - The LFT choice does depend on the host (OpenSM spreads destinations over equal ports), but it
     is a port number: `lft_ports` [R, H] as uint8 (uint16 past 255 ports), 10.5 MB at k=32.
   Rows are the switches plus hosts cabled to more than one switch; a host with one uplink has no
   row, its group is that uplink whenever the switch routes on. A k=32 snapshot is about 17 MB.
   Channels per (node, port), the delivery groups and those uplinks are derived from the link arrays
   (`link_port_a/b`, `link_state`) by the reader, so they are not shipped.

Readers use one API for both encodings, vectorised over arrays of (node, destination host):
`route_groups(nodes, hosts) -> (start, size)` slices of `route_channels`, each slice listing the LFT
channel first and then the group's other channels in cyclic port order after it (the compact reader
stores each group twice in a row, so that every rotation is a contiguous slice); `lft_channels` is the
first one (-1: no route). An empty group means no route, or that the node is the destination host.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Literal, get_args

import numpy as np
from fabrictwin.v1 import topology_pb2

from services.common.arrays import from_numeric_array, to_numeric_array

__all__ = [
    "DELIVER",
    "LFT_ONLY",
    "NO_ROUTE",
    "ROUTE_ENCODING_COMPACT",
    "ROUTE_ENCODING_CSR",
    "FabricSnapshot",
    "RouteLookup",
    "RouteTable",
    "usable_links",
]

ROUTE_ENCODING_CSR = 1
ROUTE_ENCODING_COMPACT = 2
NO_ROUTE = -1  # group id: no route toward that class
DELIVER = -2  # group id: the node is cabled to the destination; the group is those cables
LFT_ONLY = -3  # group id: the group is the LFT port alone (engines without ECMP groups, e.g. `file`)

_NODE_KIND_HOST, _LINK_STATE_DOWN = 1, 2
_ARRAY_FIELDS = (
    "node_kind",
    "node_tier",
    "host_nodes",
    "host_ip",
    "host_rail",
    "link_a",
    "link_b",
    "link_rate_bps",
    "link_latency_ns",
    "link_state",
    "link_ber",
)
_OptionalArray = Literal["route_offsets", "route_next_channels", "link_port_a", "link_port_b"]
_OPTIONAL_ARRAYS: tuple[_OptionalArray, ...] = get_args(_OptionalArray)
_TABLE_FIELDS = ("node_row", "dest_class", "group_ids", "group_offsets", "group_channels", "lft_ports")


def usable_links(
    node_kind: np.ndarray, link_a: np.ndarray, link_b: np.ndarray, link_state: np.ndarray
) -> np.ndarray:
    """[L] bool: links that carry routes: not DOWN, not a loopback, not host to host (hosts never relay).

    DEGRADED links stay usable: a marginal transceiver loses packets without going down.
    """
    is_host = np.asarray(node_kind) == _NODE_KIND_HOST
    usable: np.ndarray = (
        (np.asarray(link_state) != _LINK_STATE_DOWN)
        & (link_a != link_b)
        & ~(is_host[link_a] & is_host[link_b])
    )
    return usable


@dataclasses.dataclass(eq=False)
class RouteTable:
    """Routes in the compact encoding (module docstring, item 2)."""

    node_row: np.ndarray  # int32 [N], routing row of each node, -1 for hosts with at most one switch link
    dest_class: np.ndarray  # int32 [H], class (attachment group) of each destination host, -1: unattached
    group_ids: np.ndarray  # int32 [R, C], group of row r toward class c, or NO_ROUTE / DELIVER / LFT_ONLY
    group_offsets: np.ndarray  # int64 [G+1]
    group_channels: np.ndarray  # int32 [E], channels of each group in port order
    lft_ports: np.ndarray  # uint8 or uint16 [R, H], LFT output port of row r toward host h, 0: none

    def compacted(self) -> RouteTable:
        """The same routes in canonical form: classes without hosts dropped, classes numbered by their
        first host and groups by their first use (row by row), unused groups dropped. Two tables that
        route alike compact to equal arrays, whatever order their engines built them in."""
        used_classes = self.dest_class[self.dest_class >= 0]
        classes, first_host = np.unique(used_classes, return_index=True)
        class_order = classes[np.argsort(first_host, kind="stable")]
        renumber_class = np.full(self.group_ids.shape[1] + 1, -1, dtype=np.int32)
        renumber_class[class_order] = np.arange(class_order.shape[0])
        group_ids = self.group_ids[:, class_order]
        flat = group_ids.ravel()
        groups, first_use = np.unique(flat[flat >= 0], return_index=True)
        kept = groups[np.argsort(first_use, kind="stable")]
        renumber = np.full(self.group_offsets.shape[0], -1, dtype=np.int32)
        renumber[kept] = np.arange(kept.shape[0])
        sizes = np.diff(self.group_offsets)[kept]
        offsets = np.zeros(kept.shape[0] + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        member = np.arange(offsets[-1]) - np.repeat(offsets[:-1], sizes)
        channels = self.group_channels[np.repeat(self.group_offsets[kept], sizes) + member]
        group_ids = np.where(group_ids >= 0, renumber[np.maximum(group_ids, 0)], group_ids)
        return dataclasses.replace(
            self,
            dest_class=renumber_class[self.dest_class],
            group_ids=group_ids.astype(np.int32),
            group_offsets=offsets,
            group_channels=channels.astype(np.int32),
        )


def _doubled(offsets: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Each CSR group written twice in a row: group g of size s occupies [2*offsets[g], 2*offsets[g+1])."""
    sizes = np.diff(offsets)
    member = np.arange(2 * values.shape[0]) - np.repeat(2 * offsets[:-1], 2 * sizes)
    doubled: np.ndarray = values[
        np.repeat(offsets[:-1], 2 * sizes) + member % np.repeat(np.maximum(sizes, 1), 2 * sizes)
    ]
    return doubled


class RouteLookup:
    """Resolves (node, destination host) to a slice of `channels` for a RouteTable and its wiring."""

    def __init__(
        self,
        table: RouteTable,
        node_kind: np.ndarray,
        link_a: np.ndarray,
        link_b: np.ndarray,
        link_port_a: np.ndarray,
        link_port_b: np.ndarray,
        link_state: np.ndarray,
    ) -> None:
        self.table = table
        n = node_kind.shape[0]
        self.num_nodes = n
        self.host_nodes = np.flatnonzero(node_kind == _NODE_KIND_HOST).astype(np.int64)
        source = np.stack([link_a, link_b], axis=1).ravel().astype(np.int64)
        self.target = np.stack([link_b, link_a], axis=1).ravel().astype(np.int64)
        self.port = np.stack([link_port_a, link_port_b], axis=1).ravel().astype(np.int64)
        usable = np.repeat(usable_links(node_kind, link_a, link_b, link_state), 2)
        self.max_port = int(self.port.max(initial=0))
        width = self.max_port + 1
        # Port table: channel leaving node v by port p at port_base + v*width + p (-1 where no cable).
        port_table = np.full(n * width, -1, dtype=np.int64)
        port_table[source * width + self.port] = np.arange(source.shape[0])
        # Class groups, each doubled so that every rotation is a slice; element keys find the LFT in it.
        offsets = np.asarray(table.group_offsets, dtype=np.int64)
        members = np.asarray(table.group_channels, dtype=np.int64)
        owner = np.repeat(np.arange(offsets.shape[0] - 1), np.diff(offsets))
        self._group_keys = owner * width + self.port[members]
        self._group_offsets = offsets
        # Delivery groups: usable cables from a switch into a host, keyed (host node, switch).
        is_host = node_kind == _NODE_KIND_HOST
        into = np.flatnonzero(usable & is_host[self.target] & ~is_host[source])
        into = into[np.lexsort((self.port[into], source[into], self.target[into]))]
        self._deliver_keys = self.target[into] * n + source[into]
        self._deliver_elements = self._deliver_keys * width + self.port[into]
        starts = np.flatnonzero(np.r_[True, self._deliver_keys[1:] != self._deliver_keys[:-1]])
        deliver_offsets = np.r_[starts, into.shape[0]].astype(np.int64)
        # Hosts without a row: their one usable uplink (hosts with two switch links have rows).
        up = np.flatnonzero(usable & is_host[source] & ~is_host[self.target])
        self._uplink = np.full(n, -1, dtype=np.int64)
        self._uplink[source[up]] = up
        group_part = _doubled(offsets, members)
        deliver_part = _doubled(deliver_offsets, into.astype(np.int64))
        self._deliver_base = group_part.shape[0]
        self._port_base = self._deliver_base + deliver_part.shape[0]
        self.channels = np.concatenate([group_part, deliver_part, port_table]).astype(np.int32)

    def _position(self, keys: np.ndarray, sorted_keys: np.ndarray, first: np.ndarray) -> np.ndarray:
        position: np.ndarray = np.searchsorted(sorted_keys, keys) - first
        return position

    def groups(self, nodes: np.ndarray, hosts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(start, size) of each pair's group in `channels`, LFT channel first; size 0: no route."""
        nodes = np.asarray(nodes, dtype=np.int64).ravel()
        hosts = np.asarray(hosts, dtype=np.int64).ravel()
        table, width = self.table, self.max_port + 1
        start = np.zeros(nodes.shape[0], dtype=np.int64)
        size = np.zeros(nodes.shape[0], dtype=np.int64)
        if not nodes.size:
            return start, size
        row = table.node_row[nodes].astype(np.int64)
        cls = table.dest_class[hosts].astype(np.int64)
        active = (nodes != self.host_nodes[hosts]) & (cls >= 0)
        pick = np.flatnonzero(active & (row >= 0))
        r, h, v = row[pick], hosts[pick], nodes[pick]
        gid = table.group_ids[r, cls[pick]].astype(np.int64)
        lft = table.lft_ports[r, h].astype(np.int64)
        sel = gid >= 0
        if sel.any():
            g, p = gid[sel], lft[sel]
            first = self._group_offsets[g]
            position = np.where(p > 0, self._position(g * width + p, self._group_keys, first), 0)
            start[pick[sel]] = 2 * first + position
            size[pick[sel]] = self._group_offsets[g + 1] - first
        sel = gid == DELIVER
        if sel.any():
            key = self.host_nodes[h[sel]] * self.num_nodes + v[sel]
            lo = np.searchsorted(self._deliver_keys, key, side="left")
            hi = np.searchsorted(self._deliver_keys, key, side="right")
            position = np.where(
                hi > lo, self._position(key * width + lft[sel], self._deliver_elements, lo), 0
            )
            start[pick[sel]] = self._deliver_base + 2 * lo + np.clip(position, 0, np.maximum(hi - lo - 1, 0))
            size[pick[sel]] = hi - lo
        sel = (gid == LFT_ONLY) & (lft > 0)
        if sel.any():
            start[pick[sel]] = self._port_base + v[sel] * width + lft[sel]
            size[pick[sel]] = self.channels[start[pick[sel]]] >= 0
        rowless = np.flatnonzero(active & (row < 0))
        if rowless.size:
            uplink = self._uplink[nodes[rowless]]
            has = uplink >= 0
            _, onward = self.groups(self.target[uplink[has]], hosts[rowless[has]])
            routed = rowless[has][onward > 0]
            start[routed] = self._port_base + nodes[routed] * width + self.port[self._uplink[nodes[routed]]]
            size[routed] = 1
        return start, size


class _CsrLookup:
    """Encoding 1: the groups are the CSR rows themselves."""

    def __init__(self, offsets: np.ndarray, next_channels: np.ndarray, num_hosts: int) -> None:
        self.offsets = np.asarray(offsets, dtype=np.int64)
        self.channels = np.asarray(next_channels, dtype=np.int32)
        self.num_hosts = num_hosts

    def groups(self, nodes: np.ndarray, hosts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        key = np.asarray(nodes, dtype=np.int64) * self.num_hosts + np.asarray(hosts, dtype=np.int64)
        start = self.offsets[key]
        return start, self.offsets[key + 1] - start


@dataclasses.dataclass(eq=False)
class FabricSnapshot:
    """A fabric and its routes as flat numpy arrays (routes in either encoding)."""

    fabric: str
    routing_version: int
    node_kind: np.ndarray  # int8 [N], NodeKind values
    node_tier: np.ndarray  # int8 [N]
    node_names: list[str]
    host_nodes: np.ndarray  # int32 [H]
    host_ip: np.ndarray  # uint32 [H]
    host_rail: np.ndarray  # int32 [H]
    link_a: np.ndarray  # int32 [L]
    link_b: np.ndarray  # int32 [L]
    link_rate_bps: np.ndarray  # int64 [L]
    link_latency_ns: np.ndarray  # int64 [L]
    link_state: np.ndarray  # int8 [L], LinkState values
    link_ber: np.ndarray  # float64 [L]
    link_names: list[str]
    route_offsets: np.ndarray | None = None  # encoding 1: int64 [N*H+1]
    route_next_channels: np.ndarray | None = None  # encoding 1: int32 [route_offsets[-1]]
    link_port_a: np.ndarray | None = None  # int32 [L] (needed by encoding 2)
    link_port_b: np.ndarray | None = None  # int32 [L]
    route_table: RouteTable | None = None  # encoding 2
    reroute_seconds: float = 0.0  # a what-if snapshot: measured time of its route recompute

    @property
    def route_encoding(self) -> int:
        return ROUTE_ENCODING_COMPACT if self.route_table is not None else ROUTE_ENCODING_CSR

    @property
    def num_nodes(self) -> int:
        return int(self.node_kind.shape[0])

    @property
    def num_hosts(self) -> int:
        return int(self.host_nodes.shape[0])

    @property
    def num_links(self) -> int:
        return int(self.link_a.shape[0])

    @property
    def num_channels(self) -> int:
        return 2 * self.num_links

    def channel_source(self) -> np.ndarray:
        """[2L] node each channel leaves from."""
        return np.stack([self.link_a, self.link_b], axis=1).ravel().astype(np.int32)

    def channel_target(self) -> np.ndarray:
        """[2L] node each channel arrives at."""
        return np.stack([self.link_b, self.link_a], axis=1).ravel().astype(np.int32)

    def channel_rate_bps(self) -> np.ndarray:
        """[2L] rate of each channel (both directions of a link run at its rate)."""
        return np.repeat(self.link_rate_bps, 2)

    @functools.cached_property
    def _lookup(self) -> RouteLookup | _CsrLookup:
        if self.route_table is None:
            if self.route_offsets is None or self.route_next_channels is None:
                raise ValueError("CSR routes need route_offsets and route_next_channels")
            return _CsrLookup(self.route_offsets, self.route_next_channels, self.num_hosts)
        if self.link_port_a is None or self.link_port_b is None:
            raise ValueError("a compact route table needs link_port_a and link_port_b")
        return RouteLookup(
            self.route_table,
            self.node_kind,
            self.link_a,
            self.link_b,
            self.link_port_a,
            self.link_port_b,
            self.link_state,
        )

    @property
    def route_channels(self) -> np.ndarray:
        """int32 channels that `route_groups` slices index into (decoded once, then cached)."""
        return self._lookup.channels

    def route_groups(self, nodes: np.ndarray, hosts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(start, size) per (node, destination host index): `route_channels[start:start+size]` are
        the equal-cost next channels, the LFT choice first. Vectorised; size 0 means no route."""
        return self._lookup.groups(nodes, hosts)

    def lft_channels(self, nodes: np.ndarray, hosts: np.ndarray) -> np.ndarray:
        """The LFT (single-port) channel per (node, destination host index); -1 where there is none."""
        start, size = self.route_groups(nodes, hosts)
        return np.where(size > 0, self.route_channels[np.where(size > 0, start, 0)], -1)

    def next_channels(self, node: int, host: int) -> np.ndarray:
        """Equal-cost channels leaving `node` toward host index `host`, LFT choice first."""
        start, size = self.route_groups(np.array([node]), np.array([host]))
        return self.route_channels[int(start[0]) : int(start[0] + size[0])]

    def channel_name(self, channel: int) -> str:
        link, direction = divmod(channel, 2)
        a, b = int(self.link_a[link]), int(self.link_b[link])
        if direction:
            a, b = b, a
        return f"{self.node_names[a]}->{self.node_names[b]}"

    def to_proto(self) -> topology_pb2.FabricSnapshot:
        message = topology_pb2.FabricSnapshot(
            fabric=self.fabric,
            routing_version=self.routing_version,
            node_names=self.node_names,
            link_names=self.link_names,
            route_encoding=self.route_encoding,
            reroute_seconds=self.reroute_seconds,
        )
        for name in _ARRAY_FIELDS + _OPTIONAL_ARRAYS:
            if getattr(self, name) is not None:
                getattr(message, name).CopyFrom(to_numeric_array(getattr(self, name)))
        if self.route_table is not None:
            for name in _TABLE_FIELDS:
                getattr(message, f"route_{name}").CopyFrom(to_numeric_array(getattr(self.route_table, name)))
        return message

    @classmethod
    def from_proto(cls, message: topology_pb2.FabricSnapshot) -> FabricSnapshot:
        arrays = {name: from_numeric_array(getattr(message, name), name) for name in _ARRAY_FIELDS}

        def optional(name: _OptionalArray) -> np.ndarray | None:
            return from_numeric_array(getattr(message, name), name) if message.HasField(name) else None

        table = None
        if message.route_encoding == ROUTE_ENCODING_COMPACT:
            table = RouteTable(
                **{
                    name: from_numeric_array(getattr(message, f"route_{name}"), f"route_{name}")
                    for name in _TABLE_FIELDS
                }
            )
        return cls(
            fabric=message.fabric,
            routing_version=message.routing_version,
            node_names=list(message.node_names),
            link_names=list(message.link_names),
            route_table=table,
            reroute_seconds=message.reroute_seconds,
            **arrays,
            route_offsets=optional("route_offsets"),
            route_next_channels=optional("route_next_channels"),
            link_port_a=optional("link_port_a"),
            link_port_b=optional("link_port_b"),
        )
