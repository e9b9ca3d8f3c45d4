"""The FLOW-fidelity event loop: max-min fair sharing of channel bandwidth, recomputed at every event.

Flows are fluid: a flow crossing channels c with fractions a_c (1 on an ECMP or pinned path, shares
of an even split otherwise) gets a rate r with sum over flows of a_c * r <= capacity(c), and r at
most its cap where it has one (`Workload.flow_rate_bps`: a rate-limited sender), and the rates are
max-min fair (progressive filling / water-filling: raise every unfrozen flow's rate together until
a channel saturates or a flow reaches its cap, freeze the flows crossing that channel or at their
cap, repeat; `max_min_rates`). The rates are recomputed whenever flows start or end, for the flows
linked to those through shared channels (the others' rates cannot change); between two such
events every rate is constant.

Event times are integer nanoseconds: a flow's last byte leaves the source at
ceil(now + remaining * 8 / rate) and arrives one path latency later; its transfer is complete
when all its QP flows have arrived, and a transfer waiting on it starts once it has arrived (or,
for the next send on the same connection, once it has left the source; see workload.py).
The engine (engine.py) hands it wire bytes (payload plus a header per packet); it has no queues or
losses.

The output is raw: per-flow times, and every change of a channel's load handed to a `LoadSink` as
the loop goes (the engine's `integrate.LoadIntegrator` folds them into the series and keeps no
record); engine.py and assemble.py turn them into per-job, per-channel and time-series results,
the last step shared with the packet engine.

The loop itself is compiled (loop.py), bit-identical to a NumPy loop that fills every flow from
scratch with `max_min_rates` at every event (tests/simulator/test_flow_loop.py keeps it as the
reference). This module sets up
its arrays and drives it: in slices of about 50 ms of wall time, between which it reports progress,
hands the channel load records over and makes room for more active flows when needed.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Protocol

import numpy as np

from services.common.errors import FailedPrecondition
from services.simulator.cancel import Cancelled
from services.simulator.flow import loop
from services.simulator.flow.state import (
    Channels,
    FlowWorkload,
    Nodes,
    Records,
    Routes,
    RunState,
    Slots,
    Work,
)
from services.simulator.routes import FlowRoutes
from services.simulator.workload import Workload

__all__ = ["FlowRun", "LoadSink", "max_min_rates", "simulate_flows"]

_PROGRESS_EVERY_S = 0.2
_SLICE_S = 0.05  # wall time of one call into the compiled loop, between progress checks
_FIRST_SLICE = 1  # events of the first call (then twice as many at most each call)
_FIRST_SLOTS = 1024  # active flows room is made for at first (doubled when short)
_RECORD_BUFFER = 1 << 20  # channel load records gathered before the loop hands them over
# A component search that walks more channel list nodes than the active entries / _WALK_SHARE and
# than _WALK_LEAST gives way to one filling of every flow (loop._refill).
_WALK_SHARE = 2
_WALK_LEAST = 4096


@dataclasses.dataclass
class FlowRun:
    """What the engine measured per flow; the channels' loads went to the run's `LoadSink`."""

    flow_start_ns: np.ndarray  # int64 [F], -1 if it never started
    flow_sent_ns: np.ndarray  # int64 [F], last byte left the source, -1 if not
    flow_finish_ns: np.ndarray  # int64 [F], last byte delivered, -1 if not
    end_ns: int  # last delivery, or the time limit
    events: int  # rate recomputations
    time_limited: bool


class LoadSink(Protocol):
    """Where the loop's channel load records go: `integrate.LoadIntegrator` (the series), or a
    test's log of every record."""

    def open(self, channel_ids: np.ndarray) -> None:
        """The channel ids of the records' compact channel numbers, before any record."""

    def fold(self, times: np.ndarray, compact: np.ndarray, loads: np.ndarray, count: int) -> None:
        """Records 0..count-1 of these buffers (in time order): from `times[i]` on, channel
        `compact[i]` carries `loads[i]` bit/s. The buffers are reused after the call."""


def max_min_rates(
    entry_flow: np.ndarray,
    entry_channel: np.ndarray,
    entry_fraction: np.ndarray,
    capacity_bps: np.ndarray,
    flow_count: int,
    flow_cap_bps: np.ndarray | None = None,
) -> np.ndarray:
    """Max-min fair rates (bit/s) of `flow_count` flows over channels 0..len(capacity_bps)-1.

    Entry e says flow `entry_flow[e]` puts fraction `entry_fraction[e]` of its rate on channel
    `entry_channel[e]`. `flow_cap_bps` (per flow, inf: none) bounds each flow's rate: the filling
    stops raising a flow at its cap, as at a channel of its own. A flow with no entry gets its cap
    (0 without one).

    Progressive filling in which each channel's fair share is computed afresh at every step from
    its own entries: (capacity - the rates of its frozen flows) / the demand of its unfrozen ones,
    each summed in entry order. A step raises the level to the lowest share (or the lowest cap of
    an unfrozen flow) and freezes the flows of every channel whose share is that level, and every
    flow whose cap it reaches. A flow's rate so depends on the flows it is connected to through
    shared channels and on nothing else, to the bit: the compiled loop (loop.py) fills only the
    connected components whose flows changed, and keeps the others' rates.

    >>> max_min_rates(np.array([0, 1]), np.array([0, 0]), np.ones(2), np.array([10.0]), 2)
    array([5., 5.])
    >>> one_link = np.array([0, 1]), np.array([0, 0]), np.ones(2), np.array([10.0]), 2
    >>> max_min_rates(*one_link, flow_cap_bps=np.array([2.0, np.inf]))
    array([2., 8.])
    """
    channels = len(capacity_bps)
    capacity = np.asarray(capacity_bps, dtype=np.float64)
    rates = np.zeros(flow_count)
    live = np.zeros(flow_count, dtype=bool)
    live[entry_flow] = True
    if flow_cap_bps is not None:
        alone = ~live & np.isfinite(flow_cap_bps)
        rates[alone] = flow_cap_bps[alone]
    while live.any():
        unfrozen = live[entry_flow]
        on, off = entry_channel[unfrozen], entry_channel[~unfrozen]
        demand = np.bincount(on, weights=entry_fraction[unfrozen], minlength=channels)
        taken = np.bincount(
            off, weights=entry_fraction[~unfrozen] * rates[entry_flow[~unfrozen]], minlength=channels
        )
        busy = np.bincount(on, minlength=channels) > 0
        share = np.full(channels, np.inf)
        share[busy] = (capacity[busy] - taken[busy]) / demand[busy]
        level = float(share.min())
        if flow_cap_bps is not None:
            level = min(level, float(flow_cap_bps[live].min()))
        saturated = entry_flow[unfrozen & (share[entry_channel] <= level)]
        rates[saturated] = level
        live[saturated] = False
        if flow_cap_bps is not None:
            capped = np.flatnonzero(live & (flow_cap_bps <= level))
            rates[capped] = flow_cap_bps[capped]
            live[capped] = False
    return rates


class _Engine:
    """The compiled loop's arrays (loop.py), and the Python side of driving it: progress and
    cancelling between slices of events, more slots when short, handing the records over."""

    def __init__(
        self,
        workload: Workload,
        flow_route: np.ndarray,
        routes: FlowRoutes,
        channel_rate_bps: np.ndarray,
        progress: Callable[[float], bool] | None,
        loads: LoadSink,
    ) -> None:
        self.progress = progress
        self.loads = loads
        f, t = workload.flow_count, workload.transfer_count
        self.transfer_count = t
        # Channels any route uses, renumbered 0..U-1 so that per-channel arrays stay small.
        self.used_channels, compact = np.unique(routes.channels, return_inverse=True)
        u = len(self.used_channels)
        loads.open(self.used_channels.astype(np.int32))
        route_offsets = np.asarray(routes.offsets, dtype=np.int64)
        self.routes = Routes(
            offsets=route_offsets,
            channel=compact.astype(np.int64).reshape(-1),
            fraction=np.asarray(routes.fractions, dtype=np.float64),
            capacity=np.asarray(channel_rate_bps, dtype=np.float64)[self.used_channels],
        )
        self.longest_route = max(1, int(np.diff(route_offsets).max(initial=0)))
        self.has_caps = workload.flow_rate_bps is not None
        flow_cap = np.zeros(0)
        if workload.flow_rate_bps is not None:
            flow_cap = np.where(workload.flow_rate_bps > 0, workload.flow_rate_bps, np.inf).astype(np.float64)
        flow_route = np.asarray(flow_route, dtype=np.int64)
        self.workload = FlowWorkload(
            transfer_flow_offsets=np.asarray(workload.transfer_flow_offsets, dtype=np.int64),
            dependent_offsets=np.asarray(workload.dependent_offsets, dtype=np.int64),
            dependents=workload.dependents.astype(np.int64),
            needs_arrival=workload.dependent_needs_arrival.astype(np.bool_),
            flow_size=np.asarray(workload.flow_size_bytes, dtype=np.int64),
            flow_latency=np.asarray(routes.latency_ns, dtype=np.int64)[flow_route],
            flow_transfer=np.repeat(np.arange(t, dtype=np.int64), np.diff(workload.transfer_flow_offsets)),
            flow_route=flow_route,
            flow_cap=flow_cap,
        )
        self.start = np.full(f, -1, dtype=np.int64)
        self.sent = np.full(f, -1, dtype=np.int64)
        self.finish = np.full(f, -1, dtype=np.int64)
        waiting_on = workload.transfer_prerequisites.astype(np.int64)
        ready = workload.transfer_release_ns.astype(np.int64)
        # The transfers ready at once, as a heap ordered (ready time, transfer): sorted is one.
        ready_now = np.flatnonzero(waiting_on == 0)
        ready_now = ready_now[np.lexsort((ready_now, ready[ready_now]))]
        heap_time, heap_transfer = np.zeros(t, dtype=np.int64), np.zeros(t, dtype=np.int64)
        heap_time[: len(ready_now)] = ready[ready_now]
        heap_transfer[: len(ready_now)] = ready_now
        self.state = RunState(
            start=self.start,
            sent=self.sent,
            finish=self.finish,
            flows_left=np.diff(workload.transfer_flow_offsets).astype(np.int64),
            waiting_on=waiting_on,
            ready=ready,
            arrival=np.zeros(t, dtype=np.int64),
            departure=np.zeros(t, dtype=np.int64),
            heap_time=heap_time,
            heap_transfer=heap_transfer,
            batch_time=np.zeros(t, dtype=np.int64),
            batch=np.zeros(t, dtype=np.int64),
        )
        # Per channel, and per channel in a filling (state.py names each array).
        i64, f64, none = np.int64, np.float64, -1
        self.channel = Channels(
            entries=np.zeros(u, i64),
            head=np.full(u, none, i64),
            tail=np.full(u, none, i64),
            load=np.zeros(u, f64),
            marked_flag=np.zeros(u, np.bool_),
            marked=np.zeros(u, i64),
            demand=np.zeros(u, f64),
            seen=np.full(u, none, i64),
            share=np.zeros(u, f64),
            at=np.full(u, none, i64),
            live=np.zeros(u, i64),
            dirty_flag=np.zeros(u, np.bool_),
            dirty=np.zeros(u, i64),
            changed=np.zeros(u, i64),
            total=np.zeros(u, f64),
        )
        self.work = Work(channels=np.zeros(u, i64), heap=np.zeros(u, i64), saturated=np.zeros(u, i64))
        self.scalars = np.zeros(loop.SCALARS, dtype=np.int64)
        self.scalars[loop.NOW] = heap_time[0] if len(ready_now) else 0
        self.scalars[loop.HEAP_SIZE] = len(ready_now)
        self.scalars[loop.FIRST_STARTED] = self.scalars[loop.LAST_STARTED] = -1
        self.slots: Slots | None = None
        self.nodes: Nodes | None = None
        self._grow_slots(min(max(f, 1), _FIRST_SLOTS))
        self.records = Records(
            time=np.zeros(max(u, _RECORD_BUFFER), dtype=np.int64),
            channel=np.zeros(max(u, _RECORD_BUFFER), dtype=np.int32),
            load=np.zeros(max(u, _RECORD_BUFFER)),
        )

    def _grow_slots(self, size: int) -> None:
        """Room for `size` active flows, the active ones kept in their slots."""
        old = len(self.slots.flow) if self.slots is not None else 0
        i64, f64 = np.int64, np.float64
        floats = {"remaining", "rate", "cap", "frozen_rate"}
        slots = Slots(*(np.zeros(size, dtype=f64 if name in floats else i64) for name in Slots._fields))
        if self.slots is not None:
            for before, after in zip(self.slots, slots, strict=True):
                after[:old] = before
        # The free stack gets the new slots below the free ones it had.
        free = int(self.scalars[loop.FREE])
        added = np.arange(size - 1, old - 1, -1, dtype=i64)
        slots.free[: len(added)] = added
        if self.slots is not None:
            slots.free[len(added) : len(added) + free] = self.slots.free[:free]
        self.scalars[loop.FREE] = free + len(added)
        self.slots = slots
        nodes = Nodes(*(np.full(size * self.longest_route, -1, dtype=i64) for _ in Nodes._fields))
        if self.nodes is not None:
            for before, after in zip(self.nodes, nodes, strict=True):
                after[: len(before)] = before
        self.nodes = nodes

    def _take_records(self) -> None:
        count = int(self.scalars[loop.RECORDS])
        if count:
            self.loads.fold(*self.records, count)
            self.scalars[loop.RECORDS] = 0

    def run(self, time_limit_ns: int) -> FlowRun:
        events = _FIRST_SLICE
        last_report = time.monotonic()
        while True:
            began = time.monotonic()
            status = loop.run_events(
                self.workload,
                self.routes,
                self.state,
                self.slots,
                self.nodes,
                self.channel,
                self.work,
                self.records,
                self.scalars,
                self.has_caps,
                np.array([_WALK_SHARE, _WALK_LEAST], dtype=np.int64),
                time_limit_ns,
                events,
            )
            if status == loop.RECORDS_FULL:
                self._take_records()
            elif status == loop.SLOTS_FULL:
                assert self.slots is not None
                self._grow_slots(max(2 * len(self.slots.flow), int(self.scalars[loop.SLOTS_NEEDED])))
            elif status == loop.ZERO_RATE:
                raise FailedPrecondition("a flow crosses a channel of zero capacity (rate 0 link)")
            elif status != loop.PAUSED:
                break
            else:  # aim at slices of about _SLICE_S of wall time
                took = time.monotonic() - began
                events = int(min(max(events * _SLICE_S / max(took, 1e-6), _FIRST_SLICE), 2 * events + 1))
            if self.progress is not None and time.monotonic() - last_report > _PROGRESS_EVERY_S:
                last_report = time.monotonic()
                if not self.progress(int(self.scalars[loop.TRANSFERS_DONE]) / max(1, self.transfer_count)):
                    raise Cancelled()
        self._take_records()
        return self._result(int(self.scalars[loop.NOW]), status == loop.TIME_LIMITED)

    def _result(self, now: int, time_limited: bool) -> FlowRun:
        end = now if time_limited else int(self.finish.max(initial=0))
        events = int(self.scalars[loop.EVENTS])
        return FlowRun(self.start, self.sent, self.finish, end, events, time_limited)


def simulate_flows(
    workload: Workload,
    flow_route: np.ndarray,
    routes: FlowRoutes,
    channel_rate_bps: np.ndarray,
    loads: LoadSink,
    time_limit_ns: int = 0,
    progress: Callable[[float], bool] | None = None,
) -> FlowRun:
    """Run the workload to completion (or `time_limit_ns`), handing every change of a channel's
    load to `loads` as it goes.

    `flow_route[f]` is the row of `routes` that flow f follows. `progress(fraction)` is called
    about every 0.2 s of wall time; returning False raises Cancelled.
    """
    return _Engine(workload, flow_route, routes, channel_rate_bps, progress, loads).run(time_limit_ns)
