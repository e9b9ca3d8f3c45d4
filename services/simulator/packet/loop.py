"""The compiled event loop of the packet engine.

Model (one directed channel per link direction, store-and-forward):

- A NIC pulls: when its uplink channel is free it takes the next packet, round-robin over the
  active flows (QPs) bound to that channel, so packets exist only while they are in flight.
- A packet is serialised at the channel's rate (wire bytes = payload + header), then propagates;
  it arrives at the far end `prop + switch latency` later (EV_ARRIVE).
- A switch picks the output channel by the load-balancing mode and appends the packet to that
  channel's output queue; if the queued bytes would exceed the port's buffer, the packet is
  dropped and counted. When a channel finishes a packet (EV_TX_DONE) it starts the next queued one.
- At the destination NIC the packet is delivered; a per-flow reorder window tracks packets that
  arrive ahead of a missing one (the NIC reorder buffer of spraying).
- Collective structure: a transfer (one step of a ring, carried by its QP flows) is released when
  its prerequisites have left (same connection, in order) or arrived (the data it forwards).

Everything lives in arrays passed in; the loop returns a code (layout.RC_*) when it has handled
its event budget or needs a bigger array, and resumes from the same arrays when called again.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from services.simulator.packet.heap import heap_pop, heap_push
from services.simulator.packet.layout import (
    CN_CREDITS,
    CN_DOWN,
    CN_DOWN_AT,
    CN_ECN_MARKED,
    CN_LINK_DOWNED,
    CN_PACE_AT,
    CN_PEAK_INGRESS,
    CN_WAIT_SINCE,
    CN_WIRE_LOST,
    CN_XMIT_DISCARDS,
    CN_XMIT_WAIT,
    EV_ACK,
    EV_ARRIVE,
    EV_CC_TIMER,
    EV_CNP,
    EV_CREDIT,
    EV_LINK,
    EV_PACE,
    EV_PAUSE,
    EV_RELEASE,
    EV_REROUTE,
    EV_RESUME,
    EV_RTO,
    EV_TX_DONE,
    FI_CNP_HANDLED,
    FI_CNP_SENT,
    FI_REC_POINT,
    FI_REC_PS,
    FI_REC_START,
    FI_RESENT,
    FI_RESENT_BYTES,
    MODE_ADAPTIVE,
    MODE_ECMP,
    MODE_FLOWLET,
    MODE_SPRAY_RANDOM,
    PF_G,
    PF_MIN_RATE,
    PF_PMAX,
    PF_RAI,
    PF_RHAI,
    PR_ACK_EVERY,
    PR_ALPHA_TIMER,
    PR_BINS,
    PR_BUDGET,
    PR_BYTE_COUNTER,
    PR_CNP_INTERVAL,
    PR_CREDITS,
    PR_DCQCN,
    PR_DROP_FLOW,
    PR_DROP_PSN,
    PR_FLOWLET_GAP,
    PR_GBN,
    PR_HEADER,
    PR_HEADROOM,
    PR_INTERVAL,
    PR_KMAX,
    PR_KMIN,
    PR_LINK_EVENTS,
    PR_MARK_FLOW,
    PR_MARK_PSN,
    PR_MAX_DEPENDENTS,
    PR_MAX_FLOWS_PER_TRANSFER,
    PR_MAX_HOPS,
    PR_MAX_TX,
    PR_MODE,
    PR_MTU,
    PR_PFC,
    PR_RATE_CAP,
    PR_RATE_TIMER,
    PR_REROUTED,
    PR_ROB_WORDS,
    PR_RTO,
    PR_STAGES,
    PR_STOP,
    PR_WINDOW,
    PR_XOFF,
    PR_XON,
    QF_ALPHA,
    QF_LINE,
    QF_RATE,
    QF_TARGET,
    QI_ACTIVE,
    QI_ALPHA_AT,
    QI_ALPHA_PENDING,
    QI_B_STAGE,
    QI_BYTES,
    QI_CAP,
    QI_CC,
    QI_LAST_CNP,
    QI_NEXT_TX,
    QI_RATE_AT,
    QI_RATE_PENDING,
    QI_T_STAGE,
    RC_BUDGET,
    RC_DONE,
    RC_GROW_BINS,
    RC_GROW_HEAP,
    RC_GROW_PACKETS,
    RC_GROW_ROB,
    RC_LOOP,
    RC_NO_ROUTE,
    RC_REROUTE,
    RC_STOPPED,
    SC_CNP_HANDLED,
    SC_CNP_SENT,
    SC_CORRUPTED,
    SC_DELIVERED,
    SC_DELIVERED_BYTES,
    SC_DISCARDED,
    SC_DROPPED,
    SC_ECN_MARKED,
    SC_EPOCH,
    SC_EVENTS,
    SC_FLOWS_DONE,
    SC_FREE,
    SC_FREE_COUNT,
    SC_HEAP,
    SC_INJECTED,
    SC_INJECTED_DROP_DONE,
    SC_LAST_DELIVERY,
    SC_LIVE,
    SC_MARK_DONE,
    SC_NAKS,
    SC_NOW,
    SC_OUT_OF_ORDER,
    SC_PEAK_LIVE,
    SC_RESENT,
    SC_RESENT_BYTES,
    SC_ROB_FREE,
    SC_ROB_FREE_COUNT,
    SC_ROB_OVERFLOW,
    SC_ROB_PEAK_BYTES,
    SC_TIMEOUTS,
    SC_WIRE_LOST,
    SC_XMIT_DISCARDS,
    SE_ECN_MARKED,
    SE_PAUSE_PS,
    SE_PAUSES,
    SE_RCV_ERRORS,
    SE_XMIT_DISCARDS,
)

__all__ = ["run_events"]


@njit(cache=True)
def _next_random(rng: np.ndarray) -> np.uint64:
    """One xorshift64* step of the run's generator: 64 random bits."""
    x = rng[0]
    x ^= x >> np.uint64(12)
    x ^= x << np.uint64(25)
    x ^= x >> np.uint64(27)
    rng[0] = x
    return x * np.uint64(2685821657736338717)


@njit(cache=True)
def _random_below(rng: np.ndarray, n: int) -> int:
    """A uniform integer in [0, n)."""
    return int(_next_random(rng) >> np.uint64(33)) % n


@njit(cache=True)
def _uniform(rng: np.ndarray) -> float:
    """A uniform float in [0, 1) (53 random bits)."""
    return float(_next_random(rng) >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@njit(cache=True)
def run_events(
    sc,
    pr,
    pf,
    rng,  # scalars, integer and float parameters, RNG state
    h_time,
    h_kind,
    h_arg,  # event heap
    # channels
    ch_target,
    ch_source,
    ch_ps_per_byte,
    ch_delay_ps,
    ch_buffer,
    ch_from_host,
    ch_busy,
    ch_free_at,
    q_head,
    q_tail,
    q_bytes,
    q_last,
    ch_tx_bytes,
    ch_tx_packets,
    ch_drops,
    ch_peak_q,
    ch_rr,
    cn,
    s_bytes,
    s_qpeak,
    s_qint,
    s_drops,
    s_ev,
    # routing: equal-cost next channels of (node, destination slot)
    node_row,
    g_off,
    g_ch,
    num_dest,
    g_next,
    # flows
    f_dst_node,
    f_dst_slot,
    f_size,
    f_sent,
    f_recv,
    f_lost,
    f_next_seq,
    f_first_ch,
    f_start,
    f_finish,
    f_transfer,
    f_path_off,
    f_path_end,
    path_ch,
    act_next,
    act_prev,
    f_rob_slot,
    f_npkts,
    f_snd_nxt,
    f_snd_una,
    f_high,
    f_linked,
    f_left,
    f_nak,
    f_since_ack,
    f_rto_at,
    f_ack_lat,
    fi,
    f_qp,
    qi,
    qf,
    ch_ring_len,
    ch_loss_kind,
    ch_loss_a,
    ch_loss_b,
    ch_loss_c,
    ch_loss_d,
    ch_loss_start,
    ch_loss_end,
    ch_ge_bad,
    ch_rcv_errors,
    p_in,
    ch_ing_bytes,
    ch_paused,
    ch_pause_sent,
    ch_txd_pending,
    ch_pause_frames,
    ch_pause_ps,
    ch_pause_since,
    f_rob_bytes,
    f_fl_ch,
    f_fl_node,
    f_fl_last,
    rob_bits,
    rob_lost,
    rob_next,
    rob_hist,
    # transfers
    t_pending,
    t_release,
    t_flow_off,
    t_unsent,
    t_unarrived,
    dep_off,
    dep,
    dep_arrival,
    # packets
    p_flow,
    p_seq,
    p_payload,
    p_wire,
    p_hop,
    p_ch,
    p_ecn,
    p_next,
):
    mode = pr[PR_MODE]
    mtu = pr[PR_MTU]
    header = pr[PR_HEADER]
    interval = pr[PR_INTERVAL]
    bins = pr[PR_BINS]
    max_hops = pr[PR_MAX_HOPS]
    rob_words = pr[PR_ROB_WORDS]
    window = rob_words * 64
    cap_heap = h_time.shape[0]
    need_heap = 2 * pr[PR_MAX_FLOWS_PER_TRANSFER] + pr[PR_MAX_DEPENDENTS] + 8
    need_packets = pr[PR_MAX_FLOWS_PER_TRANSFER] + 1
    budget_end = sc[SC_EVENTS] + pr[PR_BUDGET]
    stop = pr[PR_STOP]
    gbn = pr[PR_GBN] == 1
    window_pkts = pr[PR_WINDOW]
    rto = pr[PR_RTO]
    ack_every = pr[PR_ACK_EVERY]
    drop_flow = pr[PR_DROP_FLOW]
    pfc = pr[PR_PFC] == 1
    xoff = pr[PR_XOFF]
    xon = pr[PR_XON]
    headroom = pr[PR_HEADROOM]
    dcqcn = pr[PR_DCQCN] == 1
    kmin = pr[PR_KMIN]
    kmax = pr[PR_KMAX]
    pmax = pf[PF_PMAX]
    credits = pr[PR_CREDITS] == 1
    # Rate-limited QPs: DCQCN's limiter, or a static cap (a flow's rate_gbps): both pace by QI_NEXT_TX.
    capped = pr[PR_RATE_CAP] == 1
    paced_qps = dcqcn or capped
    # Link state is checked on the hot paths only when links can fail in this run; ECMP packets can
    # be on an old path only after a reroute (the flag is set then, between slices).
    links_fail = pr[PR_LINK_EVENTS] == 1
    rerouted = pr[PR_REROUTED] == 1
    ingress_accounting = pfc or credits

    # ---- series and queue bookkeeping ---------------------------------------------------------
    def record_tx(c, t0, duration, wire):
        # Bytes of one serialisation, spread over the sample bins it overlaps.
        b0 = t0 // interval
        b1 = (t0 + duration - 1) // interval
        if b0 == b1:
            s_bytes[b0, c] += wire
        else:
            for b in range(b0, b1 + 1):
                lo = max(t0, b * interval)
                hi = min(t0 + duration, (b + 1) * interval)
                s_bytes[b, c] += wire * (hi - lo) / duration

    def spread_ps(column, c, t0, t1):
        # A duration [t0, t1) into the counter series column, split over the bins it overlaps.
        for b in range(t0 // interval, (t1 - 1) // interval + 1):
            s_ev[b, c, column] += min(t1, (b + 1) * interval) - max(t0, b * interval)

    def set_queue(c, now, new_bytes):
        # Integrate the old depth over [q_last, now), then change it.
        old = q_bytes[c]
        last = q_last[c]
        if old > 0 and now > last:
            b0 = last // interval
            b1 = (now - 1) // interval
            if b0 == b1:
                s_qint[b0, c] += old * (now - last)
            else:
                for b in range(b0, b1 + 1):
                    lo = max(last, b * interval)
                    hi = min(now, (b + 1) * interval)
                    s_qint[b, c] += old * (hi - lo)
                    if old > s_qpeak[b, c]:  # the depth held through this interval
                        s_qpeak[b, c] = old
        q_bytes[c] = new_bytes
        q_last[c] = now
        if new_bytes > ch_peak_q[c]:
            ch_peak_q[c] = new_bytes
        b = now // interval
        if new_bytes > s_qpeak[b, c]:
            s_qpeak[b, c] = new_bytes

    # ---- packets -----------------------------------------------------------------------------------
    def free_packet(p):
        p_next[p] = sc[SC_FREE]
        sc[SC_FREE] = p
        sc[SC_FREE_COUNT] += 1
        sc[SC_LIVE] -= 1

    # ---- InfiniBand credits --------------------------------------------------------------------------
    # A transmitter spends credit (bytes of the receiver's input buffer) as it starts a packet; the
    # receiver returns it, one link delay later, when the packet leaves that buffer (forwarded,
    # corrupted or discarded). Hosts drain at line rate: their channels hold unlimited credit.
    def return_credit(c, wire, now):
        sc[SC_HEAP] = heap_push(
            h_time, h_kind, h_arg, sc[SC_HEAP], now + ch_delay_ps[c], EV_CREDIT, (c << 20) | wire
        )

    def enter_input_buffer(c, p):
        ch_ing_bytes[c] += p_wire[p]
        if ch_ing_bytes[c] > cn[c, CN_PEAK_INGRESS]:
            cn[c, CN_PEAK_INGRESS] = ch_ing_bytes[c]

    def leave_input_buffer(p, now):
        ingress = p_in[p]
        if ingress >= 0:
            ch_ing_bytes[ingress] -= p_wire[p]
            return_credit(ingress, p_wire[p], now)
            p_in[p] = -1

    def has_credit(c, wire, now):
        # Whether channel c may start a packet of `wire` bytes; if not, PortXmitWait starts counting.
        if cn[c, CN_CREDITS] >= wire:
            since = cn[c, CN_WAIT_SINCE]
            if since >= 0:
                cn[c, CN_XMIT_WAIT] += now - since
                cn[c, CN_WAIT_SINCE] = -1
            return True
        if cn[c, CN_WAIT_SINCE] < 0:
            cn[c, CN_WAIT_SINCE] = now
        return False

    def start_tx(c, p, now):
        # A switch port needs an EV_TX_DONE only when packets wait behind this one (the caller
        # schedules it); a NIC port always does, to pull its next packet. This halves the events of
        # an uncongested hop.
        duration = int(p_wire[p] * ch_ps_per_byte[c] + 0.5)
        ch_free_at[c] = now + duration
        p_ch[p] = c
        ch_tx_bytes[c] += p_wire[p]
        ch_tx_packets[c] += 1
        record_tx(c, now, duration, p_wire[p])
        if ch_from_host[c]:
            ch_busy[c] = 1
            sc[SC_HEAP] = heap_push(h_time, h_kind, h_arg, sc[SC_HEAP], now + duration, EV_TX_DONE, c)
        if credits:
            cn[c, CN_CREDITS] -= p_wire[p]
            leave_input_buffer(p, now)
        sc[SC_HEAP] = heap_push(
            h_time, h_kind, h_arg, sc[SC_HEAP], now + duration + ch_delay_ps[c], EV_ARRIVE, p
        )

    # ---- DCQCN (state per QP: a connection's rate carries from one transfer to the next) ------------
    def cc_timer(q, which, when):
        if which == 0:
            qi[q, QI_ALPHA_PENDING] = 1
        else:
            qi[q, QI_RATE_PENDING] = 1
        sc[SC_HEAP] = heap_push(h_time, h_kind, h_arg, sc[SC_HEAP], when, EV_CC_TIMER, (q << 1) | which)

    def arm_timers(q, now):
        # Timers run while the QP is rate-limited and has a flow to send; idle, they wait.
        if qi[q, QI_ALPHA_PENDING] == 0:
            qi[q, QI_ALPHA_AT] = max(qi[q, QI_ALPHA_AT], now + pr[PR_ALPHA_TIMER])
            cc_timer(q, 0, qi[q, QI_ALPHA_AT])
        if qi[q, QI_RATE_PENDING] == 0:
            qi[q, QI_RATE_AT] = max(qi[q, QI_RATE_AT], now + pr[PR_RATE_TIMER])
            cc_timer(q, 1, qi[q, QI_RATE_AT])

    def rate_increase(q):
        # One increase event: fast recovery toward the target while both counters are below F,
        # hyper increase once both passed it, additive increase in between (DCQCN, Zhu et al. 2015).
        t_stage = qi[q, QI_T_STAGE]
        b_stage = qi[q, QI_B_STAGE]
        stages = pr[PR_STAGES]
        line = qf[q, QF_LINE]
        # The counters were just incremented: F events of fast recovery, then additive increase once
        # one counter passed F, hyper increase once both did.
        if max(t_stage, b_stage) > stages:
            if min(t_stage, b_stage) > stages:
                qf[q, QF_TARGET] += (min(t_stage, b_stage) - stages) * pf[PF_RHAI]
            else:
                qf[q, QF_TARGET] += pf[PF_RAI]
            if qf[q, QF_TARGET] > line:
                qf[q, QF_TARGET] = line
        qf[q, QF_RATE] = 0.5 * (qf[q, QF_TARGET] + qf[q, QF_RATE])
        if qf[q, QF_RATE] >= line * 0.999:  # back at line rate: no limiter, timers stop
            qf[q, QF_RATE] = line
            qf[q, QF_TARGET] = line
            qi[q, QI_CC] = 0

    def cnp_arrives(f, now):
        fi[f, FI_CNP_HANDLED] += 1
        sc[SC_CNP_HANDLED] += 1
        q = f_qp[f]
        if qi[q, QI_CC] == 0:  # the first CNP since line rate: the limiter starts
            qi[q, QI_CC] = 1
        qf[q, QF_TARGET] = qf[q, QF_RATE]
        qf[q, QF_RATE] = max(pf[PF_MIN_RATE], qf[q, QF_RATE] * (1.0 - 0.5 * qf[q, QF_ALPHA]))
        qf[q, QF_ALPHA] = (1.0 - pf[PF_G]) * qf[q, QF_ALPHA] + pf[PF_G]
        qi[q, QI_ALPHA_AT] = now + pr[PR_ALPHA_TIMER]  # pending timers re-arm lazily
        qi[q, QI_RATE_AT] = now + pr[PR_RATE_TIMER]
        qi[q, QI_T_STAGE] = 0
        qi[q, QI_B_STAGE] = 0
        qi[q, QI_BYTES] = 0
        if qi[q, QI_ACTIVE] > 0:
            arm_timers(q, now)

    def maybe_send_cnp(f, now):
        # The receiving NIC (NP) answers a CE-marked packet with a CNP, at most one per QP per interval.
        q = f_qp[f]
        if now - qi[q, QI_LAST_CNP] >= pr[PR_CNP_INTERVAL]:
            qi[q, QI_LAST_CNP] = now
            fi[f, FI_CNP_SENT] += 1
            sc[SC_CNP_SENT] += 1
            sc[SC_HEAP] = heap_push(h_time, h_kind, h_arg, sc[SC_HEAP], now + f_ack_lat[f], EV_CNP, f)

    def paced(q, wire, now):
        # The rate limiter of a rate-limited QP: its next packet may go wire bytes at RC later.
        qi[q, QI_NEXT_TX] = max(qi[q, QI_NEXT_TX], now) + int(wire * 8e12 / qf[q, QF_RATE])
        qi[q, QI_BYTES] += wire
        if qi[q, QI_BYTES] >= pr[PR_BYTE_COUNTER]:
            qi[q, QI_BYTES] -= pr[PR_BYTE_COUNTER]
            qi[q, QI_B_STAGE] += 1
            rate_increase(q)

    # ---- collective structure -----------------------------------------------------------------------
    def release_dependents(t, arrival, now):
        for i in range(dep_off[t], dep_off[t + 1]):
            if dep_arrival[i] == arrival:
                d = dep[i]
                t_pending[d] -= 1
                if t_pending[d] == 0:
                    when = max(now, t_release[d])
                    sc[SC_HEAP] = heap_push(h_time, h_kind, h_arg, sc[SC_HEAP], when, EV_RELEASE, d)

    def flow_left(f, now):
        t = f_transfer[f]
        t_unsent[t] -= 1
        if t_unsent[t] == 0:
            release_dependents(t, 0, now)

    def flow_accounted(f, now):
        # Every byte of f delivered or dropped.
        f_finish[f] = now
        sc[SC_FLOWS_DONE] += 1
        if dcqcn and f_size[f] > 0:
            qi[f_qp[f], QI_ACTIVE] -= 1
        slot = f_rob_slot[f]
        if slot >= 0:
            rob_next[slot] = sc[SC_ROB_FREE]
            sc[SC_ROB_FREE] = slot
            sc[SC_ROB_FREE_COUNT] += 1
            f_rob_slot[f] = -1
        t = f_transfer[f]
        t_unarrived[t] -= 1
        if t_unarrived[t] == 0:
            release_dependents(t, 1, now)

    # ---- NICs ------------------------------------------------------------------------------------------
    def link(c, f):
        # Add f to the NIC port's ring of flows with packets to send, last in this round.
        head = ch_rr[c]
        if head < 0:
            act_next[f] = f
            act_prev[f] = f
            ch_rr[c] = f
        else:
            before = act_prev[head]
            act_next[before] = f
            act_prev[f] = before
            act_next[f] = head
            act_prev[head] = f
        f_linked[f] = 1
        ch_ring_len[c] += 1

    def unlink(c, f):
        following = act_next[f]
        if following == f:
            ch_rr[c] = -1
        else:
            before = act_prev[f]
            act_next[before] = following
            act_prev[following] = before
            if ch_rr[c] == f:
                ch_rr[c] = following
        f_linked[f] = 0
        ch_ring_len[c] -= 1

    def pull(c, now):
        # The NIC behind channel c sends the next packet of its active flows, round-robin
        # (skipping, under Go-Back-N, the flows whose window is full).
        f = ch_rr[c]
        if f < 0 or ch_paused[c] or (links_fail and cn[c, CN_DOWN]):
            return
        if gbn or paced_qps:
            tried = 0
            wake = -1
            while True:
                if gbn and f_snd_nxt[f] - f_snd_una[f] >= window_pkts:
                    pass  # its window is full
                elif (
                    paced_qps
                    and (qi[f_qp[f], QI_CC] == 1 or (capped and qi[f_qp[f], QI_CAP] == 1))
                    and qi[f_qp[f], QI_NEXT_TX] > now
                ):
                    if wake < 0 or qi[f_qp[f], QI_NEXT_TX] < wake:
                        wake = qi[f_qp[f], QI_NEXT_TX]
                else:
                    break
                f = act_next[f]
                tried += 1
                if tried >= ch_ring_len[c]:
                    # Every flow waits for an ACK (which restarts the port) or its rate limiter.
                    pending = cn[c, CN_PACE_AT]
                    if wake >= 0 and (pending <= now or wake < pending):
                        cn[c, CN_PACE_AT] = wake
                        sc[SC_HEAP] = heap_push(h_time, h_kind, h_arg, sc[SC_HEAP], wake, EV_PACE, c)
                    return
        seq = f_snd_nxt[f] if gbn else f_sent[f] // mtu
        payload = min(mtu, f_size[f] - seq * mtu)
        if credits and not has_credit(c, payload + header, now):
            return  # the credit's return restarts the port
        p = sc[SC_FREE]
        sc[SC_FREE] = p_next[p]
        sc[SC_FREE_COUNT] -= 1
        sc[SC_LIVE] += 1
        if sc[SC_LIVE] > sc[SC_PEAK_LIVE]:
            sc[SC_PEAK_LIVE] = sc[SC_LIVE]
        p_flow[p] = f
        p_seq[p] = seq
        p_payload[p] = payload
        p_wire[p] = payload + header
        p_hop[p] = 1  # hop 0 is this NIC's channel
        p_ecn[p] = 0
        p_in[p] = -1
        sc[SC_INJECTED] += 1
        if f == pr[PR_MARK_FLOW] and seq == pr[PR_MARK_PSN] and sc[SC_MARK_DONE] == 0:
            p_ecn[p] = 1  # the test hook: one CE mark, as if a switch had set it
            sc[SC_MARK_DONE] = 1
        if dcqcn and qi[f_qp[f], QI_CC] == 1:
            paced(f_qp[f], payload + header, now)
        elif capped and qi[f_qp[f], QI_CAP] == 1:  # a static limiter: wire bytes at the cap
            q = f_qp[f]
            qi[q, QI_NEXT_TX] = max(qi[q, QI_NEXT_TX], now) + int((payload + header) * 8e12 / qf[q, QF_LINE])
        if gbn:
            f_snd_nxt[f] = seq + 1
            if seq < f_high[f]:
                sc[SC_RESENT] += 1
                sc[SC_RESENT_BYTES] += payload
                fi[f, FI_RESENT] += 1
                fi[f, FI_RESENT_BYTES] += payload
            else:
                f_high[f] = seq + 1
            done_sending = f_snd_nxt[f] >= f_npkts[f]
            if f_rto_at[f] < 0:
                f_rto_at[f] = now + rto
                sc[SC_HEAP] = heap_push(h_time, h_kind, h_arg, sc[SC_HEAP], now + rto, EV_RTO, f)
        else:
            f_sent[f] += payload
            done_sending = f_sent[f] >= f_size[f]
        if done_sending:
            unlink(c, f)
            if f_left[f] == 0:
                f_left[f] = 1
                flow_left(f, now)
        else:
            ch_rr[c] = act_next[f]
        start_tx(c, p, now)

    def activate(f, now):
        f_start[f] = now
        if dcqcn and f_size[f] > 0:
            q = f_qp[f]
            qi[q, QI_ACTIVE] += 1
            if qi[q, QI_CC] == 1:
                arm_timers(q, now)
        if f_size[f] == 0:
            flow_left(f, now)
            flow_accounted(f, now)
            return
        slot = sc[SC_ROB_FREE]
        sc[SC_ROB_FREE] = rob_next[slot]
        sc[SC_ROB_FREE_COUNT] -= 1
        f_rob_slot[f] = slot
        for w in range(rob_words):
            rob_bits[slot, w] = 0
            rob_lost[slot, w] = 0
        for h in range(slot * max_hops, (slot + 1) * max_hops):
            f_fl_ch[h] = -1
        c = f_first_ch[f]
        link(c, f)
        if ch_busy[c] == 0:
            pull(c, now)

    # ---- switches --------------------------------------------------------------------------------------
    def least_loaded(start, end, now):
        best = -1
        best_q = 0
        ties = 0
        for i in range(start, end):
            c = g_ch[i]
            # A busy port ranks after a free one; a port whose link is down (the switch sees its own
            # link state) after every live one.
            q = q_bytes[c] + (1 if ch_free_at[c] > now else 0)
            if links_fail and cn[c, CN_DOWN]:
                q += 1 << 62
            if best < 0 or q < best_q:
                best, best_q, ties = c, q, 1
            elif q == best_q:
                ties += 1
                if _random_below(rng, ties) == 0:  # reservoir sampling: a uniform tie-break
                    best = c
        return best

    def choose(node, p, f, now):
        if mode == MODE_ECMP:  # pinned: the path was hashed once per flow, no group lookup
            i = f_path_off[f] + p_hop[p]
            if not rerouted:
                return path_ch[i]
            if i < f_path_end[f]:
                c = path_ch[i]
                if ch_source[c] == node:
                    return c
            # A packet still on its old path when the routes changed: this switch's new group,
            # picked by flow.
            row = node_row[node]
            if row < 0:
                return -1
            key = row * num_dest + f_dst_slot[f]
            if g_off[key + 1] == g_off[key]:
                return -1
            return g_ch[g_off[key] + f % (g_off[key + 1] - g_off[key])]
        row = node_row[node]
        if row < 0:  # a host that is not the destination: hosts do not forward
            return -1
        key = row * num_dest + f_dst_slot[f]
        start = g_off[key]
        end = g_off[key + 1]
        if end == start:
            return -1
        if end - start == 1:
            return g_ch[start]
        if mode == MODE_ADAPTIVE:
            return least_loaded(start, end, now)
        if mode == MODE_FLOWLET:
            if f_rob_slot[f] < 0:  # a late copy of a finished flow's packet: no flowlet state left
                return least_loaded(start, end, now)
            slot = f_rob_slot[f] * max_hops + p_hop[p]  # per active flow, recycled with its slot
            c = f_fl_ch[slot]
            # The entry is this switch's only if the flow reached the same switch at this hop last
            # time (earlier hops may have moved it): otherwise it is a new flowlet here.
            stale = c < 0 or f_fl_node[slot] != node or (links_fail and cn[c, CN_DOWN] > 0)
            if stale or now - f_fl_last[slot] > pr[PR_FLOWLET_GAP]:
                c = least_loaded(start, end, now)  # a new flowlet may take another path
                f_fl_ch[slot] = c
                f_fl_node[slot] = node
            f_fl_last[slot] = now
            return c
        n = end - start
        if mode == MODE_SPRAY_RANDOM:
            i = _random_below(rng, n)
        else:  # round-robin: each (switch, destination) group deals packets to its ports in turn
            i = g_next[key]
            g_next[key] = i + 1 if i + 1 < n else 0
        # A port whose link is down is skipped (the switch sees its own link state) while another
        # member is live; the routes change only with the routing reaction.
        if links_fail:
            for _ in range(n):
                if cn[g_ch[start + i], CN_DOWN] == 0:
                    break
                i = i + 1 if i + 1 < n else 0
        return g_ch[start + i]

    # ---- the NIC reorder window ------------------------------------------------------------------
    # Bit k of a flow's window is packet f_next_seq + 1 + k (f_next_seq itself is the first one not
    # yet settled). A packet settles when it is delivered or dropped; `rob_lost` marks the dropped,
    # which hold no bytes. Packets held = delivered ones waiting for an earlier one.
    def payload_of(f, seq):
        return min(mtu, f_size[f] - seq * mtu)

    def shift_window(bits_array, slot, shift):
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

    def release_window(f, slot, base, shift):
        shift_window(rob_bits, slot, shift)
        shift_window(rob_lost, slot, shift)
        f_next_seq[f] = base + shift

    def settle(f, seq, delivered):
        slot = f_rob_slot[f]
        base = f_next_seq[f]
        offset = seq - base - 1
        if offset >= window:
            # Too far ahead for the window: stop waiting for the oldest unsettled packets (counted).
            need = offset - window + 1
            sc[SC_ROB_OVERFLOW] += 1  # `base` itself
            for k in range(need - 1):
                bit = np.uint64(1) << np.uint64(k & 63)
                if rob_bits[slot, k >> 6] & bit:
                    if not rob_lost[slot, k >> 6] & bit:
                        f_rob_bytes[f] -= payload_of(f, base + 1 + k)
                else:
                    sc[SC_ROB_OVERFLOW] += 1
            release_window(f, slot, base, need)
            base += need
            offset = seq - base - 1
        if offset < 0:  # the first unsettled packet: release everything that waited for it
            expected = base + 1
            while expected - base - 1 < window:
                k = expected - base - 1
                bit = np.uint64(1) << np.uint64(k & 63)
                if not rob_bits[slot, k >> 6] & bit:
                    break
                if not rob_lost[slot, k >> 6] & bit:
                    f_rob_bytes[f] -= payload_of(f, expected)
                expected += 1
            release_window(f, slot, base, expected - base)
            return
        bit = np.uint64(1) << np.uint64(offset & 63)
        rob_bits[slot, offset >> 6] |= bit
        if delivered:
            sc[SC_OUT_OF_ORDER] += 1
            f_rob_bytes[f] += payload_of(f, seq)
            if f_rob_bytes[f] > sc[SC_ROB_PEAK_BYTES]:
                sc[SC_ROB_PEAK_BYTES] = f_rob_bytes[f]
        else:
            rob_lost[slot, offset >> 6] |= bit

    def lose(p, now):
        # A packet that will never arrive. Go-Back-N: the receiver notices the gap and NAKs (or the
        # sender times out). Without it: the bytes are lost and the receiver stops waiting for them.
        f = p_flow[p]
        if gbn:
            free_packet(p)
            return
        f_lost[f] += p_payload[p]
        settle(f, p_seq[p], False)
        free_packet(p)
        if f_recv[f] + f_lost[f] >= f_size[f]:
            flow_accounted(f, now)

    def send_ack(f, psn, nak, now):
        # ACKs and NAKs travel back after the flow's path latency; they are not queued or lost.
        arg = (f << 26) | (nak << 25) | psn
        sc[SC_HEAP] = heap_push(h_time, h_kind, h_arg, sc[SC_HEAP], now + f_ack_lat[f], EV_ACK, arg)

    def go_back(f, psn, now):
        # Resend everything from psn on; the recovery lasts until what was sent before is acknowledged.
        # Returns the NIC port to wake (the caller pulls), or -1.
        if fi[f, FI_REC_START] < 0:
            fi[f, FI_REC_START] = now
            fi[f, FI_REC_POINT] = f_high[f]
        f_snd_nxt[f] = psn
        c = f_first_ch[f]
        if f_linked[f] == 0:
            link(c, f)
        return c if ch_busy[c] == 0 else -1

    def corrupted(c, p, now):
        # Bit errors on the link p just crossed (BER or a Gilbert-Elliott marginal transceiver).
        if now < ch_loss_start[c] or now >= ch_loss_end[c]:
            return False
        if ch_loss_kind[c] == 1:  # independent bit errors: P(loss) = 1 - (1 - BER)^bits
            return _uniform(rng) < 1.0 - np.exp(p_wire[p] * 8.0 * ch_loss_a[c])
        if ch_ge_bad[c]:  # Gilbert-Elliott: move between states per packet, then lose by state
            if _uniform(rng) < ch_loss_d[c]:
                ch_ge_bad[c] = 0
        elif _uniform(rng) < ch_loss_c[c]:
            ch_ge_bad[c] = 1
        return _uniform(rng) < (ch_loss_b[c] if ch_ge_bad[c] else ch_loss_a[c])

    def drop(c, p, now):
        ch_drops[c] += 1
        s_drops[now // interval, c] += 1
        sc[SC_DROPPED] += 1
        lose(p, now)

    def injected_loss(f, p):
        # The test hook: packet PR_DROP_PSN of flow PR_DROP_FLOW is lost, once.
        if f != drop_flow or p_seq[p] != pr[PR_DROP_PSN] or sc[SC_INJECTED_DROP_DONE] != 0:
            return False
        sc[SC_INJECTED_DROP_DONE] = 1
        return True

    def discard(c, p, now):
        # A switch port whose link is down throws the packet away (PortXmitDiscards).
        cn[c, CN_XMIT_DISCARDS] += 1
        sc[SC_XMIT_DISCARDS] += 1
        s_ev[now // interval, c, SE_XMIT_DISCARDS] += 1
        if credits:
            leave_input_buffer(p, now)
        lose(p, now)

    def mark_ecn(c, p, now):
        # RED-style marking on the depth the packet finds: none up to Kmin, rising linearly to Pmax
        # at Kmax, every packet beyond.
        depth = q_bytes[c]
        if depth <= kmin:
            return
        if depth < kmax and _uniform(rng) >= pmax * (depth - kmin) / (kmax - kmin):
            return
        p_ecn[p] = 1
        cn[c, CN_ECN_MARKED] += 1
        s_ev[now // interval, c, SE_ECN_MARKED] += 1
        sc[SC_ECN_MARKED] += 1

    def enqueue(c, p, now):
        if links_fail and cn[c, CN_DOWN]:
            discard(c, p, now)
            return
        if dcqcn:
            mark_ecn(c, p, now)
        ingress = p_in[p]
        if pfc and ingress >= 0 and ch_ing_bytes[ingress] + p_wire[p] > xoff + headroom:
            drop(c, p, now)  # headroom too small for what was on the wire when PAUSE went out
            return
        # An idle port sends at once (one start_tx for every mode: numba inlines each call site).
        direct = q_head[c] < 0 and ch_free_at[c] <= now
        if credits:
            direct = direct and has_credit(c, p_wire[p], now)
        elif pfc:
            direct = direct and ch_paused[c] == 0
        if direct:
            start_tx(c, p, now)
            return
        if pfc:
            if ingress >= 0:
                ch_ing_bytes[ingress] += p_wire[p]
                if ch_ing_bytes[ingress] > xoff and ch_pause_sent[ingress] == 0:
                    ch_pause_sent[ingress] = 1  # PAUSE the port this packet came from
                    sc[SC_HEAP] = heap_push(
                        h_time, h_kind, h_arg, sc[SC_HEAP], now + ch_delay_ps[ingress], EV_PAUSE, ingress
                    )
        elif not credits and q_bytes[c] + p_wire[p] > ch_buffer[c]:
            drop(c, p, now)
            return
        p_next[p] = -1
        if q_tail[c] < 0:
            q_head[c] = p
            if ch_paused[c] == 0 and ch_txd_pending[c] == 0 and (not credits or ch_free_at[c] > now):
                # The first packet to wait: the port must come back for it when it is free (unless
                # a TX_DONE is still pending from before a link flap).
                ch_txd_pending[c] = 1
                sc[SC_HEAP] = heap_push(h_time, h_kind, h_arg, sc[SC_HEAP], ch_free_at[c], EV_TX_DONE, c)
        else:
            p_next[q_tail[c]] = p
        q_tail[c] = p
        set_queue(c, now, q_bytes[c] + p_wire[p])

    def release_pfc(p, now):
        # A queued packet leaves the switch: its ingress port's count falls, RESUME at XON.
        ingress = p_in[p]
        if ingress >= 0:
            ch_ing_bytes[ingress] -= p_wire[p]
            if ch_pause_sent[ingress] == 1 and ch_ing_bytes[ingress] <= xon:
                ch_pause_sent[ingress] = 0
                sc[SC_HEAP] = heap_push(
                    h_time, h_kind, h_arg, sc[SC_HEAP], now + ch_delay_ps[ingress], EV_RESUME, ingress
                )

    def send_head(c, now):
        # A switch port sends the head of its queue, and comes back if more wait.
        p = q_head[c]
        q_head[c] = p_next[p]
        if q_head[c] < 0:
            q_tail[c] = -1
        set_queue(c, now, q_bytes[c] - p_wire[p])
        if pfc:
            release_pfc(p, now)
        start_tx(c, p, now)
        if q_head[c] >= 0:
            ch_txd_pending[c] = 1
            sc[SC_HEAP] = heap_push(h_time, h_kind, h_arg, sc[SC_HEAP], ch_free_at[c], EV_TX_DONE, c)

    def try_send_head(c, now):
        # A free, unpaused switch port with packets waiting sends the head, credit permitting.
        if q_head[c] < 0 or ch_paused[c]:
            return
        if credits and not has_credit(c, p_wire[q_head[c]], now):
            return  # the credit's return restarts the port
        send_head(c, now)

    def drop_link(c, now):
        # The link of channel c goes down: its queue is discarded, its transmitter stops.
        cn[c, CN_DOWN] += 1
        if cn[c, CN_DOWN] > 1:
            return  # already down (overlapping faults): it comes back when the last one ends
        cn[c, CN_DOWN_AT] = now
        cn[c, CN_LINK_DOWNED] += 1
        if cn[c, CN_WAIT_SINCE] >= 0:  # no longer waiting for credit: there is no link
            cn[c, CN_XMIT_WAIT] += now - cn[c, CN_WAIT_SINCE]
            cn[c, CN_WAIT_SINCE] = -1
        p = q_head[c]
        while p >= 0:
            following = p_next[p]
            if pfc:
                release_pfc(p, now)
            discard(c, p, now)
            p = following
        q_head[c] = -1
        q_tail[c] = -1
        set_queue(c, now, 0)

    def lost_on_wire(c, p, now):
        # Whether p was on c's wire when the link went down (it started after the last failure).
        duration = int(p_wire[p] * ch_ps_per_byte[c] + 0.5)
        return cn[c, CN_DOWN_AT] >= now - ch_delay_ps[c] - duration

    def deliver(p, now):
        f = p_flow[p]
        if dcqcn and p_ecn[p]:
            maybe_send_cnp(f, now)
        if gbn:  # a Go-Back-N receiver keeps only the packet it expects
            sc[SC_DELIVERED] += 1
            seq = p_seq[p]
            expected = f_next_seq[f]
            if seq == expected:
                payload = p_payload[p]
                sc[SC_DELIVERED_BYTES] += payload
                sc[SC_LAST_DELIVERY] = now
                f_recv[f] += payload
                f_next_seq[f] = expected + 1
                f_nak[f] = 0
                f_since_ack[f] += 1
                done = expected + 1 >= f_npkts[f]
                if done or f_since_ack[f] >= ack_every:
                    f_since_ack[f] = 0
                    send_ack(f, expected + 1, 0, now)
                free_packet(p)
                if done and f_finish[f] < 0:
                    flow_accounted(f, now)
                return
            sc[SC_DISCARDED] += 1
            if seq > expected and f_nak[f] == 0:  # one NAK per gap
                f_nak[f] = 1
                send_ack(f, expected, 1, now)
            free_packet(p)
            return
        sc[SC_DELIVERED] += 1
        sc[SC_DELIVERED_BYTES] += p_payload[p]
        sc[SC_LAST_DELIVERY] = now
        f_recv[f] += p_payload[p]
        settle(f, p_seq[p], True)
        occupancy = (f_rob_bytes[f] + mtu - 1) // mtu  # packets held, sampled at each delivery
        rob_hist[min(occupancy, rob_hist.shape[0] - 1)] += 1
        free_packet(p)
        if f_recv[f] + f_lost[f] >= f_size[f]:
            flow_accounted(f, now)

    # ---- the loop ----------------------------------------------------------------------------------------
    while sc[SC_HEAP] > 0:
        if sc[SC_EVENTS] >= budget_end:
            return RC_BUDGET
        if sc[SC_HEAP] + need_heap > cap_heap:
            return RC_GROW_HEAP
        if sc[SC_FREE_COUNT] < need_packets:
            return RC_GROW_PACKETS
        if sc[SC_ROB_FREE_COUNT] < need_packets:
            return RC_GROW_ROB
        if stop > 0 and h_time[0] > stop:
            return RC_STOPPED
        if links_fail and h_kind[0] == EV_LINK:
            # Taking a link down discards its queues: each packet may return a credit and finish a
            # flow (releasing its dependents). Room for all of it first (a packet is > header bytes).
            first = h_arg[0] >> 1 << 1
            queued = (q_bytes[first] + q_bytes[first + 1]) // (header + 1) + 2
            if sc[SC_HEAP] + queued * (2 + pr[PR_MAX_DEPENDENTS]) + need_heap > cap_heap:
                return RC_GROW_HEAP
        if h_time[0] + pr[PR_MAX_TX] >= bins * interval:
            return RC_GROW_BINS
        now, kind, arg, size = heap_pop(h_time, h_kind, h_arg, sc[SC_HEAP])
        sc[SC_HEAP] = size
        sc[SC_NOW] = now
        sc[SC_EVENTS] += 1
        # The handlers name the NIC port to pull from and the switch port to send from; each is
        # called once, below, so that numba inlines pull and the send path once instead of at
        # every handler (a smaller loop runs faster).
        nic = -1
        port = -1
        if kind == EV_ARRIVE:
            p = arg
            arrived_on = p_ch[p]
            f = p_flow[p]
            if links_fail and cn[arrived_on, CN_DOWN_AT] >= 0 and lost_on_wire(arrived_on, p, now):
                cn[arrived_on, CN_WIRE_LOST] += 1
                sc[SC_WIRE_LOST] += 1
                if credits:
                    return_credit(arrived_on, p_wire[p], now)
                lose(p, now)
                continue
            if (ch_loss_kind[arrived_on] != 0 and corrupted(arrived_on, p, now)) or injected_loss(f, p):
                ch_rcv_errors[arrived_on] += 1
                sc[SC_CORRUPTED] += 1
                s_ev[now // interval, arrived_on, SE_RCV_ERRORS] += 1
                if credits:  # the receiver drops it from its buffer at once
                    return_credit(arrived_on, p_wire[p], now)
                lose(p, now)
                continue
            node = ch_target[arrived_on]
            if node == f_dst_node[f]:
                deliver(p, now)
            else:
                if p_hop[p] >= max_hops:
                    return RC_LOOP
                if ingress_accounting:
                    p_in[p] = arrived_on
                    if credits:
                        enter_input_buffer(arrived_on, p)
                c = choose(node, p, f, now)
                if c < 0 or ch_from_host[c]:
                    return RC_NO_ROUTE  # no usable next hop, or a host asked to forward
                p_hop[p] += 1
                enqueue(c, p, now)
        elif kind == EV_TX_DONE:
            c = arg
            if ch_from_host[c]:
                ch_busy[c] = 0
                nic = c  # a paused NIC does not pull; RESUME restarts it
            else:
                ch_txd_pending[c] = 0
                port = c
        elif kind == EV_PAUSE:
            c = arg
            ch_paused[c] = 1
            ch_pause_frames[c] += 1
            ch_pause_since[c] = now
            s_ev[now // interval, c, SE_PAUSES] += 1
        elif kind == EV_RESUME:
            c = arg
            ch_paused[c] = 0
            ch_pause_ps[c] += now - ch_pause_since[c]
            if now > ch_pause_since[c]:
                spread_ps(SE_PAUSE_PS, c, ch_pause_since[c], now)
            if ch_from_host[c]:
                if ch_busy[c] == 0:
                    nic = c
            elif q_head[c] >= 0 and ch_txd_pending[c] == 0:
                if ch_free_at[c] <= now:
                    port = c
                else:
                    ch_txd_pending[c] = 1
                    sc[SC_HEAP] = heap_push(h_time, h_kind, h_arg, sc[SC_HEAP], ch_free_at[c], EV_TX_DONE, c)
        elif kind == EV_RELEASE:
            t = arg
            for f in range(t_flow_off[t], t_flow_off[t + 1]):
                activate(f, now)
        elif kind == EV_ACK:
            f = arg >> 26
            nak = (arg >> 25) & 1
            psn = arg & ((1 << 25) - 1)
            if psn > f_snd_una[f]:
                f_snd_una[f] = psn
                f_rto_at[f] = now + rto if psn < f_npkts[f] else -1  # the pending timer re-arms lazily
                if fi[f, FI_REC_START] >= 0 and psn >= fi[f, FI_REC_POINT]:
                    fi[f, FI_REC_PS] += now - fi[f, FI_REC_START]
                    fi[f, FI_REC_START] = -1
            if nak == 1 and f_snd_nxt[f] > psn:
                sc[SC_NAKS] += 1
                nic = go_back(f, psn, now)
            else:
                c = f_first_ch[f]
                if ch_busy[c] == 0 and ch_rr[c] >= 0:
                    nic = c  # the window may have opened
        elif kind == EV_CNP:
            cnp_arrives(arg, now)
        elif kind == EV_CC_TIMER:
            q = arg >> 1
            which = arg & 1
            if qi[q, QI_CC] == 0 or qi[q, QI_ACTIVE] == 0:
                # Back at line rate, or the QP has nothing to send: this timer stops.
                if which:
                    qi[q, QI_RATE_PENDING] = 0
                else:
                    qi[q, QI_ALPHA_PENDING] = 0
                continue
            due = qi[q, QI_RATE_AT] if which else qi[q, QI_ALPHA_AT]
            if now < due:  # a CNP re-armed it since
                cc_timer(q, which, due)
            elif which == 0:
                qf[q, QF_ALPHA] *= 1.0 - pf[PF_G]
                qi[q, QI_ALPHA_AT] = now + pr[PR_ALPHA_TIMER]
                cc_timer(q, 0, qi[q, QI_ALPHA_AT])
            else:
                qi[q, QI_T_STAGE] += 1
                rate_increase(q)
                qi[q, QI_RATE_AT] = now + pr[PR_RATE_TIMER]
                if qi[q, QI_CC] == 1:
                    cc_timer(q, 1, qi[q, QI_RATE_AT])
                else:
                    qi[q, QI_RATE_PENDING] = 0
        elif kind == EV_PACE:
            c = arg
            if cn[c, CN_PACE_AT] <= now:
                cn[c, CN_PACE_AT] = 0
            if ch_busy[c] == 0:
                nic = c
        elif kind == EV_CREDIT:
            c = arg >> 20
            cn[c, CN_CREDITS] += arg & 0xFFFFF
            if ch_from_host[c]:
                if ch_busy[c] == 0:
                    nic = c
            elif ch_txd_pending[c] == 0 and ch_free_at[c] <= now:
                port = c
        elif kind == EV_LINK:
            first = arg >> 1 << 1  # the link's two channels: first and first + 1
            for c in (first, first + 1):
                if arg & 1:  # back up (when no other fault holds it down): a NIC resumes
                    cn[c, CN_DOWN] -= 1
                    if cn[c, CN_DOWN] == 0 and ch_from_host[c] and ch_busy[c] == 0:
                        nic = c  # a link has at most one end at a host
                else:
                    drop_link(c, now)
        elif kind == EV_REROUTE:
            sc[SC_EPOCH] = arg
            return RC_REROUTE  # Python installs the epoch's forwarding tables and resumes
        else:  # EV_RTO
            f = arg
            if f_rto_at[f] >= 0 and f_snd_una[f] < f_npkts[f]:
                if now < f_rto_at[f]:  # progress since it was armed: wait until the new deadline
                    sc[SC_HEAP] = heap_push(h_time, h_kind, h_arg, sc[SC_HEAP], f_rto_at[f], EV_RTO, f)
                else:
                    sc[SC_TIMEOUTS] += 1
                    f_rto_at[f] = now + rto
                    sc[SC_HEAP] = heap_push(h_time, h_kind, h_arg, sc[SC_HEAP], now + rto, EV_RTO, f)
                    nic = go_back(f, f_snd_una[f], now)
        if nic >= 0:
            pull(nic, now)
        elif port >= 0:
            try_send_head(port, now)
    return RC_DONE
