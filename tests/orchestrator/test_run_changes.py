"""WatchRun's wake-ups (`servicer.RunChanges`): a change saved while a watcher is reading the run
must not wait for the watcher's 1 s re-read. It did: WatchRun read the run, then waited on a bare
condition, so a notify between the two was lost (the sweep benchmark saw runs end ~1 s late)."""

from __future__ import annotations

import asyncio
import time

from services.orchestrator.servicer import RunChanges


def _elapsed(coroutine) -> float:
    async def timed() -> float:
        start = time.perf_counter()
        await coroutine
        return time.perf_counter() - start

    return asyncio.run(timed())


def test_a_change_saved_while_the_watcher_reads_wakes_it_at_once():
    async def watcher() -> None:
        changes = RunChanges()
        seen = changes.count  # the watcher notes where it is, then reads the run ...
        await changes.announce()  # ... while the run's task saves a change
        await changes.wait_past(seen, timeout=1.0)

    assert _elapsed(watcher()) < 0.2


def test_a_later_change_wakes_the_watcher_and_no_change_waits_the_timeout():
    async def later() -> None:
        changes = RunChanges()
        seen = changes.count
        asyncio.get_running_loop().call_later(0.05, lambda: asyncio.ensure_future(changes.announce()))
        await changes.wait_past(seen, timeout=1.0)

    async def never() -> None:
        changes = RunChanges()
        await changes.wait_past(changes.count, timeout=0.3)

    assert _elapsed(later()) < 0.5
    assert 0.3 <= _elapsed(never()) < 0.8
