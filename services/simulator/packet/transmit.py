"""A port puts a packet on its wire; a packet slot goes back to the pool."""

from __future__ import annotations

import numpy as np

from services.simulator.packet.credits import leave_input_buffer
from services.simulator.packet.heap import schedule
from services.simulator.packet.kernel import kernel_inline
from services.simulator.packet.layout import (
    CH_DELAY_PS,
    CH_FREE_AT,
    CH_TX_BYTES,
    CH_TX_PACKETS,
    CN_CREDITS,
    EV_ARRIVE,
    EV_TX_DONE,
    PR_CREDITS,
    SC_FREE,
    SC_FREE_COUNT,
    SC_LIVE,
)
from services.simulator.packet.recording import record_tx

__all__ = ["free_packet", "start_tx"]


@kernel_inline
def start_tx(run, heap, ch, series, pk, c, p, now, arrival=True):
    """Channel c starts serialising packet p; it arrives at the far end a link delay after (an
    EV_ARRIVE then, unless `arrival` is False: the caller handles it). Returns that time.

    A switch port needs an EV_TX_DONE only when packets wait behind this one (the caller schedules
    it); a NIC port always does, to pull its next packet. This halves the events of an uncongested hop.
    """
    wire = pk.wire[p]
    duration = int(wire * ch.ps_per_byte[c] + 0.5)
    ch.hot[c, CH_FREE_AT] = now + duration
    pk.ch[p] = c
    ch.hot[c, CH_TX_BYTES] += wire
    ch.hot[c, CH_TX_PACKETS] += 1
    if ch.flow_bits.shape[1] > 0:
        f = pk.flow[p]
        ch.flow_bits[c, f >> 6] |= np.uint64(1) << np.uint64(f & 63)
    record_tx(series, run.pr, run.pf, c, now, duration, wire)
    if ch.from_host[c]:
        ch.busy[c] = 1
        schedule(heap, run.sc, now + duration, EV_TX_DONE, c)
    if run.pr[PR_CREDITS] == 1:
        ch.cn[c, CN_CREDITS] -= wire
        leave_input_buffer(run, heap, ch, pk, p, now)
    at = now + duration + ch.hot[c, CH_DELAY_PS]
    if arrival:
        schedule(heap, run.sc, at, EV_ARRIVE, p)
    return at


@kernel_inline
def free_packet(run, pk, p):
    """Packet slot p goes back to the free list (its flow -1: a free slot names no flow)."""
    sc = run.sc
    pk.flow[p] = -1
    pk.next[p] = sc[SC_FREE]
    sc[SC_FREE] = p
    sc[SC_FREE_COUNT] += 1
    sc[SC_LIVE] -= 1
