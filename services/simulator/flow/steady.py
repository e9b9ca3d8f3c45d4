"""FLOW_STEADY: the steady-state fluid model of one ring job, in seconds at any ring size.

The FLOW loop (model.py) refills max-min fair rates at every start and end of a flow: exact for the
fluid model, but a 64 MiB ring over 8,192 ranks is 134M transfers and ~268M events (minutes, and
~75 GB if held). In a ring every connection sends through the whole job (each rank sends its
segment at step 0 and keeps forwarding), so this model takes the rates the FLOW loop gives while
all connections send, and keeps them:

1. Rates: every QP flow of the ring's connections gets its max-min fair rate with all of them
   active (`max_min_rates`: the same water-filling, over the same routes' channel fractions: an
   ECMP path, or ADAPTIVE's and SPRAY's even split).
2. Times: the ring's transfers follow FLOW's dependencies exactly (collectives.ring_transfers): a
   transfer starts once its connection's previous transfer has left and the chunk it forwards has
   arrived from rank - 1; each QP flow leaves ceil(wire bytes * 8e9 / rate) ns after it starts
   and arrives one path latency later. The transfers are computed step by step from their indices
   (the formula of collectives.ring_block), never held: memory is O(ranks x chunks).
3. Series: each QP flow's bits are binned per interval while it sends, then spread over its
   route's channels by their fractions (`series_from_edges`, scaled to the exact bytes).

What it leaves out: a connection that waits (its predecessor is slower) leaves its share of a
link idle, which the FLOW loop hands to the flows still sending there; here no flow speeds up. On
a ring whose slowest connection sets the pace (ECMP collisions: each collided link's flows are all
at that pace) that idle share is what the others cannot use anyway; where latency rather than a
shared link sets the pace, the steady rates are low and the completion comes out high. Measured
against the FLOW loop: README, "FLOW or PACKET"; tests/simulator/test_flow_steady.py bounds it.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from numba import njit

from services.common.errors import FailedPrecondition
from services.simulator.cancel import Cancelled
from services.simulator.flow.integrate import DEFAULT_INTERVALS
from services.simulator.flow.model import max_min_rates
from services.simulator.routes import FlowRoutes
from services.simulator.series import MAX_SERIES_VALUES
from services.simulator.workload import RingStream

__all__ = [
    "SteadyRun",
    "route_entries",
    "simulate_steady_ring",
    "spread_rows",
    "steady_interval_ns",
    "steady_rates",
]

_kernel: Any = njit(cache=True, _nrt=False)  # type: ignore[call-overload]

_PROGRESS_EVERY_S = 0.2
_SLICE_TRANSFERS = 4_000_000  # transfers computed between two progress checks (~0.05 s)

# totals[]: what a pass adds up
LAST_ARRIVAL, LAST_LEAVE, UNFINISHED, DONE = range(4)


@dataclasses.dataclass
class SteadyRun:
    """What the steady-state model computed for the ring's QP flows (rows of the connection
    workload: rank r's QP q is row r * qps + q)."""

    rates_bps: np.ndarray  # float64 [rows], each QP flow's fixed rate
    head_start_ns: np.ndarray  # int64 [kept flows], the job's first flows (whole transfers)
    head_finish_ns: np.ndarray  # int64 [kept flows], -1 unfinished
    sent_wire_bytes: np.ndarray  # int64 [rows], wire bytes each QP flow row sent in finished transfers
    row_edge_bits: np.ndarray  # float64 [rows, bins + 1], bits each row sent from 0 to each edge
    interval_ns: int
    end_ns: int
    last_finish_ns: int  # the job's last arrival, -1 if some transfer did not finish
    transfers: int
    time_limited: bool


Entries = tuple[np.ndarray, np.ndarray, np.ndarray]  # (flow, channel, fraction) of each route entry


def route_entries(routes: FlowRoutes, rows: np.ndarray) -> Entries:
    """(flow, channel, fraction) of every entry of the routes `rows` (flow i follows rows[i])."""
    starts, ends = routes.offsets[rows], routes.offsets[rows + 1]
    counts = ends - starts
    flow = np.repeat(np.arange(len(rows)), counts)
    entry = np.repeat(starts - np.r_[0, np.cumsum(counts)[:-1]], counts) + np.arange(int(counts.sum()))
    return flow, routes.channels[entry], routes.fractions[entry]


def steady_rates(entries: Entries, flows: int, channel_rate_bps: np.ndarray) -> np.ndarray:
    """Max-min fair rates (bit/s) of `flows` QP flows over their route `entries` (route_entries) when
    all of them send at once."""
    flow, channel, fraction = entries
    rates = max_min_rates(flow, channel, fraction, np.asarray(channel_rate_bps, dtype=np.float64), flows)
    if (rates <= 0).any():
        raise FailedPrecondition("a flow crosses a channel of zero capacity (rate 0 link)")
    return rates


def steady_interval_ns(end_ns: int, first_ns: int, fixed: bool, channels: int) -> int:
    """The sample interval of a run ending at `end_ns`, as the FLOW loop's integrator settles it: a
    caller's (`fixed`) kept unless `channels` series would pass MAX_SERIES_VALUES; else the engine's
    first, doubled while the run outlasts DEFAULT_INTERVALS intervals."""
    interval = max(1, first_ns)
    if fixed:
        while channels * (-(-end_ns // interval) + 1) > MAX_SERIES_VALUES:
            interval *= 2
        return interval
    while -(-end_ns // interval) > DEFAULT_INTERVALS:
        interval *= 2
    return interval


@_kernel
def _ring_steps(
    s0,
    s1,
    ring,
    wire,
    rate,
    latency,
    left,
    arrived,
    head_start,
    head_finish,
    sent,
    interval,
    bits,
    totals,
):
    """Steps s0..s1-1 of the ring: ring = (ranks, size_bytes, chunks, steps per iteration, qps,
    job start, time limit, kept transfers), wire = (mtu, header). `left[r]`: when connection r's
    last transfer left; `arrived[s & 1, r, c]`: when chunk c of rank r's step s arrived at r + 1.
    With interval > 0 the QP flows' bits are binned into `bits[row, k]` (interval k)."""
    n, size_bytes, chunks, steps, qps, start_ns, limit_ns, kept = ring
    mtu, header = wire
    bins = bits.shape[1]
    for s in range(s0, s1):
        now, before = s & 1, (s - 1) & 1
        for r in range(n):
            segment = (r - s % steps) % n
            segment_bytes = size_bytes // n + (1 if segment < size_bytes % n else 0)
            previous = (r - 1 + n) % n
            for c in range(chunks):
                size = segment_bytes // chunks + (1 if c < segment_bytes % chunks else 0)
                begin = max(start_ns, left[r])
                if s > 0 and arrived[before, previous, c] > begin:
                    begin = arrived[before, previous, c]
                t = (s * n + r) * chunks + c
                leave = begin
                arrive = 0
                for q in range(qps):
                    part = size // qps + (1 if q < size % qps else 0)
                    on_wire = part + (part + mtu - 1) // mtu * header
                    row = r * qps + q
                    end = begin
                    if on_wire > 0:
                        end = begin + np.int64(np.ceil(on_wire * 8e9 / rate[row]))
                    leave = max(leave, end)
                    arrive = max(arrive, end + latency[row])
                    if end <= limit_ns:
                        sent[row] += on_wire
                    if t < kept:
                        head_start[t * qps + q] = begin
                        head_finish[t * qps + q] = end + latency[row] if end <= limit_ns else -1
                    if interval > 0 and on_wire > 0 and begin < limit_ns:
                        stop = min(end, limit_ns)
                        per_ns = rate[row] / 1e9
                        k = begin // interval
                        while k < bins and k * interval < stop:
                            lo = max(begin, k * interval)
                            hi = min(stop, (k + 1) * interval)
                            bits[row, k] += (hi - lo) * per_ns
                            k += 1
                left[r] = leave
                arrived[now, r, c] = arrive
                if leave <= limit_ns:
                    totals[DONE] += 1
                    totals[LAST_ARRIVAL] = max(totals[LAST_ARRIVAL], arrive)
                    totals[LAST_LEAVE] = max(totals[LAST_LEAVE], leave)
                else:
                    totals[UNFINISHED] += 1


def simulate_steady_ring(
    stream: RingStream,
    entries: Entries,
    used_channels: int,
    channel_rate_bps: np.ndarray,
    latency_ns: np.ndarray,
    wire: tuple[int, int],
    first_interval: tuple[int, bool],
    kept_flows: int,
    time_limit_ns: int,
    progress: Callable[[float], bool] | None = None,
) -> SteadyRun:
    """Run the ring of `stream` whose QP flows (rank r's QP q is flow r * qps + q) cross the channels
    of their route `entries` (route_entries; `used_channels` distinct ones), flow i arriving
    `latency_ns[i]` after it leaves; `wire` = (mtu, header bytes per packet); `first_interval` =
    (ns, fixed) as the FLOW engine chooses it; per-flow times kept for its first `kept_flows` flows
    (whole transfers).

    Two passes over the steps: the first finds when the run ends (so the interval is settled as
    the FLOW integrator would settle it), the second bins the flows' bits at that interval.
    `progress(fraction)` about every 0.2 s; returning False raises Cancelled."""
    job, n, qps = stream.job, stream.ranks, stream.qps
    chunks = max(1, job.chunks)
    total_steps = stream.steps * max(1, job.iterations)
    rate = steady_rates(entries, n * qps, channel_rate_bps)
    latency = np.asarray(latency_ns, dtype=np.int64)
    kept_transfers = -(-min(kept_flows, stream.flows) // qps)
    ring = (n, job.size_bytes, chunks, stream.steps, qps, job.start_ns, time_limit_ns, kept_transfers)
    head_start = np.full(kept_transfers * qps, -1, dtype=np.int64)
    head_finish = np.full(kept_transfers * qps, -1, dtype=np.int64)
    sent = np.zeros(n * qps, dtype=np.int64)
    steps_per_call = max(1, _SLICE_TRANSFERS // max(1, n * chunks))
    clock = {"last": time.monotonic()}

    def one_pass(index: int, interval: int, bits: np.ndarray) -> np.ndarray:
        left = np.zeros(n, dtype=np.int64)
        arrived = np.zeros((2, n, chunks), dtype=np.int64)
        totals = np.zeros(4, dtype=np.int64)
        for s0 in range(0, total_steps, steps_per_call):
            s1 = min(total_steps, s0 + steps_per_call)
            _ring_steps(
                s0,
                s1,
                ring,
                wire,
                rate,
                latency,
                left,
                arrived,
                head_start,
                head_finish,
                sent,
                interval,
                bits,
                totals,
            )
            if progress is not None and time.monotonic() - clock["last"] > _PROGRESS_EVERY_S:
                clock["last"] = time.monotonic()
                if not progress((index + s1 / total_steps) / 2):
                    raise Cancelled()
        return totals

    totals = one_pass(0, 0, np.zeros((n * qps, 0)))
    time_limited = bool(totals[UNFINISHED])
    end = time_limit_ns if time_limited else int(totals[LAST_ARRIVAL])
    interval = steady_interval_ns(end, first_interval[0], first_interval[1], used_channels)
    bins = max(1, -(-end // interval))
    bits = np.zeros((n * qps, bins))
    sent[:] = 0  # the second pass counts them again
    one_pass(1, interval, bits)
    edges = np.zeros((n * qps, bins + 1))
    np.cumsum(bits, axis=1, out=edges[:, 1:])
    return SteadyRun(
        rates_bps=rate,
        head_start_ns=head_start,
        head_finish_ns=head_finish,
        sent_wire_bytes=sent,
        row_edge_bits=edges,
        interval_ns=interval,
        end_ns=end,
        last_finish_ns=-1 if time_limited else int(totals[LAST_ARRIVAL]),
        transfers=int(totals[DONE] + totals[UNFINISHED]),
        time_limited=time_limited,
    )


@_kernel
def spread_rows(row, compact, fraction, row_edges, edges):
    """edges[compact[e]] += fraction[e] * row_edges[row[e]] for every route entry e."""
    for e in range(row.shape[0]):
        for k in range(row_edges.shape[1]):
            edges[compact[e], k] += fraction[e] * row_edges[row[e], k]
