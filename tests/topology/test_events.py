import asyncio
import datetime as dt

import pytest

from services.common.errors import FailedPrecondition
from services.topology.events import EventKind, FabricEvent, FabricEvents


def event(kind=EventKind.ROUTES_CHANGED, fabric="f"):
    return FabricEvent(kind, fabric, dt.datetime.now(dt.UTC))


async def test_a_subscriber_sees_events_of_its_fabric_only_and_stops_at_deletion():
    hub = FabricEvents()
    subscription = hub.subscribe("f")
    hub.publish(event(fabric="other"))
    hub.publish(event(EventKind.LINK_STATE_CHANGED))
    hub.publish(event(EventKind.FABRIC_DELETED))
    hub.publish(event())  # after the end: never seen
    kinds = [e.kind async for e in subscription]
    assert kinds == [EventKind.LINK_STATE_CHANGED, EventKind.FABRIC_DELETED]
    assert hub.subscriber_count("f") == 0


async def test_a_watcher_that_falls_behind_is_dropped_instead_of_slowing_the_fabric():
    hub = FabricEvents(queue_size=4)
    slow, fast = hub.subscribe("f"), hub.subscribe("f")
    for _ in range(10):
        hub.publish(event())
        await asyncio.wait_for(anext(fast), 1)
    assert hub.subscriber_count("f") == 1
    with pytest.raises(FailedPrecondition, match="fell 4 events behind"):
        async for _ in slow:
            pass
    fast.close()
    assert hub.subscriber_count("f") == 0
