"""Jobs for WorkerPool recovery tests; importable cheaply by a spawned worker (no grpc)."""

from __future__ import annotations

import os
import signal
import time

__all__ = ["allocate", "exit_at_start", "fail", "ignore_sigint_then_pid", "kill_myself", "sleep_then_pid"]


def sleep_then_pid(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def kill_myself(sig: int) -> None:
    os.kill(os.getpid(), sig)
    time.sleep(10)


def allocate(size: int) -> int:
    """Touch `size` bytes (a MemoryError where the worker's memory is limited)."""
    block = bytearray(size)
    return len(block)


def fail(message: str) -> None:
    raise ValueError(message)


def ignore_sigint_then_pid() -> int:
    """SIGINT to itself (Ctrl-C reaches the whole process group): the worker carries on."""
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.2)
    return os.getpid()


def exit_at_start(*args: object) -> None:
    """Stands in for the worker's main: a worker that ends before it reports ready."""
    raise SystemExit(3)
