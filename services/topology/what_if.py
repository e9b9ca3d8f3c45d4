"""What-if snapshots: a fabric's routes as its engine recomputes them with some links DOWN, nothing stored.

The packet simulator models a link going down at t and the subnet manager's reaction after a delay:
the measured time of the route recompute plus a sweep delay. So the recompute here is the one
SetLinkState runs (`routing.sweep.reroute` from the stored routes, in the fabric's reroute mode: by
default as a running subnet manager sweeps, keeping every entry still valid), on a copy of the fabric
whose link states say DOWN, and only that call is timed. The stored fabric,
its routes and its `routing_version` stay as they were; the snapshot carries that version (the
routes it was recomputed from) and `reroute_seconds`.

Simulations of one scenario ask for the same what-if again and again, so `WhatIfCache` keeps the
last few results per (fabric, routing_version, sorted down links) and lets concurrent callers of
one key share a single computation.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import time
from collections.abc import Awaitable, Callable, Sequence

import numpy as np

from services.common.errors import InvalidArgument
from services.topology.fabric import Fabric, LinkState
from services.topology.routing import Routes, RoutingEngine
from services.topology.routing.sweep import reroute
from services.topology.snapshots import build_snapshot

__all__ = ["WhatIfCache", "WhatIfKey", "WhatIfSnapshot", "down_link_set", "reroute_with_links_down"]

# (fabric id, routing_version, sorted down links, sorted repaired links, engine routing from scratch or "")
WhatIfKey = tuple[str, int, tuple[int, ...], tuple[int, ...], str]


@dataclasses.dataclass(frozen=True)
class WhatIfSnapshot:
    """A serialized FabricSnapshot and what it took to recompute its routes."""

    snapshot_bytes: bytes
    routing_version: int  # of the stored routes it was recomputed from
    reroute_seconds: float  # 0.0 for the stored routes themselves


def down_link_set(fabric: Fabric, down_links: Sequence[int], field: str = "down_links") -> tuple[int, ...]:
    """The sorted, distinct link indices of `down_links`; InvalidArgument naming `field[i]` for an
    index that is not a link of `fabric`.

    >>> from services.topology.generators import leaf_spine
    >>> down_link_set(leaf_spine(2, 2, 2), [5, 4, 5])
    (4, 5)
    """
    links = np.asarray(down_links, dtype=np.int64)
    bad = np.flatnonzero((links < 0) | (links >= fabric.num_links))
    if bad.size:
        i = int(bad[0])
        raise InvalidArgument(
            f"{field}[{i}]", f"no link {int(links[i])}: the fabric has links 0..{fabric.num_links - 1}"
        )
    return tuple(np.unique(links).tolist())


def reroute_with_links_down(
    fabric: Fabric,
    routes: Routes,
    router: RoutingEngine,
    down: tuple[int, ...],
    name: str,
    routing_version: int,
    up: tuple[int, ...] = (),
    *,
    from_scratch: bool = False,
    mode: str = "incremental",
) -> WhatIfSnapshot:
    """The snapshot of `fabric` with links `down` DOWN and links `up` repaired (UP, no bit errors),
    rerouted from `routes` in the fabric's reroute `mode` (routing.sweep.reroute: the path SetLinkState
    takes); `fabric` and `routes` are not changed; with `from_scratch`, `router.compute` routes the
    changed fabric anew (another engine's what-if). Blocking: run it in a thread."""
    states = fabric.link_state.copy()
    states[list(down)] = LinkState.DOWN
    states[list(up)] = LinkState.UP
    bers = fabric.link_ber.copy()
    bers[list(down) + list(up)] = 0.0  # as SetLinkState: only a DEGRADED link has a bit error rate
    failed = dataclasses.replace(fabric, link_state=states, link_ber=bers)
    started = time.perf_counter()
    rerouted = router.compute(failed) if from_scratch else reroute(router, failed, routes, mode)
    seconds = time.perf_counter() - started
    snapshot = build_snapshot(failed, rerouted, name, routing_version)
    snapshot.reroute_seconds = seconds
    return WhatIfSnapshot(snapshot.to_proto().SerializeToString(), routing_version, seconds)


class WhatIfCache:
    """The last `size` what-if results, by key; one computation per key however many ask at once."""

    def __init__(self, size: int = 4) -> None:
        self._entries: collections.OrderedDict[WhatIfKey, asyncio.Future[WhatIfSnapshot]] = (
            collections.OrderedDict()
        )
        self._size = size

    async def get(self, key: WhatIfKey, compute: Callable[[], Awaitable[WhatIfSnapshot]]) -> WhatIfSnapshot:
        """The cached result of `key`, else `compute()`'s (a failure is not cached)."""
        future = self._entries.get(key)
        if future is None:
            future = asyncio.ensure_future(compute())
            future.add_done_callback(lambda done: self._drop_failed(key, done))
            self._entries[key] = future
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)
        else:
            self._entries.move_to_end(key)
        # Shielded: a caller that gives up does not cancel the computation others may be waiting on.
        return await asyncio.shield(future)

    def forget(self, fabric_id: str) -> None:
        """Drop every result of a fabric (deleted: a new fabric may take its id and version 1)."""
        for key in [key for key in self._entries if key[0] == fabric_id]:
            del self._entries[key]

    def _drop_failed(self, key: WhatIfKey, done: asyncio.Future[WhatIfSnapshot]) -> None:
        # done.exception() also marks the exception as retrieved (no "never retrieved" warning).
        failed = done.cancelled() or done.exception() is not None
        if failed and self._entries.get(key) is done:
            del self._entries[key]
