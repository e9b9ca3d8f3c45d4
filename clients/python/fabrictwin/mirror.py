"""Mirror a live cluster: poll a command or a URL, or follow a growing file, and stream the counters in.

A *reader* yields `Poll`s: the text of one poll parsed into columns, or the error that poll met.

- `poll_command` runs a shell command every interval (`perfquery -x`, `curl -s http://node:9100/metrics`);
- `poll_url` fetches a URL every interval (a node_exporter's /metrics);
- `follow_file` reads what is appended to a file, like `tail -f`, from its start.

Texts without times of their own are stamped with the moment their answer began (the command's
first output, the URL's status line and headers: when the counters were read, not when the poll was
due), the appended text with when it was read. `run_mirror` sends each poll as its own
IngestSamples call, so every poll is acknowledged (stored, duplicates, rejected) as it happens and a
restarted service loses nothing: a poll sent again is stored once. A failed poll is reported and
the mirror goes on with the next.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping

from fabrictwin.importers import FORMATS, FormatError, SampleColumns, columns_of, perfquery, prometheus
from fabrictwin.importers.csv_samples import CsvSamples
from fabrictwin.mirror_config import DEFAULT_MAX_SCRAPE_BYTES
from fabrictwin.scrape import fetch_command_timed, fetch_url_timed, why_failed
from fabrictwin.v1 import telemetry_pb2

__all__ = ["MirrorReport", "Poll", "follow_file", "poll_command", "poll_url", "run_mirror", "text_parser"]

Parser = Callable[[str, int], list[SampleColumns]]  # (text, read time in ns) -> columns


@dataclasses.dataclass(frozen=True)
class Poll:
    """One poll: its start time and columns, or what went wrong."""

    time_ns: int
    columns: list[SampleColumns]
    error: str = ""


@dataclasses.dataclass
class MirrorReport:
    """What a mirror did so far."""

    polls: int = 0
    failed_polls: int = 0
    stored: int = 0
    duplicates: int = 0
    rejected: int = 0
    reasons: list[str] = dataclasses.field(default_factory=list)
    errors: list[str] = dataclasses.field(default_factory=list)


def text_parser(
    format: str,
    source: str,
    *,
    where: str = "",
    node: str = "",
    nodes: Mapping[int, str] | None = None,
    port_name: str = "",
    counter_kinds: Mapping[str, str] | None = None,
    link_gbps: float = 0.0,
) -> Parser:
    """The parser of a format (`perfquery`, `prometheus`, `csv`) with its naming options.

    perfquery names ports `{node}/p{port}` (node from `nodes` by LID, else `node`, else `lid-<LID>`);
    prometheus `{device}/p{port}` or `{node}/{device}/p{port}`; `port_name` overrides the template.
    `link_gbps` is the perfquery ports' link rate (node_exporter reports its own).
    """
    if format == "perfquery":
        lids = dict(nodes or {})

        def parse_perfquery(text: str, time_ns: int) -> list[SampleColumns]:
            readings = perfquery.parse(
                text,
                time_ns,
                where=where or "<perfquery>",
                node=node,
                nodes=lids,
                port_name=port_name or "{node}/p{port}",
                link_gbps=link_gbps,
            )
            return columns_of(readings)

        return parse_perfquery
    if format == "prometheus":

        def parse_prometheus(text: str, time_ns: int) -> list[SampleColumns]:
            readings = prometheus.parse(
                text, time_ns, where=where or "<metrics>", node=node, port_name=port_name
            )
            return columns_of(readings)

        return parse_prometheus
    if format == "csv":
        reader = CsvSamples(where or "<csv>", source, counter_kinds)

        def parse_csv(text: str, _time_ns: int) -> list[SampleColumns]:
            chunk = reader.parse(text)
            return [chunk] if chunk is not None else []

        return parse_csv
    raise FormatError(f"format: {format!r} is not one of {', '.join(FORMATS)}")


def _schedule(interval_s: float, until: float | None) -> Iterator[None]:
    """Yields at once, then every `interval_s` (missed ticks are skipped) until the monotonic `until`."""
    next_at = time.monotonic()
    while until is None or next_at < until:
        delay = next_at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        yield
        next_at += interval_s
        while next_at < time.monotonic():
            next_at += interval_s


def _parsed(parser: Parser, text: str, at: int) -> Poll:
    try:
        return Poll(at, parser(text, at))
    except FormatError as exc:
        return Poll(at, [], f"cannot parse: {exc.details}")


def poll_command(
    command: str, parser: Parser, interval_s: float, *, until: float | None = None
) -> Iterator[Poll]:
    """Run `command` with /bin/sh every `interval_s`; its stdout is one poll's text.

    As a mirror's command target (`fabrictwin.scrape.fetch_command`): in a session of its own, killed
    with what it started when it times out (after the interval, at least 30 s) or prints more than
    16 MiB, each a failed poll."""
    timeout_s = max(interval_s, 30)
    for _ in _schedule(interval_s, until):
        at = time.time_ns()
        try:
            output, at = fetch_command_timed(command, timeout_s, DEFAULT_MAX_SCRAPE_BYTES)
        except Exception as exc:
            why = why_failed(exc, timeout_s)
            yield Poll(
                at, [], f"command {why}" if why.startswith(("exited", "timed out")) else f"command: {why}"
            )
            continue
        yield _parsed(parser, output.decode("utf-8", errors="replace"), at)


def poll_url(url: str, parser: Parser, interval_s: float, *, until: float | None = None) -> Iterator[Poll]:
    """GET `url` every `interval_s`; the response body is one poll's text.

    As a mirror's URL target (`fabrictwin.scrape.fetch_url`, asking for no format: exporters answer
    text): whatever the server does (refuses, answers garbage, cuts the body short, sends more than
    16 MiB, takes longer than the interval, at least 10 s) is a failed poll."""
    timeout_s = max(interval_s, 10)
    for _ in _schedule(interval_s, until):
        at = time.time_ns()
        try:
            body, _, at = fetch_url_timed(url, timeout_s, DEFAULT_MAX_SCRAPE_BYTES, accept=None)
        except Exception as exc:
            yield Poll(at, [], f"cannot fetch {url}: {why_failed(exc, timeout_s)}")
            continue
        yield _parsed(parser, body.decode("utf-8", errors="replace"), at)


def follow_file(
    path: str, parser: Parser, *, check_s: float = 0.2, until: float | None = None
) -> Iterator[Poll]:
    """Read `path` from its start, then what is appended to it; each quiet moment ends a poll.

    Complete lines are read; when a read finds nothing new, the text gathered since the last poll
    is parsed as one. A file that shrinks (truncated or replaced) is read again from its start.
    """
    position, pending = 0, ""
    while until is None or time.monotonic() < until:
        try:
            size = os.path.getsize(path)
        except OSError as exc:
            yield Poll(time.time_ns(), [], f"cannot read {path}: {exc.strerror}")
            time.sleep(check_s)
            continue
        if size < position:
            position, pending = 0, ""
        text = ""
        if size > position:
            with open(path, encoding="utf-8", errors="replace") as stream:
                stream.seek(position)
                text = stream.read()
        complete = text[: text.rfind("\n") + 1]
        position += len(complete.encode("utf-8"))
        if complete:
            pending += complete
            time.sleep(check_s)  # let the writer finish what it is appending before parsing
            continue
        if pending:
            yield _parsed(parser, pending, time.time_ns())
            pending = ""
            continue
        time.sleep(check_s)


def run_mirror(
    ingest: Callable[[Iterable[telemetry_pb2.SampleBatch]], telemetry_pb2.IngestSamplesResponse],
    batches_of: Callable[[SampleColumns], Iterable[telemetry_pb2.SampleBatch]],
    polls: Iterable[Poll],
    *,
    count: int | None = None,
    on_poll: Callable[[Poll, telemetry_pb2.IngestSamplesResponse | None], None] | None = None,
) -> MirrorReport:
    """Send each poll's columns as one IngestSamples call, up to `count` polls; returns the totals."""
    report = MirrorReport()
    for poll in polls:
        report.polls += 1
        reply = None
        if poll.error:
            report.failed_polls += 1
            report.errors.append(poll.error)
        elif poll.columns:
            batches = [batch for chunk in poll.columns for batch in batches_of(chunk)]
            reply = ingest(batches)
            report.stored += reply.stored
            report.duplicates += reply.duplicates
            report.rejected += reply.rejected
            report.reasons += [r.reason for r in reply.reasons]
        if on_poll is not None:
            on_poll(poll, reply)
        if count is not None and report.polls >= count:
            break
    return report
