"""Routes: the forwarding state one engine computed for one fabric, and how two of them compare.

The arrays are a `RouteTable` (services/common/snapshot.py: LFT port per (row, host), equal-cost
group ids per (row, destination class)), exactly what snapshots ship; `lookup(fabric)` resolves any
(node, host) pair to its channels. `state` is whatever the engine keeps to reroute incrementally.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from services.common.snapshot import DELIVER, LFT_ONLY, NO_ROUTE, RouteLookup, RouteTable
from services.topology.fabric import Fabric, NodeKind

__all__ = ["Routes", "diff_routes", "entry_signatures", "lft_changes"]


@dataclasses.dataclass(eq=False)
class Routes:
    """Forwarding state of one fabric's link states, computed by one engine."""

    engine: str  # the engine asked for
    table: RouteTable
    unreachable_pairs: int  # ordered host pairs (src != dst) without a route
    compute_ns: int
    incremental: bool = False  # True when only what had to change was recomputed
    state: Any = None  # the engine's reusable state (for incremental reroutes)
    changed_rows: np.ndarray | None = None  # rows an incremental reroute recomputed (None: all)
    group_lineage: object = None  # routes with the same lineage number their groups alike
    engine_used: str = ""  # the engine that made the tables: `engine`, or minhop where it fell back
    fallback_reason: str = ""  # why `engine` did not route (empty when it did)
    roots: np.ndarray | None = None  # updn/ftree: root switch nodes
    roots_source: str = ""  # "detected" (OpenSM's detection / ftree's ranking) or "given"
    # True when the LFT kept entries of the tables before it (a running subnet manager's sweep), so it
    # may differ from a fresh computation of the same fabric
    kept_entries: bool = False
    _lookup: tuple[int, RouteLookup] | None = dataclasses.field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not self.engine_used:
            self.engine_used = self.engine

    @property
    def num_nodes(self) -> int:
        return int(self.table.node_row.shape[0])

    @property
    def num_hosts(self) -> int:
        return int(self.table.dest_class.shape[0])

    def lookup(self, fabric: Fabric) -> RouteLookup:
        """The lookup of these routes over `fabric`'s wiring (cached for the last fabric asked)."""
        if self._lookup is None or self._lookup[0] != id(fabric):
            lookup = RouteLookup(
                self.table,
                fabric.node_kind,
                fabric.link_a,
                fabric.link_b,
                fabric.link_port_a,
                fabric.link_port_b,
                fabric.link_state,
            )
            self._lookup = (id(fabric), lookup)
        return self._lookup[1]

    def group(self, fabric: Fabric, node: int, host: int) -> np.ndarray:
        """Equal-cost next channels of `node` toward host index `host`, LFT choice first."""
        lookup = self.lookup(fabric)
        start, size = lookup.groups(np.array([node]), np.array([host]))
        return lookup.channels[int(start[0]) : int(start[0] + size[0])].astype(np.int64)

    def lft_ports(self, node: int) -> np.ndarray:
        """[H] LFT output port of a node with a routing row toward every host (0: none)."""
        return self.table.lft_ports[self.table.node_row[node]].astype(np.int64)


def _channel_hash(count: int) -> np.ndarray:
    """splitmix64 of 1..count: a fixed pseudo-random 64-bit value per channel."""
    z = np.arange(1, count + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _class_signatures(
    fabric: Fabric, table: RouteTable, rows: np.ndarray, channel_hash: np.ndarray
) -> np.ndarray:
    """[len(rows), H] order-free hash of the equal-cost set of each (row, destination host) entry."""
    offsets = np.asarray(table.group_offsets, dtype=np.int64)
    group_hash = np.zeros(offsets.shape[0] - 1, dtype=np.uint64)
    sizes = np.diff(offsets)
    if sizes.any():
        nonempty = sizes > 0
        group_hash[nonempty] = np.add.reduceat(channel_hash[table.group_channels], offsets[:-1][nonempty])
    cls = table.dest_class.astype(np.int64)
    if table.group_ids.shape[1] == 0:  # no host is cabled to a switch
        return np.zeros((rows.shape[0], cls.shape[0]), dtype=np.uint64)
    ids = np.where(cls >= 0, table.group_ids[rows][:, np.maximum(cls, 0)], NO_ROUTE)
    group_hash = np.append(group_hash, np.uint64(0))  # the last slot stands for "no group"
    out = group_hash[np.where(ids >= 0, ids, group_hash.shape[0] - 1)]
    special = np.nonzero((ids == DELIVER) | (ids == LFT_ONLY))
    if special[0].size:  # rare cells: resolve them through the lookup
        row_nodes = np.flatnonzero(table.node_row >= 0)[np.argsort(table.node_row[table.node_row >= 0])]
        lookup = RouteLookup(
            table,
            fabric.node_kind,
            fabric.link_a,
            fabric.link_b,
            fabric.link_port_a,
            fabric.link_port_b,
            fabric.link_state,
        )
        start, size = lookup.groups(row_nodes[rows[special[0]]], special[1])
        prefix = np.zeros(lookup.channels.shape[0] + 1, dtype=np.uint64)
        np.cumsum(channel_hash[lookup.channels.astype(np.int64)], out=prefix[1:])
        out[special] = prefix[start + size] - prefix[start]
    return out


def entry_signatures(fabric: Fabric, routes: Routes, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(set hash, LFT port), each [len(rows), H], of every forwarding entry of the given routing rows.

    The hash is an order-free sum over the entry's equal-cost channels, so two entries with the same
    LFT port and the same set of channels have equal signatures whatever their group ids.
    """
    rows = np.asarray(rows, dtype=np.int64)
    channel_hash = _channel_hash(2 * fabric.num_links + 1)[1:]
    channel_hash = np.concatenate([channel_hash, np.zeros(1, dtype=np.uint64)])  # index -1: no channel
    signature = _class_signatures(fabric, routes.table, rows, channel_hash)
    return signature, routes.table.lft_ports[rows].astype(np.int64)


def diff_routes(
    old_fabric: Fabric, old: Routes, new_fabric: Fabric, new: Routes, rows: np.ndarray | None = None
) -> tuple[int, int]:
    """(forwarding entries, switches) whose LFT port or equal-cost set differs between `old` and `new`.

    Only switches are counted (hosts have no forwarding table). `rows` limits the comparison to
    those routing rows (an incremental reroute knows which ones it recomputed).
    """
    switch_rows = new.table.node_row[new_fabric.node_kind == NodeKind.SWITCH].astype(np.int64)
    rows = switch_rows if rows is None else np.intersect1d(switch_rows, rows)
    if old.group_lineage is not None and old.group_lineage is new.group_lineage:
        return _diff_same_lineage(old.table, new.table, rows)
    entries, changed_switches = 0, 0
    for lo in range(0, rows.shape[0], 256):  # bounded temporaries: 256 x H entries at a time
        chunk = rows[lo : lo + 256]
        old_sig, old_lft = entry_signatures(old_fabric, old, chunk)
        new_sig, new_lft = entry_signatures(new_fabric, new, chunk)
        changed = (old_sig != new_sig) | (old_lft != new_lft)
        entries += int(changed.sum())
        changed_switches += int(changed.any(axis=1).sum())
    return entries, changed_switches


def _diff_same_lineage(old: RouteTable, new: RouteTable, rows: np.ndarray) -> tuple[int, int]:
    """Fast diff of two tables whose group ids mean the same groups: compare ids and LFT ports."""
    entries, changed_rows = 0, 0
    old_class, new_class = old.dest_class.astype(np.int64), new.dest_class.astype(np.int64)
    for lo in range(0, rows.shape[0], 256):
        chunk = rows[lo : lo + 256]
        before = np.where(old_class >= 0, old.group_ids[chunk][:, np.maximum(old_class, 0)], NO_ROUTE)
        after = np.where(new_class >= 0, new.group_ids[chunk][:, np.maximum(new_class, 0)], NO_ROUTE)
        changed = (before != after) | (old.lft_ports[chunk] != new.lft_ports[chunk])
        entries += int(changed.sum())
        changed_rows += int(changed.any(axis=1).sum())
    return entries, changed_rows


def lft_changes(
    fabric: Fabric, old: Routes, new: Routes, rows: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(switch nodes, counts): the switches whose LFT output port changed toward some destination
    host between `old` and `new` (routes of the same cabling), most changed first (then node order),
    and how many entries changed at each. `rows` limits the comparison to those routing rows."""
    switches = np.flatnonzero(fabric.node_kind == NodeKind.SWITCH)
    switch_rows = new.table.node_row[switches].astype(np.int64)
    if rows is not None:
        keep = np.isin(switch_rows, rows)
        switches, switch_rows = switches[keep], switch_rows[keep]
    counts = np.zeros(switches.shape[0], dtype=np.int64)
    for lo in range(0, switch_rows.shape[0], 256):
        chunk = switch_rows[lo : lo + 256]
        counts[lo : lo + 256] = (old.table.lft_ports[chunk] != new.table.lft_ports[chunk]).sum(axis=1)
    changed = np.flatnonzero(counts)
    order = changed[np.lexsort((switches[changed], -counts[changed]))]
    return switches[order].astype(np.int64), counts[order]
