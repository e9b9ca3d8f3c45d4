"""Worker processes for CPU-heavy work, so the gRPC event loop never blocks on a computation."""

from __future__ import annotations

import asyncio
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
        """Run `fn(*args)` in a worker; `fn` and its arguments must be picklable."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def close(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self._executor.shutdown, True, True)
