"""Fabric events and the hub that fans them out to WatchFabric subscribers, one queue each.

Publishing never blocks: each subscriber has a bounded queue, and a subscriber that falls that far
behind is dropped (its stream ends with FailedPrecondition saying so) rather than slowing the
fabric's changes or growing memory without bound. FABRIC_DELETED ends every stream of that fabric.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import datetime as dt
import enum
from typing import Any

from services.common.errors import FailedPrecondition

__all__ = ["EventKind", "FabricEvent", "FabricEvents", "Subscription"]

_QUEUE_SIZE = 1024


class EventKind(enum.IntEnum):
    """What happened; values are fabrictwin.v1.FabricEventKind."""

    LINK_STATE_CHANGED = 1
    ROUTES_CHANGED = 2
    FABRIC_DELETED = 3


@dataclasses.dataclass(frozen=True)
class FabricEvent:
    """One event; `link` is a link index, `routing` whatever the registry reports about a reroute."""

    kind: EventKind
    fabric_id: str
    time: dt.datetime
    link: int | None = None
    routing: Any = None


_FELL_BEHIND = object()


class Subscription:
    """Events of one fabric for one watcher, registered from creation (nothing published after
    `subscribe` returns is missed). Iterate it; `close()` when done. Ends after FABRIC_DELETED."""

    def __init__(self, hub: FabricEvents, fabric_id: str) -> None:
        self._hub, self.fabric_id = hub, fabric_id
        self._queue: asyncio.Queue = asyncio.Queue()
        self._done = False
        hub._subscribers[fabric_id].add(self._queue)

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> FabricEvent:
        if self._done:
            raise StopAsyncIteration
        event = await self._queue.get()
        if event is _FELL_BEHIND:
            self.close()
            raise FailedPrecondition(
                f"this watcher of fabrics/{self.fabric_id} fell {self._hub.queue_size} events behind; "
                "watch again"
            )
        if event.kind == EventKind.FABRIC_DELETED:
            self.close()
        return event

    def close(self) -> None:
        self._done = True
        subscribers = self._hub._subscribers.get(self.fabric_id)
        if subscribers is not None:
            subscribers.discard(self._queue)
            if not subscribers:
                del self._hub._subscribers[self.fabric_id]


class FabricEvents:
    """Subscribers per fabric id; `publish` from the registry, `subscribe` from WatchFabric."""

    def __init__(self, queue_size: int = _QUEUE_SIZE) -> None:
        self.queue_size = queue_size
        self._subscribers: dict[str, set[asyncio.Queue]] = collections.defaultdict(set)

    def subscriber_count(self, fabric_id: str) -> int:
        return len(self._subscribers.get(fabric_id, ()))

    def publish(self, event: FabricEvent) -> None:
        """Queue `event` for every subscriber of its fabric (never blocks)."""
        for queue in list(self._subscribers.get(event.fabric_id, ())):
            if queue.qsize() >= self.queue_size - 1:  # the last slot is for the "fell behind" marker
                queue.put_nowait(_FELL_BEHIND)
                self._subscribers[event.fabric_id].discard(queue)
                continue
            queue.put_nowait(event)

    def subscribe(self, fabric_id: str) -> Subscription:
        """A subscription to `fabric_id`'s events, live as soon as this returns."""
        return Subscription(self, fabric_id)
