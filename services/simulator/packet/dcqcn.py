"""ECN's reaction at the NICs: DCQCN per QP (a connection's rate carries from one transfer to the next).

The notification point (the receiving NIC) answers CE-marked packets with CNPs; the reaction point
(the sender) cuts its rate on a CNP and recovers it on two lazily re-armed timers and a byte counter
(Zhu et al., SIGCOMM 2015). A rate-limited QP's packets are paced by QI_NEXT_TX.
"""

from __future__ import annotations

from services.simulator.packet.heap import schedule
from services.simulator.packet.kernel import kernel
from services.simulator.packet.layout import (
    EV_CC_TIMER,
    EV_CNP,
    FI_CNP_HANDLED,
    FI_CNP_SENT,
    PF_G,
    PF_MIN_RATE,
    PF_RAI,
    PF_RHAI,
    PR_ALPHA_TIMER,
    PR_BYTE_COUNTER,
    PR_CNP_INTERVAL,
    PR_RATE_TIMER,
    PR_STAGES,
    QF_ALPHA,
    QF_LINE,
    QF_RATE,
    QF_TARGET,
    QI_ACTIVE,
    QI_ALPHA_AT,
    QI_ALPHA_PENDING,
    QI_B_STAGE,
    QI_BYTES,
    QI_CC,
    QI_LAST_CNP,
    QI_NEXT_TX,
    QI_RATE_AT,
    QI_RATE_PENDING,
    QI_T_STAGE,
    SC_CNP_HANDLED,
    SC_CNP_SENT,
)

__all__ = ["arm_timers", "cnp_arrives", "maybe_send_cnp", "paced", "timer_fires"]


@kernel
def _cc_timer(run, heap, qps, q, which, when):
    if which == 0:
        qps.qi[q, QI_ALPHA_PENDING] = 1
    else:
        qps.qi[q, QI_RATE_PENDING] = 1
    schedule(heap, run.sc, when, EV_CC_TIMER, (q << 1) | which)


@kernel
def arm_timers(run, heap, qps, q, now):
    """Timers run while the QP is rate-limited and has a flow to send; idle, they wait."""
    qi = qps.qi
    pr = run.pr
    if qi[q, QI_ALPHA_PENDING] == 0:
        qi[q, QI_ALPHA_AT] = max(qi[q, QI_ALPHA_AT], now + pr[PR_ALPHA_TIMER])
        _cc_timer(run, heap, qps, q, 0, qi[q, QI_ALPHA_AT])
    if qi[q, QI_RATE_PENDING] == 0:
        qi[q, QI_RATE_AT] = max(qi[q, QI_RATE_AT], now + pr[PR_RATE_TIMER])
        _cc_timer(run, heap, qps, q, 1, qi[q, QI_RATE_AT])


@kernel
def _rate_increase(run, qps, q):
    # One increase event: fast recovery toward the target while both counters are below F,
    # hyper increase once both passed it, additive increase in between (DCQCN, Zhu et al. 2015).
    qi, qf, pf = qps.qi, qps.qf, run.pf
    t_stage = qi[q, QI_T_STAGE]
    b_stage = qi[q, QI_B_STAGE]
    stages = run.pr[PR_STAGES]
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


@kernel
def cnp_arrives(run, heap, fl, qps, f, now):
    """A CNP reaches flow f's sender: cut its QP's rate."""
    qi, qf, pf, pr = qps.qi, qps.qf, run.pf, run.pr
    fl.fi[f, FI_CNP_HANDLED] += 1
    run.sc[SC_CNP_HANDLED] += 1
    q = fl.qp[f]
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
        arm_timers(run, heap, qps, q, now)


@kernel
def maybe_send_cnp(run, heap, fl, qps, f, now):
    """The receiving NIC (NP) answers a CE-marked packet with a CNP, at most one per QP per interval."""
    q = fl.qp[f]
    if now - qps.qi[q, QI_LAST_CNP] >= run.pr[PR_CNP_INTERVAL]:
        qps.qi[q, QI_LAST_CNP] = now
        fl.fi[f, FI_CNP_SENT] += 1
        run.sc[SC_CNP_SENT] += 1
        fl.pend[f] += 1
        schedule(heap, run.sc, now + fl.ack_lat[f], EV_CNP, f)


@kernel
def paced(run, qps, q, wire, now):
    """The rate limiter of a rate-limited QP: its next packet may go `wire` bytes at RC later."""
    qi = qps.qi
    qi[q, QI_NEXT_TX] = max(qi[q, QI_NEXT_TX], now) + int(wire * 8e12 / qps.qf[q, QF_RATE])
    qi[q, QI_BYTES] += wire
    if qi[q, QI_BYTES] >= run.pr[PR_BYTE_COUNTER]:
        qi[q, QI_BYTES] -= run.pr[PR_BYTE_COUNTER]
        qi[q, QI_B_STAGE] += 1
        _rate_increase(run, qps, q)


@kernel
def timer_fires(run, heap, qps, arg, now):
    """EV_CC_TIMER: arg is QP << 1 | (0: the alpha timer, 1: the rate-increase timer)."""
    qi, qf, pr = qps.qi, qps.qf, run.pr
    q = arg >> 1
    which = arg & 1
    if qi[q, QI_CC] == 0 or qi[q, QI_ACTIVE] == 0:
        # Back at line rate, or the QP has nothing to send: this timer stops.
        if which:
            qi[q, QI_RATE_PENDING] = 0
        else:
            qi[q, QI_ALPHA_PENDING] = 0
        return
    due = qi[q, QI_RATE_AT] if which else qi[q, QI_ALPHA_AT]
    if now < due:  # a CNP re-armed it since
        _cc_timer(run, heap, qps, q, which, due)
    elif which == 0:
        qf[q, QF_ALPHA] *= 1.0 - run.pf[PF_G]
        qi[q, QI_ALPHA_AT] = now + pr[PR_ALPHA_TIMER]
        _cc_timer(run, heap, qps, q, 0, qi[q, QI_ALPHA_AT])
    else:
        qi[q, QI_T_STAGE] += 1
        _rate_increase(run, qps, q)
        qi[q, QI_RATE_AT] = now + pr[PR_RATE_TIMER]
        if qi[q, QI_CC] == 1:
            _cc_timer(run, heap, qps, q, 1, qi[q, QI_RATE_AT])
        else:
            qi[q, QI_RATE_PENDING] = 0
