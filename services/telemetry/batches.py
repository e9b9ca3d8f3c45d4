"""Validation of one columnar sample batch, in numpy, before any SQL runs.

`prepare_batch` checks every field of a batch, refuses a port whose samples go back in time, drops
repeated (port, time) rows (the first one sent wins) and orders the rows by port, then time: the
order of the primary key, which keeps the index inserts of one port on neighbouring B-tree pages.
Anything wrong raises BatchRejected naming the field as in fabrictwin.v1.SampleBatch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from services.telemetry.counters import CounterKind, InvalidReading, counter_readings
from services.telemetry.schema import METRIC_COLUMNS

__all__ = ["BatchRejected", "PreparedBatch", "Rejection", "batch_rows", "prepare_batch"]

_KNOWN_COLUMNS = frozenset(METRIC_COLUMNS.values())
_MAX_INT64 = np.iinfo(np.int64).max


@dataclasses.dataclass(frozen=True)
class Rejection:
    """Why a batch was rejected: the field at fault, what was wrong, and the first offending row."""

    field: str  # as in fabrictwin.v1.SampleBatch: `time_ns`, `columns[2].values`, `source`
    problem: str
    row: int = -1  # the first offending row of the batch as sent, or -1 for the batch as a whole

    @property
    def reason(self) -> str:
        """`field: problem`."""
        return f"{self.field}: {self.problem}"


class BatchRejected(Exception):
    """A batch that is stored not at all."""

    def __init__(self, field: str, problem: str, row: int = -1) -> None:
        super().__init__(f"{field}: {problem}")
        self.rejection = Rejection(field, problem, row)


@dataclasses.dataclass(frozen=True)
class PreparedBatch:
    """A validated batch whose rows are unique per (port, time) and sorted by port, then time."""

    port_names: list[str]  # the ports the rows use; `port` indexes this list
    port: np.ndarray  # int64 per row
    time_ns: np.ndarray  # int64 per row
    values: dict[str, np.ndarray]  # per column: float64 amounts, or uint64 readings if cumulative
    kinds: dict[str, CounterKind]
    batch_row: np.ndarray  # int64 per row: its row number in the batch as sent (for reasons)
    rows: int  # rows as sent
    duplicates: int  # rows dropped because an earlier row of the batch had the same port and time
    port_rate_bps: np.ndarray | None = None  # float64 per port of `port_names`, 0 unknown; None: not sent

    @property
    def cumulative(self) -> bool:
        """True if a column holds cumulative readings (converted against each port's last reading)."""
        return any(kind.is_cumulative for kind in self.kinds.values())

    def column_field(self, name: str) -> str:
        """The batch field of a column: `columns[2]`."""
        return f"columns[{list(self.values).index(name)}]"


def batch_rows(time_ns: np.ndarray) -> int:
    """Rows in a batch as sent (the length of its time column), for counting a rejected batch."""
    return int(time_ns.shape[0]) if time_ns.ndim >= 1 else 0


def _integers(values: np.ndarray, field: str, rows: int | None) -> np.ndarray:
    if values.ndim != 1:
        raise BatchRejected(field, f"must be one-dimensional, got shape {list(values.shape)}")
    if values.dtype.kind not in "iu":
        raise BatchRejected(field, f"dtype {values.dtype.str} is not an integer type")
    if rows is not None and values.shape[0] != rows:
        raise BatchRejected(field, f"{values.shape[0]} values, expected {rows} (one per row of time_ns)")
    if values.dtype == np.uint64 and values.size and values.max() > _MAX_INT64:
        row = int(np.argmax(values > _MAX_INT64))
        raise BatchRejected(field, f"{int(values[row])} does not fit a signed 64-bit integer", row)
    return values.astype(np.int64, copy=False)


def _check_ports(names: Sequence[str]) -> None:
    seen: dict[str, int] = {}
    for i, name in enumerate(names):
        if not name:
            raise BatchRejected(f"ports[{i}]", "a port name must not be empty")
        if name.startswith("group:"):
            raise BatchRejected(f"ports[{i}]", f"{name!r}: names starting with 'group:' select port groups")
        if name in seen:
            raise BatchRejected(f"ports[{i}]", f"{name!r} is listed twice (also ports[{seen[name]}])")
        seen[name] = i


def _column_values(values: np.ndarray, kind: CounterKind, field: str, rows: int) -> np.ndarray:
    if values.ndim != 1 or values.shape[0] != rows:
        raise BatchRejected(f"{field}.values", f"{values.size} values, expected {rows} (one per row)")
    if kind.is_cumulative:
        try:
            return counter_readings(values, kind)
        except InvalidReading as exc:
            raise BatchRejected(f"{field}.values", f"{exc} ({kind.name} counter)", exc.row) from None
    if values.dtype.kind not in "iuf":
        raise BatchRejected(f"{field}.values", f"dtype {values.dtype.str} is not numeric")
    amounts = values.astype(np.float64, copy=False)
    finite = np.isfinite(amounts)
    if not finite.all():
        row = int(np.argmin(finite))
        raise BatchRejected(f"{field}.values", f"{amounts[row]} is not a finite value", row)
    # Every metric counts or measures something: bytes, packets, errors, ns paused, a 0..1 share.
    negative = amounts < 0
    if negative.any():
        row = int(np.argmax(negative))
        raise BatchRejected(f"{field}.values", f"{amounts[row]} is negative; metrics are >= 0", row)
    return amounts


def _time_order(port: np.ndarray, time: np.ndarray, port_names: Sequence[str]) -> np.ndarray:
    """Row order by port, keeping each port's rows as sent; refuses a port whose time goes back."""
    order = np.argsort(port, kind="stable")
    sorted_port, sorted_time = port[order], time[order]
    back = (sorted_port[1:] == sorted_port[:-1]) & (sorted_time[1:] < sorted_time[:-1])
    if back.any():
        at = int(np.argmax(back)) + 1
        row, earlier = int(order[at]), int(order[at - 1])
        raise BatchRejected(
            "time_ns",
            f"{int(time[row])} ns is before {int(time[earlier])} ns of row {earlier}: the samples of port "
            f"{port_names[int(port[row])]!r} must be sent in time order",
            row,
        )
    return order


def _port_rates(rates: np.ndarray | None, ports: int) -> np.ndarray | None:
    if rates is None or rates.size == 0:
        return None
    if rates.ndim != 1 or rates.shape[0] != ports or rates.dtype.kind not in "iuf":
        raise BatchRejected("port_rate_bps", f"needs one number per port ({ports}), got {list(rates.shape)}")
    rates = rates.astype(np.float64, copy=False)
    bad = ~np.isfinite(rates) | (rates < 0)
    if bad.any():
        raise BatchRejected("port_rate_bps", f"{rates[int(np.argmax(bad))]} is not a rate >= 0 (bits/s)")
    return rates


def prepare_batch(
    port_names: Sequence[str],
    port_index: np.ndarray,
    time_ns: np.ndarray,
    columns: Mapping[str, np.ndarray],
    counter_kinds: Mapping[str, CounterKind] | None = None,
    port_rate_bps: np.ndarray | None = None,
) -> PreparedBatch:
    """Validate a columnar batch; row i is (port_names[port_index[i]], time_ns[i], columns[*][i]).

    Field names in a BatchRejected are those of fabrictwin.v1.SampleBatch, with a column named by
    its position in `columns` (`columns[2].values`). Within a port, rows must be in time order;
    rows of different ports may interleave freely.
    """
    time = _integers(time_ns, "time_ns", None)
    rows = time.shape[0]
    negative = time < 0
    if negative.any():
        row = int(np.argmax(negative))
        raise BatchRejected("time_ns", f"{int(time[row])} is negative; times are ns >= 0", row)
    port = _integers(port_index, "port_index", rows)
    _check_ports(port_names)
    outside = (port < 0) | (port >= len(port_names))
    if outside.any():
        row = int(np.argmax(outside))
        raise BatchRejected(
            "port_index", f"{int(port[row])} is not an index into the {len(port_names)} ports", row
        )
    rates = _port_rates(port_rate_bps, len(port_names))
    if not columns:
        raise BatchRejected("columns", "a batch needs at least one metric column")
    kinds = {name: CounterKind((counter_kinds or {}).get(name, CounterKind.DELTA)) for name in columns}
    values: dict[str, np.ndarray] = {}
    for i, (name, column) in enumerate(columns.items()):
        if name not in _KNOWN_COLUMNS:
            raise BatchRejected(f"columns[{i}]", f"{name!r} is not a metric column")
        values[name] = _column_values(np.asarray(column), kinds[name], f"columns[{i}]", rows)

    order = _time_order(port, time, port_names)
    sorted_port, sorted_time = port[order], time[order]
    repeat = np.zeros(rows, dtype=bool)
    repeat[1:] = (sorted_port[1:] == sorted_port[:-1]) & (sorted_time[1:] == sorted_time[:-1])
    keep = order[~repeat]
    used, local_port = np.unique(port[keep], return_inverse=True)
    return PreparedBatch(
        port_names=[port_names[i] for i in used.tolist()],
        port=local_port.astype(np.int64),
        time_ns=time[keep],
        values={name: column[keep] for name, column in values.items()},
        kinds=kinds,
        batch_row=keep.astype(np.int64),
        rows=rows,
        duplicates=int(repeat.sum()),
        port_rate_bps=rates[used] if rates is not None else None,
    )
