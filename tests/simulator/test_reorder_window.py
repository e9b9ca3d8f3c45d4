"""The receiving NIC's reorder window (packet/reorder.py), checked against a model of it through
shuffled arrivals and drops: the first unsettled packet is the first one missing, the window's bits
are exactly the packets settled beyond it, and a window is overrun only by a packet further ahead
than it reaches."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pytest

from services.simulator.packet import layout as L
from services.simulator.packet.reorder import settle

MTU = 1000


class Run(NamedTuple):
    sc: np.ndarray
    pr: np.ndarray


class Flow(NamedTuple):  # the flow fields `settle` reads
    rob_slot: np.ndarray
    next_seq: np.ndarray
    size: np.ndarray
    rob_bytes: np.ndarray


class Window(NamedTuple):
    bits: np.ndarray
    lost: np.ndarray


def arrivals(rng, packets, spread, loss):
    """Each packet's settling (seq, delivered), in an order where a packet overtakes up to `spread`
    packets sent before it."""
    order = np.argsort(np.arange(packets) + rng.uniform(0, spread, packets), kind="stable")
    return [(int(s), bool(rng.uniform() >= loss)) for s in order]


def in_window(words, base):
    """The packets whose bits are set in a window whose first unsettled packet is `base`."""
    return {base + 1 + k for k in range(64 * len(words)) if int(words[k >> 6]) >> (k & 63) & 1}


@pytest.mark.parametrize(
    ("spread", "loss", "words"), [(0, 0.0, 2), (0, 0.05, 2), (20, 0.0, 1), (40, 0.1, 1), (200, 0.02, 1)]
)
def test_the_window_holds_what_arrived_ahead_and_releases_it_in_order(spread, loss, words):
    rng = np.random.default_rng(7)
    packets = 3000
    run = Run(np.zeros(L.SC_SIZE, dtype=np.int64), np.zeros(L.PR_SIZE, dtype=np.int64))
    run.pr[L.PR_MTU], run.pr[L.PR_ROB_WORDS] = MTU, words
    flow = Flow(
        np.array([1], dtype=np.int32),  # its window is slot 1
        np.array([0], dtype=np.int64),
        np.array([packets * MTU - 123], dtype=np.int64),  # a short last packet
        np.array([0], dtype=np.int64),
    )
    window = Window(np.zeros((3, words), dtype=np.uint64), np.zeros((3, words), dtype=np.uint64))
    size = int(flow.size[0])
    settled: set[int] = set()
    dropped: set[int] = set()
    overflowed = False
    for seq, delivered in arrivals(rng, packets, spread, loss):
        before = int(run.sc[L.SC_ROB_OVERFLOW])
        settle(run, flow, window, 0, seq, delivered)
        overflowed |= run.sc[L.SC_ROB_OVERFLOW] > before
        settled.add(seq)
        if not delivered:
            dropped.add(seq)
        if not overflowed:  # the model below holds until the window is first overrun
            base = int(flow.next_seq[0])
            assert set(range(base)) <= settled and base not in settled, seq
            ahead = {s for s in settled if s > base}
            assert ahead == in_window(window.bits[1], base), seq
            assert ahead & dropped == in_window(window.lost[1], base), seq
            held = sum(min(MTU, size - s * MTU) for s in ahead - dropped)
            assert flow.rob_bytes[0] == held, seq
    if not overflowed:
        assert flow.next_seq[0] == packets and flow.rob_bytes[0] == 0
        assert not window.bits.any() and not window.lost.any()
    assert overflowed == (spread >= 64 * words)
