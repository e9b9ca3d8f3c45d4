"""The LFT choice among equal-cost ports, balanced the way OpenSM's unicast manager does.

OpenSM 3.3 (`osm_ucast_mgr.c`, used by minhop and updn) walks destinations in one fabric-wide
*routing order* and, at each switch, gives each destination the equal-cost port with the fewest
routes assigned so far on that switch (lowest port on a tie). The routing order is not LID order:
the switches are taken in node-GUID order, stably re-sorted by how many end ports (CAs) are cabled
to them, most first; each switch contributes its CAs in its port order, a CA cabled to several
switches only at the first (`routing_order` below; checked against OpenSM on ibsim by tests/lab).
The balancing is sequential per switch; two exact ways compute it:

- fast path, vectorised over rows and hosts: when the groups a row uses are pairwise disjoint (every
  healthy Clos: all uplinks, or the one port toward a child), the greedy within a group is round
  robin in port order: the r-th destination (in routing order) using a group gets its (r mod size)-th port;
- otherwise (overlapping groups, e.g. after a failure) the greedy runs per row, one *run* of
  consecutive destinations with the same group at a time: within a run the greedy is water-filling,
  which has a closed form, so the Python loop is over runs (a handful per row), not destinations.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from services.common.snapshot import DELIVER
from services.topology.fabric import Fabric, NodeKind
from services.topology.formats.ibnetdiscover_export import export_guids
from services.topology.routing.graph import ChannelGraph
from services.topology.routing.groups import GroupTable

__all__ = ["balanced_lft", "routing_order", "water_fill"]


def node_guid_keys(fabric: Fabric) -> np.ndarray:
    """[N] uint64: each node's GUID, or its synthetic export GUID where the fabric has none: the order
    must be the one OpenSM sees when it routes the fabric's export (ibnetdiscover, ibsim)."""
    return export_guids(fabric, unique=False)


def routing_order(fabric: Fabric, graph: ChannelGraph) -> np.ndarray:
    """Host indices in the order OpenSM's unicast manager routes them (see the module docstring).

    Only usable cables count (OpenSM does not see a port whose link is down). Hosts cabled to no
    switch come last, by GUID (they get no route either way).

    >>> from services.topology.generators import leaf_spine
    >>> f = leaf_spine(2, 1, 2)
    >>> f.node_guid[f.node_index("leaf-0")] = 0xFFFF_FFFF_FFFF_FFFF  # leaf-0 now sorts after leaf-1
    >>> [f.node_names[f.host_nodes[h]] for h in routing_order(f, ChannelGraph.of(f))]
    ['host-2', 'host-3', 'host-0', 'host-1']
    """
    guid = node_guid_keys(fabric)
    to_host = graph.usable & ~graph.is_host[graph.source] & graph.is_host[graph.target]
    switch, port = graph.source[to_host], graph.port[to_host]
    endport_links = np.bincount(switch, minlength=fabric.num_nodes)
    switches = np.flatnonzero(fabric.node_kind == NodeKind.SWITCH)
    # OpenSM keeps switches in a map keyed by the GUID in network byte order: that is their order.
    by_load = switches[np.lexsort((guid[switches].byteswap(), -endport_links[switches]))]
    rank = np.zeros(fabric.num_nodes, dtype=np.int64)
    rank[by_load] = np.arange(by_load.shape[0])
    first = np.full(fabric.num_hosts, np.iinfo(np.int64).max, dtype=np.int64)
    key = rank[switch] * (int(graph.port.max(initial=0)) + 1) + port
    np.minimum.at(first, fabric.node_host[graph.target[to_host]].astype(np.int64), key)
    return np.lexsort((guid[fabric.host_nodes], first)).astype(np.int64)


_ROWS_PER_CHUNK = 256


def water_fill(counts: np.ndarray, m: int) -> np.ndarray:
    """Which of the ports (indices into `counts`, routes so far) m consecutive destinations get.

    The greedy gives each destination the index with the fewest routes, lowest index on a tie; the
    j-th destination takes the j-th smallest pair (counts[p] + t, p) over t >= 0.

    >>> water_fill(np.array([2, 0, 1]), 5).tolist()
    [1, 1, 2, 0, 1]
    """
    s = counts.shape[0]
    counts = counts.astype(np.int64)
    ordered = np.sort(counts)
    prefix = np.cumsum(ordered)
    k = np.arange(1, s + 1)
    upper = np.r_[ordered[1:], np.iinfo(np.int64).max // 4]
    level = np.minimum(upper, (m + prefix) // k)
    level = int(level[level >= ordered].max())  # highest level whose filling needs at most m routes
    take = np.maximum(counts, level) - counts
    remainder = m - int(take.sum())
    take[np.flatnonzero(counts <= level)[:remainder]] += 1
    port = np.repeat(np.arange(s), take)
    height = np.repeat(counts, take) + np.arange(m) - np.repeat(np.cumsum(take) - take, take)
    return port[np.argsort(height * s + port, kind="stable")]


def _disjoint(groups: GroupTable, used: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """[n] bool: the groups each row uses (`used` [n, C] ids) share no port with each other."""
    n = rows.shape[0]
    count = groups.num_groups + 1
    pairs = np.unique((np.arange(n)[:, None] * count + np.where(used >= 0, used, groups.num_groups)).ravel())
    gid = pairs % count
    keep = gid < groups.num_groups
    owner, gid = pairs[keep] // count, gid[keep]
    sizes = groups.sizes[gid]
    member = np.arange(int(sizes.sum())) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    columns = groups.columns[np.repeat(groups.offsets[gid], sizes) + member]
    key = np.repeat(owner, sizes) * (groups.layout.padded.shape[1] + 1) + columns
    values, seen = np.unique(key, return_counts=True)
    clash = values[seen > 1] // (groups.layout.padded.shape[1] + 1)
    out = np.ones(n, dtype=bool)
    out[clash] = False
    return out


def _round_robin(
    groups: GroupTable,
    run_cells: np.ndarray,
    run_length: np.ndarray,
    run_of: np.ndarray,
    within: np.ndarray,
    group_ports: np.ndarray,
) -> np.ndarray:
    """Ports [n, H] (routing order) assuming disjoint groups per row, from group ids per *run* `run_cells`
    [n, K]: destinations in routing order come in runs of one class (`run_length` [K]; destination j is
    number `within[j]` of run `run_of[j]`), so ranks are counted per run, then spread per destination.
    `group_ports` is the port of every group element (groups' channels in port order).
    """
    n, hosts = run_cells.shape[0], run_of.shape[0]
    if groups.num_groups == 0:
        return np.zeros((n, hosts), dtype=np.int32)
    valid = run_cells >= 0
    safe = np.maximum(run_cells, 0)
    local = np.where(valid, groups.local[safe], -1)
    # int16 keys sort by radix (stable and linear); wider only for rows with >32k groups.
    key = local.astype(np.int16) if groups.local.max(initial=0) < 32_000 else local
    order = np.argsort(key, axis=1, kind="stable")
    ordered = np.take_along_axis(key, order, axis=1)
    length = run_length[order]
    before = np.cumsum(length, axis=1) - length  # destinations in earlier runs, any group
    boundary = np.ones(ordered.shape, dtype=bool)
    boundary[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    first = np.maximum.accumulate(np.where(boundary, np.arange(ordered.shape[1]), 0), axis=1)
    run_rank = np.empty(ordered.shape, dtype=np.int32)  # destinations in earlier runs of the same group
    np.put_along_axis(run_rank, order, before - np.take_along_axis(before, first, axis=1), axis=1)
    # Per destination, in int32 (half the memory traffic of int64 over [n, H]).
    # Cells without a group point at the trailing 0 of group_ports (size 1: always that slot).
    size = np.where(valid, np.maximum(groups.sizes[safe], 1), 1).astype(np.int32)
    offset = np.where(valid, groups.offsets[safe], group_ports.shape[0] - 1).astype(np.int32)
    if (run_length == run_length[0]).all():  # equal runs (generated fabrics): broadcast, no gathers
        within_run = np.arange(run_length[0], dtype=np.int32)
        slot = offset[:, :, None] + (run_rank[:, :, None] + within_run) % size[:, :, None]
        return group_ports[slot.reshape(n, hosts)]
    slot = offset[:, run_of] + (run_rank[:, run_of] + within) % size[:, run_of]
    return group_ports[slot]


def _greedy_row(groups: GroupTable, cells: np.ndarray, channel_port: np.ndarray) -> np.ndarray:
    """Ports [H] of one row with overlapping groups, run by run (cells in routing order)."""
    out = np.zeros(cells.shape[0], dtype=np.int64)
    counts = np.zeros(groups.layout.padded.shape[1], dtype=np.int64)
    edges = np.flatnonzero(np.r_[True, cells[1:] != cells[:-1], True])
    for lo, hi in zip(edges[:-1].tolist(), edges[1:].tolist(), strict=True):
        gid = int(cells[lo])
        if gid < 0:
            continue
        first, last = int(groups.offsets[gid]), int(groups.offsets[gid + 1])
        columns, ports = groups.columns[first:last], channel_port[groups.channels[first:last]]
        m = hi - lo
        if columns.shape[0] == 1:
            counts[columns[0]] += m
            out[lo:hi] = ports[0]
            continue
        chosen = water_fill(counts[columns], m)
        out[lo:hi] = ports[chosen]
        counts[columns] += np.bincount(chosen, minlength=columns.shape[0])
    return out


def balanced_lft(
    groups: GroupTable,
    group_ids: np.ndarray,
    rows: np.ndarray,
    host_class: np.ndarray,
    routing_order_hosts: np.ndarray,
    channel_port: np.ndarray,
    deliver_port: Callable[[np.ndarray, np.ndarray], np.ndarray],
) -> np.ndarray:
    """LFT ports [len(rows), H] of the given rows.

    `group_ids` [R, C]; `host_class` [H]; `routing_order_hosts` hosts in routing_order();
    `deliver_port(rows, hosts)` gives the port where a row delivers straight to the host (DELIVER cells).
    """
    hosts = host_class.shape[0]
    out = np.zeros((rows.shape[0], hosts), dtype=np.int64)
    if group_ids.shape[1] == 0:  # no host is cabled to a switch: nothing to route
        return out
    ordered_class = host_class[routing_order_hosts]
    populated = np.flatnonzero(np.bincount(host_class[host_class >= 0], minlength=group_ids.shape[1]))
    # Runs of consecutive destinations (in routing order) of one class: a run has one group per row.
    starts = np.flatnonzero(np.r_[True, ordered_class[1:] != ordered_class[:-1]])
    run_length = np.diff(np.r_[starts, hosts])
    run_class = ordered_class[starts]
    run_of = np.repeat(np.arange(starts.shape[0]), run_length).astype(np.int32)
    within = (np.arange(hosts) - starts[run_of]).astype(np.int32)
    # Port of every group element, plus a trailing 0 that cells without a group point at.
    group_ports = np.append(channel_port[groups.channels], 0).astype(np.int32)
    identity_order = bool(np.array_equal(routing_order_hosts, np.arange(hosts)))
    for lo in range(0, rows.shape[0], _ROWS_PER_CHUNK):
        chunk = rows[lo : lo + _ROWS_PER_CHUNK]
        by_class = group_ids[chunk]
        run_cells = np.where(run_class >= 0, by_class[:, np.maximum(run_class, 0)], -1)
        disjoint = _disjoint(groups, by_class[:, populated], chunk)
        ports = np.zeros((chunk.shape[0], hosts), dtype=np.int32)
        if disjoint.any():
            ports[disjoint] = _round_robin(
                groups, run_cells[disjoint], run_length, run_of, within, group_ports
            )
        for i in np.flatnonzero(~disjoint).tolist():
            ports[i] = _greedy_row(groups, run_cells[i][run_of], channel_port)
        # Rows cabled to the destination deliver to it: expand those (few) runs to destinations.
        row, run = np.nonzero(run_cells == DELIVER)
        if row.size:
            row = np.repeat(row, run_length[run])
            column = np.repeat(starts[run], run_length[run])
            column += np.arange(column.shape[0]) - np.repeat(
                np.cumsum(run_length[run]) - run_length[run], run_length[run]
            )
            ports[row, column] = deliver_port(chunk[row], routing_order_hosts[column])
        if identity_order:
            out[lo : lo + chunk.shape[0]] = ports
        else:
            out[lo : lo + chunk.shape[0], routing_order_hosts] = ports
    return out
