"""The topology service's core: fabrics in the store, routed fabrics cached in memory.

Generation and routing are CPU-bound and SQL is blocking, so both run in threads
(`asyncio.to_thread`): numpy releases the GIL in its kernels, which keeps the event loop answering,
and routes (hundreds of MB for a k=32 fat-tree) never cross a process boundary. Routed fabrics are
cached by (fabric id, routing_version); a restart recomputes routes from the stored engine name.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import datetime as dt
from collections.abc import Mapping
from typing import Any

import numpy as np

from services.common.errors import AlreadyExists
from services.common.snapshot import FabricSnapshot
from services.topology.fabric import Fabric, NodeKind
from services.topology.generators import from_spec, normalise_spec
from services.topology.routing import Routes, diff_routes, engine_named
from services.topology.snapshots import build_snapshot
from services.topology.store import FabricRecord, TopologyStore

__all__ = ["FabricRegistry", "RoutedFabric", "RoutingChange"]


@dataclasses.dataclass(frozen=True)
class RoutedFabric:
    """A fabric with the routes of one routing version."""

    record: FabricRecord
    fabric: Fabric
    routes: Routes

    def snapshot(self) -> FabricSnapshot:
        return build_snapshot(
            self.fabric, self.routes, f"fabrics/{self.record.id}", self.record.routing_version
        )


@dataclasses.dataclass(frozen=True)
class RoutingChange:
    """What a ComputeRoutes did."""

    routed: RoutedFabric
    changed_entries: int
    changed_switches: int


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _generate(spec: Mapping[str, Any], engine: str) -> tuple[Fabric, Routes]:
    fabric = from_spec(spec)
    return fabric, engine_named(engine).compute(fabric)


class FabricRegistry:
    """Create, read, route and delete fabrics; `cache_size` routed fabrics stay in memory."""

    def __init__(self, store: TopologyStore, cache_size: int = 4) -> None:
        self.store = store
        self._cache: collections.OrderedDict[tuple[str, int], RoutedFabric] = collections.OrderedDict()
        self._cache_size = cache_size
        self._locks: dict[str, asyncio.Lock] = collections.defaultdict(asyncio.Lock)

    def _remember(self, routed: RoutedFabric) -> RoutedFabric:
        key = (routed.record.id, routed.record.routing_version)
        self._cache[key] = routed
        self._cache.move_to_end(key)
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return routed

    def _forget(self, fabric_id: str) -> None:
        for key in [key for key in self._cache if key[0] == fabric_id]:
            del self._cache[key]

    async def create(
        self,
        fabric_id: str,
        display_name: str,
        spec: Mapping[str, Any],
        engine: str,
        labels: Mapping[str, str],
    ) -> RoutedFabric:
        """Generate, route and store a fabric (routing version 1); AlreadyExists if the id is taken."""
        spec = normalise_spec(spec)
        engine_named(engine)  # reject unknown engines before the heavy work
        if await asyncio.to_thread(self.store.exists, fabric_id):
            raise AlreadyExists(f"fabrics/{fabric_id} already exists")
        fabric, routes = await asyncio.to_thread(_generate, spec, engine)
        now = _now()
        record = FabricRecord(
            id=fabric_id,
            display_name=display_name,
            spec=spec,
            imported_format=None,
            labels=dict(labels),
            routing_engine=engine,
            routing_version=1,
            host_count=fabric.num_hosts,
            switch_count=fabric.num_switches,
            link_count=fabric.num_links,
            create_time=now,
            update_time=now,
        )
        await asyncio.to_thread(self.store.add, record, fabric)
        return self._remember(RoutedFabric(record, fabric, routes))

    async def get(self, fabric_id: str) -> FabricRecord:
        return await asyncio.to_thread(self.store.get, fabric_id)

    async def list(self, offset: int, limit: int) -> tuple[list[FabricRecord], bool]:
        """Up to `limit` records from `offset`, and whether more follow."""
        records = await asyncio.to_thread(self.store.list, offset, limit + 1)
        return records[:limit], len(records) > limit

    async def delete(self, fabric_id: str) -> None:
        async with self._locks[fabric_id]:
            await asyncio.to_thread(self.store.delete, fabric_id)
            self._forget(fabric_id)
        self._locks.pop(fabric_id, None)

    async def routed(self, fabric_id: str) -> RoutedFabric:
        """The fabric with its current routes: from the cache, else loaded and routed again."""
        record = await self.get(fabric_id)
        key = (fabric_id, record.routing_version)
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        async with self._locks[fabric_id]:
            if key in self._cache:
                return self._cache[key]
            fabric = await asyncio.to_thread(self.store.load_fabric, fabric_id)
            routes = await asyncio.to_thread(engine_named(record.routing_engine).compute, fabric)
            return self._remember(RoutedFabric(record, fabric, routes))

    async def compute_routes(self, fabric_id: str, engine: str | None) -> RoutingChange:
        """Recompute every table; the routing version rises only if some table changed."""
        current = await self.routed(fabric_id)
        engine = engine or current.record.routing_engine
        router = engine_named(engine)
        async with self._locks[fabric_id]:
            routes = await asyncio.to_thread(router.compute, current.fabric)
            switches = np.flatnonzero(current.fabric.node_kind == NodeKind.SWITCH)
            entries, changed_switches = await asyncio.to_thread(diff_routes, current.routes, routes, switches)
            record = current.record
            if entries or engine != record.routing_engine:
                record = await asyncio.to_thread(
                    self.store.set_routing, fabric_id, engine, record.routing_version + 1, _now()
                )
            routed = self._remember(RoutedFabric(record, current.fabric, routes))
        return RoutingChange(routed, entries, changed_switches)
