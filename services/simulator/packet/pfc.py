"""Priority flow control (one priority): a switch PAUSEs the port packets come from when they hold
more than XOFF bytes of its buffer, and RESUMEs it at XON; PAUSE and RESUME take a link delay."""

from __future__ import annotations

from services.simulator.packet.heap import schedule
from services.simulator.packet.kernel import kernel
from services.simulator.packet.layout import (
    CH_DELAY_PS,
    EV_RESUME,
    PR_INTERVAL,
    PR_XON,
    SE_PAUSE_PS,
    SE_PAUSES,
)
from services.simulator.packet.recording import spread_ps

__all__ = ["pause_arrives", "release_pfc", "resume_arrives"]


@kernel
def release_pfc(run, heap, ch, pk, p, now):
    """A queued packet leaves the switch: its ingress port's count falls, RESUME at XON."""
    ingress = pk.ingress[p]
    if ingress >= 0:
        ch.ing_bytes[ingress] -= pk.wire[p]
        if ch.pause_sent[ingress] == 1 and ch.ing_bytes[ingress] <= run.pr[PR_XON]:
            ch.pause_sent[ingress] = 0
            schedule(heap, run.sc, now + ch.hot[ingress, CH_DELAY_PS], EV_RESUME, ingress)


@kernel
def pause_arrives(run, ch, series, c, now):
    """EV_PAUSE: channel c's transmitter stops."""
    ch.paused[c] = 1
    ch.pause_frames[c] += 1
    ch.pause_since[c] = now
    series.ev[now // run.pr[PR_INTERVAL], c, SE_PAUSES] += 1


@kernel
def resume_arrives(run, ch, series, c, now):
    """EV_RESUME: channel c's transmitter may send again (the caller restarts it)."""
    ch.paused[c] = 0
    ch.pause_ps[c] += now - ch.pause_since[c]
    if now > ch.pause_since[c]:
        spread_ps(series, run.pr, SE_PAUSE_PS, c, ch.pause_since[c], now)
