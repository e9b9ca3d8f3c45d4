"""The receiving NIC's reorder window of a flow (the reorder buffer spraying needs).

Bit k of a flow's window is packet next_seq + 1 + k (next_seq itself is the first one not yet
settled). A packet settles when it is delivered or dropped; `lost` marks the dropped, which hold no
bytes. Packets held = delivered ones waiting for an earlier one.
"""

from __future__ import annotations

import numpy as np

from services.simulator.packet.kernel import kernel
from services.simulator.packet.layout import (
    PR_MTU,
    PR_ROB_WORDS,
    SC_OUT_OF_ORDER,
    SC_ROB_OVERFLOW,
    SC_ROB_PEAK_BYTES,
)

__all__ = ["settle"]


@kernel
def _payload_of(pr, fl, f, seq):
    mtu = pr[PR_MTU]
    return min(mtu, fl.size[f] - seq * mtu)


@kernel
def _shift_window(bits_array, slot, shift, rob_words):
    words = shift >> 6
    bits = shift & 63
    for w in range(rob_words):
        src = w + words
        lo = bits_array[slot, src] if src < rob_words else np.uint64(0)
        hi = bits_array[slot, src + 1] if src + 1 < rob_words else np.uint64(0)
        if bits == 0:
            bits_array[slot, w] = lo
        else:
            bits_array[slot, w] = (lo >> np.uint64(bits)) | (hi << np.uint64(64 - bits))


@kernel
def _release_window(pr, fl, rob, f, slot, base, shift):
    _shift_window(rob.bits, slot, shift, pr[PR_ROB_WORDS])
    _shift_window(rob.lost, slot, shift, pr[PR_ROB_WORDS])
    fl.next_seq[f] = base + shift


@kernel
def settle(run, fl, rob, f, seq, delivered):
    """Packet seq of flow f is delivered (True) or lost (False): release what waited for it."""
    sc, pr = run.sc, run.pr
    window = pr[PR_ROB_WORDS] * 64
    slot = fl.rob_slot[f]
    base = fl.next_seq[f]
    offset = seq - base - 1
    if offset >= window:
        # Too far ahead for the window: stop waiting for the oldest unsettled packets (counted).
        need = offset - window + 1
        sc[SC_ROB_OVERFLOW] += 1  # `base` itself
        for k in range(need - 1):
            bit = np.uint64(1) << np.uint64(k & 63)
            if rob.bits[slot, k >> 6] & bit:
                if not rob.lost[slot, k >> 6] & bit:
                    fl.rob_bytes[f] -= _payload_of(pr, fl, f, base + 1 + k)
            else:
                sc[SC_ROB_OVERFLOW] += 1
        _release_window(pr, fl, rob, f, slot, base, need)
        base += need
        offset = seq - base - 1
    if offset < 0:  # the first unsettled packet: release everything that waited for it
        expected = base + 1
        while expected - base - 1 < window:
            k = expected - base - 1
            bit = np.uint64(1) << np.uint64(k & 63)
            if not rob.bits[slot, k >> 6] & bit:
                break
            if not rob.lost[slot, k >> 6] & bit:
                fl.rob_bytes[f] -= _payload_of(pr, fl, f, expected)
            expected += 1
        _release_window(pr, fl, rob, f, slot, base, expected - base)
        return
    bit = np.uint64(1) << np.uint64(offset & 63)
    rob.bits[slot, offset >> 6] |= bit
    if delivered:
        sc[SC_OUT_OF_ORDER] += 1
        fl.rob_bytes[f] += _payload_of(pr, fl, f, seq)
        if fl.rob_bytes[f] > sc[SC_ROB_PEAK_BYTES]:
            sc[SC_ROB_PEAK_BYTES] = fl.rob_bytes[f]
    else:
        rob.lost[slot, offset >> 6] |= bit
