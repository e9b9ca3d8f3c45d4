"""Port samples in CSV, with a documented header (see HEADER_HELP).

The first line names the columns, in any order: `time_ns`, `port`, an optional `source`, and one
column per metric, named as the Metric enum in lower case without its prefix (`tx_bytes`,
`utilisation`). A metric may carry its counter kind after a colon (`tx_bytes:ib_data_32`); without
one, values are per-interval amounts or gauges (`delta`). Each further line is one sample of one
port. Integers stay exact (64-bit cumulative counters exceed a float's 53 bits).

`CsvSamples` reads the text in pieces (a growing file is fed as it grows) and keeps the header.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping

from fabrictwin.errors import InvalidArgumentError
from fabrictwin.importers import FormatError, SampleColumns
from fabrictwin.names import enum_choices, enum_value
from fabrictwin.v1 import telemetry_pb2

__all__ = ["HEADER_HELP", "CsvSamples"]

_METRICS = ", ".join(enum_choices(telemetry_pb2.Metric))
_KINDS = ", ".join(enum_choices(telemetry_pb2.CounterKind))

HEADER_HELP = f"""\
The first line is a header: `time_ns,port,<metric>,<metric>,...` (columns in any order; an optional
`source` column must name the source being ingested on every line). Each following line is one
sample of one port: its time in integer nanoseconds, the port name (`leaf-3/p17`, `leaf-3->spine-1`)
and one number per metric column. Metric names are the Metric enum names in lower case without the
prefix:
  {_METRICS}
Values are per-interval amounts or gauges unless the header gives a column's counter kind after a
colon (`tx_bytes:ib_data_32`) or --counter-kind does; kinds: {_KINDS}.

example file:
  time_ns,port,tx_bytes,utilisation
  0,leaf-0/p1,1250000,0.91
  0,leaf-0/p2,140000,0.10
"""


def _number(text: str, where: str) -> int | float:
    """An integer kept exact, else a float."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        raise FormatError(f"{where} {text!r} is not a number") from None


class CsvSamples:
    """Parses CSV sample text into columns, piece by piece; FormatError names the file and line."""

    def __init__(self, where: str, source: str, counter_kinds: Mapping[str, str] | None = None) -> None:
        self._where = where
        self._source = source.removeprefix("sources/")
        self._overrides = dict(counter_kinds or {})
        self._names: list[str] | None = None
        self._metrics: list[tuple[str, int]] = []
        self._kinds: dict[str, str] = {}
        self._line = 0

    def _header(self, names: list[str]) -> None:
        names = [n.strip() for n in names]
        plain = [n.split(":", 1)[0].strip() for n in names]
        repeated = sorted({n for n in plain if plain.count(n) > 1})
        if repeated:
            raise FormatError(f"{self._where}: header repeats {', '.join(repeated)}")
        missing = [n for n in ("time_ns", "port") if n not in plain]
        if missing:
            raise FormatError(
                f"{self._where}: header lacks {', '.join(missing)} (expected time_ns,port,<metric>...)"
            )
        for column, (name, full) in enumerate(zip(plain, names, strict=True)):
            if name in ("time_ns", "port", "source"):
                continue
            try:
                enum_value(telemetry_pb2.Metric, name, "header")
            except InvalidArgumentError:
                raise FormatError(
                    f"{self._where}: header column {name!r} is not a metric; metrics are: {_METRICS}"
                ) from None
            kind = full.split(":", 1)[1].strip() if ":" in full else "delta"
            kind = self._overrides.get(name, kind)
            try:
                enum_value(telemetry_pb2.CounterKind, kind, "header")
            except InvalidArgumentError:
                raise FormatError(
                    f"{self._where}: column {name!r}: {kind!r} is not a counter kind ({_KINDS})"
                ) from None
            self._metrics.append((name, column))
            self._kinds[name] = kind
        if not self._metrics:
            raise FormatError(f"{self._where}: header has no metric column (e.g. tx_bytes, utilisation)")
        self._names = plain

    def parse(self, text: str) -> SampleColumns | None:
        """Columns of the complete lines in `text` (the header first time), None if there are none."""
        rows = csv.reader(text.splitlines())
        chunk = SampleColumns([], [], [], {name: [] for name, _ in self._metrics}, dict(self._kinds))
        ports: dict[str, int] = {}
        for row in rows:
            self._line += 1
            if not row or all(not cell.strip() for cell in row):
                continue
            if self._names is None:
                self._header(row)
                chunk = SampleColumns([], [], [], {name: [] for name, _ in self._metrics}, dict(self._kinds))
                continue
            where = f"{self._where}:{self._line}"
            if len(row) != len(self._names):
                raise FormatError(f"{where}: {len(row)} fields, the header has {len(self._names)}")
            fields = dict(zip(self._names, row, strict=True))
            if "source" in fields and fields["source"].strip().removeprefix("sources/") != self._source:
                raise FormatError(
                    f"{where}: source {fields['source'].strip()!r} is not sources/{self._source}: "
                    "a file mixes sources; ingest each source's lines into it"
                )
            port = fields["port"].strip()
            if not port:
                raise FormatError(f"{where}: empty port")
            try:
                time_ns = int(fields["time_ns"])
            except ValueError:
                raise FormatError(f"{where}: time_ns {fields['time_ns']!r} is not an integer") from None
            for name, column in self._metrics:
                chunk.columns[name].append(_number(row[column], f"{where}: {name}"))
            chunk.time_ns.append(time_ns)
            chunk.port_index.append(ports.setdefault(port, len(ports)))
        if self._names is None and self._line:
            return None
        if self._names is None:
            raise FormatError(f"{self._where}: empty file (expected a header time_ns,port,<metric>...)")
        chunk.ports = list(ports)
        return chunk if chunk.rows else None
