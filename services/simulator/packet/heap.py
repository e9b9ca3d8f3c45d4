"""The engine's event queue: a binary min-heap over parallel arrays, compiled with numba.

An event is (time_ps, kind, arg). Ties in time pop in an order fixed by the sequence of pushes,
so a run is deterministic without a sequence number. The arrays never grow inside compiled code:
the loop checks for room before it handles an event and returns to Python to grow them.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["heap_pop", "heap_push"]


@njit(cache=True, inline="always")
def heap_push(
    h_time: np.ndarray, h_kind: np.ndarray, h_arg: np.ndarray, size: int, t: int, kind: int, arg: int
) -> int:
    """Insert an event; returns the new size (the caller guarantees room)."""
    i = size
    while i > 0:
        parent = (i - 1) >> 1
        if h_time[parent] <= t:
            break
        h_time[i] = h_time[parent]
        h_kind[i] = h_kind[parent]
        h_arg[i] = h_arg[parent]
        i = parent
    h_time[i] = t
    h_kind[i] = kind
    h_arg[i] = arg
    return size + 1


@njit(cache=True, inline="always")
def heap_pop(
    h_time: np.ndarray, h_kind: np.ndarray, h_arg: np.ndarray, size: int
) -> tuple[int, int, int, int]:
    """Remove the earliest event; returns (time, kind, arg, new size). The heap must not be empty."""
    t, kind, arg = h_time[0], h_kind[0], h_arg[0]
    size -= 1
    if size > 0:
        last_t, last_kind, last_arg = h_time[size], h_kind[size], h_arg[size]
        i = 0
        while True:
            child = 2 * i + 1
            if child >= size:
                break
            if child + 1 < size and h_time[child + 1] < h_time[child]:
                child += 1
            if h_time[child] >= last_t:
                break
            h_time[i] = h_time[child]
            h_kind[i] = h_kind[child]
            h_arg[i] = h_arg[child]
            i = child
        h_time[i] = last_t
        h_kind[i] = last_kind
        h_arg[i] = last_arg
    return t, kind, arg, size
