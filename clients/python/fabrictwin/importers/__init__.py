"""Importers of port counters from real sources, as columns ready for `TelemetryApi.ingest_columns`.

Each format has its own module: `perfquery` (infiniband-diags text, PortCounters and the extended
`-x` form), `prometheus` (node_exporter's InfiniBand collector) and `csv_samples` (a CSV with a
documented header). They parse text only; they send counters as the equipment reports them, with
the counter kind that says how to read them (`ib_data_32`, `cumulative_64`, ...), and the telemetry
service turns those into per-interval amounts (wraps, resets, 4-octet units). Standard library
only: the SDK never needs numpy.

A parser returns `PortReading`s; `columns_of` groups them into `SampleColumns` (one per set of
metrics and kinds, so that every column has a value in every row).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from fabrictwin.errors import InvalidArgumentError

__all__ = ["FORMATS", "FormatError", "PortReading", "SampleColumns", "columns_of"]

FORMATS = ("perfquery", "prometheus", "csv")

Number = int | float


class FormatError(InvalidArgumentError):
    """Text that is not what its format says, naming the line (`metrics.txt:12: ...`)."""


@dataclasses.dataclass(frozen=True)
class PortReading:
    """The counters of one port at one time: metric name -> (value, counter kind name)."""

    port: str
    time_ns: int
    values: Mapping[str, tuple[Number, str]]
    rate_bps: float = 0.0  # the port's link rate when the source reports it (0: unknown)


@dataclasses.dataclass
class SampleColumns:
    """Row-aligned columns: row i is (ports[port_index[i]], time_ns[i], columns[m][i] for every m)."""

    ports: list[str]
    port_index: list[int]
    time_ns: list[int]
    columns: dict[str, list[Number]]
    counter_kinds: dict[str, str]
    port_rates: list[float] | None = None  # bits/s per port of `ports` (0: unknown), if reported

    @property
    def rows(self) -> int:
        """Rows in these columns."""
        return len(self.time_ns)


def columns_of(readings: Iterable[PortReading]) -> list[SampleColumns]:
    """Readings grouped by their (metric, kind) signature into columns, each port's rows in time order.

    >>> chunk, = columns_of([PortReading("a/p1", 5, {"tx_bytes": (10, "cumulative_64")})])
    >>> chunk.ports, chunk.columns, chunk.counter_kinds
    (['a/p1'], {'tx_bytes': [10]}, {'tx_bytes': 'cumulative_64'})
    """
    groups: dict[tuple[tuple[str, str], ...], list[PortReading]] = {}
    for reading in readings:
        signature = tuple(sorted((metric, kind) for metric, (_, kind) in reading.values.items()))
        if signature:
            groups.setdefault(signature, []).append(reading)
    chunks = []
    for signature, members in groups.items():
        members.sort(key=lambda r: r.time_ns)  # stable: a port's rows stay in time order
        ports: dict[str, int] = {}
        rates: dict[str, float] = {}
        chunk = SampleColumns([], [], [], {m: [] for m, _ in signature}, dict(signature))
        for reading in members:
            chunk.port_index.append(ports.setdefault(reading.port, len(ports)))
            chunk.time_ns.append(reading.time_ns)
            for metric, (value, _) in reading.values.items():
                chunk.columns[metric].append(value)
            if reading.rate_bps:
                rates[reading.port] = reading.rate_bps
        chunk.ports = list(ports)
        if rates:
            chunk.port_rates = [rates.get(port, 0.0) for port in chunk.ports]
        chunks.append(chunk)
    return chunks
