"""The FLOW engine's per-link series, integrated as the loop runs: memory channels x intervals,
whatever the number of events.

The loop reports every change of a channel's load, (time, channel, bit/s), in time order, a buffer
at a time (loop.py). `LoadIntegrator` folds each buffer into the integral of every channel's load
at the interval edges k * interval (bits carried from 0 to the edge) and forgets the records: a
record ends the previous load's segment, whose bits are added to the channel's running integral;
each edge a segment covers gets the integral up to it. At the end the edges turn into bytes per
interval exactly as the FLOW engine once turned the records of a whole run into them
(`series.series_from_edges`); `tests/simulator/series_reference.py` keeps that as the reference.

The interval is either the caller's (`sample_interval_ns`: the edges grow as the run goes on, and
the interval doubles, merging pairs of intervals, only where the series would pass
MAX_SERIES_VALUES values) or chosen like the packet engine's: a power of two of ns at which the
run's expected length fills half the intervals, doubled whenever the run outlasts them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from services.simulator.series import MAX_SERIES_VALUES, ChannelSeries, series_from_edges

__all__ = ["DEFAULT_INTERVALS", "LoadIntegrator", "settled_interval_ns"]

DEFAULT_INTERVALS = 128  # intervals of a run whose interval the engine chooses, at most

_kernel: Any = njit(cache=True, _nrt=False)  # type: ignore[call-overload]


@_kernel
def _fold(times, compact, loads, start, count, interval, last_time, last_load, bits, done, edges, carried):
    """Fold records start..count-1 in; returns the first record that needs an edge beyond the
    array (its channel's edges before it written), or count when all are in."""
    capacity = edges.shape[1] - 1
    for i in range(start, count):
        c = compact[i]
        t = times[i]
        k = done[c]
        while k * interval <= t:
            if k > capacity:
                done[c] = k
                return i
            edges[c, k] = bits[c] + last_load[c] * (k * interval - last_time[c]) / 1e9
            k += 1
        done[c] = k
        bits[c] += last_load[c] * (t - last_time[c]) / 1e9
        last_time[c] = t
        last_load[c] = loads[i]
        if loads[i] > 0:
            carried[c] = True
    return count


@_kernel
def _close(end, interval, bins, last_time, last_load, bits, done, edges):
    """The edges left of every channel up to edge `bins`, which lies at `end`."""
    for c in range(edges.shape[0]):
        for k in range(done[c], bins + 1):
            edge = min(k * interval, end)
            edges[c, k] = bits[c] + last_load[c] * (edge - last_time[c]) / 1e9
        done[c] = bins + 1


class LoadIntegrator:
    """Receives the FLOW loop's load records and keeps only the series they integrate to."""

    def __init__(self, interval_ns: int, fixed: bool, intervals: int = DEFAULT_INTERVALS) -> None:
        """`interval_ns`: the first interval; `fixed`: the caller's, kept unless the series would
        not fit; `intervals`: how many the edges hold before the interval doubles (when not fixed)
        or they grow (when fixed)."""
        if interval_ns < 1:
            raise ValueError("the interval is at least 1 ns")
        self.interval_ns = interval_ns
        self.fixed = fixed
        self._intervals = max(2, intervals + intervals % 2)  # even: doubling merges pairs
        self.channel_ids = np.zeros(0, dtype=np.int32)

    def open(self, channel_ids: np.ndarray) -> None:
        """The channels the records' compact numbers stand for (the loop's used channels)."""
        u = len(channel_ids)
        self.channel_ids = np.asarray(channel_ids, dtype=np.int32)
        self._last_time = np.zeros(u, dtype=np.int64)
        self._last_load = np.zeros(u)
        self._bits = np.zeros(u)
        self._done = np.zeros(u, dtype=np.int64)
        intervals = self._intervals
        while intervals > 2 and u * (intervals + 1) > MAX_SERIES_VALUES:
            intervals = max(2, intervals // 2 + intervals // 2 % 2)
        self._edges = np.zeros((u, intervals + 1))
        self._carried = np.zeros(u, dtype=bool)

    def fold(self, times: np.ndarray, compact: np.ndarray, loads: np.ndarray, count: int) -> None:
        """Records 0..count-1 of the buffers (time order; compact channel numbers)."""
        start = 0
        while True:
            start = _fold(
                times,
                compact,
                loads,
                start,
                count,
                self.interval_ns,
                self._last_time,
                self._last_load,
                self._bits,
                self._done,
                self._edges,
                self._carried,
            )
            if start >= count:
                return
            self._make_room()

    def _make_room(self) -> None:
        """Twice the edges at the same interval (fixed, while the series fit), else twice the interval."""
        u, edges = self._edges.shape
        if self.fixed and u * (2 * (edges - 1) + 1) <= MAX_SERIES_VALUES:
            grown = np.zeros((u, 2 * (edges - 1) + 1))
            grown[:, :edges] = self._edges
            self._edges = grown
            return
        merged = np.zeros_like(self._edges)
        kept = self._edges[:, ::2]  # edge 2j at the old interval is edge j at the new one
        merged[:, : kept.shape[1]] = kept
        self._edges = merged
        self._done = (self._done + 1) // 2
        self.interval_ns *= 2

    def series(
        self, end_ns: int, channel_rate_bps: np.ndarray, exact_bytes: np.ndarray | None
    ) -> ChannelSeries:
        """The series of the channels that ever carried load, from 0 to `end_ns` (after the last
        record); `exact_bytes` ([channels], optional): the bytes each channel really carried, to
        which each channel's curve is scaled (the loop rounds event times up to whole ns)."""
        bins = max(1, -(-end_ns // self.interval_ns))
        while bins >= self._edges.shape[1]:
            self._make_room()
            bins = max(1, -(-end_ns // self.interval_ns))
        _close(
            end_ns,
            self.interval_ns,
            bins,
            self._last_time,
            self._last_load,
            self._bits,
            self._done,
            self._edges,
        )
        kept = np.flatnonzero(self._carried)
        return series_from_edges(
            self.channel_ids[kept],
            self._edges[kept, : bins + 1],
            channel_rate_bps,
            end_ns,
            self.interval_ns,
            exact_bytes,
        )


def settled_interval_ns(end_ns: int, first_ns: int, fixed: bool, rows: int) -> int:
    """The interval a `LoadIntegrator` of `rows` channels opened at `first_ns` (`fixed`: the caller's)
    ends with for a run ending at `end_ns`, for an engine that knows the end before it bins: a
    caller's kept unless the rows' edges would pass MAX_SERIES_VALUES, else doubled while the run
    outlasts DEFAULT_INTERVALS intervals (FLOW_STEADY; its tests compare the two)."""
    interval = max(1, first_ns)
    if fixed:
        while rows * (-(-end_ns // interval) + 1) > MAX_SERIES_VALUES:
            interval *= 2
        return interval
    while -(-end_ns // interval) > DEFAULT_INTERVALS:
        interval *= 2
    return interval
