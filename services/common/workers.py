"""Worker processes for CPU-heavy work, so the gRPC event loop never blocks on a computation."""

from __future__ import annotations

import asyncio
import functools
import multiprocessing
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any, TypeVar

__all__ = ["WorkerPool"]

T = TypeVar("T")


class WorkerPool:
    """A process pool (spawn context: safe with grpc's threads) used through `await pool.run(fn, ...)`."""

    def __init__(self, workers: int = 1) -> None:
        self._executor = ProcessPoolExecutor(
            max_workers=max(1, workers), mp_context=multiprocessing.get_context("spawn")
        )

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn(*args)` in a worker; `fn` (module-level) and its arguments must be picklable."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def close(self) -> None:
        """Cancel queued work, wait for running work, and end the worker processes."""
        # cancel_futures is keyword-only: run_in_executor passes positional arguments only.
        shutdown = functools.partial(self._executor.shutdown, wait=True, cancel_futures=True)
        await asyncio.get_running_loop().run_in_executor(None, shutdown)
