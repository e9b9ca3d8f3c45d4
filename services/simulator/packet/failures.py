"""Faults in the loop: bit errors on a link (BER, Gilbert-Elliott), the test hook's lost packet, and
links going down (queue discarded, packets on the wire lost) or coming back."""

from __future__ import annotations

import numpy as np

from services.simulator.packet.draws import uniform
from services.simulator.packet.kernel import kernel
from services.simulator.packet.layout import (
    CH_DELAY_PS,
    CH_Q_HEAD,
    CH_Q_TAIL,
    CN_DOWN,
    CN_DOWN_AT,
    CN_LINK_DOWNED,
    CN_WAIT_SINCE,
    CN_XMIT_WAIT,
    PR_DROP_FLOW,
    PR_DROP_PSN,
    PR_PFC,
    SC_INJECTED_DROP_DONE,
)
from services.simulator.packet.pfc import release_pfc
from services.simulator.packet.recording import set_queue
from services.simulator.packet.switch import discard

__all__ = ["corrupted", "injected_loss", "link_changes", "lost_on_wire"]


@kernel
def corrupted(run, loss, pk, c, p, now):
    """Whether bit errors on the link p just crossed (channel c) lose it."""
    if now < loss.start[c] or now >= loss.end[c]:
        return False
    rng = run.rng
    if loss.kind[c] == 1:  # independent bit errors: P(loss) = 1 - (1 - BER)^bits
        return uniform(rng) < 1.0 - np.exp(pk.wire[p] * 8.0 * loss.a[c])
    if loss.ge_bad[c]:  # Gilbert-Elliott: move between states per packet, then lose by state
        if uniform(rng) < loss.d[c]:
            loss.ge_bad[c] = 0
    elif uniform(rng) < loss.c[c]:
        loss.ge_bad[c] = 1
    return uniform(rng) < (loss.b[c] if loss.ge_bad[c] else loss.a[c])


@kernel
def injected_loss(run, pk, f, p):
    """The test hook: packet PR_DROP_PSN of flow PR_DROP_FLOW is lost, once."""
    sc, pr = run.sc, run.pr
    if f != pr[PR_DROP_FLOW] or pk.seq[p] != pr[PR_DROP_PSN] or sc[SC_INJECTED_DROP_DONE] != 0:
        return False
    sc[SC_INJECTED_DROP_DONE] = 1
    return True


@kernel
def lost_on_wire(ch, pk, c, p, now):
    """Whether packet p was on channel c's wire when its link went down (it started after the last
    failure)."""
    duration = int(pk.wire[p] * ch.ps_per_byte[c] + 0.5)
    return ch.cn[c, CN_DOWN_AT] >= now - ch.hot[c, CH_DELAY_PS] - duration


@kernel
def _drop_link(run, heap, ch, series, fl, rob, qps, tr, pk, c, now):
    # The link of channel c goes down: its queue is discarded, its transmitter stops.
    cn = ch.cn
    cn[c, CN_DOWN] += 1
    if cn[c, CN_DOWN] > 1:
        return  # already down (overlapping faults): it comes back when the last one ends
    cn[c, CN_DOWN_AT] = now
    cn[c, CN_LINK_DOWNED] += 1
    if cn[c, CN_WAIT_SINCE] >= 0:  # no longer waiting for credit: there is no link
        cn[c, CN_XMIT_WAIT] += now - cn[c, CN_WAIT_SINCE]
        cn[c, CN_WAIT_SINCE] = -1
    p = ch.hot[c, CH_Q_HEAD]
    while p >= 0:
        following = pk.next[p]
        if run.pr[PR_PFC] == 1:
            release_pfc(run, heap, ch, pk, p, now)
        discard(run, heap, ch, series, fl, rob, qps, tr, pk, c, p, now)
        p = following
    ch.hot[c, CH_Q_HEAD] = -1
    ch.hot[c, CH_Q_TAIL] = -1
    set_queue(ch, series, run.pr, run.pf, c, now, 0)


@kernel
def link_changes(run, heap, ch, series, fl, rob, qps, tr, pk, arg, now):
    """EV_LINK (arg: link << 1 | up): both channels go down or come back; returns the NIC port to
    pull from (a link has at most one end at a host), or -1."""
    nic = -1
    first = arg >> 1 << 1  # the link's two channels: first and first + 1
    for c in (first, first + 1):
        if arg & 1:  # back up (when no other fault holds it down): a NIC resumes
            ch.cn[c, CN_DOWN] -= 1
            if ch.cn[c, CN_DOWN] == 0 and ch.from_host[c] and ch.busy[c] == 0:
                nic = c
        else:
            _drop_link(run, heap, ch, series, fl, rob, qps, tr, pk, c, now)
    return nic
