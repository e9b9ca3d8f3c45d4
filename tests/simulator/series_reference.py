"""`channel_series`: the per-link series of a whole run's load records integrated at once, as the
FLOW engine did before it integrated them as it ran (`flow/integrate.py`, which these are the
reference for: tests/simulator/test_load_integrator.py)."""

from __future__ import annotations

import numpy as np

from services.simulator.series import MAX_SERIES_VALUES, ChannelSeries, series_from_edges

__all__ = ["channel_series"]


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
