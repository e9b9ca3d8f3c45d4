"""The engine's event queue: a timing wheel for the near future over a 4-ary heap for the far one.

An event is (time_ps, kind, arg). Events pop in order of time. Events of the same time pop in a
seeded random order (the queue's own xorshift generator shuffles each run of equal times when
their bucket comes up), so a run is deterministic and no sender wins every tie: with first in,
first out, the sender scheduled first at each synchronised instant reaches a full buffer first every
time (an incast test measured one of three senders never dropping), which no switch's arbitration
does. An event scheduled for the instant being handled pops after those already due then.

Why not only a heap: at scale nearly every pending event is a packet on a wire, due within a
packet's serialisation plus a link's delay. A k=16 ring AllReduce keeps ~11,500 of them and pops
263M; the heap's sift-down (a chain of ~7 dependent loads and a mispredicted compare) was half the
loop in a perf profile. The wheel makes the common push and pop O(1):

- The near future is cut into W buckets of 2^shift ps (`wheel_geometry` sizes them from the
  fabric). A push into a later bucket appends (time, payload `arg << 4 | kind`) to that bucket's
  list of chunks of 8 events (two cache lines each, from a pool with a free list: a list of single
  events was a chain of dependent cache misses, 29% of the loop) and sets its bucket's bit in `bits`.
- The bucket being popped moves into `cur`, sorted by time (insertion sort for a few events,
  heapsort for a burst), each run of equal times shuffled; pops take its front. A push into that
  bucket is inserted after every event not later than it, scanning from the back.
- An event W buckets or more ahead (timers, releases far in the future, slow links) goes to `far`,
  a 4-ary heap by time; each pop takes the earlier of `cur`'s front and the heap's top (`cur` on a
  tie).

Nothing grows inside compiled code: the loop asks Python for room first (`RC_GROW_HEAP`), and
every part is sized to hold all pending events.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from services.simulator.packet.kernel import cttz, kernel, kernel_inline
from services.simulator.packet.layout import SC_HEAP

__all__ = [
    "KIND_BITS",
    "QS_SIZE",
    "grow_queue",
    "new_queue",
    "peek",
    "pop",
    "push",
    "queue_capacity",
    "schedule",
    "wheel_geometry",
]

KIND_BITS = 4
_KIND_MASK = (1 << KIND_BITS) - 1
# Queue scalars (`Heap.qs`).
QS_SHIFT = 0  # a bucket spans 2^shift ps
QS_MASK = 1  # W - 1 (W a power of two)
QS_BUCKET = 2  # the bucket being popped (time >> shift)
QS_HEAD = 3  # cur entries [head, end) are the pending events of that bucket, in pop order
QS_END = 4
QS_WHEEL = 5  # events in the wheel's lists
QS_FAR = 6  # events in the far heap
QS_FREE = 7  # head of the free list of chunks
QS_RNG = 8  # xorshift64 state of the tie shuffles (never 0)
QS_SIZE = 9

CHUNK = 8  # events per chunk of a bucket's list
_INSERTION_SORT_MAX = 32  # a bucket this small is sorted by insertion, a larger one by heapsort
_MIN_SHIFT, _MAX_SHIFT = 6, 12
_MIN_BUCKETS, _MAX_BUCKETS = 1 << 10, 1 << 16


def wheel_geometry(max_tx_ps: int, max_delay_ps: int, channels: int) -> tuple[int, int]:
    """(shift, buckets) of a wheel for a fabric: a bucket spans a packet's serialisation time over
    channels / 128 (one channel in 128 starting a packet per bucket: ~18 events per bucket in a busy
    k=16 ring, where 256 ps to 4 ns buckets measured within 10% of each other), at most 4 ns; the
    wheel spans four times a serialisation plus the longest delay (anything later waits in the far
    heap)."""
    width = max(1, max_tx_ps * 128 // max(1, channels))
    shift = min(_MAX_SHIFT, max(_MIN_SHIFT, width.bit_length() - 1))
    horizon = 4 * (max_tx_ps + max_delay_ps)
    buckets = 1 << max(0, (-(-horizon >> shift)) - 1).bit_length()
    return shift, min(_MAX_BUCKETS, max(_MIN_BUCKETS, buckets))


def _chunks_for(capacity: int, buckets: int) -> int:
    # Every bucket's last chunk may be partly empty: one chunk per bucket beyond the events' own.
    return -(-capacity // CHUNK) + buckets + 1


def new_queue(capacity: int, shift: int, buckets: int, seed: int) -> dict[str, np.ndarray]:
    """The arrays of an empty queue with room for `capacity` pending events (`state.Heap` fields)."""
    if buckets & (buckets - 1) or buckets < 64:
        raise ValueError("the wheel's bucket count must be a power of two of at least 64")
    qs = np.zeros(QS_SIZE, dtype=np.int64)
    qs[QS_SHIFT], qs[QS_MASK] = shift, buckets - 1
    state = seed * 0xD1B54A32D192ED03 % 2**64 or 0x9E3779B97F4A7C15
    qs[QS_RNG] = state - 2**64 if state >= 2**63 else state
    chunks = _chunks_for(capacity, buckets)
    next_chunk = np.arange(1, chunks + 1, dtype=np.int64)
    next_chunk[-1] = -1
    return {
        "qs": qs,
        "chunk": np.zeros(2 * CHUNK * chunks, dtype=np.int64),
        "chunk_len": np.zeros(chunks, dtype=np.int64),
        "chunk_next": next_chunk,
        "b_head": np.full(buckets, -1, dtype=np.int64),
        "b_tail": np.full(buckets, -1, dtype=np.int64),
        "bits": np.zeros(buckets // 64, dtype=np.uint64),
        "cur": np.zeros(2 * capacity, dtype=np.int64),
        "far": np.zeros(2 * capacity, dtype=np.int64),
    }


def queue_capacity(arrays: dict[str, np.ndarray]) -> int:
    return len(arrays["cur"]) // 2


def grow_queue(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The same queue with twice the room: chunk indices kept, the new chunks in front of the free list."""
    capacity, buckets = queue_capacity(arrays), len(arrays["b_head"])
    old = len(arrays["chunk_len"])
    chunks = _chunks_for(2 * capacity, buckets)
    grown = dict(arrays)
    for name in ("cur", "far"):
        grown[name] = np.concatenate([arrays[name], np.zeros_like(arrays[name])])
    grown["chunk"] = np.concatenate([arrays["chunk"], np.zeros(2 * CHUNK * (chunks - old), dtype=np.int64)])
    grown["chunk_len"] = np.concatenate([arrays["chunk_len"], np.zeros(chunks - old, dtype=np.int64)])
    extra = np.arange(old + 1, chunks + 1, dtype=np.int64)
    extra[-1] = arrays["qs"][QS_FREE]
    grown["chunk_next"] = np.concatenate([arrays["chunk_next"], extra])
    grown["qs"][QS_FREE] = old
    return grown


# -- the far heap: (time, payload) pairs, 4-ary ------------------------------------------------------
@kernel
def _far_push(far: np.ndarray, size: int, t: int, payload: int) -> None:
    i = size
    while i > 0:
        parent = (i - 1) >> 2
        if far[2 * parent] <= t:
            break
        far[2 * i] = far[2 * parent]
        far[2 * i + 1] = far[2 * parent + 1]
        i = parent
    far[2 * i] = t
    far[2 * i + 1] = payload


@kernel
def _far_drop_top(far: np.ndarray, size: int) -> None:
    """Remove the top of the far heap of `size` entries (the caller counts it)."""
    size -= 1
    if size == 0:
        return
    t, payload = far[2 * size], far[2 * size + 1]
    i = 0
    while True:
        first = 4 * i + 1
        if first >= size:
            break
        best = first
        for child in range(first + 1, min(first + 4, size)):
            if far[2 * child] < far[2 * best]:
                best = child
        if far[2 * best] >= t:
            break
        far[2 * i] = far[2 * best]
        far[2 * i + 1] = far[2 * best + 1]
        i = best
    far[2 * i] = t
    far[2 * i + 1] = payload


# -- the bucket being popped ---------------------------------------------------------------------------
@kernel
def _into_current(q: Any, t: int, payload: int) -> None:
    """An event of the bucket being popped: into `cur` after every pending event not later."""
    qs = q.qs
    c = q.cur
    head, end = qs[QS_HEAD], qs[QS_END]
    if 2 * end == c.shape[0]:  # slide the pending events back to the start
        for k in range(2 * (end - head)):
            c[k] = c[2 * head + k]
        head, end = 0, end - head
        qs[QS_HEAD] = 0
    i = end
    while i > head and c[2 * i - 2] > t:
        c[2 * i] = c[2 * i - 2]
        c[2 * i + 1] = c[2 * i - 1]
        i -= 1
    c[2 * i] = t
    c[2 * i + 1] = payload
    qs[QS_END] = end + 1


@kernel
def _sift_down(c: np.ndarray, i: int, size: int) -> None:
    """Binary max-heap sift-down by time, for the heapsort of `_sort_by_time`."""
    while True:
        child = 2 * i + 1
        if child >= size:
            return
        if child + 1 < size and c[2 * child + 2] > c[2 * child]:
            child += 1
        if c[2 * i] >= c[2 * child]:
            return
        c[2 * i], c[2 * child] = c[2 * child], c[2 * i]
        c[2 * i + 1], c[2 * child + 1] = c[2 * child + 1], c[2 * i + 1]
        i = child


@kernel
def _sort_by_time(c: np.ndarray, count: int) -> None:
    """Sort cur[0:count] by time: insertion for a few (linear when already in order), else heapsort."""
    if count <= _INSERTION_SORT_MAX:
        for j in range(1, count):
            t, payload = c[2 * j], c[2 * j + 1]
            i = j
            while i > 0 and c[2 * i - 2] > t:
                c[2 * i] = c[2 * i - 2]
                c[2 * i + 1] = c[2 * i - 1]
                i -= 1
            c[2 * i] = t
            c[2 * i + 1] = payload
        return
    for i in range(count // 2 - 1, -1, -1):
        _sift_down(c, i, count)
    for end in range(count - 1, 0, -1):
        c[0], c[2 * end] = c[2 * end], c[0]
        c[1], c[2 * end + 1] = c[2 * end + 1], c[1]
        _sift_down(c, 0, end)


@kernel
def _below(qs: np.ndarray, n: int) -> int:
    """A seeded draw in [0, n) from the queue's xorshift64 generator."""
    x = np.uint64(qs[QS_RNG])
    x ^= x << np.uint64(13)
    x ^= x >> np.uint64(7)
    x ^= x << np.uint64(17)
    qs[QS_RNG] = np.int64(x)
    return int(((x >> np.uint64(32)) * np.uint64(n)) >> np.uint64(32))  # no division (Lemire)


@kernel
def _shuffle_ties(qs: np.ndarray, c: np.ndarray, count: int) -> None:
    """Shuffle each run of equal times of the sorted cur[0:count] (Fisher-Yates)."""
    start = 0
    while start < count:
        stop = start + 1
        while stop < count and c[2 * stop] == c[2 * start]:
            stop += 1
        for i in range(stop - 1, start, -1):
            j = start + _below(qs, i - start + 1)
            c[2 * i + 1], c[2 * j + 1] = c[2 * j + 1], c[2 * i + 1]  # same time: swap the payloads
        start = stop


# -- push and pop ---------------------------------------------------------------------------------------
@kernel_inline
def push(q: Any, t: int, kind: int, arg: int) -> None:
    """Schedule an event (the caller guarantees room)."""
    qs = q.qs
    payload = arg << KIND_BITS | kind
    bucket = t >> qs[QS_SHIFT]
    ahead = bucket - qs[QS_BUCKET]
    if ahead <= 0:
        _into_current(q, t, payload)
    elif ahead <= qs[QS_MASK]:
        slot = bucket & qs[QS_MASK]
        tail = q.b_tail[slot]
        if tail < 0 or q.chunk_len[tail] == CHUNK:
            fresh = qs[QS_FREE]
            qs[QS_FREE] = q.chunk_next[fresh]
            q.chunk_next[fresh] = -1
            q.chunk_len[fresh] = 0
            if tail < 0:
                q.b_head[slot] = fresh
                q.bits[slot >> 6] |= np.uint64(1) << np.uint64(slot & 63)
            else:
                q.chunk_next[tail] = fresh
            q.b_tail[slot] = fresh
            tail = fresh
        at = 2 * (CHUNK * tail + q.chunk_len[tail])
        q.chunk[at] = t
        q.chunk[at + 1] = payload
        q.chunk_len[tail] += 1
        qs[QS_WHEEL] += 1
    else:
        _far_push(q.far, qs[QS_FAR], t, payload)
        qs[QS_FAR] += 1


@kernel
def _next_slot(q: Any) -> int:
    """The wheel's first non-empty bucket after the one being popped (the wheel must hold events)."""
    qs = q.qs
    mask = qs[QS_MASK]
    words = (mask + 1) >> 6
    start = (qs[QS_BUCKET] + 1) & mask
    w = start >> 6
    word = q.bits[w] & (np.uint64(0xFFFFFFFFFFFFFFFF) << np.uint64(start & 63))
    for _ in range(words + 1):
        if word != np.uint64(0):
            return (w << 6) + cttz(word)
        w = (w + 1) & (words - 1)
        word = q.bits[w]
    return -1  # not reached while QS_WHEEL > 0


@kernel
def _refill(q: Any) -> None:
    """`cur` is empty: make the earliest bucket holding an event (wheel or far heap) the current one,
    and move its wheel events into `cur` in pop order."""
    qs = q.qs
    qs[QS_HEAD] = 0
    qs[QS_END] = 0
    wheel_bucket = -1
    slot = -1
    if qs[QS_WHEEL] > 0:
        slot = _next_slot(q)
        wheel_bucket = qs[QS_BUCKET] + ((slot - qs[QS_BUCKET]) & qs[QS_MASK])
    far_bucket = -1
    if qs[QS_FAR] > 0:
        far_bucket = q.far[0] >> qs[QS_SHIFT]
    if wheel_bucket < 0 or (far_bucket >= 0 and far_bucket < wheel_bucket):
        if far_bucket >= 0:
            qs[QS_BUCKET] = far_bucket  # the wheel's events all stay within W buckets of it
        return
    qs[QS_BUCKET] = wheel_bucket
    piece = q.b_head[slot]
    c = q.cur
    count = 0
    while piece >= 0:
        first = 2 * CHUNK * piece
        for k in range(2 * q.chunk_len[piece]):
            c[2 * count + k] = q.chunk[first + k]
        count += q.chunk_len[piece]
        following = q.chunk_next[piece]
        q.chunk_next[piece] = qs[QS_FREE]
        qs[QS_FREE] = piece
        piece = following
    _sort_by_time(c, count)
    _shuffle_ties(qs, c, count)
    qs[QS_END] = count
    qs[QS_WHEEL] -= count
    q.b_head[slot] = -1
    q.b_tail[slot] = -1
    q.bits[slot >> 6] &= ~(np.uint64(1) << np.uint64(slot & 63))


@kernel_inline
def peek(q: Any) -> tuple[int, int, int, bool]:
    """(time, kind, arg, from the far heap) of the next event; the queue must not be empty."""
    qs = q.qs
    if qs[QS_HEAD] == qs[QS_END]:
        _refill(q)
    head = qs[QS_HEAD]
    c = q.cur
    if head < qs[QS_END] and (qs[QS_FAR] == 0 or c[2 * head] <= q.far[0]):
        payload = c[2 * head + 1]
        return c[2 * head], payload & _KIND_MASK, payload >> KIND_BITS, False
    payload = q.far[1]
    return q.far[0], payload & _KIND_MASK, payload >> KIND_BITS, True


@kernel_inline
def pop(q: Any) -> tuple[int, int, int]:
    """Remove the next event; returns (time, kind, arg). The queue must not be empty."""
    qs = q.qs
    t, kind, arg, far = peek(q)
    if far:
        _far_drop_top(q.far, qs[QS_FAR])
        qs[QS_FAR] -= 1
    else:
        qs[QS_HEAD] += 1
    return t, kind, arg


@kernel_inline
def schedule(heap: Any, sc: np.ndarray, t: int, kind: int, arg: int) -> None:
    """Push an event onto the run's queue (`state.Heap`; the pending count is sc[SC_HEAP])."""
    push(heap, t, kind, arg)
    sc[SC_HEAP] += 1
