"""The topology service's core: fabrics in the store, routed fabrics cached in memory, events out.

Generation, import, routing and snapshots are CPU-bound and SQL is blocking, so all of them run in
threads (`asyncio.to_thread`): numpy releases the GIL in its kernels, which keeps the event loop
answering health checks and other calls. A fabric beyond the service's `FabricLimits` is refused
before any of that work starts (limits.py), which bounds how long any one step can take; a call that
is cancelled (or a server that stops) while a step runs lets that step finish in its thread but starts
no further step, so nothing half-made is stored.
Routed fabrics are cached by (fabric id, routing_version); a restart recomputes routes from the
stored engine name, root GUIDs, link states and (for `file`) the stored dump, and puts back the LFTs
a running subnet manager's sweep kept (routing/sweep.py) where they differ from a fresh routing.
Changes to one fabric (link state, routes, updates, deletion) are serialised by a per-fabric lock,
persisted, then published to WatchFabric subscribers. `routing_version` rises whenever a snapshot
would differ: a forwarding table changed, or a link's state or bit error rate did. What-if snapshots
(links DOWN, nothing stored) are computed by what_if.py and cached there.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import datetime as dt
import functools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from services.common.errors import AlreadyExists, FailedPrecondition, InvalidArgument
from services.common.snapshot import FabricSnapshot
from services.topology.events import EventKind, FabricEvent, FabricEvents
from services.topology.fabric import Fabric, LinkState
from services.topology.lfts_dump import FORMAT_NAME as LFTS_FORMAT
from services.topology.lfts_dump import write_lfts_dump
from services.topology.limits import DEFAULT_LIMITS, FabricLimits
from services.topology.routing import FILE_ENGINE, ROOTED_ENGINES, Routes, diff_routes, engine_named
from services.topology.routing.balance import node_guid_keys
from services.topology.routing.routes import lft_changes
from services.topology.routing.sweep import REROUTE_MODES, reroute
from services.topology.routing.updn import check_roots_reach, root_nodes
from services.topology.snapshots import build_snapshot
from services.topology.specs import from_spec, normalise_spec
from services.topology.store import FabricRecord, RoutingOutcome, TopologyStore
from services.topology.what_if import WhatIfCache, WhatIfSnapshot, down_link_set, reroute_with_links_down

__all__ = ["FabricRegistry", "LinkChange", "RoutedFabric", "RoutingChange"]

_NEEDS_DUMP = "the file engine needs a dump: use ComputeRoutes with lfts_dump"


@dataclasses.dataclass(frozen=True, eq=False)
class RoutedFabric:
    """A fabric with the routes of one routing version (never mutated: a change makes a new one)."""

    record: FabricRecord
    fabric: Fabric
    routes: Routes

    @functools.cached_property
    def snapshot_bytes(self) -> bytes:
        """The serialized FabricSnapshot of this version (built once)."""
        return self.snapshot().to_proto().SerializeToString()

    def snapshot(self) -> FabricSnapshot:
        return build_snapshot(
            self.fabric, self.routes, f"fabrics/{self.record.id}", self.record.routing_version
        )


@dataclasses.dataclass(frozen=True)
class RoutingChange:
    """What a routing computation did."""

    routed: RoutedFabric
    changed_entries: int  # entries whose LFT port or equal-cost set changed
    changed_switches: int
    mode: str = "full"  # "full" (first routing, ComputeRoutes), "incremental" or "fresh"
    # switches whose LFT entries changed (nodes, most changed first) and how many changed at each
    lft_switches: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    lft_counts: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    @property
    def changed_lft_entries(self) -> int:
        return int(self.lft_counts.sum())

    @property
    def routes(self) -> Routes:
        return self.routed.routes


@dataclasses.dataclass(frozen=True)
class LinkChange:
    """What a SetLinkState did: the link index after the change and the reroute."""

    link: int
    routing: RoutingChange


_VERSIONS_PER_FABRIC = 4  # routed versions of one fabric held for pinned runs (the current one included)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _check_engine(engine: str, field: str = "routing_engine") -> None:
    if engine == FILE_ENGINE:
        raise InvalidArgument(field, _NEEDS_DUMP)
    engine_named(engine, field)


def _check_routing(engine: str, roots: Sequence[int], reroute_mode: str) -> None:
    """The routing settings before any heavy work: roots only for updn and ftree, a known mode."""
    if roots and engine not in ROOTED_ENGINES:
        raise InvalidArgument(
            "routing_roots", f"only {' and '.join(ROOTED_ENGINES)} take root switches, not {engine}"
        )
    if reroute_mode not in REROUTE_MODES:
        raise InvalidArgument(
            "reroute", f"unknown reroute mode {reroute_mode!r}; known: {', '.join(REROUTE_MODES)}"
        )


def _route_new(fabric: Fabric, engine: str, roots: Sequence[int] = ()) -> Routes:
    fabric.validate()
    if roots:
        check_roots_reach(fabric, root_nodes(fabric, roots))
    return engine_named(engine, roots=roots).compute(fabric)


def outcome_of(fabric: Fabric, routes: Routes) -> RoutingOutcome:
    """How `routes` were made, for the store (roots by GUID)."""
    guids = node_guid_keys(fabric)
    roots = () if routes.roots is None else tuple(int(guids[n]) for n in routes.roots.tolist())
    return RoutingOutcome(routes.engine_used, routes.fallback_reason, roots, routes.roots_source)


def _change(
    old_fabric: Fabric, old: Routes, routed: RoutedFabric, mode: str, rows: np.ndarray | None = None
) -> RoutingChange:
    """The RoutingChange from `old` to `routed`'s routes (`rows`: the only rows that may differ)."""
    entries, switches = diff_routes(old_fabric, old, routed.fabric, routed.routes, rows)
    nodes, counts = lft_changes(routed.fabric, old, routed.routes, rows)
    return RoutingChange(routed, entries, switches, mode, nodes, counts)


class FabricRegistry:
    """Create, import, read, route, change and delete fabrics; `cache_size` routed fabrics in memory."""

    def __init__(
        self,
        store: TopologyStore,
        cache_size: int = 4,
        events: FabricEvents | None = None,
        limits: FabricLimits = DEFAULT_LIMITS,
    ) -> None:
        self.store = store
        self.limits = limits
        self.events = events or FabricEvents()
        self._cache: collections.OrderedDict[tuple[str, int], RoutedFabric] = collections.OrderedDict()
        self._cache_size = cache_size
        self._locks: dict[str, asyncio.Lock] = collections.defaultdict(asyncio.Lock)
        self._what_ifs = WhatIfCache()

    def _remember(self, routed: RoutedFabric) -> RoutedFabric:
        """Keep a routed version: the last `cache_size` fabrics' current routes, and for each the
        versions before it while room allows (runs pinned to them keep them warm), at most
        `_VERSIONS_PER_FABRIC` per fabric."""
        fabric_id = routed.record.id
        key = (fabric_id, routed.record.routing_version)
        self._cache[key] = routed
        self._cache.move_to_end(key)
        versions = [k for k in self._cache if k[0] == fabric_id]
        for old in sorted(versions, key=lambda k: k[1])[: max(0, len(versions) - _VERSIONS_PER_FABRIC)]:
            del self._cache[old]
        while len(self._cache) > self._cache_size * _VERSIONS_PER_FABRIC:
            self._cache.popitem(last=False)
        return routed

    def _forget(self, fabric_id: str) -> None:
        for key in [key for key in self._cache if key[0] == fabric_id]:
            del self._cache[key]

    # -- creating -------------------------------------------------------------------------------

    async def create(
        self,
        fabric_id: str,
        display_name: str,
        spec: Mapping[str, Any],
        engine: str,
        labels: Mapping[str, str],
        *,
        roots: Sequence[int] = (),
        reroute_mode: str = "incremental",
    ) -> RoutedFabric:
        """Generate, route and store a fabric (routing version 1); AlreadyExists if the id is taken,
        ResourceExhausted if it is beyond the limits (before it is built)."""
        spec = normalise_spec(spec)
        _check_engine(engine)  # before the heavy work
        _check_routing(engine, roots, reroute_mode)
        self.limits.admit_labels(labels)
        if await asyncio.to_thread(self.store.exists, fabric_id):
            raise AlreadyExists(f"fabrics/{fabric_id} already exists")
        fabric = await asyncio.to_thread(from_spec, spec, self.limits)
        return await self._add(
            fabric_id, display_name, fabric, engine, labels, spec=spec, roots=roots, reroute_mode=reroute_mode
        )

    async def import_(
        self,
        fabric_id: str,
        display_name: str,
        format: str,
        content: str,
        engine: str,
        *,
        default_link_speed_gbps: float,
        default_link_latency_ns: int,
        take_slower_end_on_speed_mismatch: bool = False,
        documents: list[tuple[str, str]] | None = None,
        archive: bytes = b"",
        port_speeds_gbps: Mapping[str, float] | None = None,
        roots: Sequence[int] = (),
        reroute_mode: str = "incremental",
    ) -> RoutedFabric:
        """Parse a dump (services.topology.formats), route and store it; nothing is stored on error."""
        from services.topology.formats import import_fabric  # the formats package loads its parsers lazily

        _check_engine(engine)
        _check_routing(engine, roots, reroute_mode)
        if await asyncio.to_thread(self.store.exists, fabric_id):
            raise AlreadyExists(f"fabrics/{fabric_id} already exists")
        fabric = await asyncio.to_thread(
            functools.partial(
                import_fabric,
                format,
                content,
                default_link_speed_gbps=default_link_speed_gbps,
                default_link_latency_ns=default_link_latency_ns,
                take_slower_end_on_speed_mismatch=take_slower_end_on_speed_mismatch,
                documents=documents,
                archive=archive,
                port_speeds_gbps=port_speeds_gbps,
                limits=self.limits,
            )
        )
        return await self._add(
            fabric_id,
            display_name,
            fabric,
            engine,
            {},
            imported_format=format,
            roots=roots,
            reroute_mode=reroute_mode,
        )

    async def _add(
        self,
        fabric_id: str,
        display_name: str,
        fabric: Fabric,
        engine: str,
        labels: Mapping[str, str],
        *,
        spec: dict[str, Any] | None = None,
        imported_format: str | None = None,
        roots: Sequence[int] = (),
        reroute_mode: str = "incremental",
    ) -> RoutedFabric:
        routes = await asyncio.to_thread(_route_new, fabric, engine, roots)
        now = _now()
        record = FabricRecord(
            id=fabric_id,
            display_name=display_name,
            spec=spec,
            imported_format=imported_format,
            labels=dict(labels),
            routing_engine=engine,
            routing_version=1,
            host_count=fabric.num_hosts,
            switch_count=fabric.num_switches,
            link_count=fabric.num_links,
            create_time=now,
            update_time=now,
            import_notes=list(fabric.import_notes),
            routing_roots=list(roots),
            reroute=reroute_mode,
            outcome=outcome_of(fabric, routes),
        )
        await asyncio.to_thread(self.store.add, record, fabric)
        return self._remember(RoutedFabric(record, fabric, routes))

    # -- reading --------------------------------------------------------------------------------

    async def get(self, fabric_id: str) -> FabricRecord:
        return await asyncio.to_thread(self.store.get, fabric_id)

    async def list(self, offset: int, limit: int) -> tuple[list[FabricRecord], bool]:
        """Up to `limit` records from `offset`, and whether more follow."""
        records = await asyncio.to_thread(self.store.list, offset, limit + 1)
        return records[:limit], len(records) > limit

    async def routed(self, fabric_id: str) -> RoutedFabric:
        """The fabric with its current routes: from the cache, else loaded and routed again."""
        record = await self.get(fabric_id)
        key = (fabric_id, record.routing_version)
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        async with self._locks[fabric_id]:
            record = await self.get(fabric_id)
            key = (fabric_id, record.routing_version)
            if key in self._cache:
                return self._cache[key]
            fabric = await asyncio.to_thread(self.store.load_fabric, fabric_id)
            dump = await asyncio.to_thread(self.store.routing_file, fabric_id)
            router = engine_named(record.routing_engine, lfts_dump=dump, roots=record.routing_roots)
            routes = await asyncio.to_thread(router.compute, fabric)
            kept = await asyncio.to_thread(self.store.stored_lft, fabric_id, record.routing_version)
            if kept is not None and kept.shape == routes.table.lft_ports.shape:  # a sweep kept entries
                table = dataclasses.replace(routes.table, lft_ports=kept.astype(routes.table.lft_ports.dtype))
                routes = dataclasses.replace(routes, table=table, kept_entries=True, _lookup=None)
            return self._remember(RoutedFabric(record, fabric, routes))

    async def routed_at(self, fabric_id: str, routing_version: int = 0) -> RoutedFabric:
        """The fabric with the routes of `routing_version` (0: the current ones); FailedPrecondition
        when that version is no longer held (the current one and the last few are)."""
        current = await self.routed(fabric_id)
        if routing_version in (0, current.record.routing_version):
            return current
        held = self._cache.get((fabric_id, routing_version))
        if held is None:
            versions = sorted(v for f, v in self._cache if f == fabric_id)
            raise FailedPrecondition(
                f"routing version {routing_version} of fabrics/{fabric_id} is no longer held (held: "
                f"{', '.join(map(str, versions))}; the current one is {current.record.routing_version})"
            )
        self._cache.move_to_end((fabric_id, routing_version))
        return held

    async def snapshot(
        self,
        fabric_id: str,
        down_links: Sequence[int] = (),
        *,
        routing_version: int = 0,
        up_links: Sequence[int] = (),
        routing_engine: str = "",
    ) -> WhatIfSnapshot:
        """The serialized snapshot of the routes of `routing_version` (0: the current ones); with
        `down_links` and/or `up_links`, a what-if snapshot: those links DOWN / repaired, rerouted as
        SetLinkState reroutes (timed), nothing stored (services/topology/what_if.py).
        InvalidArgument naming `down_links[i]` / `up_links[i]` for an index that is not a link."""
        current = await self.routed_at(fabric_id, routing_version)
        record = current.record
        engine = "" if routing_engine in ("", record.routing_engine) else routing_engine
        if engine == FILE_ENGINE:
            raise InvalidArgument(
                "routing_engine", "a what-if cannot route by a dump (FILE); import it instead"
            )
        if engine:
            engine_named(engine)  # InvalidArgument naming routing_engine for an unknown one
        if not down_links and not up_links and not engine:
            # Built once per routing version, in a thread: a k=48 snapshot is 100 MB of arrays.
            data = await asyncio.to_thread(lambda: current.snapshot_bytes)
            return WhatIfSnapshot(data, record.routing_version, 0.0)
        down = down_link_set(current.fabric, down_links)
        up = down_link_set(current.fabric, up_links, "up_links")
        both = sorted(set(down) & set(up))
        if both:
            raise InvalidArgument("up_links", f"link {both[0]} is also in down_links")

        async def reroute() -> WhatIfSnapshot:
            dump = None
            if not engine and record.routing_engine == FILE_ENGINE:
                dump = await asyncio.to_thread(self.store.routing_file, fabric_id)
            router = engine_named(
                engine or record.routing_engine,
                lfts_dump=dump,
                roots=record.routing_roots if (engine or record.routing_engine) in ROOTED_ENGINES else (),
            )
            return await asyncio.to_thread(
                functools.partial(
                    reroute_with_links_down,
                    current.fabric,
                    current.routes,
                    router,
                    down,
                    f"fabrics/{fabric_id}",
                    record.routing_version,
                    up,
                    from_scratch=bool(engine),
                    mode=record.reroute,
                )
            )

        return await self._what_ifs.get((fabric_id, record.routing_version, down, up, engine), reroute)

    async def export(self, fabric_id: str, format: str) -> str:
        """The fabric in a topology format (services.topology.formats), or its LFTs as an OpenSM dump."""
        routed = await self.routed(fabric_id)
        if format == LFTS_FORMAT:
            routes = routed.routes
            return await asyncio.to_thread(write_lfts_dump, routed.fabric, routes.lft_ports)
        from services.topology.formats import export_fabric

        return await asyncio.to_thread(export_fabric, routed.fabric, format)

    # -- changing -------------------------------------------------------------------------------

    async def delete(self, fabric_id: str) -> None:
        """Delete the fabric; its watchers get FABRIC_DELETED and their streams end."""
        async with self._locks[fabric_id]:
            await asyncio.to_thread(self.store.delete, fabric_id)
            self._forget(fabric_id)
            self._what_ifs.forget(fabric_id)
        self._locks.pop(fabric_id, None)
        self.events.publish(FabricEvent(EventKind.FABRIC_DELETED, fabric_id, _now()))

    async def compute_routes(
        self,
        fabric_id: str,
        engine: str | None,
        lfts_dump: str = "",
        *,
        roots: Sequence[int] | None = None,
        reroute_mode: str | None = None,
    ) -> RoutingChange:
        """Recompute every table from scratch (with another engine if given; `file` needs
        `lfts_dump`; with `roots` (updn/ftree root GUIDs, [] to detect them as OpenSM does) and
        `reroute_mode` replacing the fabric's where given).

        The routing version rises only if some table, the engine, the dump or a setting changed.
        """
        current = await self.routed(fabric_id)
        engine = engine or current.record.routing_engine
        if lfts_dump and engine != FILE_ENGINE:
            raise InvalidArgument("lfts_dump", f"only the file engine reads a dump, not {engine}")
        if roots is None:  # keep the fabric's roots while the engine takes them
            roots = current.record.routing_roots if engine in ROOTED_ENGINES else []
        _check_routing(engine, roots, reroute_mode or current.record.reroute)
        if roots:
            await asyncio.to_thread(check_roots_reach, current.fabric, root_nodes(current.fabric, roots))
        stored_dump = None
        if engine == FILE_ENGINE and not lfts_dump:
            stored_dump = await asyncio.to_thread(self.store.routing_file, fabric_id)
            if stored_dump is None:
                raise InvalidArgument("lfts_dump", _NEEDS_DUMP)
        router = engine_named(engine, lfts_dump=lfts_dump or stored_dump, roots=roots)
        async with self._locks[fabric_id]:
            current = await self.routed(fabric_id)
            routes = await asyncio.to_thread(router.compute, current.fabric)
            change = await asyncio.to_thread(
                _change,
                current.fabric,
                current.routes,
                RoutedFabric(current.record, current.fabric, routes),
                "full",
            )
            record = current.record
            settings = (list(roots), reroute_mode or record.reroute)
            if (
                change.changed_entries
                or change.changed_lft_entries
                or engine != record.routing_engine
                or lfts_dump
                or settings != (record.routing_roots, record.reroute)
            ):
                record = await asyncio.to_thread(
                    functools.partial(
                        self.store.set_routing,
                        fabric_id,
                        engine,
                        record.routing_version + 1,
                        _now(),
                        lfts_dump or None,
                        outcome=outcome_of(current.fabric, routes),
                        roots=settings[0],
                        reroute=settings[1],
                    )
                )
            change = dataclasses.replace(
                change, routed=self._remember(RoutedFabric(record, current.fabric, routes))
            )
        if record.routing_version != current.record.routing_version:
            self.events.publish(FabricEvent(EventKind.ROUTES_CHANGED, fabric_id, _now(), routing=change))
        return change

    async def update(self, fabric_id: str, changes: Mapping[str, Any]) -> FabricRecord:
        """Apply `display_name`, `labels` and/or `routing_engine` (which reroutes); the new record."""
        if "routing_engine" in changes:
            _check_engine(changes["routing_engine"], "fabric.routing_engine")
        if "labels" in changes:
            self.limits.admit_labels(changes["labels"], "fabric.labels")
        plain = {key: value for key, value in changes.items() if key in ("display_name", "labels")}
        if plain:
            await self.get(fabric_id)  # NotFound before anything changes
            async with self._locks[fabric_id]:
                record = await asyncio.to_thread(self.store.update_fabric, fabric_id, plain, _now())
                for key, routed in list(self._cache.items()):  # same routes, new display name / labels
                    if key == (fabric_id, record.routing_version):
                        self._cache[key] = dataclasses.replace(routed, record=record)
        if "routing_engine" in changes:
            await self.compute_routes(fabric_id, changes["routing_engine"])
        return await self.get(fabric_id)

    async def set_link_state(self, fabric_id: str, link: int, state: LinkState, ber: float) -> LinkChange:
        """Set one link's state (and bit error rate while DEGRADED), reroute incrementally, persist,
        and publish LINK_STATE_CHANGED then ROUTES_CHANGED. Setting the state it has changes nothing."""
        return LinkChange(link, await self.set_link_states(fabric_id, [(link, state, ber)]))

    async def set_link_states(
        self, fabric_id: str, changes: Sequence[tuple[int, LinkState, float]]
    ) -> RoutingChange:
        """Set several links' states at once: one reroute, one new routing version, one transaction;
        every link checked before anything changes. LINK_STATE_CHANGED for each link that changed,
        then one ROUTES_CHANGED. Links already in the asked state change nothing."""
        async with self._locks[fabric_id]:
            current = await self.routed(fabric_id)
            fabric = current.fabric
            seen: set[int] = set()
            for link, _, _ in changes:
                if not 0 <= link < fabric.num_links:
                    raise InvalidArgument("name", f"fabrics/{fabric_id} has no link {link}")
                if link in seen:
                    raise InvalidArgument("changes", f"fabrics/{fabric_id}/links/{link} is named twice")
                seen.add(link)
            states, bers = fabric.link_state.copy(), fabric.link_ber.copy()
            changed_links = []
            for link, state, ber in changes:
                ber = ber if state == LinkState.DEGRADED else 0.0
                if states[link] != state or bers[link] != ber:
                    states[link], bers[link] = state, ber
                    changed_links.append(link)
            if not changed_links:
                unchanged = dataclasses.replace(current.routes, compute_ns=0, incremental=True)
                return RoutingChange(dataclasses.replace(current, routes=unchanged), 0, 0)
            changed = dataclasses.replace(fabric, link_state=states, link_ber=bers)
            dump = None
            if current.record.routing_engine == FILE_ENGINE:
                dump = await asyncio.to_thread(self.store.routing_file, fabric_id)
            record = current.record
            router = engine_named(record.routing_engine, lfts_dump=dump, roots=record.routing_roots)
            routes = await asyncio.to_thread(reroute, router, changed, current.routes, record.reroute)
            routing = await asyncio.to_thread(
                _change, fabric, current.routes, RoutedFabric(record, changed, routes), record.reroute,
                routes.changed_rows,
            )  # fmt: skip
            record = await asyncio.to_thread(
                self.store.set_link_states,
                fabric_id,
                [(link, int(states[link]), float(bers[link])) for link in changed_links],
                record.routing_version + 1,
                _now(),
                routes.table.lft_ports if routes.kept_entries else None,
                outcome_of(changed, routes),
            )
            routing = dataclasses.replace(
                routing, routed=self._remember(RoutedFabric(record, changed, routes))
            )
        now = _now()
        for link in changed_links:
            self.events.publish(
                FabricEvent(EventKind.LINK_STATE_CHANGED, fabric_id, now, link=link, routing=routing)
            )
        self.events.publish(FabricEvent(EventKind.ROUTES_CHANGED, fabric_id, now, routing=routing))
        return routing
