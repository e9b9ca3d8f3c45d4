"""Where the store's blocking calls run: queries and writes on thread pools of their own.

Every store call blocks (SQL), so the servicer runs it in a thread. With one shared pool
(asyncio.to_thread's: min(32, CPUs + 4) threads, 6 on a 2-core machine) a few writes held up by
the database took every thread: on SQLite writes queue for the one writer's lock, on PostgreSQL
for a row lock, and each waits in a thread holding a connection. Queries then queued behind them,
and under 64 clients the service answered about one call at a time. Here queries get
`query_threads` threads and writes (ingest, source changes, the sweep) `write_threads`, together
no more than the engine's connection pool holds, so no thread waits for a connection either.
SQLite in WAL mode and PostgreSQL both let readers run side by side, and both drivers release the
GIL while the database works, so queries overlap on every core.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["DEFAULT_QUERY_THREADS", "StoreThreads"]

T = TypeVar("T")

# With the write threads, within the 10 connections services.common.db gives a PostgreSQL engine.
DEFAULT_QUERY_THREADS = 6


class StoreThreads:
    """`await threads.query(fn, ...)` and `await threads.write(fn, ...)` run `fn` in its pool."""

    def __init__(self, query_threads: int = DEFAULT_QUERY_THREADS, write_threads: int = 2) -> None:
        self.query_threads = max(1, query_threads)
        self.write_threads = max(1, write_threads)
        self._queries = concurrent.futures.ThreadPoolExecutor(self.query_threads, "telemetry-query")
        self._writes = concurrent.futures.ThreadPoolExecutor(self.write_threads, "telemetry-write")

    @staticmethod
    async def _run(pool: concurrent.futures.Executor, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        # As asyncio.to_thread does: the caller's context variables (log fields) go with the call.
        context = contextvars.copy_context()
        call = functools.partial(context.run, fn, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(pool, call)

    async def query(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a read (`fn(*args, **kwargs)`) on a query thread."""
        return await self._run(self._queries, fn, *args, **kwargs)

    async def write(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a write, or the decoding of a batch to write, on a write thread."""
        return await self._run(self._writes, fn, *args, **kwargs)

    def close(self) -> None:
        """Stop taking calls; calls not started yet are cancelled, running ones finish on their own."""
        self._queries.shutdown(wait=False, cancel_futures=True)
        self._writes.shutdown(wait=False, cancel_futures=True)
