"""WorkerPool: CPU-heavy work runs in another process while the event loop keeps answering."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from services.common.workers import WorkerPool

from .cpu_work import burn_cpu, pid_and_square


async def test_work_runs_in_another_process_that_close_ends():
    pool = WorkerPool(1)
    try:
        pid, square = await pool.run(pid_and_square, 12)
    finally:
        await pool.close()
    assert square == 144
    assert pid != os.getpid()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


async def test_the_event_loop_stays_responsive_while_a_worker_computes():
    pool = WorkerPool(1)
    await pool.run(pid_and_square, 0)  # start the worker first: spawning is not what is measured
    gaps: list[float] = []

    async def tick() -> None:
        last = time.perf_counter()
        while True:
            await asyncio.sleep(0.01)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    ticker = asyncio.ensure_future(tick())
    try:
        started = time.perf_counter()
        pid = await pool.run(burn_cpu, 0.5)
        elapsed = time.perf_counter() - started
    finally:
        ticker.cancel()
        await pool.close()
    assert pid != os.getpid()
    assert elapsed >= 0.5
    # Burnt on this thread, the same work would have frozen the loop for half a second.
    assert len(gaps) >= 10
    assert max(gaps) < 0.25, max(gaps)
