"""Per-channel time series from an engine's piecewise-constant channel loads.

An engine reports every change of a channel's load as (time, channel, bits per second); the
bytes a channel carried up to time t are the integral of that step function. The series of a
channel is that integral at the edges k * interval (k = 0..B), differenced: bytes per interval,
exact up to rounding to whole bytes (rounded on the cumulative curve, so the intervals add up to
the channel's total).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from services.common.errors import InvalidArgument

__all__ = [
    "MAX_SERIES_VALUES",
    "ChannelSeries",
    "channel_series",
    "first_interval_ns",
    "refuse_sample_interval",
    "series_from_edges",
    "widened_interval_ns",
]

MAX_SERIES_VALUES = 50_000_000  # channels x intervals kept in memory at most


@dataclasses.dataclass
class ChannelSeries:
    """Bytes and utilisation per sample interval of the channels that carried traffic."""

    channels: np.ndarray  # int32 [C], channel ids (2*link + direction)
    start_ns: int
    interval_ns: int
    bytes: np.ndarray  # int64 [C, B]
    utilisation: np.ndarray  # float64 [C, B], 0..1
    # PACKET fidelity only (None at FLOW fidelity, which has no queues):
    mean_queue_bytes: np.ndarray | None = None  # float64 [C, B]
    peak_queue_bytes: np.ndarray | None = None  # int64 [C, B]
    drops: np.ndarray | None = None  # int64 [C, B], packets
    # PACKET fidelity with faults, PFC or DCQCN: per-interval counters by LinkSeries field name
    # (rcv_errors, xmit_discards, ecn_marked_packets, pause_frames, pause_ns), int64 [C, B] each.
    counters: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)

    @property
    def total_bytes(self) -> np.ndarray:
        return self.bytes.sum(axis=1)

    def over_all_channels(self, num_channels: int) -> ChannelSeries:
        """The same series for every channel 0..num_channels-1, idle ones as zeros.

        A live cluster reports counters for every port, busy or not; telemetry of a simulated run
        does the same, so that "idle links next to hot ones" is visible in either.
        """

        def spread(values: np.ndarray) -> np.ndarray:
            full = np.zeros((num_channels, values.shape[1]), dtype=values.dtype)
            full[self.channels] = values
            return full

        def spread_optional(values: np.ndarray | None) -> np.ndarray | None:
            return None if values is None else spread(values)

        return ChannelSeries(
            np.arange(num_channels, dtype=np.int32),
            self.start_ns,
            self.interval_ns,
            spread(self.bytes),
            spread(self.utilisation),
            spread_optional(self.mean_queue_bytes),
            spread_optional(self.peak_queue_bytes),
            spread_optional(self.drops),
            {name: spread(values) for name, values in self.counters.items()},
        )


def first_interval_ns(expected_end_ns: int, intervals: int) -> int:
    """The sample interval an engine starts from when the caller sets none: the finest power of two
    of ns at which a run of `expected_end_ns` fits in half of `intervals` (the engines double it
    whenever the run outlasts them all: a run that lasts at least that long gets more than a
    quarter of them, and at most all)."""
    return 1 << max(0, int(np.ceil(np.log2(max(1.0, max(1, expected_end_ns) / (intervals / 2))))))


def widened_interval_ns(end_ns: int, channels: int) -> int:
    """The finest interval in whole ns whose series of `channels` channels fit MAX_SERIES_VALUES."""
    most_bins = max(1, MAX_SERIES_VALUES // max(1, channels) - 1)
    return max(1, -(-end_ns // most_bins))


def _record_in_force(
    owner: np.ndarray, times: np.ndarray, edges: np.ndarray, channels: int, end_ns: int
) -> np.ndarray:
    """int64 [channels * len(edges)]: index of the last record of each channel at or before each edge
    (-1 or another channel's where it has none; the caller checks). Records are by channel, then time."""
    stride = end_ns + 1
    if channels * stride < 2**62:  # (channel, time) as one int64 key: one search for all
        keys = owner.astype(np.int64) * stride + times
        queries = (np.arange(channels, dtype=np.int64)[:, None] * stride + edges[None, :]).ravel()
        return np.searchsorted(keys, queries, side="right") - 1
    # A long run on many channels: the keys would overflow int64; search channel by channel.
    first = np.searchsorted(owner, np.arange(channels + 1))
    at = np.empty((channels, len(edges)), dtype=np.int64)
    for c in range(channels):
        at[c] = first[c] + np.searchsorted(times[first[c] : first[c + 1]], edges, side="right") - 1
    return at.ravel()


def channel_series(
    record_time_ns: np.ndarray,
    record_channel: np.ndarray,
    record_load_bps: np.ndarray,
    channel_rate_bps: np.ndarray,
    end_ns: int,
    interval_ns: int,
    exact_bytes: np.ndarray | None = None,
) -> ChannelSeries:
    """Integrate the load records of every channel that ever carried load into interval bins.

    Records must be in time order on each channel (all in time order, or by channel and then time:
    then each channel is a run and nothing is sorted). Intervals run from 0 to `end_ns`; the last
    may be partial, and its utilisation is over its actual length. `exact_bytes` ([channels],
    optional) are the bytes each channel really carried: an engine that rounds event times up to
    whole nanoseconds integrates slightly more (under 1 ns of extra rate per flow), so each
    channel's curve is scaled to end exactly there.
    """
    bins = max(1, -(-end_ns // interval_ns))
    record_channel = np.asarray(record_channel)
    # Records already by channel (the FLOW engine's order): each channel is a run, no sort needed.
    by_channel = len(record_channel) < 2 or bool((record_channel[1:] >= record_channel[:-1]).all())
    if by_channel:
        starts = (
            np.flatnonzero(np.r_[True, record_channel[1:] != record_channel[:-1]])
            if len(record_channel)
            else np.zeros(0, dtype=np.int64)
        )
        channels = record_channel[starts]
        inverse = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, len(record_channel)]))
        loaded = record_load_bps > 0
        carried = np.logical_or.reduceat(loaded, starts) if len(starts) else np.zeros(0, dtype=bool)
    else:
        channels, inverse = np.unique(record_channel, return_inverse=True)
        carried = np.zeros(len(channels), dtype=bool)
        np.logical_or.at(carried, inverse, record_load_bps > 0)
    channels = channels[carried]
    if len(channels) * (bins + 1) > MAX_SERIES_VALUES:
        # The caller's interval gives more values than fit (checks.py refuses the certain cases up
        # front; the run came out longer than the bound it knew): the interval that fits, noted in
        # the outcome by the caller through the returned interval_ns.
        interval_ns = widened_interval_ns(end_ns, len(channels))
        bins = max(1, -(-end_ns // interval_ns))
    if not len(channels):
        empty = np.zeros((0, bins))
        return ChannelSeries(np.zeros(0, np.int32), 0, interval_ns, empty.astype(np.int64), empty)
    keep = carried[inverse]
    if by_channel:  # already by channel, then time
        owner = (np.cumsum(carried) - 1)[inverse[keep]]
        times = record_time_ns[keep].astype(np.int64)
        loads = record_load_bps[keep]
    else:
        channel_index = np.searchsorted(channels, record_channel[keep])
        order = np.argsort(channel_index, kind="stable")  # by channel, then time
        owner = channel_index[order]
        times = record_time_ns[keep][order].astype(np.int64)
        loads = record_load_bps[keep][order]
    # Each record holds until the channel's next record, or the end.
    last_of_channel = np.r_[owner[1:] != owner[:-1], True]
    until = np.r_[times[1:], end_ns]
    until[last_of_channel] = end_ns
    segment_bits = loads * (np.minimum(until, end_ns) - times) / 1e9
    first_of_channel = np.r_[True, owner[1:] != owner[:-1]]
    cumulative = np.cumsum(segment_bits) - segment_bits  # bits before each segment, global
    cumulative -= np.repeat(
        cumulative[first_of_channel], np.diff(np.r_[np.flatnonzero(first_of_channel), len(owner)])
    )
    edges = np.minimum(np.arange(bins + 1, dtype=np.int64) * interval_ns, end_ns)
    # The record in force at each (channel, edge): the last one of that channel at or before it.
    at = _record_in_force(owner, times, edges, len(channels), end_ns)
    query_channel = np.repeat(np.arange(len(channels)), bins + 1)
    valid = (at >= 0) & (owner[np.maximum(at, 0)] == query_channel)
    at = np.maximum(at, 0)
    query_time = np.tile(edges, len(channels))
    bits = np.where(valid, cumulative[at] + loads[at] * (query_time - times[at]) / 1e9, 0.0)
    return series_from_edges(
        channels, bits.reshape(len(channels), bins + 1), channel_rate_bps, end_ns, interval_ns, exact_bytes
    )


def series_from_edges(
    channels: np.ndarray,
    edge_bits: np.ndarray,
    channel_rate_bps: np.ndarray,
    end_ns: int,
    interval_ns: int,
    exact_bytes: np.ndarray | None = None,
) -> ChannelSeries:
    """The series of `channels` from the bits each carried from 0 to each edge k * interval (the last
    edge at `end_ns`): bytes per interval, rounded on the cumulative curve (so that they add up to
    the total), scaled to `exact_bytes` when given (see `channel_series`), and utilisation."""
    bins = edge_bits.shape[1] - 1
    cumulative = edge_bits / 8
    if exact_bytes is not None:
        integrated = cumulative[:, -1]
        wanted = np.asarray(exact_bytes, dtype=np.float64)[channels]
        cumulative *= np.divide(wanted, integrated, out=np.ones(len(channels)), where=integrated > 0)[:, None]
    cumulative_bytes = np.rint(cumulative).astype(np.int64)
    per_bin = np.diff(cumulative_bytes, axis=1)
    edges = np.minimum(np.arange(bins + 1, dtype=np.int64) * interval_ns, end_ns)
    bin_ns = np.diff(edges).astype(np.float64)
    capacity_bytes = np.asarray(channel_rate_bps, dtype=np.float64)[channels][:, None] * bin_ns[None, :] / 8e9
    utilisation = np.divide(per_bin, capacity_bytes, out=np.zeros(per_bin.shape), where=capacity_bytes > 0)
    return ChannelSeries(np.asarray(channels).astype(np.int32), 0, interval_ns, per_bin, utilisation)


def refuse_sample_interval(interval_ns: int, shortest_ns: int, channels: int, most_intervals: int) -> None:
    """Raise InvalidArgument on `sample_interval_ns`: a run lasting at least `shortest_ns` gives more
    intervals for each of `channels` link directions than the engine's series can hold
    (`most_intervals`); an engine's `check_placed` calls it when its series cannot fit."""
    intervals = -(-shortest_ns // interval_ns)
    coarsest = -(-shortest_ns // max(1, most_intervals))
    raise InvalidArgument(
        "sample_interval_ns",
        f"{interval_ns} ns gives at least {intervals:,} intervals for each of {channels:,} link directions "
        f"(the run lasts at least {shortest_ns:,} ns), more than the series can hold; use at least "
        f"{coarsest:,} ns (or 0: chosen from the run's length)",
    )
