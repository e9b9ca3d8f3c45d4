"""`fabrictwin telemetry ingest-csv|import|mirror`: counters from files, commands and URLs.

- `ingest-csv SOURCE FILE`: a CSV of port samples (header documented in its --help);
- `import --format F --source S FILE`: one perfquery, Prometheus or CSV text;
- `mirror --format F --source S (--command CMD | --url URL | --file PATH)`: a live cluster, poll by
  poll (`--interval`), until Ctrl-C or `--count` polls or `--duration`.

A text that is not what its format says is a usage error (exit 2) naming the file and line.

Prometheus ports are named as `fabrictwin mirror` names them (`fabrictwin.port_names`): with `--node`
and no `--port-name`, through the interface names the source's fabric keeps from LLDP (`leaf0`'s `swp3` is
`leaf0/p3` when a link of the fabric says so; interfaces it does not name are no fabric port and are
left out); `--port-name` names every port, Ethernet and SNMP ones too.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any, BinaryIO, TextIO

from fabrictwin.cli_common import (
    InputError,
    duration_arg,
    emit,
    key_value_arg,
    leaf,
    not_utf8,
    print_json,
    read_text,
    warn,
)
from fabrictwin.client import Client
from fabrictwin.errors import InvalidArgumentError
from fabrictwin.importers import FORMATS, FormatError
from fabrictwin.importers.csv_samples import HEADER_HELP, CsvSamples
from fabrictwin.mirror import MirrorReport, Poll, follow_file, poll_command, poll_url, text_parser
from fabrictwin.names import enum_value, resource_name
from fabrictwin.port_names import PortNames, prometheus_parser, source_fabric_links
from fabrictwin.telemetry import DEFAULT_BATCH_ROWS, column_batches
from fabrictwin.v1 import telemetry_pb2

__all__ = ["csv_batches", "register"]

_INGEST_HELP = "Ingest a CSV file of port samples into a telemetry source.\n\n" + HEADER_HELP
_NAMING_HELP = """\
Port names: perfquery blocks become `{node}/p{port}`, the node being --lid LID=NAME, else --node,
else `lid-<LID>`. Prometheus samples with --node are named as `fabrictwin mirror` names them: through
the interface names the source's fabric keeps from LLDP (`swp3` is `leaf0/p3` where a link says so;
interfaces the fabric does not name, `lo` or a management port, are left out and listed); where the
source has no fabric, or its fabric names no interface of that node, InfiniBand ports become
`{node}/{device}/p{port}` and Ethernet and SNMP ones `{node}/{device}` (without --node: `{device}/p{port}`
and `{device}`). --port-name sets the template for every port instead ({node}, {lid}, {device},
{port}); for an Ethernet or SNMP interface {port} is the number its name ends in (`swp51` is 51; one
without a number in 1..65535, `lo` or `eth0`, is left out), e.g. `{node}/p{port}` to match a fabric
numbered so (and its groups: group:uplinks, ...). Two interfaces given one name are refused."""
_LINES_PER_CHUNK = 50_000


def csv_batches(
    stream: TextIO | BinaryIO, path: str, source: str, counter_kinds: dict[str, str], batch_rows: int
) -> Iterator[telemetry_pb2.SampleBatch]:
    """SampleBatches of at most `batch_rows` rows read lazily from CSV text; InputError names the line."""
    reader = CsvSamples(path, source, counter_kinds)
    name = resource_name("sources", source)
    lines: list[str] = []
    try:
        for line in _decoded(stream, path):
            lines.append(line)
            if len(lines) == _LINES_PER_CHUNK:
                chunk = reader.parse("".join(lines))
                lines = []
                if chunk is not None:
                    yield from column_batches(name, chunk, batch_rows)
        chunk = reader.parse("".join(lines))
    except FormatError as exc:
        raise InputError(exc.details) from None
    if chunk is not None:
        yield from column_batches(name, chunk, batch_rows)


def _decoded(stream: TextIO | BinaryIO, path: str) -> Iterator[str]:
    """The lines of `stream` as text; InputError naming `path` and the line when they are not UTF-8.

    A binary stream is decoded line by line, so the error names the very line; a text stream's
    decoder reads ahead, so its error can only say after which line it happened.
    """
    number = 0
    lines: Iterable[str | bytes] = stream
    try:
        for number, line in enumerate(lines, start=1):
            if isinstance(line, bytes):
                try:
                    line = line.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise not_utf8(path, exc, f"on line {number}, column {exc.start + 1}") from None
            yield line
    except UnicodeDecodeError as exc:
        raise not_utf8(path, exc, f"after line {number}") from None


def _kinds(pairs: list[tuple[str, str]]) -> dict[str, str]:
    kinds = dict(pairs)
    for metric, kind in kinds.items():
        try:
            enum_value(telemetry_pb2.Metric, metric, "--counter-kind")
            enum_value(telemetry_pb2.CounterKind, kind, "--counter-kind")
        except InvalidArgumentError as exc:
            raise InputError(str(exc.details)) from None
    return kinds


def _report(args: argparse.Namespace, response: telemetry_pb2.IngestSamplesResponse) -> int:
    def human(r: telemetry_pb2.IngestSamplesResponse) -> str:
        counts = f"{r.duplicates} duplicates, {r.rejected} rejected"
        return f"stored {r.stored} rows, {counts}, in {r.batches} batches"

    emit(args, response, human)
    for reason in response.reasons:
        where = f"batch {reason.batch}" + (f" row {reason.row}" if reason.row >= 0 else "")
        warn(f"rejected ({where}): {reason.reason}")
    return 1 if response.rejected else 0


def _ingest_csv(client: Client, args: argparse.Namespace) -> int:
    kinds = _kinds(args.counter_kind)
    if args.batch_rows <= 0:
        raise InputError("--batch-rows must be positive")
    if args.file == "-":
        stdin = getattr(sys.stdin, "buffer", sys.stdin)  # bytes: a line that is not UTF-8 is named
        response = client.telemetry.ingest(csv_batches(stdin, "<stdin>", args.source, kinds, args.batch_rows))
        return _report(args, response)
    try:
        stream = open(args.file, "rb")  # noqa: SIM115 - closed below; decoded line by line
    except OSError as exc:
        raise InputError(f"cannot read {args.file}: {exc.strerror}") from None
    with stream:
        response = client.telemetry.ingest(
            csv_batches(stream, args.file, args.source, kinds, args.batch_rows)
        )
    return _report(args, response)


def _naming(args: argparse.Namespace, where: str) -> dict[str, Any]:
    try:
        lids = {int(lid): name for lid, name in args.lid}
    except ValueError:
        raise InputError("--lid takes LID=NAME with an integer LID") from None
    return {
        "where": where,
        "node": args.node,
        "nodes": lids,
        "port_name": args.port_name,
        "counter_kinds": _kinds(args.counter_kind),
        "link_gbps": args.link_gbps,
    }


def _fabric_of(client: Client, args: argparse.Namespace) -> tuple[str, list[Any]]:
    """The source's fabric and links when ports are named through them (--node, no --port-name)."""
    return source_fabric_links(client, args.source) if args.node and not args.port_name else ("", [])


def _import(client: Client, args: argparse.Namespace) -> int:
    if args.format == "csv":  # CSV carries its own times, and is read in pieces
        args.batch_rows = DEFAULT_BATCH_ROWS
        return _ingest_csv(client, args)
    text = read_text(args.file)
    if args.format == "prometheus":
        parse, names = prometheus_parser(args.node, args.port_name, args.file, *_fabric_of(client, args))
        try:
            chunks = parse(text, args.time or time.time_ns())
        except FormatError as exc:
            raise InputError(exc.details) from None
        for note in names.notes:
            warn(note)
        name = resource_name("sources", args.source)
        return _report(args, client.telemetry.ingest(b for c in chunks for b in column_batches(name, c)))
    try:
        response = client.telemetry.import_text(
            args.source, text, args.format, time_ns=args.time or None, **_naming(args, args.file)
        )
    except FormatError as exc:
        raise InputError(exc.details) from None
    return _report(args, response)


def _mirror(client: Client, args: argparse.Namespace) -> int:
    sources = [s for s in (args.command, args.url, args.file) if s]
    if len(sources) != 1:
        raise InputError("give exactly one of --command, --url and --file")
    until = time.monotonic() + args.duration / 1e9 if args.duration else None
    interval = args.interval / 1e9
    if interval <= 0:
        raise InputError("--interval must be positive")
    where = args.file or args.url or args.command
    names: PortNames | None = None
    if args.format == "prometheus":
        parse, names = prometheus_parser(args.node, args.port_name, where, *_fabric_of(client, args))
    else:
        parse = text_parser(args.format, args.source, **_naming(args, where))
    if args.command:
        polls = poll_command(args.command, parse, interval, until=until)
    elif args.url:
        polls = poll_url(args.url, parse, interval, until=until)
    else:
        polls = follow_file(args.file, parse, until=until)

    def progress(poll: Poll, reply: telemetry_pb2.IngestSamplesResponse | None) -> None:
        while names is not None and names.notes:
            warn(names.notes.pop(0))
        if poll.error:
            warn(f"poll at {poll.time_ns} failed: {poll.error}")
        elif reply is not None:
            counts = f"{reply.duplicates} duplicates, {reply.rejected} rejected"
            warn(f"poll at {poll.time_ns}: stored {reply.stored}, {counts}")
            for reason in reply.reasons:
                warn(f"  rejected: {reason.reason}")

    report = MirrorReport()
    try:
        report = client.telemetry.mirror(args.source, polls, count=args.count or None, on_poll=progress)
    except KeyboardInterrupt:
        warn("stopped")
    if args.json:
        print_json(dataclasses.asdict(report))
    else:
        print(
            f"{report.polls} polls ({report.failed_polls} failed): stored {report.stored} rows, "
            f"{report.duplicates} duplicates, {report.rejected} rejected"
        )
    return 1 if report.rejected or report.failed_polls else 0


def _format_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", choices=FORMATS, required=True, help="text format")
    parser.add_argument("--source", required=True, help="telemetry source (ID or sources/ID)")
    parser.add_argument("--node", default="", help="node the counters belong to (perfquery, prometheus)")
    parser.add_argument(
        "--lid",
        type=key_value_arg,
        action="append",
        default=[],
        metavar="LID=NAME",
        help="perfquery LID -> node",
    )
    parser.add_argument(
        "--port-name", default="", help="port name template ({node}, {lid}, {device}, {port})"
    )
    parser.add_argument(
        "--link-gbps", type=float, default=0.0, help="perfquery: the ports' link rate, to derive utilisation"
    )
    parser.add_argument(
        "--counter-kind",
        type=key_value_arg,
        action="append",
        default=[],
        metavar="METRIC=KIND",
        help="csv: how a column's values are read, e.g. tx_bytes=cumulative_64 (default delta)",
    )


def register(group: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `ingest-csv`, `import` and `mirror` to the `telemetry` subcommands."""
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
    p = leaf(
        group,
        "import",
        _import,
        "ingest one perfquery, Prometheus or CSV text",
        "Ingest one text of port counters.\n\n" + _NAMING_HELP,
    )
    _format_options(p)
    p.add_argument("file", metavar="FILE", help="the text")
    p.add_argument(
        "--time",
        type=duration_arg,
        default=0,
        help="time of readings without one, ns since the epoch (default now)",
    )
    p = leaf(
        group,
        "mirror",
        _mirror,
        "stream a live cluster's counters in, poll by poll",
        "Mirror a live cluster: run a command or fetch a URL every --interval, or follow a growing\n"
        "file, and ingest each poll's counters (one call per poll, acknowledged as it happens).\n\n"
        + _NAMING_HELP,
    )
    _format_options(p)
    p.add_argument("--command", default="", help="shell command printing the text, e.g. 'perfquery -x'")
    p.add_argument("--url", default="", help="URL serving the text, e.g. http://node:9100/metrics")
    p.add_argument("--file", default="", help="file to follow as it grows (read from its start)")
    p.add_argument(
        "--interval", type=duration_arg, default=10_000_000_000, help="poll interval (default 10s)"
    )
    p.add_argument("--count", type=int, default=0, help="stop after this many polls (default: never)")
    p.add_argument("--duration", type=duration_arg, default=0, help="stop after this long (default: never)")
