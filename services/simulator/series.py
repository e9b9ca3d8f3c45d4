"""Per-channel time series, and how the engines choose and bound their intervals.

The bytes a channel carried up to time t are the integral of its load; the series of a channel is
that integral at the edges k * interval (k = 0..B), differenced (`series_from_edges`): bytes per
interval, exact up to rounding to whole bytes (rounded on the cumulative curve, so the intervals
add up to the channel's total). The FLOW engine integrates its loads as it runs
(`flow/integrate.py`); the packet engine bins its bytes per interval as it sends them.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from services.common.errors import InvalidArgument

__all__ = [
    "MAX_SERIES_VALUES",
    "ChannelSeries",
    "first_interval_ns",
    "refuse_sample_interval",
    "series_from_edges",
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
    the total), scaled to `exact_bytes` ([channels]: what each really carried) when given, and
    utilisation."""
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
