"""The engine's event queue: a 4-ary min-heap of 16-byte entries, compiled with numba.

An event is (time_ps, kind, arg). Ties in time pop in an order fixed by the sequence of pushes,
so a run is deterministic without a sequence number.

Layout, which is what the event loop spends its time on once tens of thousands of events are
pending (a k=16 ring AllReduce keeps ~11,500; popping was 46% of its run in a perf profile when the
three fields lived in three arrays, each level of the sift-down touching three cache lines):

- one int64 array, two words per entry: the time, then `arg << 4 | kind` (kinds are < 16, arguments
  non-negative), so the entry that moves up a level comes with the line its time was compared in;
- entry i sits at row i + 3 of an array whose start is 64-byte aligned, so the four children
  4i+1 .. 4i+4 of every node fill exactly one cache line: one line per level of a pop.

The comparisons are those of the plain 4-ary heap, so events pop in the same order as before.
The array never grows inside compiled code: the loop checks for room before it handles an event
and returns to Python, which grows it (`grow_heap`).
"""

from __future__ import annotations

import numpy as np

from services.simulator.packet.kernel import kernel_inline
from services.simulator.packet.layout import SC_HEAP

__all__ = [
    "KIND_BITS",
    "PAD",
    "grow_heap",
    "heap_arg",
    "heap_capacity",
    "heap_kind",
    "heap_pop",
    "heap_push",
    "heap_time",
    "new_heap",
    "schedule",
]

PAD = 3  # entry i lives in row i + PAD: its four children share one 64-byte line
KIND_BITS = 4
_KIND_MASK = (1 << KIND_BITS) - 1
_LINE_WORDS = 8  # int64 words in a 64-byte cache line


def new_heap(capacity: int) -> np.ndarray:
    """An empty heap of room for `capacity` events, its rows aligned to cache lines."""
    words = 2 * (capacity + PAD)
    raw = np.zeros(words + _LINE_WORDS, dtype=np.int64)
    skip = (-raw.ctypes.data % 64) // 8
    return raw[skip : skip + words]


def grow_heap(h: np.ndarray) -> np.ndarray:
    """The same events in a heap of twice the room."""
    grown = new_heap(2 * heap_capacity(h))
    grown[: len(h)] = h
    return grown


def heap_capacity(h: np.ndarray) -> int:
    return len(h) // 2 - PAD


@kernel_inline
def heap_time(h: np.ndarray, i: int) -> int:
    """Time of entry i (0: the earliest)."""
    return h[2 * (i + PAD)]


@kernel_inline
def heap_kind(h: np.ndarray, i: int) -> int:
    return h[2 * (i + PAD) + 1] & _KIND_MASK


@kernel_inline
def heap_arg(h: np.ndarray, i: int) -> int:
    return h[2 * (i + PAD) + 1] >> KIND_BITS


@kernel_inline
def heap_push(h: np.ndarray, size: int, t: int, kind: int, arg: int) -> int:
    """Insert an event; returns the new size (the caller guarantees room)."""
    i = size
    while i > 0:
        parent = (i - 1) >> 2
        row = 2 * (parent + PAD)
        if h[row] <= t:
            break
        h[2 * (i + PAD)] = h[row]
        h[2 * (i + PAD) + 1] = h[row + 1]
        i = parent
    h[2 * (i + PAD)] = t
    h[2 * (i + PAD) + 1] = arg << KIND_BITS | kind
    return size + 1


@kernel_inline
def heap_pop(h: np.ndarray, size: int) -> tuple[int, int, int, int]:
    """Remove the earliest event; returns (time, kind, arg, new size). The heap must not be empty."""
    t = h[2 * PAD]
    payload = h[2 * PAD + 1]
    size -= 1
    if size > 0:
        last_t = h[2 * (size + PAD)]
        last_payload = h[2 * (size + PAD) + 1]
        i = 0
        while True:
            first = 4 * i + 1
            if first >= size:
                break
            best = first
            best_t = h[2 * (first + PAD)]
            if first + 4 <= size:  # a full line of children: no bound to check
                for child in range(first + 1, first + 4):
                    child_t = h[2 * (child + PAD)]
                    if child_t < best_t:
                        best = child
                        best_t = child_t
            else:
                for child in range(first + 1, size):
                    child_t = h[2 * (child + PAD)]
                    if child_t < best_t:
                        best = child
                        best_t = child_t
            if best_t >= last_t:
                break
            h[2 * (i + PAD)] = best_t
            h[2 * (i + PAD) + 1] = h[2 * (best + PAD) + 1]
            i = best
        h[2 * (i + PAD)] = last_t
        h[2 * (i + PAD) + 1] = last_payload
    return t, payload & _KIND_MASK, payload >> KIND_BITS, size


@kernel_inline
def schedule(heap, sc: np.ndarray, t: int, kind: int, arg: int) -> None:
    """Push an event onto the run's heap (`state.Heap`; its size is sc[SC_HEAP])."""
    sc[SC_HEAP] = heap_push(heap.ev, sc[SC_HEAP], t, kind, arg)
