"""`fabrictwin telemetry ...`: sources, CSV ingest, series queries and top links."""

from __future__ import annotations

import argparse
import csv
import sys
from collections.abc import Iterator
from typing import TextIO

from fabrictwin.cli_common import (
    InputError,
    choice,
    duration_arg,
    emit,
    emit_list,
    key_value_arg,
    leaf,
    subcommands,
    warn,
)
from fabrictwin.client import Client
from fabrictwin.errors import InvalidArgumentError
from fabrictwin.names import enum_choices, enum_value
from fabrictwin.tables import port_values_table, series_table, sources_table
from fabrictwin.telemetry import DEFAULT_BATCH_ROWS, sample_batches
from fabrictwin.v1 import telemetry_pb2

__all__ = ["csv_batches", "register"]

_METRICS = ", ".join(enum_choices(telemetry_pb2.Metric))
_KINDS = ", ".join(enum_choices(telemetry_pb2.CounterKind))

_INGEST_HELP = f"""\
Ingest a CSV file of port samples into a telemetry source.

The first line is a header: `time_ns,port,<metric>,<metric>,...` (columns in any order). Each
following line is one sample of one port: its time in integer nanoseconds, the port name
(`leaf-3/p17` or a link display name) and one number per metric column. Metric names are the
Metric enum names in lower case without the prefix:
  {_METRICS}
Values are per-interval amounts or gauges unless --counter-kind says a column is a cumulative
counter ({_KINDS}).

example file:
  time_ns,port,tx_bytes,utilisation
  0,leaf-0/p1,1250000,0.91
  0,leaf-0/p2,140000,0.10
"""


def _header(fieldnames: list[str] | None, path: str) -> list[str]:
    if not fieldnames:
        raise InputError(f"{path}: empty file (expected a header time_ns,port,<metric>...)")
    names = [n.strip() for n in fieldnames]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise InputError(f"{path}: header repeats {', '.join(repeated)}")
    missing = [n for n in ("time_ns", "port") if n not in names]
    if missing:
        raise InputError(f"{path}: header lacks {', '.join(missing)} (expected time_ns,port,<metric>...)")
    metrics = [n for n in names if n not in ("time_ns", "port")]
    if not metrics:
        raise InputError(f"{path}: header has no metric column (e.g. tx_bytes, utilisation)")
    for name in metrics:
        try:
            enum_value(telemetry_pb2.Metric, name, "header")
        except InvalidArgumentError:
            raise InputError(
                f"{path}: header column {name!r} is not a metric; metrics are: {_METRICS}"
            ) from None
    return metrics


def _number(text: str, where: str) -> float:
    """An integer kept exact (64-bit cumulative counters exceed float precision), else a float."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        raise InputError(f"{where} {text!r} is not a number") from None


def csv_batches(
    stream: TextIO, path: str, source: str, counter_kinds: dict[str, str], batch_rows: int
) -> Iterator[telemetry_pb2.SampleBatch]:
    """SampleBatches of at most `batch_rows` rows read lazily from CSV text; InputError names the line."""
    reader = csv.reader(stream)
    try:
        fieldnames = next(reader)
    except StopIteration:
        fieldnames = None
    metrics = _header(fieldnames, path)
    names = [n.strip() for n in fieldnames or []]
    time_col, port_col = names.index("time_ns"), names.index("port")
    metric_cols = [(m, names.index(m)) for m in metrics]
    ports: dict[str, int] = {}
    port_index: list[int] = []
    times: list[int] = []
    columns: dict[str, list[float]] = {m: [] for m in metrics}  # ints stay ints

    def flush() -> Iterator[telemetry_pb2.SampleBatch]:
        yield from sample_batches(
            source,
            list(ports),
            port_index,
            times,
            columns,
            counter_kinds=counter_kinds,
            batch_rows=batch_rows,
        )

    for row in reader:
        line = reader.line_num
        if not row or all(not cell.strip() for cell in row):
            continue
        if len(row) != len(names):
            raise InputError(f"{path}:{line}: {len(row)} fields, the header has {len(names)}")
        port = row[port_col].strip()
        if not port:
            raise InputError(f"{path}:{line}: empty port")
        try:
            times.append(int(row[time_col]))
        except ValueError:
            raise InputError(f"{path}:{line}: time_ns {row[time_col]!r} is not an integer") from None
        for metric, col in metric_cols:
            columns[metric].append(_number(row[col], f"{path}:{line}: {metric}"))
        port_index.append(ports.setdefault(port, len(ports)))
        if len(times) == batch_rows:
            yield from flush()
            ports, port_index, times = {}, [], []
            columns = {m: [] for m in metrics}
    if times:
        yield from flush()


def _ingest_csv(client: Client, args: argparse.Namespace) -> int:
    kinds = dict(args.counter_kind)
    for metric, kind in kinds.items():
        try:
            enum_value(telemetry_pb2.Metric, metric, "--counter-kind")
            enum_value(telemetry_pb2.CounterKind, kind, "--counter-kind")
        except InvalidArgumentError as exc:
            raise InputError(str(exc.details)) from None
    if args.batch_rows <= 0:
        raise InputError("--batch-rows must be positive")
    if args.file == "-":
        response = client.telemetry.ingest(
            csv_batches(sys.stdin, "<stdin>", args.source, kinds, args.batch_rows)
        )
    else:
        try:
            stream = open(args.file, newline="", encoding="utf-8")  # noqa: SIM115 - closed below
        except OSError as exc:
            raise InputError(f"cannot read {args.file}: {exc.strerror}") from None
        with stream:
            response = client.telemetry.ingest(
                csv_batches(stream, args.file, args.source, kinds, args.batch_rows)
            )

    def human(r: telemetry_pb2.IngestSamplesResponse) -> str:
        counts = f"{r.duplicates} duplicates, {r.rejected} rejected"
        return f"stored {r.stored} rows, {counts}, in {r.batches} batches"

    emit(args, response, human)
    for reason in response.reasons:
        where = f"batch {reason.batch}" + (f" row {reason.row}" if reason.row >= 0 else "")
        warn(f"rejected ({where}): {reason.reason}")
    return 1 if response.rejected else 0


def _sources(client: Client, args: argparse.Namespace) -> int:
    emit_list(args, client.telemetry.list_sources(), sources_table)
    return 0


def _create_source(client: Client, args: argparse.Namespace) -> int:
    source = client.telemetry.create_source(
        args.id,
        kind=args.kind,
        display_name=args.display_name,
        fabric=args.fabric,
        retention_ns=args.retention,
    )
    emit(args, source, lambda s: sources_table([s]))
    return 0


def _delete_source(client: Client, args: argparse.Namespace) -> int:
    client.telemetry.delete_source(args.name)
    emit(args, telemetry_pb2.DeleteSourceResponse(), lambda _: f"deleted {args.name}")
    return 0


def _query(client: Client, args: argparse.Namespace) -> int:
    series = client.telemetry.query_series(
        args.source,
        args.metric,
        ports=args.port,
        start_ns=args.start,
        end_ns=args.end,
        aggregation=args.aggregation,
        step_ns=args.step,
    )
    emit_list(args, series, series_table)
    return 0


def _top(client: Client, args: argparse.Namespace) -> int:
    top = client.telemetry.top_links(
        args.source,
        args.metric,
        ports=args.port,
        start_ns=args.start,
        end_ns=args.end,
        aggregation=args.aggregation,
        limit=args.limit,
    )
    emit_list(args, top, port_values_table)
    return 0


def _window_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", help="telemetry source (ID or sources/ID)")
    parser.add_argument("--metric", **choice(telemetry_pb2.Metric), required=True, help="metric")
    parser.add_argument(
        "--port", action="append", default=[], help="port name or glob (spine-*/p*); repeat; default all"
    )
    parser.add_argument(
        "--start", type=duration_arg, default=0, help="window start, ns or 10ms/2s (default 0)"
    )
    parser.add_argument("--end", type=duration_arg, default=0, help="window end, exclusive (default: newest)")
    parser.add_argument(
        "--aggregation", **choice(telemetry_pb2.Aggregation), default=None, help="default avg"
    )


def register(root: argparse._SubParsersAction) -> None:
    """Add `telemetry` and its subcommands to the root parser's subcommands."""
    telemetry = root.add_parser("telemetry", help="telemetry sources, ingest and queries (telemetry service)")
    telemetry.description = "Per-port time series of live clusters and simulated runs."
    group = subcommands(telemetry, "telemetry")
    leaf(group, "sources", _sources, "list telemetry sources")
    p = leaf(group, "create-source", _create_source, "create a telemetry source")
    p.add_argument("id", help="source id (sources/ID)")
    p.add_argument("--kind", **choice(telemetry_pb2.SourceKind), default="live", help="live or simulated")
    p.add_argument("--fabric", default="", help="fabric its ports belong to")
    p.add_argument("--display-name", default="", help="human-readable name")
    p.add_argument(
        "--retention", type=duration_arg, default=0, help="delete samples older than this (0: keep)"
    )
    leaf(group, "delete-source", _delete_source, "delete a source and all its samples").add_argument(
        "name", help="source"
    )
    p = leaf(group, "query", _query, "time series of a metric per port, optionally bucketed by --step")
    _window_options(p)
    p.add_argument("--step", type=duration_arg, default=0, help="bucket width (default 0: raw samples)")
    p = leaf(group, "top", _top, "the ports with the highest value of a metric over a window")
    _window_options(p)
    p.add_argument("--limit", type=int, default=0, help="how many ports (default 10)")
    p = leaf(group, "ingest-csv", _ingest_csv, "ingest a CSV file of port samples", _INGEST_HELP)
    p.add_argument("source", help="telemetry source (ID or sources/ID); create it first with create-source")
    p.add_argument("file", metavar="FILE", help="CSV file ('-' reads stdin)")
    p.add_argument(
        "--counter-kind",
        type=key_value_arg,
        action="append",
        default=[],
        metavar="METRIC=KIND",
        help="how a column's values are read, e.g. tx_bytes=cumulative_64 (default delta)",
    )
    p.add_argument(
        "--batch-rows",
        type=int,
        default=DEFAULT_BATCH_ROWS,
        help=f"rows per batch (default {DEFAULT_BATCH_ROWS})",
    )
