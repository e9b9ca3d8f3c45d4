"""The compiled event loop of the packet engine: it pops events and hands each to its section.

Model (one directed channel per link direction, store-and-forward):

- A NIC pulls (`nic.py`): when its uplink channel is free it takes the next packet, round-robin over
  the active flows (QPs) bound to that channel, so packets exist only while they are in flight.
- A packet is serialised at the channel's rate (wire bytes = payload + header), then propagates;
  it arrives at the far end `prop + switch latency` later (EV_ARRIVE; `transmit.py`).
- A switch picks the output channel by the load-balancing mode (`forward.py`) and appends the
  packet to that channel's output queue (`switch.py`); if the queued bytes would exceed the port's
  buffer, the packet is dropped and counted. When a channel finishes a packet (EV_TX_DONE) it starts
  the next queued one.
- At the destination NIC the packet is delivered (`receive.py`); a per-flow reorder window
  (`reorder.py`) tracks packets that arrive ahead of a missing one (the NIC reorder buffer of
  spraying), or Go-Back-N (`gobackn.py`) keeps only the expected one.
- Collective structure (`collective.py`): a transfer (one step of a ring, carried by its QP flows) is
  released when its prerequisites have left (same connection, in order) or arrived (the data it
  forwards). PFC (`pfc.py`), DCQCN (`dcqcn.py`), InfiniBand credits (`credits.py`) and faults
  (`failures.py`) have sections of their own.

Everything lives in arrays passed in, grouped by `state.py`; the loop returns a code (layout.RC_*)
when it has handled its event budget or needs a bigger array, and resumes from the same arrays when
called again.

Compiling: every section is a module-level `@njit(cache=True, _nrt=False)` function, compiled once
(nested closures were inlined by numba at every call site: 107 s of compile on two cores, 40 s now).
`_nrt=False` because nothing here allocates: with numba's reference counting on, every call that
takes the groups increfs and decrefs each of their ~130 arrays (atomic operations), 45 times slower
than the closure loop. The per-packet path (`_arrive`, `choose_*`, `enqueue`, `start_tx`,
`send_head`, `pull`, `deliver`, the series updates) is `inline="always"`: as calls, passing the
groups' array structs costs about 4 times the inlined loop; cold paths (faults, DCQCN, Go-Back-N,
PFC) stay calls.
"""

from __future__ import annotations

from services.simulator.packet.credits import enter_input_buffer, return_credit
from services.simulator.packet.dcqcn import cnp_arrives, timer_fires
from services.simulator.packet.failures import corrupted, injected_loss, link_changes, lost_on_wire
from services.simulator.packet.forward import choose
from services.simulator.packet.gobackn import ack_arrives, timeout_fires
from services.simulator.packet.heap import peek, pop, schedule
from services.simulator.packet.kernel import kernel, kernel_inline
from services.simulator.packet.layout import (
    CH_FREE_AT,
    CH_Q_BYTES,
    CH_Q_HEAD,
    CN_CREDITS,
    CN_DOWN_AT,
    CN_PACE_AT,
    CN_WIRE_LOST,
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
    EV_TX_DONE,
    PR_BINS,
    PR_BUDGET,
    PR_CREDITS,
    PR_HEADER,
    PR_INTERVAL,
    PR_LINK_EVENTS,
    PR_MAX_DEPENDENTS,
    PR_MAX_FLOWS_PER_TRANSFER,
    PR_MAX_HOPS,
    PR_MAX_TX,
    PR_PFC,
    PR_STOP,
    RC_BUDGET,
    RC_DONE,
    RC_GROW_BINS,
    RC_GROW_HEAP,
    RC_GROW_PACKETS,
    RC_GROW_ROB,
    RC_LOOP,
    RC_MATERIALIZE,
    RC_NO_ROUTE,
    RC_REROUTE,
    RC_STOPPED,
    SC_BUDGET_END,
    SC_CORRUPTED,
    SC_EPOCH,
    SC_EVENTS,
    SC_FREE_COUNT,
    SC_HEAP,
    SC_MATERIALIZED,
    SC_NOW,
    SC_ROB_FREE_COUNT,
    SC_WIRE_LOST,
    SE_RCV_ERRORS,
)
from services.simulator.packet.nic import activate, pull
from services.simulator.packet.pfc import pause_arrives, resume_arrives
from services.simulator.packet.receive import deliver, lose
from services.simulator.packet.switch import enqueue, try_send_head

__all__ = ["run_events"]

_NO_CODE = -1


@kernel_inline
def _arrive(run, heap, ch, loss, series, rt, fl, rob, qps, tr, pk, p, now):
    """EV_ARRIVE: packet p has fully arrived at the far end of its channel. Returns RC_LOOP or
    RC_NO_ROUTE when the run cannot go on, else _NO_CODE."""
    pr = run.pr
    credits = pr[PR_CREDITS] == 1
    arrived_on = pk.ch[p]
    f = pk.flow[p]
    if (
        pr[PR_LINK_EVENTS] == 1
        and ch.cn[arrived_on, CN_DOWN_AT] >= 0
        and lost_on_wire(ch, pk, arrived_on, p, now)
    ):
        ch.cn[arrived_on, CN_WIRE_LOST] += 1
        run.sc[SC_WIRE_LOST] += 1
        if credits:
            return_credit(run, heap, ch, arrived_on, pk.wire[p], now)
        lose(run, heap, fl, rob, qps, tr, pk, p, now)
        return _NO_CODE
    if (loss.kind[arrived_on] != 0 and corrupted(run, loss, pk, arrived_on, p, now)) or injected_loss(
        run, pk, f, p
    ):
        loss.rcv_errors[arrived_on] += 1
        run.sc[SC_CORRUPTED] += 1
        series.ev[now // pr[PR_INTERVAL], arrived_on, SE_RCV_ERRORS] += 1
        if credits:  # the receiver drops it from its buffer at once
            return_credit(run, heap, ch, arrived_on, pk.wire[p], now)
        lose(run, heap, fl, rob, qps, tr, pk, p, now)
        return _NO_CODE
    node = ch.target[arrived_on]
    if node == fl.dst_node[f]:
        deliver(run, heap, fl, rob, qps, tr, pk, p, now)
        return _NO_CODE
    if pk.hop[p] >= pr[PR_MAX_HOPS]:
        return RC_LOOP
    if pr[PR_PFC] == 1 or credits:
        pk.ingress[p] = arrived_on
        if credits:
            enter_input_buffer(ch, pk, arrived_on, p)
    c = choose(run, ch, rt, fl, pk, node, p, f, now)
    if c < 0 or ch.from_host[c]:
        return RC_NO_ROUTE  # no usable next hop, or a host asked to forward
    pk.hop[p] += 1
    enqueue(run, heap, ch, series, fl, rob, qps, tr, pk, c, p, now)
    return _NO_CODE


@kernel
def _room_needed(run, heap, ch, tr):
    """A code asking Python for more room before the next event, or _NO_CODE."""
    sc, pr = run.sc, run.pr
    need_heap = 2 * pr[PR_MAX_FLOWS_PER_TRANSFER] + pr[PR_MAX_DEPENDENTS] + 8
    need_packets = pr[PR_MAX_FLOWS_PER_TRANSFER] + 1
    cap_heap = heap.cur.shape[0] // 2
    if sc[SC_HEAP] + need_heap > cap_heap:
        return RC_GROW_HEAP
    if sc[SC_FREE_COUNT] < need_packets:
        return RC_GROW_PACKETS
    if sc[SC_ROB_FREE_COUNT] < need_packets:
        return RC_GROW_ROB
    next_t, next_kind, next_arg, _ = peek(heap)
    if pr[PR_STOP] > 0 and next_t > pr[PR_STOP]:
        return RC_STOPPED
    if next_kind == EV_RELEASE and tr.dep_last.shape[0] > 0 and tr.dep_last[next_arg] >= sc[SC_MATERIALIZED]:
        return RC_MATERIALIZE  # its transfer's dependents must exist before it can end
    if pr[PR_LINK_EVENTS] == 1 and next_kind == EV_LINK:
        # Taking a link down discards its queues: each packet may return a credit and finish a
        # flow (releasing its dependents). Room for all of it first (a packet is > header bytes).
        first = next_arg >> 1 << 1
        queued = (ch.hot[first, CH_Q_BYTES] + ch.hot[first + 1, CH_Q_BYTES]) // (pr[PR_HEADER] + 1) + 2
        if sc[SC_HEAP] + queued * (2 + pr[PR_MAX_DEPENDENTS]) + need_heap > cap_heap:
            return RC_GROW_HEAP
    if next_t + pr[PR_MAX_TX] >= pr[PR_BINS] * pr[PR_INTERVAL]:
        return RC_GROW_BINS
    return _NO_CODE


@kernel
def run_events(run, heap, ch, loss, series, rt, fl, rob, qps, tr, pk):
    """Handle events until none is left (RC_DONE) or Python is needed (another layout.RC_*)."""
    sc = run.sc
    while sc[SC_HEAP] > 0:
        if sc[SC_EVENTS] >= sc[SC_BUDGET_END]:
            sc[SC_BUDGET_END] = sc[SC_EVENTS] + run.pr[PR_BUDGET]
            return RC_BUDGET
        code = _room_needed(run, heap, ch, tr)
        if code != _NO_CODE:
            return code
        now, kind, arg = pop(heap)
        sc[SC_HEAP] -= 1
        sc[SC_NOW] = now
        sc[SC_EVENTS] += 1
        # The handlers name the NIC port to pull from and the switch port to send from; each is
        # restarted once, below.
        nic = -1
        port = -1
        if kind == EV_ARRIVE:
            code = _arrive(run, heap, ch, loss, series, rt, fl, rob, qps, tr, pk, arg, now)
            if code != _NO_CODE:
                return code
        elif kind == EV_TX_DONE:
            c = arg
            if ch.from_host[c]:
                ch.busy[c] = 0
                nic = c  # a paused NIC does not pull; RESUME restarts it
            else:
                ch.txd_pending[c] = 0
                port = c
        elif kind == EV_PAUSE:
            pause_arrives(run, ch, series, arg, now)
        elif kind == EV_RESUME:
            c = arg
            resume_arrives(run, ch, series, c, now)
            if ch.from_host[c]:
                if ch.busy[c] == 0:
                    nic = c
            elif ch.hot[c, CH_Q_HEAD] >= 0 and ch.txd_pending[c] == 0:
                if ch.hot[c, CH_FREE_AT] <= now:
                    port = c
                else:
                    ch.txd_pending[c] = 1
                    schedule(heap, sc, ch.hot[c, CH_FREE_AT], EV_TX_DONE, c)
        elif kind == EV_RELEASE:
            for f in range(tr.flow_off[arg], tr.flow_end[arg]):
                activate(run, heap, ch, series, fl, rob, qps, tr, pk, f, now)
        elif kind == EV_ACK:
            fl.pend[arg >> 26] -= 1
            nic = ack_arrives(run, ch, fl, arg, now)
        elif kind == EV_CNP:
            fl.pend[arg] -= 1
            cnp_arrives(run, heap, fl, qps, arg, now)
        elif kind == EV_CC_TIMER:
            timer_fires(run, heap, qps, arg, now)
        elif kind == EV_PACE:
            c = arg
            if ch.cn[c, CN_PACE_AT] <= now:
                ch.cn[c, CN_PACE_AT] = 0
            if ch.busy[c] == 0:
                nic = c
        elif kind == EV_CREDIT:
            c = arg >> 20
            ch.cn[c, CN_CREDITS] += arg & 0xFFFFF
            if ch.from_host[c]:
                if ch.busy[c] == 0:
                    nic = c
            elif ch.txd_pending[c] == 0 and ch.hot[c, CH_FREE_AT] <= now:
                port = c
        elif kind == EV_LINK:
            nic = link_changes(run, heap, ch, series, fl, rob, qps, tr, pk, arg, now)
        elif kind == EV_REROUTE:
            sc[SC_EPOCH] = arg
            return RC_REROUTE  # Python installs the epoch's forwarding tables and resumes
        else:  # EV_RTO
            nic = timeout_fires(run, heap, ch, fl, arg, now)
        if nic >= 0:
            pull(run, heap, ch, series, fl, qps, tr, pk, nic, now)
        elif port >= 0:
            try_send_head(run, heap, ch, series, fl, rob, qps, tr, pk, port, now)
    return RC_DONE
