"""WorkerPool recovery: a dead worker fails only its job, saying how it died, and is replaced; a
cancelled job's worker is killed; closing ends busy workers too; workers ignore Ctrl-C."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest

from services.common.workers import WorkerDied, WorkerOutOfMemory, WorkerPool

from .pool_jobs import allocate, fail, ignore_sigint_then_pid, kill_myself, sleep_then_pid


def gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


async def test_a_worker_that_dies_fails_its_job_with_the_signal_and_is_replaced():
    pool = WorkerPool(1)
    try:
        await pool.start()
        first = pool.pids()
        with pytest.raises(WorkerDied) as died:
            await pool.run(kill_myself, signal.SIGKILL)
        assert died.value.signal_name == "SIGKILL"
        assert str(died.value).startswith("worker process died (SIGKILL)")
        assert not died.value.out_of_memory
        assert await pool.run(sleep_then_pid, 0) not in first  # a new worker ran it
        assert pool.ready
    finally:
        await pool.close()


async def test_readiness_goes_down_with_the_last_worker_and_up_with_its_replacement():
    pool = WorkerPool(1)
    try:
        await pool.start()
        seen: list[bool] = []

        async def follow() -> None:
            async for ready in pool.watch_ready():
                seen.append(ready)

        follower = asyncio.create_task(follow())
        with pytest.raises(WorkerDied):
            await pool.run(kill_myself, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while seen[-2:] != [False, True]:
            assert time.monotonic() < deadline, seen
            await asyncio.sleep(0.02)
        follower.cancel()
    finally:
        await pool.close()


async def test_a_crash_says_which_signal():
    pool = WorkerPool(1)
    try:
        with pytest.raises(WorkerDied, match=r"worker process died \(SIGSEGV\)"):
            await pool.run(kill_myself, signal.SIGSEGV)
    finally:
        await pool.close()


async def test_a_memory_error_is_reported_as_such_and_the_worker_replaced():
    pool = WorkerPool(1, memory_limit_bytes=1 << 30)
    try:
        await pool.start()
        first = pool.pids()
        with pytest.raises(WorkerOutOfMemory, match="ran out of memory"):
            await pool.run(allocate, 2 << 30)
        assert await pool.run(allocate, 1 << 20) == 1 << 20
        assert pool.pids() != first
    finally:
        await pool.close()


async def test_errors_of_the_job_come_back_with_the_worker_traceback():
    pool = WorkerPool(1)
    try:
        with pytest.raises(ValueError, match="bad input") as raised:
            await pool.run(fail, "bad input")
        assert "fail" in str(raised.value.__cause__)
        assert await pool.run(sleep_then_pid, 0) > 0  # the same worker goes on
    finally:
        await pool.close()


async def test_cancelling_a_job_kills_its_worker():
    pool = WorkerPool(1)
    try:
        await pool.start()
        worker = pool.pids()[0]
        job = asyncio.ensure_future(pool.run(sleep_then_pid, 60))
        await asyncio.sleep(0.3)
        job.cancel()
        with pytest.raises(asyncio.CancelledError):
            await job
        deadline = time.monotonic() + 5
        while not gone(worker):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        assert await pool.run(sleep_then_pid, 0) != worker
    finally:
        await pool.close()


async def test_close_ends_a_busy_worker_within_its_grace():
    pool = WorkerPool(2)
    await pool.start()
    job = asyncio.ensure_future(pool.run(sleep_then_pid, 60))
    await asyncio.sleep(0.3)
    workers = pool.pids()
    started = time.monotonic()
    await pool.close(grace=1.0)
    assert time.monotonic() - started < 5
    assert all(gone(pid) for pid in workers)
    with pytest.raises(WorkerDied):
        await job


async def test_workers_ignore_ctrl_c():
    pool = WorkerPool(1)
    try:
        assert await pool.run(ignore_sigint_then_pid) != os.getpid()
    finally:
        await pool.close()


async def test_a_pool_whose_workers_cannot_start_says_so_at_start(monkeypatch):
    from services.common import workers

    from . import pool_jobs

    monkeypatch.setattr(workers, "_worker_main", pool_jobs.exit_at_start)
    pool = WorkerPool(1)
    try:
        with pytest.raises(OSError, match="cannot start a worker process"):
            await pool.start()
        assert not pool.ready
    finally:
        await pool.close()


async def test_an_idle_worker_that_dies_is_replaced_before_the_next_job():
    pool = WorkerPool(1)
    try:
        await pool.start()
        idle = pool.pids()[0]
        os.kill(idle, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while pool.pids() in ([], [idle]):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        assert pool.ready
        assert await pool.run(sleep_then_pid, 0) != idle
    finally:
        await pool.close()
