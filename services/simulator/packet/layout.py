"""Indices of the engine's scalar and parameter slots, event kinds, modes and return codes.

The compiled loop keeps every piece of state in numpy arrays so that it can stop at any event,
hand control back to Python (progress, cancellation, growing an array) and resume where it was.
Scalars live in one int64 array `sc`, run parameters in another, `pr`; these constants name their
slots. (Plain module-level ints: numba folds them into the compiled code.)
"""

from __future__ import annotations

# --- sc: scalar state -------------------------------------------------------------------------
SC_NOW = 0  # time of the event being handled, ps
SC_HEAP = 1  # events in the heap
SC_FREE = 2  # head of the free list of packet slots (-1: none)
SC_FREE_COUNT = 3
SC_EVENTS = 4  # events handled
SC_INJECTED = 5  # packets put on a wire by a NIC
SC_DELIVERED = 6  # packets that reached their destination NIC
SC_DROPPED = 7  # packets dropped (buffer overflow)
SC_DELIVERED_BYTES = 8  # payload bytes delivered
SC_FLOWS_DONE = 9  # flows whose every packet was delivered or dropped
SC_LIVE = 10  # packets in flight now
SC_PEAK_LIVE = 11  # most packets in flight at once
SC_ROB_FREE = 12  # head of the free list of reorder windows
SC_ROB_FREE_COUNT = 13
SC_ROB_OVERFLOW = 14  # packets that arrived beyond a reorder window
SC_OUT_OF_ORDER = 15  # packets that arrived ahead of a missing one
SC_ROB_PEAK_BYTES = 16  # largest reorder-buffer occupancy of any flow
SC_LAST_DELIVERY = 17  # time of the last delivery, ps
SC_RESENT = 18  # packets sent again by Go-Back-N
SC_NAKS = 19  # NAKs the senders acted on
SC_TIMEOUTS = 20  # retransmission timeouts
SC_CORRUPTED = 21  # packets lost to bit errors (PortRcvErrors at the receiving port)
SC_DISCARDED = 22  # packets a Go-Back-N receiver threw away (out of order or duplicate)
SC_INJECTED_DROP_DONE = 23
SC_SIZE = 24

# --- pr: parameters ---------------------------------------------------------------------------
PR_MODE = 0
PR_MTU = 1  # payload bytes per packet
PR_HEADER = 2  # wire overhead per packet (headers, FCS, preamble, gap)
PR_INTERVAL = 3  # series interval, ps
PR_BINS = 4  # columns of the series arrays
PR_FLOWLET_GAP = 5  # ps
PR_MAX_HOPS = 6  # hops a path may take (flowlet tables, loop guard)
PR_STOP = 7  # stop at this time, ps (0: never)
PR_BUDGET = 8  # events to handle before returning for progress
PR_ROB_WORDS = 9  # 64-bit words per reorder window
PR_MAX_TX = 10  # longest serialisation of one packet on any channel, ps
PR_MAX_FLOWS_PER_TRANSFER = 11
PR_MAX_DEPENDENTS = 12
PR_GBN = 13  # 1: Go-Back-N reliable connections (window, ACK/NAK, retransmission timeout)
PR_WINDOW = 14  # Go-Back-N window, packets
PR_RTO = 15  # retransmission timeout, ps
PR_ACK_EVERY = 16  # a receiver acknowledges every this many in-order packets (and the last)
PR_DROP_FLOW = 17  # test hook: drop packet PR_DROP_PSN of this flow once (-1: off)
PR_DROP_PSN = 18
PR_PFC = 19  # 1: priority flow control on the RDMA priority (one priority modelled)
PR_XOFF = 20  # bytes from one ingress port held in a switch before it PAUSEs that port's sender
PR_XON = 21  # ... and at or below which it RESUMEs it
PR_HEADROOM = 22  # bytes above XOFF an ingress port may still fill (packets already on the wire)
PR_SIZE = 24

# --- modes --------------------------------------------------------------------------------------
MODE_ECMP = 1
MODE_ADAPTIVE = 2
MODE_SPRAY = 3  # spraying round-robin per (switch, destination)
MODE_FLOWLET = 4
MODE_SPRAY_RANDOM = 5  # spraying by a seeded uniform choice (ns-3's RandomEcmpRouting)

# --- events -------------------------------------------------------------------------------------
EV_ARRIVE = 0  # arg: packet; it has fully arrived at the far end of its channel
EV_TX_DONE = 1  # arg: channel; it has finished serialising its packet
EV_RELEASE = 2  # arg: transfer; its prerequisites are met and its release time has come
EV_ACK = 3  # arg: flow << 26 | nak << 25 | psn; an ACK (or NAK) reaches the sender
EV_RTO = 4  # arg: flow; its retransmission timer may have expired
EV_PAUSE = 5  # arg: channel; a PFC PAUSE reaches its transmitter
EV_RESUME = 6  # arg: channel; a PFC RESUME (XON) reaches its transmitter

# --- why the loop returned ------------------------------------------------------------------------
RC_DONE = 0  # no event left
RC_BUDGET = 1  # handled PR_BUDGET events (progress, cancellation)
RC_GROW_HEAP = 2
RC_GROW_PACKETS = 3
RC_GROW_BINS = 4
RC_GROW_ROB = 5
RC_STOPPED = 6  # the next event is after PR_STOP
RC_LOOP = 7  # a packet exceeded PR_MAX_HOPS: the routes loop
RC_NO_ROUTE = 8  # a switch has no usable next hop toward a packet's destination
