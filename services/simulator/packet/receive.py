"""The receiving NIC: delivery (with the reorder window, or Go-Back-N's in-order receiver) and the
end of a packet that will never arrive."""

from __future__ import annotations

from services.simulator.packet.collective import flow_accounted
from services.simulator.packet.dcqcn import maybe_send_cnp
from services.simulator.packet.gobackn import receive_in_order
from services.simulator.packet.kernel import kernel, kernel_inline
from services.simulator.packet.layout import (
    PR_DCQCN,
    PR_GBN,
    PR_MTU,
    SC_DELIVERED,
    SC_DELIVERED_BYTES,
    SC_LAST_DELIVERY,
)
from services.simulator.packet.reorder import settle
from services.simulator.packet.transmit import free_packet

__all__ = ["deliver", "lose"]


@kernel
def lose(run, heap, fl, rob, qps, tr, pk, p, now):
    """A packet that will never arrive. Go-Back-N: the receiver notices the gap and NAKs (or the
    sender times out). Without it: the bytes are lost and the receiver stops waiting for them."""
    f = pk.flow[p]
    if run.pr[PR_GBN] == 1:
        free_packet(run, pk, p)
        return
    fl.lost[f] += pk.payload[p]
    settle(run, fl, rob, f, pk.seq[p], False)
    free_packet(run, pk, p)
    if fl.recv[f] + fl.lost[f] >= fl.size[f]:
        # Its other packets may have been delivered ahead of their time (a sink channel): the
        # flow ends with the last of them.
        flow_accounted(run, heap, fl, rob, qps, tr, f, max(now, fl.last_rx[f]))


@kernel_inline
def deliver(run, heap, fl, rob, qps, tr, pk, p, now):
    """Packet p reached its destination NIC at `now` (from a sink channel, handled when it started
    its last link: `now` is then later than the loop's; everything it schedules is at or after it)."""
    sc = run.sc
    f = pk.flow[p]
    if run.pr[PR_DCQCN] == 1 and pk.ecn[p]:
        maybe_send_cnp(run, heap, fl, qps, f, now)
    if run.pr[PR_GBN] == 1:
        receive_in_order(run, heap, fl, rob, qps, tr, pk, p, now)
        return
    sc[SC_DELIVERED] += 1
    sc[SC_DELIVERED_BYTES] += pk.payload[p]
    sc[SC_LAST_DELIVERY] = max(sc[SC_LAST_DELIVERY], now)  # (a sink's deliveries come early)
    fl.last_rx[f] = now
    fl.recv[f] += pk.payload[p]
    settle(run, fl, rob, f, pk.seq[p], True)
    mtu = run.pr[PR_MTU]
    occupancy = (fl.rob_bytes[f] + mtu - 1) // mtu  # packets held, sampled at each delivery
    rob.hist[min(occupancy, rob.hist.shape[0] - 1)] += 1
    free_packet(run, pk, p)
    if fl.recv[f] + fl.lost[f] >= fl.size[f]:
        flow_accounted(run, heap, fl, rob, qps, tr, f, now)  # its latest delivery: in order on the wire
