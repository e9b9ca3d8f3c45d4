"""Switch output ports: enqueue (ECN marking, PFC and buffer admission, drops), send the head of
the queue, throw packets away where the link is down."""

from __future__ import annotations

from services.simulator.packet.credits import has_credit, leave_input_buffer
from services.simulator.packet.draws import uniform
from services.simulator.packet.heap import schedule
from services.simulator.packet.kernel import kernel, kernel_inline
from services.simulator.packet.layout import (
    CH_DELAY_PS,
    CH_FREE_AT,
    CH_Q_BYTES,
    CH_Q_HEAD,
    CH_Q_TAIL,
    CN_DOWN,
    CN_ECN_MARKED,
    CN_XMIT_DISCARDS,
    EV_ARRIVE,
    EV_PAUSE,
    EV_TX_DONE,
    FI_DROPS,
    PF_PMAX,
    PR_BINS,
    PR_CREDITS,
    PR_DCQCN,
    PR_GBN,
    PR_HEADROOM,
    PR_INTERVAL,
    PR_KMAX,
    PR_KMIN,
    PR_LINK_EVENTS,
    PR_MAX_TX,
    PR_PFC,
    PR_STOP,
    PR_XOFF,
    SC_DROPPED,
    SC_ECN_MARKED,
    SC_REACHED,
    SC_XMIT_DISCARDS,
    SE_ECN_MARKED,
    SE_XMIT_DISCARDS,
)
from services.simulator.packet.pfc import release_pfc
from services.simulator.packet.receive import deliver, lose
from services.simulator.packet.recording import set_queue
from services.simulator.packet.transmit import start_tx

__all__ = ["discard", "enqueue", "forward_tx", "send_head", "try_send_head"]


@kernel
def _drop(run, heap, ch, series, fl, rob, qps, tr, pk, c, p, now):
    ch.drops[c] += 1
    fl.fi[pk.flow[p], FI_DROPS] += 1
    series.drops[now // run.pr[PR_INTERVAL], c] += 1
    run.sc[SC_DROPPED] += 1
    lose(run, heap, fl, rob, qps, tr, pk, p, now)


@kernel
def discard(run, heap, ch, series, fl, rob, qps, tr, pk, c, p, now):
    """A switch port whose link is down throws packet p away (PortXmitDiscards)."""
    ch.cn[c, CN_XMIT_DISCARDS] += 1
    run.sc[SC_XMIT_DISCARDS] += 1
    series.ev[now // run.pr[PR_INTERVAL], c, SE_XMIT_DISCARDS] += 1
    if run.pr[PR_CREDITS] == 1:
        leave_input_buffer(run, heap, ch, pk, p, now)
    lose(run, heap, fl, rob, qps, tr, pk, p, now)


@kernel
def _mark_ecn(run, ch, series, pk, c, p, now):
    # RED-style marking on the depth the packet finds: none up to Kmin, rising linearly to Pmax at
    # Kmax, every packet beyond.
    pr = run.pr
    kmin, kmax = pr[PR_KMIN], pr[PR_KMAX]
    depth = ch.hot[c, CH_Q_BYTES]
    if depth <= kmin:
        return
    if depth < kmax and uniform(run.rng) >= run.pf[PF_PMAX] * (depth - kmin) / (kmax - kmin):
        return
    pk.ecn[p] = 1
    ch.cn[c, CN_ECN_MARKED] += 1
    series.ev[now // pr[PR_INTERVAL], c, SE_ECN_MARKED] += 1
    run.sc[SC_ECN_MARKED] += 1


@kernel_inline
def forward_tx(run, heap, ch, series, fl, rob, qps, tr, pk, c, p, now):
    """Switch port c starts sending packet p. On a sink channel (`Channels.sink`) its destination
    receives it now, at the time it will arrive: nothing can reach the packet on that wire, and the
    wire keeps a flow's packets in order, so its delivery is the same as at an EV_ARRIVE then, for
    one event less a packet. (Only the order among events of one instant, shuffled, may differ.)

    The packet keeps its event when its arrival is beyond a time limit (the run stops before it) or
    beyond the series' columns (the event grows them, as it did); without Go-Back-N, when its flow's
    reorder window is not empty behind it (a packet of the flow dropped upstream meanwhile would
    settle between them, and the window's counts depend on that order); and when a packet of its
    flow ahead of it on this wire kept its event and has not arrived (`Flows.sink_wait`), so that
    the flow's deliveries are handled in the order they arrive."""
    pr = run.pr
    f = pk.flow[p]
    if ch.sink[c] == 1 and ch.target[c] == fl.dst_node[f]:
        at = start_tx(run, heap, ch, series, pk, c, p, now, False)
        if (
            fl.sink_wait[f] < now
            and (pr[PR_STOP] == 0 or at <= pr[PR_STOP])
            and at + pr[PR_MAX_TX] < pr[PR_BINS] * pr[PR_INTERVAL]
            and (pr[PR_GBN] == 1 or (pk.seq[p] == fl.next_seq[f] and fl.rob_bytes[f] == 0))
        ):
            if at > run.sc[SC_REACHED]:
                run.sc[SC_REACHED] = at
            deliver(run, heap, fl, rob, qps, tr, pk, p, at)
            return
        fl.sink_wait[f] = at
        schedule(heap, run.sc, at, EV_ARRIVE, p)
        return
    start_tx(run, heap, ch, series, pk, c, p, now)


@kernel_inline
def enqueue(run, heap, ch, series, fl, rob, qps, tr, pk, c, p, now):
    """Packet p joins output channel c: sent at once by an idle port, else queued or dropped."""
    pr = run.pr
    pfc = pr[PR_PFC] == 1
    credits = pr[PR_CREDITS] == 1
    if pr[PR_LINK_EVENTS] == 1 and ch.cn[c, CN_DOWN]:
        discard(run, heap, ch, series, fl, rob, qps, tr, pk, c, p, now)
        return
    if pr[PR_DCQCN] == 1:
        _mark_ecn(run, ch, series, pk, c, p, now)
    ingress = pk.ingress[p]
    wire = pk.wire[p]
    if pfc and ingress >= 0 and ch.ing_bytes[ingress] + wire > pr[PR_XOFF] + pr[PR_HEADROOM]:
        # Headroom too small for what was on the wire when PAUSE went out.
        _drop(run, heap, ch, series, fl, rob, qps, tr, pk, c, p, now)
        return
    direct = ch.hot[c, CH_Q_HEAD] < 0 and ch.hot[c, CH_FREE_AT] <= now  # an idle port sends at once
    if credits:
        direct = direct and has_credit(ch, c, wire, now)
    elif pfc:
        direct = direct and ch.paused[c] == 0
    if direct:
        forward_tx(run, heap, ch, series, fl, rob, qps, tr, pk, c, p, now)
        return
    if pfc:
        if ingress >= 0:
            ch.ing_bytes[ingress] += wire
            if ch.ing_bytes[ingress] > pr[PR_XOFF] and ch.pause_sent[ingress] == 0:
                ch.pause_sent[ingress] = 1  # PAUSE the port this packet came from
                schedule(heap, run.sc, now + ch.hot[ingress, CH_DELAY_PS], EV_PAUSE, ingress)
    elif not credits and ch.hot[c, CH_Q_BYTES] + wire > ch.buffer[c]:
        _drop(run, heap, ch, series, fl, rob, qps, tr, pk, c, p, now)
        return
    pk.next[p] = -1
    if ch.hot[c, CH_Q_TAIL] < 0:
        ch.hot[c, CH_Q_HEAD] = p
        if ch.paused[c] == 0 and ch.txd_pending[c] == 0 and (not credits or ch.hot[c, CH_FREE_AT] > now):
            # The first packet to wait: the port must come back for it when it is free (unless a
            # TX_DONE is still pending from before a link flap).
            ch.txd_pending[c] = 1
            schedule(heap, run.sc, ch.hot[c, CH_FREE_AT], EV_TX_DONE, c)
    else:
        pk.next[ch.hot[c, CH_Q_TAIL]] = p
    ch.hot[c, CH_Q_TAIL] = p
    set_queue(ch, series, pr, run.pf, c, now, ch.hot[c, CH_Q_BYTES] + wire)


@kernel_inline
def send_head(run, heap, ch, series, fl, rob, qps, tr, pk, c, now):
    """Switch port c sends the head of its queue, and comes back if more wait."""
    p = ch.hot[c, CH_Q_HEAD]
    ch.hot[c, CH_Q_HEAD] = pk.next[p]
    if ch.hot[c, CH_Q_HEAD] < 0:
        ch.hot[c, CH_Q_TAIL] = -1
    set_queue(ch, series, run.pr, run.pf, c, now, ch.hot[c, CH_Q_BYTES] - pk.wire[p])
    if run.pr[PR_PFC] == 1:
        release_pfc(run, heap, ch, pk, p, now)
    forward_tx(run, heap, ch, series, fl, rob, qps, tr, pk, c, p, now)
    if ch.hot[c, CH_Q_HEAD] >= 0:
        ch.txd_pending[c] = 1
        schedule(heap, run.sc, ch.hot[c, CH_FREE_AT], EV_TX_DONE, c)


@kernel_inline
def try_send_head(run, heap, ch, series, fl, rob, qps, tr, pk, c, now):
    """A free, unpaused switch port with packets waiting sends the head, credit permitting."""
    if ch.hot[c, CH_Q_HEAD] < 0 or ch.paused[c]:
        return
    if run.pr[PR_CREDITS] == 1 and not has_credit(ch, c, pk.wire[ch.hot[c, CH_Q_HEAD]], now):
        return  # the credit's return restarts the port
    send_head(run, heap, ch, series, fl, rob, qps, tr, pk, c, now)
