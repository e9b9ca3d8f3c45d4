"""The sending NICs: each port pulls its next packet when it is free, round-robin over the active
flows (QPs) bound to it, so packets exist only while they are in flight."""

from __future__ import annotations

from services.simulator.packet.collective import flow_accounted, flow_left
from services.simulator.packet.credits import has_credit
from services.simulator.packet.dcqcn import arm_timers, paced
from services.simulator.packet.heap import schedule
from services.simulator.packet.kernel import kernel, kernel_inline
from services.simulator.packet.layout import (
    CN_DOWN,
    CN_PACE_AT,
    EV_PACE,
    EV_RTO,
    FI_RESENT,
    FI_RESENT_BYTES,
    PR_CREDITS,
    PR_DCQCN,
    PR_GBN,
    PR_HEADER,
    PR_LINK_EVENTS,
    PR_MARK_FLOW,
    PR_MARK_PSN,
    PR_MAX_HOPS,
    PR_MTU,
    PR_RATE_CAP,
    PR_ROB_WORDS,
    PR_RTO,
    PR_WINDOW,
    QF_LINE,
    QI_ACTIVE,
    QI_CAP,
    QI_CC,
    QI_NEXT_TX,
    RTO_GEN_BITS,
    RTO_GEN_MASK,
    SC_FREE,
    SC_FREE_COUNT,
    SC_INJECTED,
    SC_LIVE,
    SC_MARK_DONE,
    SC_PEAK_LIVE,
    SC_RESENT,
    SC_RESENT_BYTES,
    SC_ROB_FREE,
    SC_ROB_FREE_COUNT,
)
from services.simulator.packet.transmit import start_tx

__all__ = ["activate", "link", "pull", "rto_arg"]


@kernel_inline
def rto_arg(fl, f):
    """An EV_RTO's argument: flow slot f and its occupant, so that a timer left by an earlier
    occupant of a reused slot (a streamed ring) is told apart and ignored (`timeout_fires`)."""
    return (f << RTO_GEN_BITS) | (fl.gen[f] & RTO_GEN_MASK)


@kernel
def link(ch, fl, c, f):
    """Add flow f to NIC port c's ring of flows with packets to send, last in this round."""
    head = ch.rr[c]
    if head < 0:
        fl.act_next[f] = f
        fl.act_prev[f] = f
        ch.rr[c] = f
    else:
        before = fl.act_prev[head]
        fl.act_next[before] = f
        fl.act_prev[f] = before
        fl.act_next[f] = head
        fl.act_prev[head] = f
    fl.linked[f] = 1
    ch.ring_len[c] += 1


@kernel
def _unlink(ch, fl, c, f):
    following = fl.act_next[f]
    if following == f:
        ch.rr[c] = -1
    else:
        before = fl.act_prev[f]
        fl.act_next[before] = following
        fl.act_prev[following] = before
        if ch.rr[c] == f:
            ch.rr[c] = following
    fl.linked[f] = 0
    ch.ring_len[c] -= 1


@kernel
def _next_sendable(run, heap, ch, fl, qps, c, now):
    """The first flow of port c's ring that may send now (Go-Back-N window, rate limiter), or -1
    after scheduling an EV_PACE for the earliest rate-limited one."""
    pr = run.pr
    gbn = pr[PR_GBN] == 1
    capped = pr[PR_RATE_CAP] == 1
    paced_qps = pr[PR_DCQCN] == 1 or capped
    window_pkts = pr[PR_WINDOW]
    qi = qps.qi
    f = ch.rr[c]
    tried = 0
    wake = -1
    while True:
        if gbn and fl.snd_nxt[f] - fl.snd_una[f] >= window_pkts:
            pass  # its window is full
        elif (
            paced_qps
            and (qi[fl.qp[f], QI_CC] == 1 or (capped and qi[fl.qp[f], QI_CAP] == 1))
            and qi[fl.qp[f], QI_NEXT_TX] > now
        ):
            if wake < 0 or qi[fl.qp[f], QI_NEXT_TX] < wake:
                wake = qi[fl.qp[f], QI_NEXT_TX]
        else:
            return f
        f = fl.act_next[f]
        tried += 1
        if tried >= ch.ring_len[c]:
            # Every flow waits for an ACK (which restarts the port) or its rate limiter.
            pending = ch.cn[c, CN_PACE_AT]
            if wake >= 0 and (pending <= now or wake < pending):
                ch.cn[c, CN_PACE_AT] = wake
                schedule(heap, run.sc, wake, EV_PACE, c)
            return -1


@kernel_inline
def pull(run, heap, ch, series, fl, qps, tr, pk, c, now):
    """The NIC behind channel c sends the next packet of its active flows, round-robin (skipping,
    under Go-Back-N, the flows whose window is full, and rate-limited flows not yet due)."""
    sc, pr = run.sc, run.pr
    gbn = pr[PR_GBN] == 1
    dcqcn = pr[PR_DCQCN] == 1
    capped = pr[PR_RATE_CAP] == 1
    mtu = pr[PR_MTU]
    header = pr[PR_HEADER]
    f = ch.rr[c]
    if f < 0 or ch.paused[c] or (pr[PR_LINK_EVENTS] == 1 and ch.cn[c, CN_DOWN]):
        return
    if gbn or dcqcn or capped:
        f = _next_sendable(run, heap, ch, fl, qps, c, now)
        if f < 0:
            return
    seq = fl.snd_nxt[f] if gbn else fl.sent[f] // mtu
    payload = min(mtu, fl.size[f] - seq * mtu)
    if pr[PR_CREDITS] == 1 and not has_credit(ch, c, payload + header, now):
        return  # the credit's return restarts the port
    p = sc[SC_FREE]
    sc[SC_FREE] = pk.next[p]
    sc[SC_FREE_COUNT] -= 1
    sc[SC_LIVE] += 1
    if sc[SC_LIVE] > sc[SC_PEAK_LIVE]:
        sc[SC_PEAK_LIVE] = sc[SC_LIVE]
    pk.flow[p] = f
    pk.seq[p] = seq
    pk.payload[p] = payload
    pk.wire[p] = payload + header
    pk.hop[p] = 1  # hop 0 is this NIC's channel
    pk.ecn[p] = 0
    pk.ingress[p] = -1
    sc[SC_INJECTED] += 1
    if f == pr[PR_MARK_FLOW] and seq == pr[PR_MARK_PSN] and sc[SC_MARK_DONE] == 0:
        pk.ecn[p] = 1  # the test hook: one CE mark, as if a switch had set it
        sc[SC_MARK_DONE] = 1
    qi = qps.qi
    if dcqcn and qi[fl.qp[f], QI_CC] == 1:
        paced(run, qps, fl.qp[f], payload + header, now)
    elif capped and qi[fl.qp[f], QI_CAP] == 1:  # a static limiter: wire bytes at the cap
        q = fl.qp[f]
        qi[q, QI_NEXT_TX] = max(qi[q, QI_NEXT_TX], now) + int((payload + header) * 8e12 / qps.qf[q, QF_LINE])
    if gbn:
        fl.snd_nxt[f] = seq + 1
        if seq < fl.high[f]:
            sc[SC_RESENT] += 1
            sc[SC_RESENT_BYTES] += payload
            fl.fi[f, FI_RESENT] += 1
            fl.fi[f, FI_RESENT_BYTES] += payload
        else:
            fl.high[f] = seq + 1
        done_sending = fl.snd_nxt[f] >= fl.npkts[f]
        if fl.rto_at[f] < 0:
            fl.rto_at[f] = now + pr[PR_RTO]
            schedule(heap, sc, now + pr[PR_RTO], EV_RTO, rto_arg(fl, f))
    else:
        fl.sent[f] += payload
        done_sending = fl.sent[f] >= fl.size[f]
    if done_sending:
        _unlink(ch, fl, c, f)
        if fl.left[f] == 0:
            fl.left[f] = 1
            flow_left(run, heap, fl, tr, f, now)
    else:
        ch.rr[c] = fl.act_next[f]
    start_tx(run, heap, ch, series, pk, c, p, now)


@kernel
def activate(run, heap, ch, series, fl, rob, qps, tr, pk, f, now):
    """Flow f starts: it takes a reorder window and joins its NIC port's ring."""
    sc, pr = run.sc, run.pr
    fl.start[f] = now
    if pr[PR_DCQCN] == 1 and fl.size[f] > 0:
        q = fl.qp[f]
        qps.qi[q, QI_ACTIVE] += 1
        if qps.qi[q, QI_CC] == 1:
            arm_timers(run, heap, qps, q, now)
    if fl.size[f] == 0:
        flow_left(run, heap, fl, tr, f, now)
        flow_accounted(run, heap, fl, rob, qps, tr, f, now)
        return
    slot = sc[SC_ROB_FREE]
    sc[SC_ROB_FREE] = rob.next[slot]
    sc[SC_ROB_FREE_COUNT] -= 1
    fl.rob_slot[f] = slot
    for w in range(pr[PR_ROB_WORDS]):
        rob.bits[slot, w] = 0
        rob.lost[slot, w] = 0
    max_hops = pr[PR_MAX_HOPS]
    for h in range(slot * max_hops, (slot + 1) * max_hops):
        fl.fl_ch[h] = -1
    c = fl.first_ch[f]
    link(ch, fl, c, f)
    if ch.busy[c] == 0:
        pull(run, heap, ch, series, fl, qps, tr, pk, c, now)
