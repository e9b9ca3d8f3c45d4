"""A running subnet manager's sweep: after links change, keep every forwarding entry still valid.

A subnet manager that is already running does not route a changed fabric from scratch. OpenSM 3.3,
after a trap (a port went down) sweeps the fabric again and, for minhop and updn, recomputes the
hop tables and then each switch's LFT in its routing order with the entries already programmed in
hand (`osm_switch_recommend_path`, `osm_ucast_mgr.c`): an entry whose port is still up and still
leads to the destination on a best path the engine allows (its hop count through that port is the
least) is kept; only the others are chosen again, each taking the allowed port with the fewest
routes so far, lowest port on a tie, where "routes so far" counts the kept entries as well. So a
failure moves only the routes it must.

`sweep` applies that rule to the twin's tables. Where OpenSM ignores the programmed entries, so does
the twin, and the sweep equals a fresh routing:

- a link that came up: its ports are in state INIT, so OpenSM ignores the existing LFTs
  (`ignore_existing_lfts`, osm_port_info_rcv.c) and routes everything again;
- ftree, which writes whole tables from its own walk each sweep (when the changed fabric is no
  longer a fat-tree, OpenSM falls back to minhop, which keeps what it can of ftree's entries);
- the `file` engine, whose tables are the dump's.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np

from services.common.snapshot import RouteTable
from services.topology.fabric import Fabric
from services.topology.routing.classbased import ClassEngine, ClassState
from services.topology.routing.groups import GroupTable
from services.topology.routing.routes import Routes

__all__ = ["REROUTE_MODES", "keep_valid_entries", "reroute", "sweep"]

REROUTE_MODES = ("incremental", "fresh")  # a running subnet manager's sweep, or routing from scratch


def reroute(engine: Any, fabric: Fabric, previous: Routes, mode: str = "incremental") -> Routes:
    """Routes after link states changed from those of `previous`: as a running subnet manager sweeps
    (`incremental`, `sweep`), or as if routed from scratch (`fresh`, `engine.reroute`)."""
    if mode == "fresh":
        return engine.reroute(fabric, previous)
    return sweep(engine, fabric, previous)


def sweep(engine: Any, fabric: Fabric, previous: Routes) -> Routes:
    """`engine`'s routes after a sweep of a running subnet manager (see the module docstring)."""
    started = time.perf_counter_ns()
    fresh = engine.reroute(fabric, previous)
    old, new = previous.state, fresh.state
    if not isinstance(old, ClassState) or not isinstance(new, ClassState) or fresh.engine_used == "ftree":
        return fresh
    if (new.graph.usable_link & ~old.graph.usable_link).any():
        return fresh
    # Rows whose groups came out the same keep every entry (each is still in its group): only the
    # others are looked at.
    if fresh.group_lineage is previous.group_lineage:  # group ids mean the same groups in both
        regrouped = ClassEngine.changed_rows(old, new, previous.table.group_ids, fresh.table.group_ids, set())
    else:  # routed anew (other roots, a fallback): look at every row
        regrouped = np.arange(new.layout.num_rows)
    lft = keep_valid_entries(new, fresh.table, previous.table.lft_ports, regrouped)
    moved = regrouped[(lft[regrouped] != previous.table.lft_ports[regrouped]).any(axis=1)]
    changed = None if fresh.changed_rows is None else np.union1d(fresh.changed_rows, moved)
    return dataclasses.replace(
        fresh,
        table=dataclasses.replace(fresh.table, lft_ports=lft.astype(fresh.table.lft_ports.dtype)),
        compute_ns=time.perf_counter_ns() - started,
        incremental=True,
        changed_rows=changed,
        kept_entries=not np.array_equal(lft, fresh.table.lft_ports),
        _lookup=None,
    )


def keep_valid_entries(
    state: ClassState, table: RouteTable, previous_lft: np.ndarray, rows: np.ndarray
) -> np.ndarray:
    """LFT ports [R, H]: `previous_lft` where its port is in the entry's new equal-cost group, the
    other entries chosen again by OpenSM's balancing (kept entries counted); delivery and unrouted
    entries as `table` (the fresh routing) has them. Only `rows` are looked at: every other row keeps
    `previous_lft` whole (its groups did not change)."""
    out = previous_lft.astype(np.int64)
    host_class = state.classes.host_class
    hosts = host_class.shape[0]
    if table.group_ids.shape[1] == 0 or hosts == 0:
        return out
    groups = state.groups
    masks = groups.masks()
    columns = groups.layout.padded.shape[1]
    order = state.routing_order_hosts
    rows = rows[state.layout.is_switch_row[rows]]
    fresh = table.lft_ports
    for lo in range(0, rows.shape[0], 256):
        chunk = rows[lo : lo + 256]
        cells = np.where(host_class >= 0, table.group_ids[chunk][:, np.maximum(host_class, 0)], -1)
        old = previous_lft[chunk].astype(np.int64)
        column = state.layout.port_columns(state.graph, chunk, old)
        grouped = cells >= 0
        safe = np.maximum(cells, 0)
        col = np.maximum(column, 0)
        bit = (
            masks[safe, np.minimum(col // 64, masks.shape[1] - 1)] >> (col % 64).astype(np.uint64)
        ) & np.uint64(1)
        keep = grouped & (column >= 0) & (bit == 1)
        out[chunk] = np.where(keep, old, fresh[chunk])
        for i in np.flatnonzero((grouped & ~keep).any(axis=1)).tolist():
            out[chunk[i]] = _rebalance(
                groups,
                state.graph.port,
                cells[i][order],
                keep[i][order],
                column[i][order],
                out[chunk[i]][order],
                columns,
            )[np.argsort(order)]
    return out


def _rebalance(
    groups: GroupTable,
    channel_port: np.ndarray,
    cells: np.ndarray,
    keep: np.ndarray,
    kept_column: np.ndarray,
    ports: np.ndarray,
    columns: int,
) -> np.ndarray:
    """One row in routing order: kept entries stay and count; each other grouped entry takes the
    group's column with the fewest routes so far (the lowest on a tie)."""
    counts = np.zeros(columns, dtype=np.int64)
    out = ports.copy()
    free = np.flatnonzero((cells >= 0) & ~keep)
    counted = 0
    for position in free.tolist():
        held = kept_column[counted:position][keep[counted:position]]
        if held.size:
            counts += np.bincount(held, minlength=columns)
        counted = position
        gid = int(cells[position])
        first, last = int(groups.offsets[gid]), int(groups.offsets[gid + 1])
        members = groups.columns[first:last]
        best = int(np.argmin(counts[members]))
        counts[members[best]] += 1
        out[position] = channel_port[groups.channels[first + best]]
    return out
