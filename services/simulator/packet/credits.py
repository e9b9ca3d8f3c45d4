"""InfiniBand credit-based link-level flow control (one data VL).

A transmitter spends credit (bytes of the receiver's input buffer) as it starts a packet; the
receiver returns it, one link delay later, when the packet leaves that buffer (forwarded, corrupted,
lost or discarded). Hosts drain at line rate: their channels hold unlimited credit.
"""

from __future__ import annotations

from services.simulator.packet.heap import schedule
from services.simulator.packet.kernel import kernel
from services.simulator.packet.layout import (
    CN_CREDITS,
    CN_PEAK_INGRESS,
    CN_WAIT_SINCE,
    CN_XMIT_WAIT,
    EV_CREDIT,
)

__all__ = ["enter_input_buffer", "has_credit", "leave_input_buffer", "return_credit"]


@kernel
def return_credit(run, heap, ch, c, wire, now):
    """`wire` bytes of credit travel back to channel c's transmitter: one link delay, propagation
    alone (a flow-control packet does not cross the switch; delay_ps would add its latency again)."""
    schedule(heap, run.sc, now + ch.prop_ps[c], EV_CREDIT, (c << 20) | wire)


@kernel
def enter_input_buffer(ch, pk, c, p):
    """Packet p, arrived over channel c, now occupies the switch's input buffer of c."""
    ch.ing_bytes[c] += pk.wire[p]
    if ch.ing_bytes[c] > ch.cn[c, CN_PEAK_INGRESS]:
        ch.cn[c, CN_PEAK_INGRESS] = ch.ing_bytes[c]


@kernel
def leave_input_buffer(run, heap, ch, pk, p, now):
    """Packet p leaves the input buffer it was in (if any): its credit goes back."""
    ingress = pk.ingress[p]
    if ingress >= 0:
        ch.ing_bytes[ingress] -= pk.wire[p]
        return_credit(run, heap, ch, ingress, pk.wire[p], now)
        pk.ingress[p] = -1


@kernel
def has_credit(ch, c, wire, now):
    """Whether channel c may start a packet of `wire` bytes; if not, PortXmitWait starts counting."""
    cn = ch.cn
    if cn[c, CN_CREDITS] >= wire:
        since = cn[c, CN_WAIT_SINCE]
        if since >= 0:
            cn[c, CN_XMIT_WAIT] += now - since
            cn[c, CN_WAIT_SINCE] = -1
        return True
    if cn[c, CN_WAIT_SINCE] < 0:
        cn[c, CN_WAIT_SINCE] = now
    return False
