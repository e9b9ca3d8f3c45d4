"""The FLOW-fidelity event loop: max-min fair sharing of channel bandwidth, recomputed at every event.

Flows are fluid: a flow crossing channels c with fractions a_c (1 on an ECMP or pinned path, shares
of an even split otherwise) gets a rate r with sum over flows of a_c * r <= capacity(c), and r at
most its cap where it has one (`Workload.flow_rate_bps`: a rate-limited sender), and the rates are
max-min fair (progressive filling / water-filling: raise every unfrozen flow's rate together until
a channel saturates or a flow reaches its cap, freeze the flows crossing that channel or at their
cap, repeat). The rates are recomputed whenever flows start or end; between two such events every
rate is constant.

Event times are integer nanoseconds: a flow's last byte leaves the source at
ceil(now + remaining * 8 / rate) and arrives one path latency later; its transfer is complete
when all its QP flows have arrived, and a transfer waiting on it starts once it has arrived (or,
for the next send on the same connection, once it has left the source; see workload.py).
The engine (engine.py) hands it wire bytes (payload plus a header per packet); it has no queues or
losses.

The output is raw (per-flow times and every change of a channel's load); engine.py and assemble.py
turn it into per-job, per-channel and time-series results, the last step shared with the packet engine.
"""

from __future__ import annotations

import dataclasses
import heapq
import time
from collections.abc import Callable

import numpy as np

from services.common.errors import FailedPrecondition
from services.simulator.cancel import Cancelled
from services.simulator.routes import FlowRoutes
from services.simulator.workload import Workload

__all__ = ["FlowRun", "max_min_rates", "simulate_flows"]

_NS_PER_S = 1e9
_SATURATION_TOLERANCE = 1e-9
_PROGRESS_EVERY_S = 0.2
_FEW = 4  # flows ending at one event below which bookkeeping is done in plain Python


@dataclasses.dataclass
class FlowRun:
    """What the engine measured: per-flow times and the piecewise-constant load of every channel."""

    flow_start_ns: np.ndarray  # int64 [F], -1 if it never started
    flow_sent_ns: np.ndarray  # int64 [F], last byte left the source, -1 if not
    flow_finish_ns: np.ndarray  # int64 [F], last byte delivered, -1 if not
    record_time_ns: np.ndarray  # int64 [R], from this time on ...
    record_channel: np.ndarray  # int32 [R], ... this channel ...
    record_load_bps: np.ndarray  # float64 [R], ... carries this many bits per second
    end_ns: int  # last delivery, or the time limit
    events: int  # rate recomputations
    time_limited: bool


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
    `entry_channel[e]`. Every flow needs at least one entry. `flow_cap_bps` (per flow, inf: none)
    bounds each flow's rate: the filling stops raising a flow at its cap, as at a channel of its own.

    >>> max_min_rates(np.array([0, 1]), np.array([0, 0]), np.ones(2), np.array([10.0]), 2)
    array([5., 5.])
    >>> one_link = np.array([0, 1]), np.array([0, 0]), np.ones(2), np.array([10.0]), 2
    >>> max_min_rates(*one_link, flow_cap_bps=np.array([2.0, np.inf]))
    array([2., 8.])
    """
    channels = len(capacity_bps)
    rates = np.zeros(flow_count)
    live = np.ones(flow_count, dtype=bool)
    remaining = np.array(capacity_bps, dtype=np.float64)
    flow, channel, fraction = entry_flow, entry_channel, entry_fraction
    level = 0.0
    while flow.size:
        demand = np.bincount(channel, weights=fraction, minlength=channels)
        # Fair share left on each entry's channel; every channel seen here has demand > 0.
        share = remaining[channel] / demand[channel]
        delta = max(float(share.min()), 0.0)
        if flow_cap_bps is not None:  # ... unless a live flow reaches its cap first
            delta = min(delta, max(float(flow_cap_bps[live].min()) - level, 0.0))
        level += delta
        remaining -= delta * demand
        newly = flow[share <= delta * (1.0 + _SATURATION_TOLERANCE)]
        rates[newly] = level
        live[newly] = False
        if flow_cap_bps is not None:
            capped = np.flatnonzero(live & (flow_cap_bps <= level * (1.0 + _SATURATION_TOLERANCE)))
            rates[capped] = flow_cap_bps[capped]
            live[capped] = False
        keep = live[flow]
        flow, channel, fraction = flow[keep], channel[keep], fraction[keep]
    return rates


class _Engine:
    """Event loop state; `run` drives it. Arrays are indexed by flow, transfer or active slot."""

    def __init__(
        self,
        workload: Workload,
        flow_route: np.ndarray,
        routes: FlowRoutes,
        channel_rate_bps: np.ndarray,
        progress: Callable[[float], bool] | None,
    ) -> None:
        self.w = workload
        self.flow_route = flow_route
        self.routes = routes
        # Channels any route uses, renumbered 0..U-1 so that per-event arrays stay small.
        self.used_channels, compact = np.unique(routes.channels, return_inverse=True)
        self.route_channel = compact.astype(np.int64)
        self.capacity = np.asarray(channel_rate_bps, dtype=np.float64)[self.used_channels]
        self.progress = progress
        f, t = workload.flow_count, workload.transfer_count
        self.flow_transfer = np.repeat(np.arange(t), np.diff(workload.transfer_flow_offsets))
        self.flow_latency = routes.latency_ns[flow_route]
        self.start = np.full(f, -1, dtype=np.int64)
        self.sent = np.full(f, -1, dtype=np.int64)
        self.finish = np.full(f, -1, dtype=np.int64)
        self.flows_left = np.diff(workload.transfer_flow_offsets).astype(np.int64)
        self.waiting_on = workload.transfer_prerequisites.astype(np.int64)
        self.ready = workload.transfer_release_ns.astype(np.int64)
        self.arrival = np.zeros(t, dtype=np.int64)
        self.departure = np.zeros(t, dtype=np.int64)
        self.transfers_done = 0
        ready_now = np.flatnonzero(self.waiting_on == 0)
        self.heap = list(zip(self.ready[ready_now].tolist(), ready_now.tolist(), strict=True))
        heapq.heapify(self.heap)
        # Active flows (slots) and their channel entries.
        self.active = np.zeros(0, dtype=np.int64)
        self.remaining = np.zeros(0)
        self.entry_slot = np.zeros(0, dtype=np.int64)
        self.entry_channel = np.zeros(0, dtype=np.int64)
        self.entry_fraction = np.zeros(0)
        # Caps of the active slots (inf: none), when the workload caps any flow.
        self.caps = None
        if workload.flow_rate_bps is not None:
            self.caps = np.zeros(0)
            self.flow_cap = np.where(workload.flow_rate_bps > 0, workload.flow_rate_bps, np.inf)
        self.load: np.ndarray = np.zeros(len(self.used_channels))
        self.records: list[tuple[int, np.ndarray, np.ndarray]] = []

    def _complete(self, flows: np.ndarray, now: int) -> None:
        """Flows whose last byte left at `now`: set times, release the transfers they complete."""
        self.sent[flows] = now
        self.finish[flows] = now + self.flow_latency[flows]
        if len(flows) <= _FEW:
            self._complete_few(flows.tolist(), now)
            return
        transfers = self.flow_transfer[flows]
        np.subtract.at(self.flows_left, transfers, 1)
        np.maximum.at(self.arrival, transfers, self.finish[flows])
        self.departure[transfers] = now  # time only moves forward
        done = np.unique(transfers[self.flows_left[transfers] == 0])
        if not len(done):
            return
        self.transfers_done += len(done)
        offsets = self.w.dependent_offsets
        counts = offsets[done + 1] - offsets[done]
        if not counts.sum():
            return
        index = np.repeat(offsets[done] - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())
        dependents = self.w.dependents[index].astype(np.int64)
        needs_arrival = self.w.dependent_needs_arrival[index]
        waited = np.where(
            needs_arrival, np.repeat(self.arrival[done], counts), np.repeat(self.departure[done], counts)
        )
        np.maximum.at(self.ready, dependents, waited)
        np.subtract.at(self.waiting_on, dependents, 1)
        for transfer in np.unique(dependents[self.waiting_on[dependents] == 0]).tolist():
            heapq.heappush(self.heap, (int(self.ready[transfer]), transfer))

    def _complete_few(self, flows: list[int], now: int) -> None:
        """`_complete` for the handful of flows that end at most events.

        Same bookkeeping one flow at a time: for two or three flows, plain Python beats the dozen
        numpy calls of the vectorised path by several times (this is the engine's hottest path).
        """
        released = []
        for flow in flows:
            transfer = int(self.flow_transfer[flow])
            self.flows_left[transfer] -= 1
            self.arrival[transfer] = max(int(self.arrival[transfer]), int(self.finish[flow]))
            self.departure[transfer] = now
            if self.flows_left[transfer] == 0:
                released.append(transfer)
        offsets, dependents, needs_arrival = (
            self.w.dependent_offsets,
            self.w.dependents,
            self.w.dependent_needs_arrival,
        )
        for transfer in released:
            self.transfers_done += 1
            first, last = int(offsets[transfer]), int(offsets[transfer + 1])
            arrival, departure = int(self.arrival[transfer]), now
            for waiting, needs in zip(
                dependents[first:last].tolist(), needs_arrival[first:last].tolist(), strict=True
            ):
                self.ready[waiting] = max(int(self.ready[waiting]), arrival if needs else departure)
                self.waiting_on[waiting] -= 1
                if self.waiting_on[waiting] == 0:
                    heapq.heappush(self.heap, (int(self.ready[waiting]), waiting))

    def _start(self, transfers: list[int], now: int) -> None:
        offsets = self.w.transfer_flow_offsets
        tr = np.asarray(transfers, dtype=np.int64)
        counts = offsets[tr + 1] - offsets[tr]
        flows = np.repeat(offsets[tr] - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())
        self.start[flows] = now
        empty = self.w.flow_size_bytes[flows] == 0
        if empty.any():
            self._complete(flows[empty], now)
            flows = flows[~empty]
        route = self.flow_route[flows]
        r_off = self.routes.offsets
        n_entries = r_off[route + 1] - r_off[route]
        entries = np.repeat(r_off[route] - np.cumsum(n_entries) + n_entries, n_entries) + np.arange(
            n_entries.sum()
        )
        slots = len(self.active) + np.repeat(np.arange(len(flows)), n_entries)
        self.active = np.concatenate([self.active, flows])
        if self.caps is not None:
            self.caps = np.concatenate([self.caps, self.flow_cap[flows]])
        self.remaining = np.concatenate([self.remaining, self.w.flow_size_bytes[flows].astype(np.float64)])
        self.entry_slot = np.concatenate([self.entry_slot, slots])
        self.entry_channel = np.concatenate([self.entry_channel, self.route_channel[entries]])
        self.entry_fraction = np.concatenate([self.entry_fraction, self.routes.fractions[entries]])

    def _retire(self, ending: np.ndarray) -> np.ndarray:
        """Drop the active slots in `ending` (bool per slot); returns their flows."""
        keep = ~ending
        new_slot = np.cumsum(keep) - 1
        keep_entry = keep[self.entry_slot]
        self.entry_slot = new_slot[self.entry_slot[keep_entry]]
        self.entry_channel = self.entry_channel[keep_entry]
        self.entry_fraction = self.entry_fraction[keep_entry]
        flows = self.active[ending]
        self.active, self.remaining = self.active[keep], self.remaining[keep]
        if self.caps is not None:
            self.caps = self.caps[keep]
        return flows

    def _rates(self, now: int) -> np.ndarray:
        rates = max_min_rates(
            self.entry_slot,
            self.entry_channel,
            self.entry_fraction,
            self.capacity,
            len(self.active),
            self.caps,
        )
        load = np.bincount(
            self.entry_channel, weights=self.entry_fraction * rates[self.entry_slot], minlength=len(self.load)
        )
        changed = np.flatnonzero(load != self.load)
        if len(changed):
            self.records.append((now, self.used_channels[changed], load[changed]))
            self.load = load
        return rates

    def run(self, time_limit_ns: int) -> FlowRun:
        events, time_limited = 0, False
        now = self.heap[0][0] if self.heap else 0
        last_report = time.monotonic()
        while True:
            while self.heap and self.heap[0][0] <= now:
                starting = []
                while self.heap and self.heap[0][0] <= now:
                    starting.append(heapq.heappop(self.heap)[1])
                self._start(starting, now)
            rates = self._rates(now)
            events += 1
            if len(self.active):
                if not (rates > 0).all():
                    raise FailedPrecondition("a flow crosses a channel of zero capacity (rate 0 link)")
                finish = now + np.ceil(self.remaining * (8 * _NS_PER_S) / rates).astype(np.int64)
                next_end = int(finish.min())
            else:
                next_end = None
            next_start = self.heap[0][0] if self.heap else None
            candidates = [t for t in (next_end, next_start) if t is not None]
            if not candidates:
                break
            upcoming = min(candidates)
            if time_limit_ns and upcoming > time_limit_ns:
                now, time_limited = time_limit_ns, True
                break
            if len(self.active):
                self.remaining -= rates * ((upcoming - now) / (8 * _NS_PER_S))
                ending = finish <= upcoming
                if ending.any():
                    self._complete(self._retire(ending), upcoming)
            now = upcoming
            if self.progress is not None and time.monotonic() - last_report > _PROGRESS_EVERY_S:
                last_report = time.monotonic()
                if not self.progress(self.transfers_done / max(1, self.w.transfer_count)):
                    raise Cancelled()
        return self._result(now, events, time_limited)

    def _result(self, now: int, events: int, time_limited: bool) -> FlowRun:
        if self.records:
            times = np.concatenate([np.full(len(c), t, dtype=np.int64) for t, c, _ in self.records])
            channels = np.concatenate([c for _, c, _ in self.records]).astype(np.int32)
            loads = np.concatenate([v for _, _, v in self.records])
        else:
            times, channels, loads = np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0)
        end = now if time_limited else int(self.finish.max(initial=0))
        return FlowRun(self.start, self.sent, self.finish, times, channels, loads, end, events, time_limited)


def simulate_flows(
    workload: Workload,
    flow_route: np.ndarray,
    routes: FlowRoutes,
    channel_rate_bps: np.ndarray,
    time_limit_ns: int = 0,
    progress: Callable[[float], bool] | None = None,
) -> FlowRun:
    """Run the workload to completion (or `time_limit_ns`).

    `flow_route[f]` is the row of `routes` that flow f follows. `progress(fraction)` is called
    about every 0.2 s of wall time; returning False raises Cancelled.
    """
    return _Engine(workload, flow_route, routes, channel_rate_bps, progress).run(time_limit_ns)
