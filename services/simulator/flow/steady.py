"""FLOW_STEADY: the steady-state fluid model of ring jobs, in seconds at any ring size.

The FLOW loop (model.py) refills max-min fair rates at every start and end of a flow: exact for the
fluid model, but a 64 MiB ring over 8,192 ranks is 134M transfers and ~268M events (minutes, and
~75 GB if held). In a ring every connection sends all through the job, a chunk per step, so this
model gives each QP flow one rate, the rate it sends at whenever it sends, and computes each ring
from it (the jobs' rings one after the other, each in its own time):

1. Times: the ring's transfers follow FLOW's dependencies exactly (collectives.ring_transfers): a
   transfer starts once its connection's previous transfer has left and the chunk it forwards has
   arrived from rank - 1; each QP flow leaves ceil(wire bytes * 8e9 / rate) ns after it starts
   (FLOW's rounding) and arrives one path latency later. The transfers are computed step by step
   from their indices (the formula of collectives.ring_block), never held: memory is O(ranks x
   chunks), ~1.2 s a pass over 134M transfers.
2. Phases: with several jobs the run has phases, from one job's start or end to the next
   (`run_phases`); a flow meets the flows of the jobs running in the phase (and its own job's), and
   a transfer takes the rates of the phase it starts in. The ends are found by the passes
   themselves (the first takes every job as running forever). One job has one phase.
3. Rates, first: per phase, the max-min fair rates of all those QP flows sending at once
   (`max_min_rates`, FLOW's water-filling over the same routes' channel fractions: an ECMP path,
   or ADAPTIVE's and SPRAY's even split), passes until the jobs' ends settle. Where every flow
   already has its whole path to itself (no flow could go faster alone), that is FLOW's rate at
   every instant and the model is FLOW's to the ns.
4. Rates, then (`mean_field_rates`): a connection sends only part of the time (its duty in a
   phase: the time its transfers that started in the phase took over the part of the phase its
   job ran, from the pass before), and where latency rather than a shared link sets the pace, two
   connections that share a link rarely send at once. Each QP flow's rate becomes, on each channel
   of its path, the capacity over its own fraction plus the fractions of the other connections'
   flows it meets weighted by their duties (the number of them it expects to meet there, its own
   connection's QPs always), the lowest over its path, and never below its max-min rate. Passes
   repeat until every job's completion moves less than CONVERGED of it between two (2 to 19 passes
   on the rings measured).
5. Series: each QP flow's bits are binned per interval while it sends, then spread over its route's
   channels by their fractions (`series_from_edges`, scaled to the exact bytes, which are FLOW's).

What it leaves out: in FLOW a flow's rate changes while it sends, as others start and end; here a
flow meets the other connections' flows as if their phases were independent of its own. Against the
FLOW loop on the same rings (README, "FLOW, FLOW_STEADY or PACKET"; test_flow_steady.py bounds some):
-0.01% to -0.36% on rings of 1,024 and 2,048 ranks, -3.1% to +0.2% on 24 small ECMP rings (-4.7%
on the test suite's latency-bound 16-rank ring), exact under ADAPTIVE; the max-min rates alone
(every flow meeting the others always, the first passes) were never below FLOW on a single ring
measured, and the notes give that completion too.
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
from services.simulator.flow.integrate import settled_interval_ns
from services.simulator.flow.model import max_min_rates
from services.simulator.routes import FlowRoutes
from services.simulator.workload import RingStream, head_transfers

__all__ = [
    "CONVERGED",
    "MAX_PASSES",
    "SteadyRun",
    "mean_field_rates",
    "route_entries",
    "run_phases",
    "simulate_steady_rings",
    "spread_rows",
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
    """What the steady-state model computed for the rings' QP flows (rows of the connection
    workload: ring j's rank r's QP q is row first_flow + r * qps + q)."""

    rates_bps: np.ndarray  # float64 [phases, rows], each QP flow's rate whenever it sends in a phase
    head_start_ns: np.ndarray  # int64 [kept flows], the job's first flows (whole transfers)
    head_finish_ns: np.ndarray  # int64 [kept flows], -1 unfinished
    sent_wire_bytes: np.ndarray  # int64 [rows], wire bytes each QP flow row sent in finished transfers
    row_edge_bits: np.ndarray  # float64 [rows, bins + 1], bits each row sent from 0 to each edge
    interval_ns: int
    end_ns: int
    last_finish_ns: list[int]  # per job: its last arrival, -1 if some transfer did not finish
    transfers: int
    time_limited: bool
    passes: int  # over the ring's steps, the last one binning the series
    converged: bool  # the mean-field passes settled (else MAX_PASSES ran)
    all_meet_ns: list[int]  # per job: its length at the max-min rates (every flow meeting all always)


Entries = tuple[np.ndarray, np.ndarray, np.ndarray]  # (flow, channel, fraction) of each route entry


def route_entries(routes: FlowRoutes, rows: np.ndarray) -> Entries:
    """(flow, channel, fraction) of every entry of the routes `rows` (flow i follows rows[i])."""
    starts, ends = routes.offsets[rows], routes.offsets[rows + 1]
    counts = ends - starts
    flow = np.repeat(np.arange(len(rows)), counts)
    entry = np.repeat(starts - np.r_[0, np.cumsum(counts)[:-1]], counts) + np.arange(int(counts.sum()))
    return flow, routes.channels[entry], routes.fractions[entry]


def mean_field_rates(
    entries: Entries,
    connection: np.ndarray | None,
    duty: np.ndarray,
    job: np.ndarray,
    meet: np.ndarray,
    channel_rate_bps: np.ndarray,
    floor_bps: np.ndarray,
) -> np.ndarray:
    """float64 [flows]: each QP flow's rate while it sends (module doc, 4). Flow f puts fraction a_fl
    of its rate on channel l; its connection (`connection[f]`; None: each flow is its own) sends a
    fraction `duty[f]` of the time; a flow of job a meets job b's flows `meet[a, b]` of the time
    (`job[f]`: f's job; in a phase 1 where b runs or b is a, else 0). On l flow f expects its own
    connection's fractions (its QPs send together) plus every other flow's fraction times its duty
    and that meeting: its share there is C_l over that sum. Its rate is its lowest share, never
    below `floor_bps` (its max-min rate when all send).

    >>> one_link = np.array([0, 1]), np.array([0, 0]), np.ones(2)
    >>> mean_field_rates(one_link, None, np.array([0.5, 0.5]), np.zeros(2, int), np.ones((1, 1)),
    ...                  np.array([12.0]), np.zeros(2)).tolist()
    [8.0, 8.0]
    """
    flow, channel, fraction = entries
    capacity = np.asarray(channel_rate_bps, dtype=np.float64)
    weighted = duty[flow] * fraction
    jobs = meet.shape[0]
    if jobs == 1:
        expected = np.bincount(channel, weights=weighted, minlength=len(capacity))[channel]
    else:
        entry_job = job[flow]
        load = np.bincount(channel * jobs + entry_job, weights=weighted, minlength=len(capacity) * jobs)
        expected = np.einsum("ej,ej->e", load.reshape(-1, jobs)[channel], meet[entry_job])
    if connection is None:  # a route lists a channel once: its own connection is itself
        expected += fraction - weighted  # (counted at its duty and meet[a, a] = 1 above)
    else:
        key = connection[flow].astype(np.int64) * len(capacity) + channel
        _, group = np.unique(key, return_inverse=True)
        expected += np.bincount(group, weights=fraction)[group] - np.bincount(group, weights=weighted)[group]
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
    bounds,
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
    iteration, qps, time limit, kept transfers). Phase p of the run starts at bounds[p]; a transfer
    takes the rates of the phase it starts in. Its segment is small (0) or large (1):
    `wire_bytes[kind, chunk, qp]` its QP flows' wire bytes, `duration[phase, kind, chunk, rank, qp]`
    how long each takes at its rate (`rate[phase, row]`). `left[r]`: when connection r's last
    transfer left (at first the job's start); `arrived[s & 1, r, c]`: when chunk c of rank r's step
    s arrived at r + 1; `busy[phase, r]`: the time connection r's transfers that started in that
    phase took, summed. With interval > 0 the QP flows' bits are binned into `bits[row, k]`
    (interval k)."""
    n, large, chunks, steps, qps, limit_ns, kept = ring
    bins = bits.shape[1]
    phases = bounds.shape[0]
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
                phase = 0
                while phase + 1 < phases and bounds[phase + 1] <= begin:
                    phase += 1
                leave = begin
                arrive = begin
                for q in range(qps):
                    row = r * qps + q
                    end = begin + duration[phase, kind, c, r, q]
                    leave = max(leave, end)
                    arrive = max(arrive, end + latency[row])
                    if end <= limit_ns:
                        sent[row] += wire_bytes[kind, c, q]
                    if t < kept:  # (one that starts after the time limit never started)
                        head_start[t * qps + q] = begin if begin <= limit_ns else -1
                        head_finish[t * qps + q] = end + latency[row] if end <= limit_ns else -1
                    if interval > 0 and end > begin and begin < limit_ns:
                        stop = min(end, limit_ns)
                        per_ns = rate[phase, row] / 1e9
                        k = begin // interval
                        while k < bins and k * interval < stop:
                            lo = max(begin, k * interval)
                            hi = min(stop, (k + 1) * interval)
                            bits[row, k] += (hi - lo) * per_ns
                            k += 1
                left[r] = leave
                arrived[now, r, c] = arrive
                busy[phase, r] += leave - begin
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
    """int64 [phases, 2, chunks, ranks, qps]: ceil(wire bytes * 8e9 / rate) ns (`rate`: [phases,
    ranks x qps]), as the FLOW loop rounds; 0 for an empty flow."""
    on_wire = wire_bytes[None, :, :, None, :]
    took = np.ceil(on_wire * 8e9 / rate.reshape(len(rate), 1, 1, ranks, -1))
    return np.where(on_wire > 0, took, 0).astype(np.int64)


_NEVER = np.iinfo(np.int64).max  # a job's end before a pass has found it


def run_phases(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The run's phases, between one job's start or end and the next: (bounds, present), phase p
    starting at bounds[p], present[p, a, b] whether a flow of job a meets job b's there (b runs
    then, or b is a: a flow's own job is always there).

    >>> bounds, present = run_phases(np.array([0, 50]), np.array([100, 300]))
    >>> bounds.tolist(), present[:, 0, 1].tolist(), present[:, 1, 0].tolist()
    ([0, 50, 100, 300], [False, True, False, False], [True, True, False, False])
    """
    bounds = np.unique(np.r_[starts, ends[ends < _NEVER]])
    runs = (starts[None, :] <= bounds[:, None]) & (bounds[:, None] < ends[None, :])
    present = runs[:, None, :] | np.eye(len(starts), dtype=bool)[None, :, :]
    return bounds.astype(np.int64), present


def _duties(
    busy: np.ndarray, bounds: np.ndarray, starts: np.ndarray, ends: np.ndarray, job: np.ndarray, phases: int
) -> np.ndarray:
    """float64 [phases, flows]: the share of each phase its flow's connection sends, from `busy`
    ([measured phases, flows]: the time its transfers that started in each phase took) over the
    part of the phase its job ran in. Where the run has since found other phases, its whole run's."""
    if len(bounds) != phases:
        duty = busy.sum(axis=0) / np.maximum(1, ends - starts)[job]
        return np.minimum(1.0, np.broadcast_to(duty, (phases, len(job))))
    upper = np.r_[bounds[1:], _NEVER]
    ran = np.minimum(ends[None, :], upper[:, None]) - np.maximum(starts[None, :], bounds[:, None])
    return np.minimum(1.0, busy / np.maximum(1, ran)[:, job])


def _floor_rates(
    entries: Entries, job: np.ndarray, present: np.ndarray, capacity: np.ndarray, flows: int
) -> np.ndarray:
    """float64 [phases, flows]: each flow's max-min fair rate in each phase with every flow of the
    jobs it meets there sending (`run_phases`)."""
    flow, channel, fraction = entries
    floor = np.zeros((len(present), flows))
    filled: dict[bytes, np.ndarray] = {}
    for p, meets in enumerate(present):
        for a, jobs in enumerate(meets):
            key = jobs.tobytes()
            if key not in filled:
                kept = jobs[job[flow]]
                filled[key] = max_min_rates(flow[kept], channel[kept], fraction[kept], capacity, flows)
            mine = job == a
            floor[p, mine] = filled[key][mine]
    if (floor <= 0).any():
        raise FailedPrecondition("a flow crosses a channel of zero capacity (rate 0 link)")
    return floor


def simulate_steady_rings(
    rings: list[RingStream],
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
    """Run the ring jobs `rings`, whose QP flows (ring j's rank r's QP q is flow first_flow + r *
    qps + q) cross the channels of their route `entries` (route_entries; `used_channels` distinct
    ones), flow f arriving `latency_ns[f]` after it leaves; `wire` = (mtu, header bytes per packet);
    `first_interval` = (ns, fixed) as the FLOW engine chooses it; per-flow times kept for the first
    `kept_flows` flows (`workload.head_transfers`).

    Passes over the steps (module doc): with the max-min rates, then with the mean-field rates
    until every job's completion settles (the time limit plays no part in the rates), then one that
    bins the flows' bits at the interval the end settles (as the FLOW integrator would settle it).
    `progress(fraction)` about every 0.2 s; returning False raises Cancelled."""
    flows = len(latency_ns)
    capacity = np.asarray(channel_rate_bps, dtype=np.float64)
    rows = [slice(ring.first_flow, ring.first_flow + ring.ranks * ring.qps) for ring in rings]
    job = np.zeros(flows, dtype=np.int64)
    for j, span in enumerate(rows):
        job[span] = j
    connection = None  # each flow its own connection, with one QP each
    if any(ring.qps > 1 for ring in rings):  # rank r of ring j: connection first_flow + r (distinct)
        connection = np.empty(flows, dtype=np.int64)
        for ring, span in zip(rings, rows, strict=True):
            connection[span] = ring.first_flow + np.arange(ring.ranks * ring.qps) // ring.qps
    latency = np.asarray(latency_ns, dtype=np.int64)
    kept = head_transfers(rings, kept_flows)
    head_at = np.r_[0, np.cumsum([k * ring.qps for k, ring in zip(kept, rings, strict=True)])]
    head_start = np.full(int(head_at[-1]), -1, dtype=np.int64)
    head_finish = np.full(int(head_at[-1]), -1, dtype=np.int64)
    on_wire = [_wire_bytes(ring, wire) for ring in rings]
    starts = np.array([ring.job.start_ns for ring in rings], dtype=np.int64)
    total = sum(ring.transfers for ring in rings)
    clock = {"last": time.monotonic()}

    def one_pass(
        bounds: np.ndarray, rate: np.ndarray, done: tuple[float, float], interval: int, bits: np.ndarray
    ):
        """A pass at `rate` ([phases, flows], phase p from bounds[p]); progress goes from done[0] to
        done[1] over it."""
        totals = np.zeros((len(rings), len(_TOTALS)), dtype=np.int64)
        busy = np.zeros((len(bounds), flows), dtype=np.int64)
        sent = np.zeros(flows, dtype=np.int64)
        computed = 0
        for j, ring in enumerate(rings):
            n, qps, chunks, span = ring.ranks, ring.qps, max(1, ring.job.chunks), rows[j]
            ring_rate = np.ascontiguousarray(rate[:, span])  # (one compiled layout for every job)
            duration = _durations(on_wire[j], ring_rate, n)
            left = np.full(n, ring.job.start_ns, dtype=np.int64)
            arrived = np.zeros((2, n, chunks), dtype=np.int64)
            ring_busy = np.zeros((len(bounds), n), dtype=np.int64)
            setting = (n, ring.job.size_bytes % n, chunks, ring.steps, qps, time_limit_ns, kept[j])
            heads = slice(int(head_at[j]), int(head_at[j + 1]))
            steps = ring.steps * max(1, ring.job.iterations)
            per_call = max(1, _SLICE_TRANSFERS // max(1, n * chunks))
            for s0 in range(0, steps, per_call):
                s1 = min(steps, s0 + per_call)
                _ring_steps(
                    s0,
                    s1,
                    setting,
                    bounds,
                    on_wire[j],
                    duration,
                    ring_rate,
                    latency[span],
                    left,
                    arrived,
                    ring_busy,
                    head_start[heads],
                    head_finish[heads],
                    sent[span],
                    interval,
                    bits[span],
                    totals[j],
                )
                if progress is not None and time.monotonic() - clock["last"] > _PROGRESS_EVERY_S:
                    clock["last"] = time.monotonic()
                    fraction = (computed + s1 * n * chunks) / total
                    if not progress(done[0] + (done[1] - done[0]) * fraction):
                        raise Cancelled()
            computed += ring.transfers
            busy[:, span] = np.repeat(ring_busy, qps, axis=1)
        return totals, busy, sent

    no_bits = np.zeros((flows, 0))
    passes = 0

    def settled(before: np.ndarray, after: np.ndarray) -> bool:
        return bool(np.all(np.abs(after - before) <= CONVERGED * np.maximum(1, after - starts)))

    # The max-min rates of all flows sending at once, phase by phase (the jobs that run then), until
    # the jobs' ends, which bound the phases, settle: every flow meeting the others always.
    ends = np.full(len(rings), _NEVER, dtype=np.int64)
    while True:
        bounds, present = run_phases(starts, ends)
        floor = _floor_rates(entries, job, present, capacity, flows)
        totals, busy, _ = one_pass(
            bounds, floor, (0.9 - 0.9 / 2**passes, 0.9 - 0.9 / 2 ** (passes + 1)), 0, no_bits
        )
        passes += 1
        found, ends = ends, totals[:, ALL_ARRIVAL].copy()
        # One job: its phase is its run, whenever it ends. Several: the first pass took every job
        # as running forever; again until the ends (the phases' bounds) settle.
        if len(rings) == 1 or settled(found, ends) or passes >= MAX_PASSES:
            break
    all_meet = ends - starts
    rate = floor
    # Each flow alone with its own connection: where the max-min rates already are that, no flow
    # could go faster and FLOW's rates never change.
    nobody = np.zeros(flows)
    alone = mean_field_rates(entries, connection, nobody, job, np.eye(len(rings)), capacity, np.zeros(flows))
    converged = bool(np.all(floor >= alone[None, :] * (1 - 1e-12)))
    while not converged and passes < MAX_PASSES:
        measured = bounds  # the phases `busy` was summed over; they end where the jobs now end
        bounds, present = run_phases(starts, ends)
        duty = _duties(busy, measured, starts, ends, job, len(bounds))
        floor = _floor_rates(entries, job, present, capacity, flows)
        rate = np.stack(
            [
                mean_field_rates(entries, connection, duty[p], job, meets.astype(float), capacity, floor[p])
                for p, meets in enumerate(present)
            ]
        )
        done = (0.9 - 0.9 / 2**passes, 0.9 - 0.9 / 2 ** (passes + 1))
        totals, busy, _ = one_pass(bounds, rate, done, 0, no_bits)
        passes += 1
        found, ends = ends, totals[:, ALL_ARRIVAL].copy()
        converged = settled(found, ends)
    time_limited = bool(totals[:, UNFINISHED].any())
    end = time_limit_ns if time_limited else int(totals[:, LAST_ARRIVAL].max())
    # The channels' series and the flows' bits alike within MAX_SERIES_VALUES.
    interval = settled_interval_ns(end, first_interval[0], first_interval[1], max(used_channels, flows))
    bins = max(1, -(-end // interval))
    bits = np.zeros((flows, bins))
    _, _, sent = one_pass(bounds, rate, (0.9, 1.0), interval, bits)
    edges = np.zeros((flows, bins + 1))
    np.cumsum(bits, axis=1, out=edges[:, 1:])
    return SteadyRun(
        rates_bps=rate,
        head_start_ns=head_start,
        head_finish_ns=head_finish,
        sent_wire_bytes=sent,
        row_edge_bits=edges,
        interval_ns=interval,
        end_ns=end,
        last_finish_ns=[-1 if t[UNFINISHED] else int(t[LAST_ARRIVAL]) for t in totals],
        transfers=total,
        time_limited=time_limited,
        passes=passes + 1,
        converged=converged,
        all_meet_ns=[int(x) for x in all_meet],
    )


@_kernel
def spread_rows(row, compact, fraction, row_edges, edges):
    """edges[compact[e]] += fraction[e] * row_edges[row[e]] for every route entry e."""
    for e in range(row.shape[0]):
        for k in range(row_edges.shape[1]):
            edges[compact[e], k] += fraction[e] * row_edges[row[e], k]
