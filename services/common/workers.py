"""Worker processes for CPU-heavy work, so the gRPC event loop never blocks on a computation.

`WorkerPool` keeps `workers` spawn-context processes (spawn: safe with grpc's threads), each
serving one job at a time over a pipe of its own. Unlike concurrent.futures.ProcessPoolExecutor,
which breaks for good when one of its processes dies (BrokenProcessPool), a worker that dies here
(killed, out of memory, crashed) fails only the job it ran, with `WorkerDied` saying how it died,
and is replaced at once. `ready` (and `watch_ready`) say whether a live worker exists, which is
what a service's health reports. A job whose caller is cancelled has its worker killed, and
`close` ends every worker, running or idle, within its grace period: no worker outlives its
service. Workers ignore SIGINT (Ctrl-C in a terminal reaches the whole process group; the service
decides what stops) and die with the service process even when it is killed (PR_SET_PDEATHSIG,
and a watchdog thread where prctl is unavailable).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import multiprocessing
import os
import signal
import threading
import time
import traceback
from collections.abc import AsyncIterator, Callable
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any, Self, TypeVar

from services.common.procfs import memory_total_bytes, peak_rss_bytes

__all__ = ["WorkerDied", "WorkerOutOfMemory", "WorkerPool"]

log = logging.getLogger("fabrictwin.workers")

T = TypeVar("T")

START_TIMEOUT_SECONDS = 60.0  # a worker must report ready within this (spawn imports the main module)
RESPAWN_BACKOFF_SECONDS = (0.5, 1.0, 2.0, 5.0)  # when a replacement cannot be started
MEMORY_SAMPLE_SECONDS = 0.5  # how often a busy worker's peak memory is read from /proc
_GIB = 1 << 30


class WorkerDied(Exception):
    """The worker process running a job ended before answering (killed, out of memory, crashed)."""

    def __init__(self, pid: int, exitcode: int | None, peak_rss_bytes: int = 0, oom_killed: bool = False):
        self.pid = pid
        self.exitcode = exitcode
        self.peak_rss_bytes = peak_rss_bytes
        self.oom_killed = oom_killed
        super().__init__(self.describe())

    def __reduce__(self) -> tuple[type[Self], tuple[int, int | None, int, bool]]:
        return (self.__class__, (self.pid, self.exitcode, self.peak_rss_bytes, self.oom_killed))

    @property
    def signal_name(self) -> str | None:
        """SIGKILL, SIGSEGV, ... when a signal ended the process."""
        if self.exitcode is None or self.exitcode >= 0:
            return None
        try:
            return signal.Signals(-self.exitcode).name
        except ValueError:
            return f"signal {-self.exitcode}"

    @property
    def out_of_memory(self) -> bool:
        return self.oom_killed

    def describe(self) -> str:
        how = self.signal_name or (f"exit code {self.exitcode}" if self.exitcode is not None else "unknown")
        text = f"worker process died ({how})"
        if self.peak_rss_bytes:
            text += f"; its memory had reached {_human_bytes(self.peak_rss_bytes)}"
        if self.oom_killed:
            text += "; out of memory: the kernel's OOM killer ended it"
        return text


class WorkerOutOfMemory(Exception):
    """The job raised MemoryError in its worker (the worker is retired and replaced)."""


class _RemoteTraceback(Exception):
    """The worker-side traceback of an exception a job raised, chained as its __cause__."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return self.text


def _human_bytes(value: int) -> str:
    if value >= _GIB:
        return f"{value / _GIB:.1f} GiB"
    return f"{value / (1 << 20):.0f} MiB"


# -- the worker process ----------------------------------------------------------------------------


def _die_with_parent(parent_pid: int) -> None:
    """End this process when the service process ends, however it ends."""
    with contextlib.suppress(Exception):  # Linux: the kernel sends SIGKILL when the parent exits
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != parent_pid:  # the parent was gone before prctl took effect
        os._exit(1)

    def watch() -> None:  # fallback where prctl is unavailable; needs the GIL now and then
        while True:
            time.sleep(1.0)
            if os.getppid() != parent_pid:
                os._exit(1)

    threading.Thread(target=watch, name="parent-watchdog", daemon=True).start()


def _set_memory_limit(limit_bytes: int) -> None:
    if limit_bytes <= 0:
        return
    import resource

    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))


def _worker_main(conn: Connection, parent_pid: int, memory_limit_bytes: int) -> None:
    """Serve jobs `(fn, args)` from `conn` until it closes or sends None."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent(parent_pid)
    _set_memory_limit(memory_limit_bytes)
    conn.send(("ready", os.getpid()))
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        except BaseException as exc:  # the job itself did not unpickle (e.g. an import failed)
            failure = RuntimeError(f"the job could not be loaded: {exc!r}")
            conn.send(("error", failure, traceback.format_exc()))
            continue
        if message is None:
            return
        fn, args = message
        try:
            reply: tuple[Any, ...] = ("ok", fn(*args))
        except MemoryError as exc:
            reply = ("memory", str(exc) or "MemoryError")
        except BaseException as exc:
            reply = ("error", exc, traceback.format_exc())
        del message, fn, args
        try:
            conn.send(reply)
        except Exception as exc:  # the result or the exception does not pickle
            conn.send(("error", RuntimeError(f"the job's reply could not be sent: {exc!r}"), ""))
        if reply[0] == "memory":
            return  # retire: what is left of the heap after a MemoryError is not worth keeping


# -- the service side ------------------------------------------------------------------------------


def _oom_kills() -> int | None:
    """The cgroup's count of OOM kills (cgroup v2), None where the machine does not say."""
    try:
        with open("/sys/fs/cgroup/memory.events", encoding="ascii") as events:
            for line in events:
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
    except (OSError, ValueError):
        pass
    return None


class _Worker:
    """One worker process and the service's end of its pipe."""

    def __init__(self, process: BaseProcess, conn: Connection) -> None:
        self.process = process
        self.conn = conn
        self.pid = process.pid or 0
        self.peak_rss = 0

    @property
    def alive(self) -> bool:
        return self.process.exitcode is None

    def kill(self) -> None:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            self.process.kill()

    def terminate(self) -> None:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            self.process.terminate()

    def reap(self) -> None:
        """Collect the exit status (non-blocking once the process has ended) and close the pipe."""
        with contextlib.suppress(OSError, ValueError, AssertionError):
            self.process.join(0)
        with contextlib.suppress(OSError):
            self.conn.close()

    def died(self, oom_kills_before: int | None) -> WorkerDied:
        with contextlib.suppress(OSError, ValueError, AssertionError):
            self.process.join(1.0)  # the pipe closed: the exit status follows at once
        after = _oom_kills()
        oom = after is not None and oom_kills_before is not None and after > oom_kills_before
        if not oom and self.process.exitcode == -signal.SIGKILL and self.peak_rss:
            # Without cgroup counters: a SIGKILL to a process holding most of the machine's memory.
            total = memory_total_bytes()
            oom = bool(total) and self.peak_rss >= total // 2
        return WorkerDied(self.pid, self.process.exitcode, self.peak_rss, oom)


async def _readable(loop: asyncio.AbstractEventLoop, fds: list[int], timeout: float | None) -> bool:
    """Wait until one of `fds` is readable (True) or `timeout` passes (False)."""
    ready = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    for fd in fds:
        loop.add_reader(fd, wake)
    try:
        await asyncio.wait_for(ready, timeout)
        return True
    except TimeoutError:
        return False
    finally:
        for fd in fds:
            loop.remove_reader(fd)


class WorkerPool:
    """`workers` worker processes used through `await pool.run(fn, *args)` (see the module doc)."""

    def __init__(self, workers: int = 1, memory_limit_bytes: int = 0) -> None:
        self._size = max(1, workers)
        self._memory_limit = memory_limit_bytes
        self._context = multiprocessing.get_context("spawn")
        self._idle: list[_Worker] = []
        self._busy: set[_Worker] = set()
        self._starting = 0
        self._slots: asyncio.Semaphore | None = None
        self._filler: asyncio.Task[None] | None = None
        self._closed = False
        self._ready_changed: asyncio.Condition | None = None
        self._ready = False
        self._background: set[asyncio.Task[None]] = set()

    # -- state ---------------------------------------------------------------------------------------
    @property
    def size(self) -> int:
        return self._size

    @property
    def ready(self) -> bool:
        """A live worker exists (idle or busy): jobs can run, or will once one is free."""
        return self._ready

    def pids(self) -> list[int]:
        """Process ids of the live workers (idle and busy)."""
        return [w.pid for w in (*self._idle, *self._busy) if w.alive]

    def busy_pids(self) -> list[int]:
        return [w.pid for w in self._busy if w.alive]

    async def watch_ready(self) -> AsyncIterator[bool]:
        """`ready` now, then every time it changes (until the pool is closed)."""
        condition = self._condition()
        shown = self._ready
        yield shown
        while not self._closed:

            def changed(shown: bool = shown) -> bool:
                return self._ready != shown or self._closed

            async with condition:
                await condition.wait_for(changed)
            if self._ready != shown:
                shown = self._ready
                yield shown

    def _condition(self) -> asyncio.Condition:
        if self._ready_changed is None:
            self._ready_changed = asyncio.Condition()
        return self._ready_changed

    async def _update_ready(self) -> None:
        ready = not self._closed and any(w.alive for w in (*self._idle, *self._busy))
        if ready != self._ready:
            self._ready = ready
            log.info("worker pool %s", "ready" if ready else "has no live worker")
        condition = self._condition()
        async with condition:
            condition.notify_all()

    # -- starting and replacing workers ---------------------------------------------------------------
    async def start(self) -> None:
        """Start the worker processes now (else the first job starts them) and wait until they answer.

        OSError when one cannot be started (a service fails at start-up rather than serving without
        workers); replacements later are retried with back-off instead.
        """
        while not self._closed and len(self._idle) + len(self._busy) < self._size:
            try:
                worker = await self._spawn()
            except (RuntimeError, EOFError, TimeoutError) as exc:
                raise OSError(f"cannot start a worker process: {exc}") from exc
            self._park(worker)
        await self._update_ready()

    def _ensure_filled(self) -> None:
        if self._closed or (self._filler is not None and not self._filler.done()):
            return
        if len(self._idle) + len(self._busy) + self._starting >= self._size:
            return
        self._filler = asyncio.get_running_loop().create_task(self._fill())

    async def _fill(self) -> None:
        """Start workers until the pool has `size`; retry with back-off when a start fails."""
        failures = 0
        while not self._closed and len(self._idle) + len(self._busy) < self._size:
            try:
                worker = await self._spawn()
            except (OSError, RuntimeError, EOFError, TimeoutError) as exc:
                delay = RESPAWN_BACKOFF_SECONDS[min(failures, len(RESPAWN_BACKOFF_SECONDS) - 1)]
                failures += 1
                log.error("cannot start a worker process (%s); retrying in %.1f s", exc, delay)
                await asyncio.sleep(delay)
                continue
            failures = 0
            if self._closed:
                await self._end([worker], grace=0.0)
                return
            self._park(worker)
            await self._update_ready()

    async def _spawn(self) -> _Worker:
        """Start one process (on the event loop's thread: PR_SET_PDEATHSIG follows the starting thread)
        and wait for its ready message."""
        loop = asyncio.get_running_loop()
        ours, theirs = self._context.Pipe(duplex=True)
        process = self._context.Process(
            target=_worker_main,
            args=(theirs, os.getpid(), self._memory_limit),
            name="fabrictwin-worker",
            daemon=True,
        )
        self._starting += 1
        try:
            process.start()
            theirs.close()
            worker = _Worker(process, ours)
            try:
                if not await _readable(loop, [ours.fileno(), process.sentinel], START_TIMEOUT_SECONDS):
                    raise TimeoutError(
                        f"worker {worker.pid} did not start within {START_TIMEOUT_SECONDS:.0f} s"
                    )
                if not ours.poll():
                    raise RuntimeError(f"worker {worker.pid} exited at start (exit code {process.exitcode})")
                ours.recv()  # ("ready", pid)
            except BaseException:  # including the pool closing meanwhile: no half-started worker is left
                worker.kill()
                with contextlib.suppress(Exception):
                    process.join(2.0)
                worker.reap()
                raise
            return worker
        finally:
            self._starting -= 1

    def _park(self, worker: _Worker) -> None:
        """Keep an idle worker, watching for its death: health must not wait for the next job to see it."""
        self._idle.append(worker)
        asyncio.get_running_loop().add_reader(worker.process.sentinel, self._idle_died, worker)

    def _unpark(self, worker: _Worker) -> _Worker:
        self._idle.remove(worker)
        with contextlib.suppress(Exception):
            asyncio.get_running_loop().remove_reader(worker.process.sentinel)
        return worker

    def _idle_died(self, worker: _Worker) -> None:
        if worker not in self._idle:
            return
        self._unpark(worker)
        log.warning("idle worker %d died; starting another", worker.pid)
        task = asyncio.get_running_loop().create_task(self._retire(worker))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _take(self) -> _Worker:
        """An idle live worker, starting one if none is idle (the caller holds a slot)."""
        while True:
            if self._closed:
                raise RuntimeError("the worker pool is closed")
            while self._idle:
                worker = self._unpark(self._idle[-1])
                if worker.alive:
                    return worker
                worker.reap()
            self._ensure_filled()
            filler = self._filler
            while not self._idle and filler is not None and not filler.done():
                await asyncio.sleep(0.01)  # until the filler has appended a worker
            if filler is None:
                await asyncio.sleep(0.01)

    # -- running jobs ------------------------------------------------------------------------------------
    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn(*args)` in a worker; `fn` (module-level) and its arguments must be picklable.

        Raises what `fn` raised (its worker-side traceback chained), WorkerDied when the worker
        process ended during the job, WorkerOutOfMemory on a MemoryError in the worker. Cancelling
        the caller kills the worker running the job (a replacement is started).
        """
        if self._slots is None:
            self._slots = asyncio.Semaphore(self._size)
        async with self._slots:
            worker = await self._take()
            self._busy.add(worker)
            retire = True
            try:
                reply = await self._call(worker, fn, args)
                retire = reply[0] == "memory" or not worker.alive
            except BaseException:
                worker.kill()  # cancelled (shutdown, or a cancel the job did not honour) or died
                raise
            finally:
                self._busy.discard(worker)
                if retire:
                    await self._retire(worker)
                else:
                    self._park(worker)
        if reply[0] == "ok":
            result: T = reply[1]
            return result
        if reply[0] == "memory":
            limit = f"; a worker's address space is limited to {_human_bytes(self._memory_limit)}"
            raise WorkerOutOfMemory(
                f"the worker ran out of memory ({reply[1]}{limit if self._memory_limit else ''})"
            )
        error: BaseException = reply[1]
        if reply[2]:
            error.__cause__ = _RemoteTraceback(reply[2])
        raise error

    async def _retire(self, worker: _Worker) -> None:
        """Collect a worker that died or was killed (so no zombie is left) and start its replacement."""
        if worker.alive:  # killed a moment ago: SIGKILL takes effect at once, the exit status follows
            with contextlib.suppress(Exception):
                await _readable(asyncio.get_running_loop(), [worker.process.sentinel], 2.0)
        worker.reap()
        await self._update_ready()
        self._ensure_filled()

    async def _call(self, worker: _Worker, fn: Callable[..., Any], args: tuple[Any, ...]) -> tuple[Any, ...]:
        loop = asyncio.get_running_loop()
        before = _oom_kills()
        try:
            await asyncio.to_thread(worker.conn.send, (fn, args))  # off the loop: a snapshot is MBs
        except (BrokenPipeError, ConnectionResetError, EOFError, OSError):
            raise worker.died(before) from None
        fds = [worker.conn.fileno(), worker.process.sentinel]
        while not await _readable(loop, fds, MEMORY_SAMPLE_SECONDS):
            worker.peak_rss = max(worker.peak_rss, peak_rss_bytes(worker.pid))
        worker.peak_rss = max(worker.peak_rss, peak_rss_bytes(worker.pid))
        if not worker.conn.poll():
            raise worker.died(before)
        try:
            return await asyncio.to_thread(worker.conn.recv)  # unpickling a large result: off the loop
        except (EOFError, OSError):
            raise worker.died(before) from None

    # -- shutting down -----------------------------------------------------------------------------------
    async def close(self, grace: float = 2.0) -> None:
        """End every worker: idle ones are asked to exit, busy ones terminated, and whatever is still
        running after `grace` seconds is killed. Jobs still waiting for a worker fail."""
        self._closed = True
        if self._filler is not None:
            self._filler.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._filler
        workers = [self._unpark(w) for w in list(self._idle)] + list(self._busy)
        await self._end(workers, grace)
        await self._update_ready()

    async def _end(self, workers: list[_Worker], grace: float) -> None:
        for worker in workers:
            if worker in self._busy:
                worker.terminate()
            else:
                with contextlib.suppress(OSError, ValueError):
                    worker.conn.send(None)
        deadline = time.monotonic() + grace
        loop = asyncio.get_running_loop()
        for worker in workers:
            left = deadline - time.monotonic()
            if worker.alive and left > 0:
                await _readable(loop, [worker.process.sentinel], left)
            if worker.alive:
                worker.kill()
            with contextlib.suppress(OSError, ValueError, AssertionError):
                await asyncio.to_thread(worker.process.join, 5.0)
            worker.reap()
