"""Go-Back-N reliable connections: the receiver keeps only the packet it expects and ACKs (or NAKs
a gap once); the sender resends from the NAKed or unacknowledged PSN. ACKs and NAKs travel back
after the flow's path latency and are never queued or lost; one pending timer event per flow checks
its retransmission deadline lazily."""

from __future__ import annotations

from services.simulator.packet.collective import flow_accounted
from services.simulator.packet.heap import schedule
from services.simulator.packet.kernel import kernel
from services.simulator.packet.layout import (
    EV_ACK,
    EV_RTO,
    FI_REC_POINT,
    FI_REC_PS,
    FI_REC_START,
    PR_ACK_EVERY,
    PR_RTO,
    RTO_GEN_BITS,
    RTO_GEN_MASK,
    SC_DELIVERED,
    SC_DELIVERED_BYTES,
    SC_DISCARDED,
    SC_LAST_DELIVERY,
    SC_NAKS,
    SC_TIMEOUTS,
)
from services.simulator.packet.nic import link, rto_arg
from services.simulator.packet.transmit import free_packet

__all__ = ["ack_arrives", "receive_in_order", "timeout_fires"]


@kernel
def _send_ack(run, heap, fl, f, psn, nak, now):
    fl.pend[f] += 1
    schedule(heap, run.sc, now + fl.ack_lat[f], EV_ACK, (f << 26) | (nak << 25) | psn)


@kernel
def _go_back(ch, fl, f, psn, now):
    # Resend everything from psn on; the recovery lasts until what was sent before is acknowledged.
    # Returns the NIC port to wake (the caller pulls), or -1.
    if fl.fi[f, FI_REC_START] < 0:
        fl.fi[f, FI_REC_START] = now
        fl.fi[f, FI_REC_POINT] = fl.high[f]
    fl.snd_nxt[f] = psn
    c = fl.first_ch[f]
    if fl.linked[f] == 0:
        link(ch, fl, c, f)
    return c if ch.busy[c] == 0 else -1


@kernel
def receive_in_order(run, heap, fl, rob, qps, tr, pk, p, now):
    """A Go-Back-N receiver takes packet p if it is the one it expects, else discards it."""
    sc = run.sc
    f = pk.flow[p]
    sc[SC_DELIVERED] += 1
    seq = pk.seq[p]
    expected = fl.next_seq[f]
    if seq == expected:
        payload = pk.payload[p]
        sc[SC_DELIVERED_BYTES] += payload
        sc[SC_LAST_DELIVERY] = max(sc[SC_LAST_DELIVERY], now)  # (a sink's deliveries come early)
        fl.recv[f] += payload
        fl.next_seq[f] = expected + 1
        fl.nak[f] = 0
        fl.since_ack[f] += 1
        done = expected + 1 >= fl.npkts[f]
        if done or fl.since_ack[f] >= run.pr[PR_ACK_EVERY]:
            fl.since_ack[f] = 0
            _send_ack(run, heap, fl, f, expected + 1, 0, now)
        free_packet(run, pk, p)
        if done and fl.finish[f] < 0:
            flow_accounted(run, heap, fl, rob, qps, tr, f, now)
        return
    sc[SC_DISCARDED] += 1
    if seq > expected and fl.nak[f] == 0:  # one NAK per gap
        fl.nak[f] = 1
        _send_ack(run, heap, fl, f, expected, 1, now)
    free_packet(run, pk, p)


@kernel
def ack_arrives(run, ch, fl, arg, now):
    """EV_ACK (arg: flow << 26 | nak << 25 | psn); returns the NIC port to pull from, or -1."""
    f = arg >> 26
    nak = (arg >> 25) & 1
    psn = arg & ((1 << 25) - 1)
    if psn > fl.snd_una[f]:
        fl.snd_una[f] = psn
        fl.rto_at[f] = now + run.pr[PR_RTO] if psn < fl.npkts[f] else -1  # the pending timer re-arms lazily
        if fl.fi[f, FI_REC_START] >= 0 and psn >= fl.fi[f, FI_REC_POINT]:
            fl.fi[f, FI_REC_PS] += now - fl.fi[f, FI_REC_START]
            fl.fi[f, FI_REC_START] = -1
    if nak == 1 and fl.snd_nxt[f] > psn:
        run.sc[SC_NAKS] += 1
        return _go_back(ch, fl, f, psn, now)
    c = fl.first_ch[f]
    if ch.busy[c] == 0 and ch.rr[c] >= 0:
        return c  # the window may have opened
    return -1


@kernel
def timeout_fires(run, heap, ch, fl, arg, now):
    """EV_RTO (arg: `rto_arg`): the flow's timer may have expired; returns the NIC port to pull
    from, or -1. A timer of the slot's earlier occupant does nothing (the occupant had disarmed it:
    its slot was freed only with `rto_at` -1)."""
    f = arg >> RTO_GEN_BITS
    if arg & RTO_GEN_MASK != fl.gen[f] & RTO_GEN_MASK:
        return -1
    rto = run.pr[PR_RTO]
    if fl.rto_at[f] >= 0 and fl.snd_una[f] < fl.npkts[f]:
        if now < fl.rto_at[f]:  # progress since it was armed: wait until the new deadline
            schedule(heap, run.sc, fl.rto_at[f], EV_RTO, rto_arg(fl, f))
        else:
            run.sc[SC_TIMEOUTS] += 1
            fl.rto_at[f] = now + rto
            schedule(heap, run.sc, now + rto, EV_RTO, rto_arg(fl, f))
            return _go_back(ch, fl, f, fl.snd_una[f], now)
    return -1
