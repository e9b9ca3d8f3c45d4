"""A ring generated as the run goes: transfers and flows live in slots, reused once done.

A 64 MiB ring AllReduce over 8,192 ranks is 134M transfers; held whole, the engine's per-transfer
and per-flow state would take tens of GB. A streamed workload (`workload.RingStream`) instead gives
the engine its connections (one flow per QP: the per-QP *templates* of every flow's destination,
forwarding slot, NIC port, path and ACK latency) and `TransferPool` keeps only the transfers that
exist now in slots of the engine's transfer and flow arrays:

- Materialising: the loop returns `RC_MATERIALIZE` before it releases a transfer whose dependents
  do not exist yet (layout.SC_MATERIALIZED: transfers below that index exist). Python then fills
  the next block of transfers (`ring_block`, whole steps at a time) into free slots. A prerequisite
  completes only after it was released, so every dependent exists before any prerequisite of it
  can count it down: pending counts start at the transfer's whole number of prerequisites.
- Freeing: a flow every byte of which was delivered or dropped has released its transfer's
  dependents, and holds nothing the loop still uses once no packet in flight names it (a free
  packet slot names flow -1), no pending ACK, NAK or CNP event does (`Flows.pend` counts them:
  scheduled +1, handled -1), it is in no NIC's ring of flows to send and its retransmission timer
  is disarmed. Without Go-Back-N and DCQCN that is the case as soon as it is accounted; with them
  its sender may still wait for ACKs, time out and resend. A disarmed timer's event stays pending
  up to the timeout: it carries its slot's occupant (`Flows.gen`, `nic.rto_arg`) and does nothing
  once the slot holds another flow, so slots do not wait for it. Slots come in pages of one
  block: when no page is free, the pages whose flows are all settled so fold their results into
  the run's totals (`StreamedFlows`) and are freed (else a page is added), so every fill and fold
  is a contiguous slice.
- The first block goes to page 0 (slot = index) and holds every transfer with no prerequisite, and
  the event queue orders events by time alone (ties by its own generator, not by slot), so a
  streamed run schedules the same events in the same order as the same ring held whole: the
  results are identical (tests/simulator/test_stream.py), while the memory follows the transfers
  in flight (a few steps of the ring) instead of the run.

A transfer's dependents are kept by index; `slot_of` maps an index to its slot (a power-of-two map
over the indices in flight, rebuilt larger when they span more than half of it).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from services.simulator.packet import layout as L
from services.simulator.packet.collective import fold_totals
from services.simulator.results import FLOW_RESULTS_LIMIT
from services.simulator.workload import RingStream

__all__ = ["StreamedFlows", "TransferPool"]

# Arrays of one entry per flow slot, and their value in a free slot (arrays.py names them).
_FLOW_ARRAYS = {
    "f_dst_node": 0,
    "f_dst_slot": 0,
    "f_size": 0,
    "f_sent": 0,
    "f_recv": 0,
    "f_lost": 0,
    "f_next_seq": 0,
    "f_first_ch": 0,
    "f_start": -1,
    "f_finish": 0,  # a free slot counts as finished (watchdogs count the unfinished flows)
    "f_last_rx": -1,
    "f_sink_wait": -1,
    "f_transfer": -1,
    "act_next": -1,
    "act_prev": -1,
    "f_rob_slot": -1,
    "f_rob_bytes": 0,
    "f_npkts": 0,
    "f_snd_nxt": 0,
    "f_snd_una": 0,
    "f_high": 0,
    "f_linked": 0,
    "f_left": 0,
    "f_nak": 0,
    "f_since_ack": 0,
    "f_rto_at": -1,
    "f_pend": 0,
    "f_gen": 0,  # (counted up at each fill, not reset)
    "f_ack_lat": 1,
    "fi": 0,
    "f_qp": 0,
    "f_path_off": 0,
    "f_path_end": 0,
}
# Per-QP templates a flow slot copies from its QP's row.
_TEMPLATES = ("f_dst_node", "f_dst_slot", "f_first_ch", "f_ack_lat", "f_qp", "f_path_off", "f_path_end")
_TRANSFER_ARRAYS = {
    "t_pending": 0,
    "t_release": 0,
    "t_unsent": 0,
    "t_unarrived": 0,
    "dep_last": -1,
    "t_index": -1,  # the transfer a slot holds (-1: free)
}
_TRANSFER_DTYPES = {
    "t_pending": np.int32,
    "t_unsent": np.int32,
    "t_unarrived": np.int32,
    "dep_last": np.int32,
}
_DEPENDENTS = 2  # a ring transfer's: the next on its connection, the next step on rank + 1


@dataclasses.dataclass
class StreamedFlows:
    """What a streamed run keeps of its flows: the first `FLOW_RESULTS_LIMIT` whole (by flow index,
    as a held run numbers them), and totals over all."""

    count: int
    start: np.ndarray  # int64 [kept], ps (-1: never started)
    finish: np.ndarray  # int64 [kept], ps (-1: unfinished)
    lost: np.ndarray  # int64 [kept] bytes
    fi: np.ndarray  # int64 [kept, FI_SIZE]
    last_finish: int = -1  # ps, latest finish of any flow
    unfinished: int = 0  # flows that never finished
    lost_flows: int = 0  # flows that lost bytes
    fi_sum: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(L.FI_SIZE, dtype=np.int64))
    settled_bytes: int = 0  # bytes delivered or lost (progress)
    max_recovery_ps: int = 0  # longest Go-Back-N recovery of a flow

    @classmethod
    def empty(cls, count: int, qps: int) -> StreamedFlows:
        kept = min(count, -(-FLOW_RESULTS_LIMIT // qps) * qps)  # whole transfers
        fi = np.zeros((kept, L.FI_SIZE), dtype=np.int64)
        fi[:, L.FI_REC_START] = -1
        return cls(
            count,
            np.full(kept, -1, dtype=np.int64),
            np.full(kept, -1, dtype=np.int64),
            np.zeros(kept, dtype=np.int64),
            fi,
        )

    def fold(self, index: np.ndarray, start, finish, recv, lost, fi) -> None:
        """Results of flows `index` (their final values) into the totals and the kept ones."""
        if not len(index):
            return
        settled, unfinished, last_finish, lost_flows, recovery = fold_totals(
            finish, recv, lost, fi, self.fi_sum, L.FI_REC_PS
        )
        self.settled_bytes += settled
        self.unfinished += unfinished
        self.last_finish = max(self.last_finish, last_finish)
        self.lost_flows += lost_flows
        self.max_recovery_ps = max(self.max_recovery_ps, recovery)
        kept = index < len(self.start)
        if kept.any():
            at = index[kept]
            self.start[at], self.finish[at], self.lost[at], self.fi[at] = (
                start[kept],
                finish[kept],
                lost[kept],
                fi[kept],
            )


class TransferPool:
    """The slots of a streamed run's transfers and flows, inside `arrays` (an EngineArrays whose
    per-flow arrays hold one row per QP of the stream's connections when this is built).

    Slots come in *pages* of one block each: a block is generated into a free page (the lowest),
    so every fill is a contiguous slice, and a page is freed whole once all its transfers are done
    (a ring's transfers end roughly in order: a few pages are in use at any time).
    """

    def __init__(self, arrays, stream: RingStream, mtu_bytes: int, release_ps: int) -> None:
        self.a, self.stream, self.mtu = arrays, stream, mtu_bytes
        self.release_ps = release_ps
        self.q = stream.qps
        self.page = min(stream.transfers, stream.block)  # transfers per page (and per block)
        self.next = 0  # transfers below this index exist
        self.templates = {name: getattr(arrays, name) for name in _TEMPLATES}
        self.flows = StreamedFlows.empty(stream.flows, stream.qps)
        self.first: list[int] = []  # per page: the first transfer index it holds (-1: free)
        self.count: list[int] = []  # per page: transfers it holds
        for name, fill in _TRANSFER_ARRAYS.items():  # the held run's dtypes: one compiled loop
            setattr(arrays, name, np.full(0, fill, dtype=_TRANSFER_DTYPES.get(name, np.int64)))
        for name, fill in _FLOW_ARRAYS.items():
            template = getattr(arrays, name)
            setattr(arrays, name, np.full((0, *template.shape[1:]), fill, dtype=template.dtype))
        arrays.dep = np.full(0, -1, dtype=np.int32)
        arrays.slot_of = np.zeros(_power_of_two(4 * self.page), dtype=np.int32)
        for _ in range(2):
            self._add_page()
        arrays.pr[L.PR_MAX_FLOWS_PER_TRANSFER] = self.q
        arrays.pr[L.PR_MAX_DEPENDENTS] = _DEPENDENTS

    @property
    def done(self) -> bool:
        return self.next >= self.stream.transfers

    @property
    def slots(self) -> int:
        return len(self.first) * self.page

    def materialize(self, push) -> None:
        """The next block of transfers into a free page (freeing or adding one first if none is);
        `push(time_ps, kind, arg)` schedules the release of those with no prerequisite."""
        a, stream, q = self.a, self.stream, self.q
        lo = self.next
        hi = min(stream.transfers, lo + self.page)
        if hi <= lo:
            return
        page = self._free_page()
        count = hi - lo
        base = page * self.page
        self.first[page], self.count[page] = lo, count
        block = stream.transfers_in(lo, hi)
        index = np.arange(lo, hi, dtype=np.int64)
        self._map(index, base)
        t = slice(base, base + count)
        a.t_index[t] = index
        a.t_pending[t] = block.prerequisites
        a.t_release[t] = self.release_ps
        a.t_unsent[t] = q
        a.t_unarrived[t] = q
        first_dep, second_dep = block.dependents[:, 0], block.dependents[:, 1]
        a.dep_last[t] = np.maximum(first_dep, second_dep)  # (numpy's max over an axis of 2: 10x slower)
        a.dep[base * _DEPENDENTS : (base + count) * _DEPENDENTS] = block.dependents.ravel()
        # A ring's missing dependents (-1: its last step) come last: the row ends before them.
        a.dep_end[t] = a.dep_off[t] + (first_dep >= 0) + (second_dep >= 0)
        f = self._flows_of(page)
        rows = (block.rank[:, None] * q + np.arange(q)).ravel()
        for name, template in self.templates.items():
            getattr(a, name)[f] = template[rows]
        for name, fill in _FLOW_ARRAYS.items():
            if name not in self.templates and name != "f_gen":
                getattr(a, name)[f] = fill
        a.f_gen[f] += 1  # a new occupant: the earlier one's timers no longer apply
        a.fi[f, L.FI_REC_START] = -1
        a.f_finish[f] = -1
        sizes = stream.flow_sizes(block.sizes).ravel()
        a.f_size[f] = sizes
        a.f_npkts[f] = -(-sizes // self.mtu)
        a.f_transfer[f] = np.repeat(np.arange(base, base + count, dtype=a.f_transfer.dtype), q)
        self.next = hi
        a.sc[L.SC_MATERIALIZED] = hi
        for slot in base + np.flatnonzero(block.prerequisites == 0):
            push(self.release_ps, L.EV_RELEASE, int(slot))

    def _free_page(self) -> int:
        """The lowest free page: after freeing the pages whose transfers are all done, else a new one."""
        if -1 not in self.first:
            live = None  # the flows of the packets in flight, once
            for page in range(len(self.first)):
                base = page * self.page
                if not (self.a.t_unarrived[base : base + self.count[page]] == 0).all():
                    continue
                if live is None:
                    live = self.a.p_flow[self.a.p_flow >= 0]
                if self._settled(page, live):
                    self._release(page)
        if -1 not in self.first:
            self._add_page()
        return self.first.index(-1)

    def _settled(self, page: int, live_flows: np.ndarray) -> bool:
        """Whether nothing names the flows of a page whose transfers are all accounted: no packet
        in flight (`live_flows`), no ACK, NAK or CNP event pending, no NIC's ring of flows to send,
        no armed retransmission timer. Without Go-Back-N and DCQCN an accounted flow has none of
        these; with them, its sender may still be waiting for ACKs (and resend) after its receiver
        has everything."""
        f = self._flows_of(page)
        a = self.a
        # A disarmed timer (rto_at -1) stays so: nothing else can make the flow send again. Its
        # pending RTO events carry this occupant's generation and do nothing once the slot is reused.
        if a.f_pend[f].any() or a.f_linked[f].any() or (a.f_rto_at[f] >= 0).any():
            return False
        return not ((live_flows >= f.start) & (live_flows < f.stop)).any()

    def finish(self, now: int) -> StreamedFlows:
        """At the end of the run (`now`, ps): every transfer still in a slot, folded (finished or
        not; a loss recovery still open counts until now, as in a held run); those a time-limited
        run never generated count as unfinished."""
        a = self.a
        open_ = a.fi[:, L.FI_REC_START] >= 0
        a.fi[open_, L.FI_REC_PS] += now - a.fi[open_, L.FI_REC_START]
        a.fi[open_, L.FI_REC_START] = -1
        for page in range(len(self.first)):
            if self.first[page] >= 0:
                self._release(page)
        self.flows.unfinished += (self.stream.transfers - self.next) * self.q
        self.next = self.stream.transfers
        return self.flows

    def settled_bytes(self) -> int:
        """Bytes delivered or lost so far, of every flow (progress)."""
        a, settled = self.a, self.flows.settled_bytes
        for page, first in enumerate(self.first):
            if first >= 0:
                f = self._flows_of(page)
                settled += int(a.f_recv[f].sum() + a.f_lost[f].sum())
        return settled

    def _flows_of(self, page: int) -> slice:
        """The flow slots of the transfers a page holds."""
        base = page * self.page
        return slice(base * self.q, (base + self.count[page]) * self.q)

    def _release(self, page: int) -> None:
        """Fold the results of a page's flows, and free it."""
        a, q = self.a, self.q
        base, count, first = page * self.page, self.count[page], self.first[page]
        f = self._flows_of(page)
        index = np.arange(first * q, (first + count) * q, dtype=np.int64)
        self.flows.fold(index, a.f_start[f], a.f_finish[f], a.f_recv[f], a.f_lost[f], a.fi[f])
        a.t_index[base : base + count] = -1
        a.dep_last[base : base + count] = -1
        self.first[page] = -1

    def _add_page(self) -> None:
        a, q, extra = self.a, self.q, self.page
        for name, fill in _TRANSFER_ARRAYS.items():
            array = getattr(a, name)
            setattr(a, name, np.concatenate([array, np.full(extra, fill, dtype=array.dtype)]))
        for name, fill in _FLOW_ARRAYS.items():
            array = getattr(a, name)
            more = np.full((extra * q, *array.shape[1:]), fill, dtype=array.dtype)
            setattr(a, name, np.concatenate([array, more]))
        a.dep = np.concatenate([a.dep, np.full(extra * _DEPENDENTS, -1, dtype=a.dep.dtype)])
        slots = np.arange(self.slots + extra, dtype=np.int64)
        ends = a.dep_end[: self.slots].copy() if self.first else None  # (none before the first page)
        a.t_flow_off, a.t_flow_end = slots * q, slots * q + q
        a.dep_off, a.dep_end = slots * _DEPENDENTS, slots * _DEPENDENTS + _DEPENDENTS
        if ends is not None:
            a.dep_end[: len(ends)] = ends  # the slots in use keep their rows' ends
        a.dep_arrival = np.tile(np.array([0, 1], dtype=np.uint8), len(slots))
        self.first.append(-1)
        self.count.append(0)
        if len(a.slot_of) < 4 * self.slots:
            self._rebuild_map(_power_of_two(4 * self.slots))

    def _map(self, index: np.ndarray, base: int) -> None:
        """slot_of for `index` (into slots base..); a bigger map first if the indices would alias."""
        a = self.a
        live = [first for first in self.first if first >= 0]
        oldest = min(live, default=int(index[0]))
        span = int(index[-1]) + 1 - oldest
        if 2 * span > len(a.slot_of):
            self._rebuild_map(_power_of_two(2 * span))
        a.slot_of[index & (len(a.slot_of) - 1)] = np.arange(base, base + len(index), dtype=np.int32)

    def _rebuild_map(self, size: int) -> None:
        a = self.a
        a.slot_of = np.zeros(size, dtype=np.int32)
        live = np.flatnonzero(a.t_index >= 0)
        a.slot_of[a.t_index[live] & (size - 1)] = live


def _power_of_two(n: int) -> int:
    return 1 << max(0, int(n - 1).bit_length())
