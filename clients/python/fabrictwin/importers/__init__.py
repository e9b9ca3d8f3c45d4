"""Importers of port counters from real sources, as columns ready for `TelemetryApi.ingest_columns`.

Each format has its own module: `perfquery` (infiniband-diags text, PortCounters and the extended
`-x` form), `prometheus` (the Prometheus text exposition of node_exporter's InfiniBand, netdev and
ethtool collectors and of snmp_exporter's if_mib module) and `csv_samples` (a CSV with a documented
header). They parse text only; they send counters as the equipment reports them, with the counter
kind that says how to read them (`ib_data_32`, `cumulative_64`, ...), and the telemetry service
turns those into per-interval amounts (wraps, resets, 4-octet units). The standard library, and
prometheus_client's parser for the exposition format: the SDK never needs numpy.

A parser returns `PortReading`s; `columns_of` groups them into `SampleColumns` (one per set of
metrics and kinds, so that every column has a value in every row). Readings may also carry a port's
link rate and operational state: `port_rates` and `port_states` collect them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from fabrictwin.errors import InvalidArgumentError

__all__ = [
    "FORMATS",
    "FormatError",
    "PortReading",
    "SampleColumns",
    "ScrapeColumns",
    "columns_of",
    "merge_columns",
    "port_rates",
    "port_states",
    "scrape_columns",
]

FORMATS = ("perfquery", "prometheus", "csv")

Number = int | float


class FormatError(InvalidArgumentError):
    """Text that is not what its format says, naming the line (`metrics.txt:12: ...`).

    The message is cut to MAX_DETAILS characters: it names where the text is wrong and quotes a little
    of it, never a whole 100 MB line."""

    MAX_DETAILS = 1_000

    def __init__(self, details: str, **kwargs: str) -> None:
        if len(details) > self.MAX_DETAILS:
            details = f"{details[: self.MAX_DETAILS]}... [{len(details) - self.MAX_DETAILS:,} characters cut]"
        super().__init__(details, **kwargs)


@dataclasses.dataclass(frozen=True)
class PortReading:
    """The counters of one port at one time: metric name -> (value, counter kind name).

    `values` may be empty for a port that reported only its state (it stays out of `columns_of`).
    """

    port: str
    time_ns: int
    values: Mapping[str, tuple[Number, str]]
    rate_bps: float = 0.0  # the port's link rate when the source reports it (0: unknown)
    oper_up: bool | None = None  # operational state when reported: True up, False down, None not reported


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


@dataclasses.dataclass(frozen=True)
class ScrapeColumns:
    """One scrape's readings as a mirror keeps them: its columns (`columns_of`), each port's last
    reported state as (time, up), and every port it named (with counters or only a state)."""

    chunks: list[SampleColumns]
    states: dict[str, tuple[int, bool]]
    ports: list[str]


def scrape_columns(readings: list[PortReading]) -> ScrapeColumns:
    """A scrape's readings as `ScrapeColumns` (the latest state of a port wins; at one time, the later
    reading).

    >>> scrape = scrape_columns([PortReading("a/p1", 5, {"tx_bytes": (10, "cumulative_64")}, oper_up=True),
    ...                          PortReading("a/p2", 5, {}, oper_up=False)])
    >>> scrape.states, scrape.ports, scrape.chunks[0].columns
    ({'a/p1': (5, True), 'a/p2': (5, False)}, ['a/p1', 'a/p2'], {'tx_bytes': [10]})
    """
    states: dict[str, tuple[int, bool]] = {}
    for reading in readings:
        held = states.get(reading.port)
        if reading.oper_up is not None and (held is None or reading.time_ns >= held[0]):
            states[reading.port] = (reading.time_ns, reading.oper_up)
    return ScrapeColumns(columns_of(readings), states, list({reading.port: None for reading in readings}))


def merge_columns(chunks: Iterable[SampleColumns]) -> list[SampleColumns]:
    """Columns of the same (metric, kind) signature joined into one, each port listed once and its
    rows in time order (as `columns_of` makes them from all the readings at once; where several
    chunks report a port with a link rate, the last chunk's is kept).

    >>> a = columns_of([PortReading("a/p1", 5, {"tx_bytes": (10, "cumulative_64")})])
    >>> b = columns_of([PortReading("b/p1", 5, {"tx_bytes": (20, "cumulative_64")})])
    >>> chunk, = merge_columns(a + b)
    >>> chunk.ports, chunk.port_index, chunk.columns
    (['a/p1', 'b/p1'], [0, 1], {'tx_bytes': [10, 20]})
    """
    merged: dict[tuple[tuple[str, str], ...], tuple[SampleColumns, dict[str, int], dict[str, float]]] = {}
    shared: set[tuple[tuple[str, str], ...]] = set()  # signatures with a port in several chunks
    for chunk in chunks:
        signature = tuple(sorted(chunk.counter_kinds.items()))
        if signature not in merged:
            empty = SampleColumns([], [], [], {m: [] for m, _ in signature}, dict(signature))
            merged[signature] = (empty, {}, {})
        into, index, rates = merged[signature]
        offset = len(index)
        ports = chunk.ports
        if index.keys().isdisjoint(ports) and len(set(ports)) == len(ports):  # a target's own ports
            index.update(zip(ports, range(offset, offset + len(ports)), strict=True))
            into.port_index += map(offset.__add__, chunk.port_index)
            if chunk.port_rates:  # (a zero is no rate: as absent)
                rates.update(zip(ports, chunk.port_rates, strict=False))
        else:
            shared.add(signature)
            local = [index.setdefault(port, len(index)) for port in chunk.ports]
            into.port_index += [local[i] for i in chunk.port_index]
            for port, rate in zip(chunk.ports, chunk.port_rates or (), strict=False):
                if rate:
                    rates[port] = rate
        into.time_ns += chunk.time_ns
        for metric, values in chunk.columns.items():
            into.columns[metric] += values
    joined = []
    for signature, (into, index, rates) in merged.items():
        into.ports = list(index)
        if any(rates.values()):
            into.port_rates = [rates.get(port, 0.0) for port in into.ports]
        if signature in shared:  # a port's rows from two chunks: put them in time order (stable)
            order = sorted(range(into.rows), key=into.time_ns.__getitem__)
            into.port_index = [into.port_index[i] for i in order]
            into.time_ns = [into.time_ns[i] for i in order]
            into.columns = {m: [values[i] for i in order] for m, values in into.columns.items()}
        joined.append(into)
    return joined


def port_states(readings: Iterable[PortReading]) -> dict[str, bool]:
    """Each port's operational state as last reported (True up, False down); ports without one are left out.

    >>> port_states([PortReading("a", 2, {}, oper_up=False), PortReading("a", 1, {}, oper_up=True),
    ...              PortReading("b", 1, {})])
    {'a': False}
    """
    latest: dict[str, tuple[int, bool]] = {}
    for reading in readings:
        if reading.oper_up is None:
            continue
        held = latest.get(reading.port)
        if held is None or reading.time_ns >= held[0]:  # a later reading, or the later line at one time
            latest[reading.port] = (reading.time_ns, reading.oper_up)
    return {port: up for port, (_, up) in latest.items()}


def port_rates(readings: Iterable[PortReading]) -> dict[str, float]:
    """Each port's link rate in bits/s as reported (the last one wins); ports without one are left out.

    >>> port_rates([PortReading("a", 1, {}, rate_bps=4e11), PortReading("b", 1, {})])
    {'a': 400000000000.0}
    """
    return {reading.port: reading.rate_bps for reading in readings if reading.rate_bps}
