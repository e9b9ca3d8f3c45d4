"""Counter kinds and the conversion of cumulative counter readings into per-interval deltas.

Switches and NICs report cumulative counters; the samples table stores what happened in each
interval. For readings r[k-1], r[k] of one port and metric, in time order:

- 64-bit counters (CUMULATIVE_64, IB_DATA_64): delta = r[k] - r[k-1]; a drop in value is a reset
  (counter cleared, device rebooted), and the new reading counts from zero: delta = r[k].
- 32-, 16- and 8-bit counters (CUMULATIVE_32, IB_DATA_32, CUMULATIVE_16, CUMULATIVE_8):
  delta = (r[k] - r[k-1]) mod 2^w.
  A drop is read as a wrap, the common case for PortXmitData at 400 Gb/s (it wraps in ~0.3 s); a
  reset of a narrow counter cannot be told apart from a wrap. A SymbolErrorCounter that saturates at
  0xFFFF yields zero deltas from then on, which is all that can be known.
- IB_DATA_32 / IB_DATA_64 count units of 4 octets: the delta is multiplied by 4 (bytes).

The first reading of a port has nothing to be compared with: its delta is missing (NaN, stored NULL).
"""

from __future__ import annotations

import enum

import numpy as np

__all__ = ["CounterKind", "InvalidReading", "counter_deltas", "counter_readings"]


class CounterKind(enum.IntEnum):
    """How a column's values are read; the numbers are fabrictwin.v1.CounterKind's."""

    UNSPECIFIED = 0  # read as DELTA
    DELTA = 1
    CUMULATIVE_64 = 2
    CUMULATIVE_32 = 3
    IB_DATA_32 = 4
    IB_DATA_64 = 5
    CUMULATIVE_16 = 6
    CUMULATIVE_8 = 7

    @property
    def is_cumulative(self) -> bool:
        """True for the kinds whose readings are converted into deltas."""
        return self in _WIDTH_BITS


_WIDTH_BITS = {
    CounterKind.CUMULATIVE_64: 64,
    CounterKind.CUMULATIVE_32: 32,
    CounterKind.IB_DATA_32: 32,
    CounterKind.IB_DATA_64: 64,
    CounterKind.CUMULATIVE_16: 16,
    CounterKind.CUMULATIVE_8: 8,
}
_OCTETS_PER_UNIT = {CounterKind.IB_DATA_32: 4, CounterKind.IB_DATA_64: 4}


class InvalidReading(ValueError):
    """A counter reading that cannot be what the counter kind says; `row` is the first such row."""

    def __init__(self, row: int, problem: str) -> None:
        super().__init__(problem)
        self.row = row


def counter_readings(values: np.ndarray, kind: CounterKind) -> np.ndarray:
    """Validate raw readings of `kind` and return them as uint64.

    Integer arrays are taken exactly; float arrays must hold whole numbers (exact only below 2^53, so
    senders of 64-bit counters should use "<u8"). Raises InvalidReading naming the first bad row.

    >>> counter_readings(np.array([1.0, 2.0]), CounterKind.CUMULATIVE_32).dtype
    dtype('uint64')
    """
    bits = _WIDTH_BITS[kind]
    if values.dtype.kind == "f":
        bad = ~np.isfinite(values) | (values < 0) | (values != np.floor(values)) | (values >= 2.0**bits)
        if bad.any():
            row = int(np.argmax(bad))
            raise InvalidReading(row, f"{values[row]!r} is not a {bits}-bit counter reading")
        return values.astype(np.uint64)
    if values.dtype.kind == "i":
        negative = values < 0
        if negative.any():
            row = int(np.argmax(negative))
            raise InvalidReading(row, f"{int(values[row])} is negative; counters count up from 0")
        values = values.astype(np.uint64)
    elif values.dtype.kind != "u":
        raise InvalidReading(-1, f"dtype {values.dtype} cannot hold counter readings")
    readings = values.astype(np.uint64, copy=False)
    if bits < 64:
        too_wide = readings >= np.uint64(1 << bits)
        if too_wide.any():
            row = int(np.argmax(too_wide))
            raise InvalidReading(row, f"{int(readings[row])} does not fit a {bits}-bit counter")
    return readings


def counter_deltas(
    kind: CounterKind, readings: np.ndarray, previous: np.ndarray, has_previous: np.ndarray
) -> np.ndarray:
    """Per-interval amounts (float64) from readings and the reading before each (both uint64).

    `has_previous[k]` False means row k is a port's first reading: its delta is NaN.

    >>> counter_deltas(CounterKind.CUMULATIVE_32, np.array([5], np.uint64),
    ...                np.array([2**32 - 5], np.uint64), np.array([True])).tolist()
    [10.0]
    """
    bits = _WIDTH_BITS[kind]
    # uint64 subtraction wraps modulo 2^64 without a warning; masking reduces it modulo 2^bits.
    difference = readings - previous
    if bits == 64:
        delta = np.where(readings >= previous, difference, readings)
    else:
        delta = difference & np.uint64((1 << bits) - 1)
    amounts = delta.astype(np.float64) * _OCTETS_PER_UNIT.get(kind, 1)
    amounts[~has_previous] = np.nan
    return amounts
