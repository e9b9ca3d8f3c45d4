"""What minhop, updn and ftree share: route per destination class, reroute only what must change.

An engine built on `ClassEngine` says three things: the per-class state it keeps (distances, or hop
counts with up/down modes), which layout columns are candidates for a block of (rows, classes), and
which classes a channel coming *up* can affect. The pipeline does the rest, for a full computation
and for an incremental reroute after links change:

- a channel going DOWN matters only to the classes whose group at its source contains it. If that
  group had other members, only that one row's groups change (distances elsewhere are untouched:
  the node still has an equally good next hop); if it was the only member, the class is recomputed;
- a channel coming UP matters only to classes for which it offers an equal or better next hop
  (`up_effects`): equal adds to one row's group, better recomputes the class;
- a host link changes that host's class (and, for a multi-homed host, its own row);
- rows whose group toward some destination changed get their LFT recomputed whole (the balancing
  depends on every destination of the row), every other row keeps its LFT.

The result equals a full recomputation entry for entry (tests check it); `Routes.changed_rows`
says which rows were recomputed.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np

from services.common.snapshot import NO_ROUTE, RouteTable
from services.topology.fabric import Fabric
from services.topology.routing.balance import routing_order
from services.topology.routing.classes import DestinationClasses
from services.topology.routing.graph import ChannelGraph, RowLayout
from services.topology.routing.groups import GroupTable
from services.topology.routing.routes import Routes

__all__ = ["ClassEngine", "ClassState", "DeliveryPorts", "EngineRefused"]


class EngineRefused(Exception):
    """An engine cannot route this fabric; OpenSM then routes with its fallback engine, minhop, and
    so does the twin (`ClassEngine` catches this). `reason` says why, in OpenSM's words where it logs
    any."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class DeliveryPorts:
    """The lowest usable port from a switch to a host it is cabled to."""

    def __init__(self, graph: ChannelGraph, layout: RowLayout, host_nodes: np.ndarray) -> None:
        into = np.flatnonzero(graph.usable & graph.is_host[graph.target] & ~graph.is_host[graph.source])
        keys = graph.target[into] * graph.num_nodes + graph.source[into]
        order = np.lexsort((graph.port[into], keys))
        keys, ports = keys[order], graph.port[into][order]
        first = np.ones(keys.shape[0], dtype=bool)
        first[1:] = keys[1:] != keys[:-1]
        self._keys, self._ports = keys[first], ports[first]
        self._n, self._row_nodes, self._host_nodes = graph.num_nodes, layout.row_nodes, host_nodes

    def __call__(self, rows: np.ndarray, hosts: np.ndarray) -> np.ndarray:
        key = self._host_nodes[hosts].astype(np.int64) * self._n + self._row_nodes[rows]
        if not self._keys.size:
            return np.zeros(key.shape, dtype=np.int64)
        at = np.minimum(np.searchsorted(self._keys, key), self._keys.shape[0] - 1)
        return np.where(self._keys[at] == key, self._ports[at], 0)


@dataclasses.dataclass(eq=False)
class ClassState:
    """What a class-based engine keeps between reroutes of one fabric."""

    graph: ChannelGraph
    layout: RowLayout
    classes: DestinationClasses
    per_class: dict[str, np.ndarray]  # arrays [C, S]
    extra: Any  # engine-wide state (updn: ranks), unchanged by an incremental reroute
    groups: GroupTable
    routing_order_hosts: np.ndarray  # host indices in OpenSM's routing order (balance.routing_order)
    host_nodes: np.ndarray

    def delivery(self) -> DeliveryPorts:
        return DeliveryPorts(self.graph, self.layout, self.host_nodes)


class ClassEngine:
    """Base of the class-based engines (see the module docstring); subclasses fill in the hooks."""

    name = ""
    # True for engines whose per-class state a link change can alter anywhere (updn's hop tables
    # depend on the order OpenSM walks them): a reroute recomputes every class, and keeps the LFT
    # of every row whose groups came out the same.
    recompute_every_class = False

    # -- hooks ----------------------------------------------------------------------------------

    def engine_state(self, fabric: Fabric, graph: ChannelGraph, layout: RowLayout) -> Any:
        """Engine-wide state; a reroute whose engine state differs recomputes everything."""
        return None

    def same_engine_state(self, old: Any, new: Any) -> bool:
        return True

    def class_state(
        self, state: ClassState, columns: np.ndarray
    ) -> dict[str, np.ndarray]:  # pragma: no cover - abstract
        """Per-class arrays [len(columns), S] for the given classes over `state.graph`."""
        raise NotImplementedError

    def candidates(
        self, state: ClassState, lo: int, hi: int, columns: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - abstract
        """(valid [hi-lo, W, c], deliver [hi-lo, c]) for rows lo..hi-1 toward the given classes."""
        raise NotImplementedError

    def up_effects(
        self, state: ClassState, channel: int
    ) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover
        """For a switch channel that became usable: ([C] classes to recompute, [C] classes where it
        only joins its source row's group)."""
        raise NotImplementedError

    def lft(
        self, state: ClassState, group_ids: np.ndarray, rows: np.ndarray
    ) -> np.ndarray:  # pragma: no cover
        """LFT ports [len(rows), H]."""
        raise NotImplementedError

    # -- the pipeline ---------------------------------------------------------------------------

    def roots(self, extra: Any) -> Any:
        """The engine state's ranking (roots, how they were found), if it has one."""
        return None

    def compute(self, fabric: Fabric) -> Routes:
        """Routes of `fabric` over its usable links, everything computed afresh (minhop's, saying why,
        when the engine refuses the fabric)."""
        started = time.perf_counter_ns()
        graph = ChannelGraph.of(fabric)
        layout = RowLayout.of(fabric, graph)
        try:
            extra = self.engine_state(fabric, graph, layout)
        except EngineRefused as refusal:
            return self._fall_back(fabric, None, refusal.reason)
        classes = DestinationClasses.of(fabric, graph)
        state = ClassState(
            graph=graph,
            layout=layout,
            classes=classes,
            per_class={},
            extra=extra,
            groups=GroupTable(layout),
            routing_order_hosts=routing_order(fabric, graph),
            host_nodes=fabric.host_nodes.astype(np.int64),
        )
        columns = np.arange(classes.num_classes)
        state.per_class = self.class_state(state, columns)
        group_ids = np.full((layout.num_rows, classes.num_classes), NO_ROUTE, dtype=np.int32)
        for lo, hi in layout.chunks(classes.num_classes):
            valid, deliver = self.candidates(state, lo, hi, columns)
            group_ids[lo:hi] = state.groups.assign(lo, valid, deliver)
        rows = np.arange(layout.num_rows)
        lft = self.lft(state, group_ids, rows)
        return self._routes(fabric, state, group_ids, lft, started, incremental=False, changed=None)

    def reroute(self, fabric: Fabric, previous: Routes) -> Routes:
        """Routes after link states changed from those `previous` was computed for."""
        started = time.perf_counter_ns()
        old: ClassState | None = previous.state if isinstance(previous.state, ClassState) else None
        if old is None or previous.engine_used != self.name or old.graph.num_nodes != fabric.num_nodes:
            if old is not None and previous.engine_used != self.name and self.name != "minhop":
                try:  # routed by the fallback before: route by this engine again if it can
                    self.engine_state(fabric, ChannelGraph.of(fabric), old.layout)
                except EngineRefused as refusal:
                    return self._fall_back(fabric, previous, refusal.reason)
            return self.compute(fabric)
        graph = ChannelGraph.of(fabric)
        changed_links = np.flatnonzero(graph.usable_link != old.graph.usable_link)
        if changed_links.size == 0 and not previous.kept_entries:
            return dataclasses.replace(
                previous,
                compute_ns=time.perf_counter_ns() - started,
                incremental=True,
                state=dataclasses.replace(old, graph=graph),
                changed_rows=np.zeros(0, dtype=np.int64),
                _lookup=None,
            )
        try:
            extra = self.engine_state(fabric, graph, old.layout)
        except EngineRefused as refusal:
            return self._fall_back(fabric, previous, refusal.reason)
        if not self.same_engine_state(old.extra, extra):
            return self.compute(fabric)
        layout = old.layout
        classes = DestinationClasses.of(fabric, graph, previous=old.classes)
        old_ids = previous.table.group_ids
        c_old, c_new = old.classes.num_classes, classes.num_classes
        recompute = np.zeros(c_new, dtype=bool)
        recompute[c_old:] = True
        mask_rows: set[int] = set()
        lft_rows: set[int] = set()
        probe = dataclasses.replace(old, graph=graph)  # old per-class state over the new graph
        for link in changed_links.tolist():
            a, b = int(fabric.link_a[link]), int(fabric.link_b[link])
            if graph.is_host[a] or graph.is_host[b]:
                host, switch = (a, b) if graph.is_host[a] else (b, a)
                for node in (host, switch):
                    if layout.node_row[node] >= 0:
                        (mask_rows if node == host else lft_rows).add(int(layout.node_row[node]))
                continue
            for channel in (2 * link, 2 * link + 1):
                row = int(layout.node_row[graph.source[channel]])
                if graph.usable[channel]:
                    whole, joins = self.up_effects(probe, channel)
                    recompute[:c_old] |= whole
                    if joins.any():
                        mask_rows.add(row)
                    continue
                ids = old_ids[row]
                contains = np.isin(ids, self._groups_with(old.groups, channel))
                single = contains & (old.groups.sizes[np.maximum(ids, 0)] == 1)
                recompute[:c_old] |= single
                if (contains & ~single).any():
                    mask_rows.add(row)
        if self.recompute_every_class:
            recompute[:] = True
        order = routing_order(fabric, graph)
        if not np.array_equal(order, old.routing_order_hosts):  # a host cable moved OpenSM's walk
            lft_rows.update(range(layout.num_rows))  # every switch balances over the new order
        if previous.kept_entries:  # its tables kept entries of earlier ones: balance every row afresh
            lft_rows.update(range(layout.num_rows))
        state = dataclasses.replace(
            old,
            graph=graph,
            classes=classes,
            extra=extra,
            groups=old.groups.extended(),
            routing_order_hosts=order,
        )
        columns = np.flatnonzero(recompute)
        if self.recompute_every_class:  # shapes follow the link states: nothing of the old to merge
            state.per_class = self.class_state(state, columns)
        else:
            state.per_class = self._merge_class_state(old, state, columns, c_new)
        group_ids = np.full((layout.num_rows, c_new), NO_ROUTE, dtype=np.int32)
        group_ids[:, :c_old] = old_ids
        if columns.size:
            for lo, hi in layout.chunks(columns.shape[0]):
                valid, deliver = self.candidates(state, lo, hi, columns)
                group_ids[lo:hi, columns] = state.groups.assign(lo, valid, deliver)
        all_columns = np.arange(c_new)
        for row in sorted(mask_rows):
            valid, deliver = self.candidates(state, row, row + 1, all_columns)
            group_ids[row] = state.groups.assign(row, valid, deliver)[0]
        changed = self.changed_rows(old, state, old_ids, group_ids, lft_rows)
        lft = previous.table.lft_ports.astype(np.int64)
        if changed.size:
            lft[changed] = self.lft(state, group_ids, changed)
        return self._routes(fabric, state, group_ids, lft, started, incremental=True, changed=changed)

    # -- helpers --------------------------------------------------------------------------------

    def _fall_back(self, fabric: Fabric, previous: Routes | None, reason: str) -> Routes:
        """minhop's routes (rerouted from `previous` where that was minhop's too), as OpenSM falls back."""
        from services.topology.routing.minhop import MinHop  # minhop is itself a ClassEngine

        minhop = MinHop()
        routes = minhop.reroute(fabric, previous) if previous is not None else minhop.compute(fabric)
        return dataclasses.replace(routes, engine=self.name, engine_used=minhop.name, fallback_reason=reason)

    @staticmethod
    def _groups_with(groups: GroupTable, channel: int) -> np.ndarray:
        """Ids of the groups that contain `channel`."""
        elements = np.flatnonzero(groups.channels == channel)
        return np.searchsorted(groups.offsets, elements, side="right") - 1

    def _merge_class_state(
        self, old: ClassState, state: ClassState, columns: np.ndarray, c_new: int
    ) -> dict[str, np.ndarray]:
        c_old = old.classes.num_classes
        fresh = self.class_state(state, columns) if columns.size else {}
        merged = {}
        for name, values in old.per_class.items():
            out = np.empty((c_new, *values.shape[1:]), dtype=values.dtype)
            out[:c_old] = values
            if columns.size:
                out[columns] = fresh[name]
            merged[name] = out
        return merged

    @staticmethod
    def changed_rows(
        old: ClassState, state: ClassState, old_ids: np.ndarray, new_ids: np.ndarray, extra: set[int]
    ) -> np.ndarray:
        """Rows whose group toward some destination host differs (plus `extra`)."""
        c_old = old_ids.shape[1]
        populated = np.flatnonzero(
            np.bincount(state.classes.host_class[state.classes.host_class >= 0], minlength=c_old)[:c_old] > 0
        )
        changed = (old_ids[:, populated] != new_ids[:, populated]).any(axis=1)
        old_class, new_class = old.classes.host_class, state.classes.host_class
        moved = np.flatnonzero(old_class != new_class)
        if moved.size:
            before = np.where(old_class[moved] >= 0, old_ids[:, np.maximum(old_class[moved], 0)], NO_ROUTE)
            after = np.where(new_class[moved] >= 0, new_ids[:, np.maximum(new_class[moved], 0)], NO_ROUTE)
            changed |= (before != after).any(axis=1)
        changed[list(extra)] = True
        return np.flatnonzero(changed)

    def _routes(
        self,
        fabric: Fabric,
        state: ClassState,
        group_ids: np.ndarray,
        lft: np.ndarray,
        started: int,
        *,
        incremental: bool,
        changed: np.ndarray | None,
    ) -> Routes:
        port_type = np.uint8 if int(state.graph.port.max(initial=0)) <= 255 else np.uint16
        table = RouteTable(
            node_row=state.layout.node_row,
            dest_class=state.classes.host_class,
            group_ids=group_ids,
            group_offsets=state.groups.offsets,
            group_channels=state.groups.channels.astype(np.int32),
            lft_ports=lft.astype(port_type),
        )
        ranking = self.roots(state.extra)
        return Routes(
            engine=self.name,
            table=table,
            roots=None if ranking is None else ranking.roots,
            roots_source="" if ranking is None else ranking.source,
            unreachable_pairs=_unreachable_pairs(state, group_ids),
            compute_ns=time.perf_counter_ns() - started,
            incremental=incremental,
            state=state,
            changed_rows=changed,
            group_lineage=state.groups.lineage,
        )


def _unreachable_pairs(state: ClassState, group_ids: np.ndarray) -> int:
    """Ordered host pairs (src != dst) without a route, counted per (source row, class)."""
    graph, layout, classes = state.graph, state.layout, state.classes
    hosts = state.host_nodes.shape[0]
    source_row = layout.node_row[state.host_nodes].astype(np.int64)
    up = np.flatnonzero(graph.usable & graph.is_host[graph.source] & ~graph.is_host[graph.target])
    rowless = layout.node_row[graph.source[up]] < 0
    node_host = np.full(graph.num_nodes, -1, dtype=np.int64)
    node_host[state.host_nodes] = np.arange(hosts)
    source_row[node_host[graph.source[up][rowless]]] = layout.node_row[graph.target[up][rowless]]
    reach = group_ids != NO_ROUTE
    weight = np.bincount(source_row[source_row >= 0], minlength=layout.num_rows)
    per_class = weight @ reach.astype(np.int64) if reach.size else np.zeros(classes.num_classes, np.int64)
    reachable = int((per_class * classes.size).sum())
    own = classes.host_class.astype(np.int64)
    ok = (source_row >= 0) & (own >= 0)
    reachable -= int(reach[source_row[ok], own[ok]].sum())
    return hosts * (hosts - 1) - reachable
