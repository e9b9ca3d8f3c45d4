"""CPU-bound functions for WorkerPool tests; importable cheaply by a spawned worker (no grpc, no numpy)."""

from __future__ import annotations

import os
import time

__all__ = ["burn_cpu", "pid_and_square"]


def pid_and_square(value: int) -> tuple[int, int]:
    """The worker's pid and `value` squared."""
    return os.getpid(), value * value


def burn_cpu(seconds: float) -> int:
    """Spin for `seconds` without yielding (what would freeze an event loop); returns the worker's pid."""
    deadline = time.perf_counter() + seconds
    spins = 0
    while time.perf_counter() < deadline:
        spins += 1
    return os.getpid()
