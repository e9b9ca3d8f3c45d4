"""The engine's event queue: a 4-ary min-heap over parallel arrays, compiled with numba.

An event is (time_ps, kind, arg). Ties in time pop in an order fixed by the sequence of pushes,
so a run is deterministic without a sequence number. Four children per node rather than two: half
the levels, and the four keys compared at each level sit in one cache line, which is what the
event loop spends its time on once tens of thousands of packets are in flight. The arrays never
grow inside compiled code: the loop checks for room before it handles an event and returns to
Python to grow them.
"""

from __future__ import annotations

import numpy as np

from services.simulator.packet.kernel import kernel_inline
from services.simulator.packet.layout import SC_HEAP

__all__ = ["heap_pop", "heap_push", "schedule"]


@kernel_inline
def heap_push(
    h_time: np.ndarray, h_kind: np.ndarray, h_arg: np.ndarray, size: int, t: int, kind: int, arg: int
) -> int:
    """Insert an event; returns the new size (the caller guarantees room)."""
    i = size
    while i > 0:
        parent = (i - 1) >> 2
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


@kernel_inline
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
            first = 4 * i + 1
            if first >= size:
                break
            best = first
            best_t = h_time[first]
            stop = min(first + 4, size)
            for child in range(first + 1, stop):
                if h_time[child] < best_t:
                    best = child
                    best_t = h_time[child]
            if best_t >= last_t:
                break
            h_time[i] = best_t
            h_kind[i] = h_kind[best]
            h_arg[i] = h_arg[best]
            i = best
        h_time[i] = last_t
        h_kind[i] = last_kind
        h_arg[i] = last_arg
    return t, kind, arg, size


@kernel_inline
def schedule(heap, sc: np.ndarray, t: int, kind: int, arg: int) -> None:
    """Push an event onto the run's heap (`state.Heap`; its size is sc[SC_HEAP])."""
    sc[SC_HEAP] = heap_push(heap.time, heap.kind, heap.arg, sc[SC_HEAP], t, kind, arg)
