"""The packet engine's event queue (`packet/heap.py`): a timing wheel over a far heap.

Checked against a plain model (sorting by time): every event pops exactly once, in order of time,
whatever mix of near, same-bucket, same-instant and far-future pushes; ties pop in a seeded order.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from services.simulator.packet.heap import grow_queue, new_queue, pop, push, queue_capacity
from services.simulator.packet.state import Heap

SHIFT, BUCKETS = 8, 1024  # 256 ps buckets; the wheel spans 262 ns, anything later goes to the far heap


def _queue(capacity: int = 4096, seed: int = 1) -> dict[str, np.ndarray]:
    return new_queue(capacity, SHIFT, BUCKETS, seed)


def _drain(arrays: dict[str, np.ndarray], count: int) -> list[tuple[int, int, int]]:
    q = Heap(**arrays)
    return [tuple(int(v) for v in pop(q)) for _ in range(count)]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.one_of(st.integers(0, 2_000), st.integers(0, 300_000), st.integers(0, 10**9)),
            st.integers(0, 12),
        ),
        min_size=1,
        max_size=400,
    )
)
def test_events_pop_once_each_in_order_of_time(events):
    arrays = _queue()
    q = Heap(**arrays)
    for arg, (t, kind) in enumerate(events):
        push(q, t, kind, arg)
    popped = _drain(arrays, len(events))
    assert [t for t, _, _ in popped] == sorted(t for t, _ in events)
    assert sorted(popped) == sorted((t, kind, arg) for arg, (t, kind) in enumerate(events))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 400_000)), min_size=1, max_size=300))
def test_pushes_while_popping_keep_time_order(steps):
    """The loop's pattern: pop an event, schedule more at now + delay (0: the same instant)."""
    arrays = _queue()
    q = Heap(**arrays)
    push(q, 0, 1, 0)
    pending, now, arg, popped = 1, 0, 1, []
    for fan_out, delay in steps:
        if pending == 0:
            break
        t, _, a = pop(q)
        pending -= 1
        assert t >= now
        now = int(t)
        popped.append(int(a))
        for k in range(fan_out):
            push(q, now + delay * k, 0, arg)
            arg, pending = arg + 1, pending + 1
    rest = _drain(arrays, pending)
    times = [t for t, _, _ in rest]
    assert times == sorted(times) and (not times or times[0] >= now)
    assert sorted(popped + [a for _, _, a in rest]) == list(range(arg))


def test_ties_pop_in_a_seeded_order_not_the_push_order():
    def order(seed: int) -> list[int]:
        arrays = _queue(seed=seed)
        q = Heap(**arrays)
        for arg in range(64):
            push(q, 5_000, 0, arg)
        return [a for _, _, a in _drain(arrays, 64)]

    assert order(1) == order(1)
    assert order(1) != order(2)
    assert order(1) != list(range(64))


def test_growing_keeps_every_event():
    arrays = _queue(capacity=64)
    q = Heap(**arrays)
    times = [(37 * i) % 5_000_000 for i in range(60)]
    for arg, t in enumerate(times):
        push(q, t, 2, arg)
    grown = grow_queue(arrays)
    assert queue_capacity(grown) == 128
    q = Heap(**grown)
    for arg, t in enumerate(times, start=60):
        push(q, t + 1, 3, arg)
    popped = _drain(grown, 120)
    assert [t for t, _, _ in popped] == sorted(times + [t + 1 for t in times])
    assert sorted(a for _, _, a in popped) == list(range(120))
