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
SC_CNP_SENT = 24  # CNPs the receiving NICs sent (np_cnp_sent)
SC_CNP_HANDLED = 25  # CNPs the sending NICs acted on (rp_cnp_handled)
SC_ECN_MARKED = 26  # packets a switch marked Congestion Experienced
SC_RESENT_BYTES = 27  # payload bytes sent again by Go-Back-N
SC_XMIT_DISCARDS = 28  # packets a switch port threw away: its link was down (PortXmitDiscards)
SC_WIRE_LOST = 29  # packets on a link's wire when it went down
SC_EPOCH = 30  # the routing epoch whose reroute the loop returned for
SC_MARK_DONE = 31  # the ECN test hook has marked its packet
# Transfers with a lower index exist (all of them unless the run is generated as it goes: stream.py).
SC_MATERIALIZED = 32
# The loop returns RC_BUDGET when SC_EVENTS reaches this (then PR_BUDGET events later): counted across
# every return, so a run that returns often for other reasons (a streamed ring) still reports.
SC_BUDGET_END = 33
# The latest time the run reached: a sink's deliveries are handled ahead of the loop's time, SC_NOW
# (switch.forward_tx); the report takes the later of the two as the run's last moment.
SC_REACHED = 34
SC_SIZE = 35

# --- Channels.hot: the fields every hop of a packet reads or writes, one 64-byte row per channel
# (one cache line instead of eight arrays' at k=32's 49,152 channels) ----------------------------
CH_FREE_AT = 0  # ps; the port is transmitting until then
CH_Q_HEAD = 1  # output FIFO of packet slots (-1: empty)
CH_Q_TAIL = 2
CH_Q_BYTES = 3
CH_Q_LAST = 4  # when q_bytes last changed (the series integrate it)
CH_TX_BYTES = 5
CH_TX_PACKETS = 6
CH_DELAY_PS = 7  # propagation, plus switch latency into a switch
CH_HOT_SIZE = 8

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
PR_DCQCN = 24  # 1: ECN marking in the switches and DCQCN rate control at the NICs
PR_KMIN = 25  # ECN: no marking at or below this queue depth, bytes
PR_KMAX = 26  # ECN: every packet marked at or above this depth
PR_CNP_INTERVAL = 27  # DCQCN NP: at most one CNP per QP per this many ps
PR_ALPHA_TIMER = 28  # DCQCN RP: alpha decays once per this many ps without a CNP
PR_RATE_TIMER = 29  # DCQCN RP: a rate-increase event every this many ps
PR_BYTE_COUNTER = 30  # DCQCN RP: ... and every this many bytes sent
PR_STAGES = 31  # DCQCN RP: F, the increase events of fast recovery
PR_CREDITS = 32  # 1: InfiniBand credit-based link-level flow control
PR_LINK_EVENTS = 34  # 1: links go down or up in this run (the link-state checks of the hot paths)
PR_REROUTED = 35  # 1: the routes changed during the run (ECMP packets may be on an old path)
PR_MARK_FLOW = 36  # test hook: packet PR_MARK_PSN of this flow leaves its NIC CE-marked (-1: off)
PR_MARK_PSN = 37
PR_RATE_CAP = 38  # 1: some QP's rate is capped (a point-to-point flow's rate_gbps; see QI_CAP)
PR_SIZE = 40

# --- pf: float parameters -------------------------------------------------------------------------
PF_PMAX = 0  # ECN marking probability at Kmax
PF_G = 1  # DCQCN alpha gain
PF_RAI = 2  # additive increase, bit/s
PF_RHAI = 3  # hyper increase, bit/s
PF_MIN_RATE = 4  # floor of the rate cut, bit/s
PF_INV_INTERVAL = 5  # 1 / PR_INTERVAL: sample bins by a multiply (recording.bin_of), not a division
PF_SIZE = 8

# --- fi: per-flow counters (columns) ------------------------------------------------------------
FI_CNP_SENT = 0  # CNPs its receiver sent
FI_CNP_HANDLED = 1  # CNPs its sender acted on
FI_RESENT = 2  # Go-Back-N: packets of this flow sent again
FI_RESENT_BYTES = 3
FI_REC_START = 4  # Go-Back-N: when the current loss recovery began (-1: none)
FI_REC_POINT = 5  # ... and the PSN whose acknowledgement ends it
FI_REC_PS = 6  # total time spent in loss recovery
FI_DROPS = 7  # its packets a full switch buffer dropped
FI_SIZE = 8

# --- qi / qf: DCQCN state per QP (a connection's queue pair, across the flows of its transfers) ---
QI_NEXT_TX = 0  # earliest time the rate limiter lets the QP's next packet go, ps
QI_LAST_CNP = 1  # NP: when the QP's receiver last sent a CNP, ps
QI_BYTES = 2  # RP: bytes sent since the byte counter last fired
QI_T_STAGE = 3  # RP: rate-timer events since the last cut
QI_B_STAGE = 4  # RP: byte-counter events since the last cut
QI_ALPHA_AT = 5  # RP: when alpha next decays (the pending timer re-arms lazily)
QI_RATE_AT = 6  # RP: when the rate timer next fires
QI_CC = 7  # RP: 1 while the QP is rate-limited
QI_ACTIVE = 8  # the QP's flows started and not yet accounted (its timers run while any is)
QI_ALPHA_PENDING = 9  # an alpha-timer event is in the heap
QI_RATE_PENDING = 10  # a rate-timer event is in the heap
QI_CAP = 11  # 1: a static rate limiter paces the QP at QF_LINE, its cap (with DCQCN: RC up to it)
QI_SIZE = 12
QF_RATE = 0  # current rate RC, bit/s
QF_TARGET = 1  # target rate RT
QF_ALPHA = 2
QF_LINE = 3  # line rate of the QP's NIC port, or its cap where lower (QI_CAP)
QF_SIZE = 4

# --- s_ev: per-channel counter series [bin, channel, column] (allocated with one column when the
# run has no fault, PFC or DCQCN: then nothing writes them) ------------------------------------------
SE_RCV_ERRORS = 0
SE_XMIT_DISCARDS = 1
SE_ECN_MARKED = 2
SE_PAUSES = 3  # PAUSE frames its transmitter received
SE_PAUSE_PS = 4  # time its transmitter was paused
SE_SIZE = 5

# --- cn: per-channel counters (columns) ---------------------------------------------------------
CN_ECN_MARKED = 0  # packets marked CE in this port's queue (ecn-marked-pkts)
CN_XMIT_WAIT = 1  # ps with data queued and no credit (PortXmitWait)
CN_XMIT_DISCARDS = 2  # packets discarded at this port: its link was down (PortXmitDiscards)
CN_LINK_DOWNED = 3  # times the link went down (LinkDownedCounter)
CN_WAIT_SINCE = 4  # InfiniBand: since when the head packet waits for credit (-1: it does not)
CN_PACE_AT = 5  # DCQCN: a pending EV_PACE wake-up of this NIC port (0: none)
CN_CREDITS = 6  # InfiniBand: bytes of credit the transmitter holds for the receiver's buffer
CN_DOWN_AT = 7  # last time the link went down, ps (-1: never)
CN_PEAK_INGRESS = 8  # most bytes its packets ever occupied in the switch it feeds
CN_DOWN = 9  # 1 while the link is down
CN_WIRE_LOST = 10  # packets on the wire when the link went down (lost)
CN_SIZE = 12

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
EV_RTO = 4  # arg: flow << RTO_GEN_BITS | its slot's occupant; its retransmission timer may have expired
RTO_GEN_BITS = 24  # EV_RTO's argument: the occupant of the flow's slot, modulo 2^24 (nic.rto_arg)
RTO_GEN_MASK = (1 << RTO_GEN_BITS) - 1
EV_PAUSE = 5  # arg: channel; a PFC PAUSE reaches its transmitter
EV_RESUME = 6  # arg: channel; a PFC RESUME (XON) reaches its transmitter
EV_CNP = 7  # arg: flow; a CNP reaches the flow's sender
EV_CC_TIMER = 8  # arg: QP << 1 | (0: alpha timer, 1: rate-increase timer)
EV_PACE = 9  # arg: channel; a rate-limited flow of this NIC port may send again
EV_CREDIT = 10  # arg: channel << 20 | bytes; credit returns to the channel's transmitter
EV_LINK = 11  # arg: link << 1 | up; a link goes down (0) or comes back (1)
EV_REROUTE = 12  # arg: routing epoch; the routing reaction takes effect (the loop returns RC_REROUTE)

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
RC_REROUTE = 9  # a routing reaction is due: new forwarding tables (Python), then resume
# The next event releases a transfer whose dependents do not exist yet: Python generates them (stream.py).
RC_MATERIALIZE = 10
