"""FLOW_STEADY: the steady-state fluid model of one ring job, in seconds at any ring size.

The FLOW loop (model.py) refills max-min fair rates at every start and end of a flow: exact for the
fluid model, but a 64 MiB ring over 8,192 ranks is 134M transfers and ~268M events (minutes, and
~75 GB if held). In a ring every connection sends all through the job, a chunk per step, so this
model gives each QP flow one rate, the rate it sends at whenever it sends, and computes the ring
from it:

1. Times: the ring's transfers follow FLOW's dependencies exactly (collectives.ring_transfers): a
   transfer starts once its connection's previous transfer has left and the chunk it forwards has
   arrived from rank - 1; each QP flow leaves ceil(wire bytes * 8e9 / rate) ns after it starts
   (FLOW's rounding) and arrives one path latency later. The transfers are computed step by step
   from their indices (the formula of collectives.ring_block), never held: memory is O(ranks x
   chunks), ~0.5 s per pass over 134M transfers.
2. Rates, first: the max-min fair rates of all QP flows sending at once (`max_min_rates`, FLOW's
   water-filling over the same routes' channel fractions: an ECMP path, or ADAPTIVE's and SPRAY's
   even split). Where every flow already has its whole path to itself (no flow could go faster
   alone), that is FLOW's rate at every instant and the model is FLOW's to the ns.
3. Rates, then (`mean_field_rates`): a connection sends only part of the time (its duty: the time
   its transfers take over the run's length, from the pass before), and where latency rather than a
   shared link sets the pace, two connections that share a link rarely send at once. Each QP flow's
   rate becomes, on each channel of its path, the capacity over its own fraction plus the fractions
   of the other connections' flows weighted by their duties (the number of them it expects to meet
   there, its own connection's QPs always), the lowest over its path, and never below its max-min
   rate. Passes repeat until the completion moves less than CONVERGED between two (in 5 to 15
   passes on the rings measured).
4. Series: each QP flow's bits are binned per interval while it sends, then spread over its route's
   channels by their fractions (`series_from_edges`, scaled to the exact bytes, which are FLOW's).

What it leaves out: in FLOW a flow's rate changes while it sends, as others start and end; here a
flow meets the other connections' flows as if their phases were independent of its own. Against the
FLOW loop on the same rings (README, "FLOW, FLOW_STEADY or PACKET"; test_flow_steady.py bounds some):
-0.05% (k=16, 1,024 ranks, ECMP) to -4.7% (a 16-rank latency-bound ring), exact under ADAPTIVE;
the max-min rates alone (every flow meeting the others always, its first pass) came out above
FLOW on every ring measured, and the notes give that completion too.
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
from services.simulator.collectives import split_bytes
from services.simulator.flow.integrate import DEFAULT_INTERVALS
from services.simulator.flow.model import max_min_rates
from services.simulator.routes import FlowRoutes
from services.simulator.series import MAX_SERIES_VALUES
from services.simulator.workload import RingStream

__all__ = [
    "CONVERGED",
    "MAX_PASSES",
    "SteadyRun",
    "mean_field_rates",
    "route_entries",
    "simulate_steady_ring",
    "spread_rows",
    "steady_interval_ns",
    "steady_rates",
]

_kernel: Any = njit(cache=True, _nrt=False)  # type: ignore[call-overload]

_PROGRESS_EVERY_S = 0.2
_SLICE_TRANSFERS = 4_000_000  # transfers computed between two progress checks (~0.05 s)

# Passes at the mean-field rates stop when the completion moves less than this share of the run.
CONVERGED = 1e-5
MAX_PASSES = 40

# totals[]: what a pass adds up (ALL_ARRIVAL: the last arrival, had the run no time limit)
_TOTALS = LAST_ARRIVAL, ALL_ARRIVAL, UNFINISHED, DONE = range(4)


@dataclasses.dataclass
class SteadyRun:
    """What the steady-state model computed for the ring's QP flows (rows of the connection
    workload: rank r's QP q is row r * qps + q)."""

    rates_bps: np.ndarray  # float64 [rows], each QP flow's rate whenever it sends (the last pass's)
    head_start_ns: np.ndarray  # int64 [kept flows], the job's first flows (whole transfers)
    head_finish_ns: np.ndarray  # int64 [kept flows], -1 unfinished
    sent_wire_bytes: np.ndarray  # int64 [rows], wire bytes each QP flow row sent in finished transfers
    row_edge_bits: np.ndarray  # float64 [rows, bins + 1], bits each row sent from 0 to each edge
    interval_ns: int
    end_ns: int
    last_finish_ns: int  # the job's last arrival, -1 if some transfer did not finish
    transfers: int
    time_limited: bool
    passes: int  # over the ring's steps, the last one binning the series
    converged: bool  # the mean-field passes settled (else MAX_PASSES ran)
    all_meet_ns: int  # the job's length at the max-min rates (every flow meeting the others always)


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


def mean_field_rates(
    entries: Entries,
    qps: int,
    duty: np.ndarray,
    channel_rate_bps: np.ndarray,
    floor_bps: np.ndarray,
) -> np.ndarray:
    """float64 [flows]: each QP flow's rate while it sends (module doc, 3). Flow i of connection
    i // qps puts fraction a_il of its rate on channel l; connection c sends a fraction `duty[c]` of
    the time. On l flow i expects its own connection's fractions (its QPs send together) plus the
    others' times their duties: its share there is C_l over that sum. Its rate is its lowest share,
    and never below `floor_bps` (its max-min rate when all send).

    >>> one_link = np.array([0, 1]), np.array([0, 0]), np.ones(2)
    >>> mean_field_rates(one_link, 1, np.array([0.5, 0.5]), np.array([12.0]), np.zeros(2)).tolist()
    [8.0, 8.0]
    """
    flow, channel, fraction = entries
    capacity = np.asarray(channel_rate_bps, dtype=np.float64)
    connection = flow // qps
    weighted = duty[connection] * fraction
    expected = np.bincount(channel, weights=weighted, minlength=len(capacity))[channel]
    if qps == 1:  # a route lists a channel once: its own connection is itself
        expected += fraction - weighted
    else:
        key = connection.astype(np.int64) * len(capacity) + channel
        _, group = np.unique(key, return_inverse=True)
        own = np.bincount(group, weights=fraction)[group]
        expected += own - np.bincount(group, weights=weighted)[group]
    share = capacity[channel] / expected
    starts = np.flatnonzero(np.r_[True, flow[1:] != flow[:-1]])  # entries are grouped by flow
    rates = np.array(floor_bps, dtype=np.float64)
    rates[flow[starts]] = np.maximum(rates[flow[starts]], np.minimum.reduceat(share, starts))
    return rates


@_kernel
def _ring_steps(
    s0,
    s1,
    ring,
    wire_bytes,
    duration,
    rate,
    latency,
    left,
    arrived,
    busy,
    head_start,
    head_finish,
    sent,
    interval,
    bits,
    totals,
):
    """Steps s0..s1-1 of the ring: ring = (ranks, segments one byte larger, chunks, steps per
    iteration, qps, time limit, kept transfers). A transfer's segment is small (0) or large (1):
    `wire_bytes[kind, chunk, qp]` its QP flows' wire bytes, `duration[kind, chunk, rank, qp]` how long
    each takes at its rate. `left[r]`: when connection r's last transfer left (at first the job's
    start); `arrived[s & 1, r, c]`: when chunk c of rank r's step s arrived at r + 1; `busy[r]`: the
    time connection r's transfers took, summed. With interval > 0 the QP flows' bits are binned into
    `bits[row, k]` (interval k)."""
    n, large, chunks, steps, qps, limit_ns, kept = ring
    bins = bits.shape[1]
    for s in range(s0, s1):
        now, before = s & 1, (s - 1) & 1
        shift = (s % steps) % n
        for r in range(n):
            segment = r - shift  # step s of rank r carries segment (r - s) mod n
            if segment < 0:
                segment += n
            kind = 1 if segment < large else 0
            previous = r - 1 if r > 0 else n - 1
            for c in range(chunks):
                begin = left[r]
                if s > 0 and arrived[before, previous, c] > begin:
                    begin = arrived[before, previous, c]
                t = (s * n + r) * chunks + c
                leave = begin
                arrive = begin
                for q in range(qps):
                    row = r * qps + q
                    end = begin + duration[kind, c, r, q]
                    leave = max(leave, end)
                    arrive = max(arrive, end + latency[row])
                    if end <= limit_ns:
                        sent[row] += wire_bytes[kind, c, q]
                    if t < kept:
                        head_start[t * qps + q] = begin
                        head_finish[t * qps + q] = end + latency[row] if end <= limit_ns else -1
                    if interval > 0 and end > begin and begin < limit_ns:
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
                busy[r] += leave - begin
                totals[ALL_ARRIVAL] = max(totals[ALL_ARRIVAL], arrive)
                if leave <= limit_ns:
                    totals[DONE] += 1
                    totals[LAST_ARRIVAL] = max(totals[LAST_ARRIVAL], arrive)
                else:
                    totals[UNFINISHED] += 1


def _wire_bytes(stream: RingStream, wire: tuple[int, int]) -> np.ndarray:
    """int64 [2, chunks, qps]: the wire bytes of each QP flow of a transfer of a small (0) and a large
    (1) segment, chunk by chunk (collectives.ring_block's split, then workload.wire_bytes)."""
    mtu, header = wire
    job, n = stream.job, stream.ranks
    chunks = max(1, job.chunks)
    segment = np.array([job.size_bytes // n, job.size_bytes // n + 1], dtype=np.int64)
    chunk = split_bytes(segment[:, None], chunks, np.arange(chunks)[None, :])
    part = split_bytes(chunk[:, :, None], stream.qps, np.arange(stream.qps)[None, None, :])
    return (part + -(-part // mtu) * header).astype(np.int64)


def _durations(wire_bytes: np.ndarray, rate: np.ndarray, ranks: int) -> np.ndarray:
    """int64 [2, chunks, ranks, qps]: ceil(wire bytes * 8e9 / rate) ns, as the FLOW loop rounds; 0 for
    an empty flow."""
    on_wire = wire_bytes[:, :, None, :]
    took = np.ceil(on_wire * 8e9 / rate.reshape(ranks, -1)[None, None, :, :])
    return np.where(on_wire > 0, took, 0).astype(np.int64)


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

    Passes over the steps (module doc): with the max-min rates, then with the mean-field rates
    until the completion settles (the time limit plays no part in the rates), then one that bins
    the flows' bits at the interval the end settles (as the FLOW integrator would settle it).
    `progress(fraction)` about every 0.2 s; returning False raises Cancelled."""
    job, n, qps = stream.job, stream.ranks, stream.qps
    chunks = max(1, job.chunks)
    total_steps = stream.steps * max(1, job.iterations)
    capacity = np.asarray(channel_rate_bps, dtype=np.float64)
    floor = steady_rates(entries, n * qps, capacity)
    alone = mean_field_rates(entries, qps, np.zeros(n), capacity, floor)  # nobody else ever sends
    latency = np.asarray(latency_ns, dtype=np.int64)
    kept_transfers = -(-min(kept_flows, stream.flows) // qps)
    ring = (n, job.size_bytes % n, chunks, stream.steps, qps, time_limit_ns, kept_transfers)
    on_wire = _wire_bytes(stream, wire)
    head_start = np.full(kept_transfers * qps, -1, dtype=np.int64)
    head_finish = np.full(kept_transfers * qps, -1, dtype=np.int64)
    steps_per_call = max(1, _SLICE_TRANSFERS // max(1, n * chunks))
    clock = {"last": time.monotonic()}

    def one_pass(rate: np.ndarray, done: tuple[float, float], interval: int, bits: np.ndarray):
        """A pass at `rate`; progress goes from done[0] to done[1] over it."""
        duration = _durations(on_wire, rate, n)
        left = np.full(n, job.start_ns, dtype=np.int64)
        arrived = np.zeros((2, n, chunks), dtype=np.int64)
        busy = np.zeros(n, dtype=np.int64)
        sent = np.zeros(n * qps, dtype=np.int64)
        totals = np.zeros(len(_TOTALS), dtype=np.int64)
        for s0 in range(0, total_steps, steps_per_call):
            s1 = min(total_steps, s0 + steps_per_call)
            _ring_steps(
                s0,
                s1,
                ring,
                on_wire,
                duration,
                rate,
                latency,
                left,
                arrived,
                busy,
                head_start,
                head_finish,
                sent,
                interval,
                bits,
                totals,
            )
            if progress is not None and time.monotonic() - clock["last"] > _PROGRESS_EVERY_S:
                clock["last"] = time.monotonic()
                if not progress(done[0] + (done[1] - done[0]) * s1 / total_steps):
                    raise Cancelled()
        return totals, busy, sent

    no_bits = np.zeros((n * qps, 0))
    rate = floor
    totals, busy, _ = one_pass(rate, (0.0, 0.45), 0, no_bits)
    all_meet = int(totals[ALL_ARRIVAL]) - job.start_ns
    passes, converged = 1, bool(np.all(floor >= alone * (1 - 1e-12)))  # no flow could go faster
    while not converged and passes < MAX_PASSES:
        span = max(1, int(totals[ALL_ARRIVAL]) - job.start_ns)
        rate = mean_field_rates(entries, qps, np.minimum(1.0, busy / span), capacity, floor)
        before = int(totals[ALL_ARRIVAL])
        totals, busy, _ = one_pass(rate, (0.9 - 0.9 / 2**passes, 0.9 - 0.9 / 2 ** (passes + 1)), 0, no_bits)
        passes += 1
        converged = abs(int(totals[ALL_ARRIVAL]) - before) <= CONVERGED * span
    time_limited = bool(totals[UNFINISHED])
    end = time_limit_ns if time_limited else int(totals[LAST_ARRIVAL])
    interval = steady_interval_ns(end, first_interval[0], first_interval[1], used_channels)
    bins = max(1, -(-end // interval))
    bits = np.zeros((n * qps, bins))
    _, _, sent = one_pass(rate, (0.9, 1.0), interval, bits)
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
        passes=passes + 1,
        converged=converged,
        all_meet_ns=all_meet,
    )


@_kernel
def spread_rows(row, compact, fraction, row_edges, edges):
    """edges[compact[e]] += fraction[e] * row_edges[row[e]] for every route entry e."""
    for e in range(row.shape[0]):
        for k in range(row_edges.shape[1]):
            edges[compact[e], k] += fraction[e] * row_edges[row[e], k]
