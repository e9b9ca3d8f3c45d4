"""The named structures the compiled engine works on: groups of numpy arrays, one per concept.

numba passes a namedtuple of arrays to compiled code as one argument and reads its fields by name
at no cost, so the loop and its sections take the few groups they touch instead of ~130 loose
arrays. The arrays themselves belong to the engine (`engine.py` builds and grows them); these
tuples are rebuilt from them before every slice of the loop, so a grown array is simply a new field.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = [
    "Channels",
    "Flows",
    "Heap",
    "LossModel",
    "Packets",
    "Qps",
    "Reorder",
    "Routing",
    "Run",
    "Series",
    "Transfers",
]


class Run(NamedTuple):
    """Scalars of the run (`layout.SC_*`), integer and float parameters (`PR_*`, `PF_*`), the RNG."""

    sc: np.ndarray
    pr: np.ndarray
    pf: np.ndarray
    rng: np.ndarray


class Heap(NamedTuple):
    """The event queue (`heap.py`): a timing wheel over a far heap; payloads are `arg << 4 | kind`."""

    qs: np.ndarray  # scalars (heap.QS_*)
    chunk: np.ndarray  # the wheel's chunks: CHUNK (time, payload) pairs each
    chunk_len: np.ndarray  # events in each chunk
    chunk_next: np.ndarray  # the next chunk of its bucket (or of the free list)
    b_head: np.ndarray  # per bucket its first and last chunk (-1: empty)
    b_tail: np.ndarray
    bits: np.ndarray  # uint64: a bit per non-empty bucket
    cur: np.ndarray  # (time, payload) pairs of the bucket being popped, in pop order
    far: np.ndarray  # 4-ary heap of (time, payload) pairs beyond the wheel


class Channels(NamedTuple):
    """Per channel (a link direction): its transmitter, output queue, PFC state and counters."""

    target: np.ndarray  # node it leads to
    source: np.ndarray
    ps_per_byte: np.ndarray
    hot: np.ndarray  # int64 [channel, layout.CH_*]: transmitter, output queue, counters, delay
    prop_ps: np.ndarray  # propagation alone (link-level frames: InfiniBand credits)
    buffer: np.ndarray  # bytes its output queue may hold
    from_host: np.ndarray  # 1: a NIC's uplink (it pulls from its QPs)
    # 1: a switch port whose packets may be delivered as they start (the one channel into a host,
    # without bit errors, in a run where nothing acts on a packet on that wire or on what its
    # delivery changes: arrays._sinks); its arrival is known then, so it needs no event
    # (switch.forward_tx says when a packet keeps it anyway).
    sink: np.ndarray
    busy: np.ndarray  # NIC ports: a pull is pending
    drops: np.ndarray
    peak_q: np.ndarray
    rr: np.ndarray  # NIC ports: the next flow of their round-robin ring (-1: none)
    ring_len: np.ndarray
    cn: np.ndarray  # [channel, layout.CN_*] counters and transport state
    ing_bytes: np.ndarray  # bytes its packets occupy in the switch it feeds (PFC, credits)
    paused: np.ndarray  # PFC: its transmitter is paused
    pause_sent: np.ndarray  # PFC: the switch it feeds has paused it
    txd_pending: np.ndarray  # an EV_TX_DONE of this switch port is in the heap
    pause_frames: np.ndarray
    pause_ps: np.ndarray
    pause_since: np.ndarray
    # uint64 [C, W]: bit f of row c is set once a packet of flow f was sent on channel c (the flows
    # that actually used each link, under modes that choose per packet); W = 0: not kept.
    flow_bits: np.ndarray


class LossModel(NamedTuple):
    """Bit errors per channel (`config.LinkLoss`): kind 1 BER, 2 Gilbert-Elliott, 0 none."""

    kind: np.ndarray
    a: np.ndarray  # BER: log(1 - ber); GE: good-state loss
    b: np.ndarray  # GE: bad-state loss
    c: np.ndarray  # GE: P(good -> bad) per packet
    d: np.ndarray  # GE: P(bad -> good) per packet
    start: np.ndarray  # ps
    end: np.ndarray
    ge_bad: np.ndarray  # GE: 1 while in the bad state
    rcv_errors: np.ndarray  # packets lost to them (PortRcvErrors of the receiving port)


class Series(NamedTuple):
    """Per-interval series, bin-major [bin, channel]."""

    bytes: np.ndarray
    qpeak: np.ndarray
    qint: np.ndarray  # queue depth integrated over time, byte x ps
    drops: np.ndarray
    ev: np.ndarray  # [bin, channel, layout.SE_*] counters


class Routing(NamedTuple):
    """Equal-cost next channels of (switch row, destination slot), and ECMP's per-flow paths."""

    node_row: np.ndarray  # switch row of each node (-1: a host)
    g_span: np.ndarray  # int32 [row * num_dest + slot, 2]: its group g_ch[start:end]
    g_ch: np.ndarray  # groups' channels; groups with the same members share them
    num_dest: int
    g_next: np.ndarray  # SPRAY's round-robin position of each group
    path_off: np.ndarray  # per flow: its ECMP path in path_ch
    path_end: np.ndarray
    path_ch: np.ndarray


class Flows(NamedTuple):
    """Per flow (a QP's share of one transfer): progress, Go-Back-N and flowlet state."""

    dst_node: np.ndarray
    dst_slot: np.ndarray  # forwarding slot (destination, or a pinned path's)
    size: np.ndarray
    sent: np.ndarray
    recv: np.ndarray
    lost: np.ndarray
    next_seq: np.ndarray  # receiver: first packet not yet settled
    first_ch: np.ndarray  # the NIC port its QP is bound to
    start: np.ndarray
    finish: np.ndarray
    last_rx: np.ndarray  # ps: its latest delivery so far (a delivery may be handled before its time)
    sink_wait: np.ndarray  # ps: arrival of its latest packet on a sink channel that kept its event
    transfer: np.ndarray
    act_next: np.ndarray  # the NIC port's ring of flows with packets to send
    act_prev: np.ndarray
    rob_slot: np.ndarray  # its reorder window and flowlet table (-1: none)
    rob_bytes: np.ndarray
    npkts: np.ndarray
    snd_nxt: np.ndarray  # Go-Back-N sequence numbers (packets)
    snd_una: np.ndarray
    high: np.ndarray
    linked: np.ndarray
    left: np.ndarray
    nak: np.ndarray
    since_ack: np.ndarray
    rto_at: np.ndarray
    ack_lat: np.ndarray  # ps: ACKs, NAKs and CNPs return over the path latency
    fi: np.ndarray  # [flow, layout.FI_*] counters
    qp: np.ndarray
    fl_ch: np.ndarray  # FLOWLET: per (reorder slot, hop) the channel, switch and last use
    fl_node: np.ndarray
    fl_last: np.ndarray
    pend: np.ndarray  # int32: ACK, NAK and CNP events pending that name it
    gen: np.ndarray  # int32: its slot's occupant, counted from 0 (a streamed run reuses slots)


class Reorder(NamedTuple):
    """The receiving NICs' reorder windows: a pool of bitmaps, one slot per active flow."""

    bits: np.ndarray  # [slot, word]: settled packets ahead of the first unsettled one
    lost: np.ndarray  # ... of which dropped
    next: np.ndarray  # free list of slots
    hist: np.ndarray  # deliveries seen with k packets held


class Qps(NamedTuple):
    """DCQCN and rate-cap state per QP: integer (`layout.QI_*`) and float (`QF_*`) columns."""

    qi: np.ndarray
    qf: np.ndarray


class Transfers(NamedTuple):
    """Per transfer slot: its flows and unmet prerequisites; the dependency edges between transfers.

    A slot holds one transfer; its flows are slots flow_off[t]..flow_end[t]-1 and its dependents
    dep[dep_off[t]:dep_end[t]], by transfer *index* in the run, whose slot is slot_of[index & (len -
    1)] (a power-of-two map). A run held whole has slot = index (slot_of and dep_last empty, the
    ends views of the offsets); a run generated as it goes (stream.py) reuses slots.
    """

    pending: np.ndarray
    release: np.ndarray
    flow_off: np.ndarray
    flow_end: np.ndarray
    unsent: np.ndarray
    unarrived: np.ndarray
    dep_off: np.ndarray
    dep_end: np.ndarray
    dep: np.ndarray
    dep_arrival: np.ndarray  # 1: the dependent waits for arrival, 0: only for leaving
    dep_last: np.ndarray  # int32: the largest index among its dependents (-1: none; empty: held run)
    slot_of: np.ndarray  # int32: slot of transfer index i at i & (len - 1) (empty: held run)


class Packets(NamedTuple):
    """The pool of packet slots (a free list through `next`)."""

    flow: np.ndarray
    seq: np.ndarray
    payload: np.ndarray
    wire: np.ndarray
    hop: np.ndarray
    ch: np.ndarray  # channel it was last sent on
    ingress: np.ndarray  # channel whose switch input buffer holds it (PFC, credits; -1: none)
    ecn: np.ndarray
    next: np.ndarray
