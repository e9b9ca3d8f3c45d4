"""`fabrictwin telemetry ...`: sources, series queries, top links, skew and loss history.

Ingest commands (`ingest-csv`, `import`, `mirror`) live in `cli_telemetry_ingest`. Port selectors
(`--port`) take names, globs (`spine-*/p*`) and fabric groups (`group:uplinks`, `group:downlinks`,
`group:switch-links`, `group:host-links`, `group:tier:1->2`).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Sequence

from fabrictwin import cli_telemetry_ingest, link_health
from fabrictwin.cli_common import (
    add_list_options,
    choice,
    duration_arg,
    emit,
    emit_list,
    leaf,
    limited,
    pinning_options,
    print_json,
    subcommands,
)
from fabrictwin.cli_output import add_output_option, write_output
from fabrictwin.client import Client
from fabrictwin.format import format_percent, render_table
from fabrictwin.tables import port_values_table, series_table, sources_table
from fabrictwin.v1 import telemetry_pb2

__all__ = ["loss_table", "register", "skew_table"]

_PORT_HELP = "port name, glob (spine-*/p*) or group (group:uplinks); repeat; default all"


def _number(value: float, digits: str = ".6g") -> str:
    return "-" if math.isnan(value) else format(value, digits)


def skew_table(points: Sequence[telemetry_pb2.SkewPoint]) -> str:
    """One row per interval: ports, max, mean and min utilisation, max/mean, CV, hot and idle shares,
    and whether the pinning rule holds."""
    rows = [
        [
            p.time_ns,
            p.ports,
            format_percent(p.max_utilisation),
            format_percent(p.mean_utilisation),
            format_percent(p.min_utilisation),
            f"{p.max_over_mean:.2f}",
            f"{p.coefficient_of_variation:.2f}",
            format_percent(p.share_hot),
            format_percent(p.share_idle),
            "yes" if p.pinned else "no",
        ]
        for p in points
    ]
    return render_table(
        ["TIME_NS", "PORTS", "MAX", "MEAN", "MIN", "MAX/MEAN", "CV", "HOT", "IDLE", "PINNED"], rows
    )


def loss_table(points: Sequence[telemetry_pb2.LossPoint]) -> str:
    """One row per interval: drops, discards, errors, traffic and the estimated BER ('-': not reported)."""
    rows = [
        [
            p.time_ns,
            _number(p.drops),
            _number(p.xmit_discards),
            _number(p.rcv_errors),
            _number(p.symbol_errors),
            _number(p.rx_packets),
            _number(p.rx_bytes),
            _number(p.estimated_ber, ".3e"),
        ]
        for p in points
    ]
    headers = ["TIME_NS", "DROPS", "DISCARDS", "RCV_ERR", "SYM_ERR", "RX_PKTS", "RX_BYTES", "EST_BER"]
    return render_table(headers, rows)


def _sources(client: Client, args: argparse.Namespace) -> int:
    sources = client.telemetry.list_sources(filter=args.filter, order_by=args.order_by)
    emit_list(args, limited(args, sources), sources_table)
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


def _update_source(client: Client, args: argparse.Namespace) -> int:
    source = client.telemetry.update_source(
        args.name, display_name=args.display_name, retention_ns=args.retention
    )
    emit(args, source, lambda s: sources_table([s]))
    return 0


def _delete_source(client: Client, args: argparse.Namespace) -> int:
    client.telemetry.delete_source(args.name)
    emit(args, telemetry_pb2.DeleteSourceResponse(), lambda _: f"deleted {args.name}")
    return 0


def _query(client: Client, args: argparse.Namespace) -> int:
    series = list(
        client.telemetry.query_series(
            args.source,
            args.metric,
            ports=args.port,
            start_ns=args.start,
            end_ns=args.end,
            aggregation=args.aggregation,
            step_ns=args.step,
        )
    )
    if not write_output(args, telemetry_pb2.QuerySeriesResponse(series=series)):
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
    if not write_output(args, telemetry_pb2.TopLinksResponse(ports=top)):
        emit_list(args, top, port_values_table)
    return 0


def _skew(client: Client, args: argparse.Namespace) -> int:
    points = client.telemetry.utilisation_skew(
        args.source,
        ports=args.port,
        start_ns=args.start,
        end_ns=args.end,
        step_ns=args.step,
        hot_above=args.hot_above,
        idle_below=args.idle_below,
        max_over_mean=args.max_over_mean,
        spread=args.spread,
    )
    if not write_output(args, telemetry_pb2.GetUtilisationSkewResponse(points=points)):
        emit_list(args, points, skew_table)
    return 0


def _loss(client: Client, args: argparse.Namespace) -> int:
    points = client.telemetry.loss_history(
        args.source, args.port, start_ns=args.start, end_ns=args.end, step_ns=args.step
    )
    if not write_output(args, telemetry_pb2.GetLossHistoryResponse(points=points)):
        emit_list(args, points, loss_table)
    return 0


def _health(client: Client, args: argparse.Namespace) -> int:
    report = link_health.check_links(
        client, args.source, window_ns=args.window, ber_threshold=args.ber_threshold, apply=args.apply
    )
    shown = report.verdicts if args.all else report.changes
    if args.json:
        print_json(
            {
                "fabric": report.fabric,
                "window": {"start_ns": report.window[0], "end_ns": report.window[1]},
                "links": [dataclasses.asdict(v) | {"changed": v.changed} for v in shown],
                "applied": report.applied,
            }
        )
        return 0
    rows = [
        [v.name, v.current, v.state, f"{v.bit_error_rate:.3g}" if v.bit_error_rate else "", v.reason]
        for v in shown
    ]
    print(render_table(["link", "now", "counters say", "BER", "why"], rows))
    verb = "applied" if report.applied is not None else "to apply (--apply)"
    routing = (
        f"; routing version {report.applied.routing.routing_version}" if report.applied is not None else ""
    )
    counts = f"{len(report.verdicts)} links assessed in {report.fabric}; {len(report.changes)} changes"
    print(f"{counts} {verb}{routing}")
    return 0


def _window_options(parser: argparse.ArgumentParser, ports: bool = True) -> None:
    parser.add_argument("source", help="telemetry source (ID or sources/ID)")
    if ports:
        parser.add_argument("--port", action="append", default=[], help=_PORT_HELP)
    parser.add_argument(
        "--start", type=duration_arg, default=0, help="window start, ns or 10ms/2s (default 0)"
    )
    parser.add_argument("--end", type=duration_arg, default=0, help="window end, exclusive (default: newest)")
    add_output_option(parser)


def _metric_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--metric", **choice(telemetry_pb2.Metric), required=True, help="metric")
    parser.add_argument(
        "--aggregation", **choice(telemetry_pb2.Aggregation), default=None, help="default avg"
    )


def _source_commands(group: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    add_list_options(leaf(group, "sources", _sources, "list telemetry sources"))
    p = leaf(group, "create-source", _create_source, "create a telemetry source")
    p.add_argument("id", help="source id (sources/ID)")
    p.add_argument("--kind", **choice(telemetry_pb2.SourceKind), default="live", help="live or simulated")
    p.add_argument("--fabric", default="", help="fabric its ports belong to (needed for port groups)")
    p.add_argument("--display-name", default="", help="human-readable name")
    p.add_argument(
        "--retention", type=duration_arg, default=0, help="keep raw samples this long (0: forever)"
    )
    p = leaf(group, "update-source", _update_source, "change a source's display name or retention")
    p.add_argument("name", help="source")
    p.add_argument("--display-name", default=None, help="human-readable name")
    p.add_argument(
        "--retention", type=duration_arg, default=None, help="keep raw samples this long (0: forever)"
    )
    leaf(group, "delete-source", _delete_source, "delete a source and all its samples").add_argument(
        "name", help="source"
    )


def register(root: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `telemetry` and its subcommands to the root parser's subcommands."""
    telemetry = root.add_parser("telemetry", help="telemetry sources, ingest and queries (telemetry service)")
    telemetry.description = "Per-port time series of live clusters and simulated runs."
    group = subcommands(telemetry, "telemetry")
    _source_commands(group)
    p = leaf(group, "query", _query, "time series of a metric per port, optionally bucketed by --step")
    _window_options(p)
    _metric_options(p)
    p.add_argument("--step", type=duration_arg, default=0, help="bucket width (default 0: raw samples)")
    p = leaf(group, "top", _top, "the ports with the highest value of a metric over a window")
    _window_options(p)
    _metric_options(p)
    p.add_argument("--limit", type=int, default=0, help="how many ports (default 10)")
    p = leaf(group, "skew", _skew, "utilisation skew of a port group per interval (ECMP pinning)")
    _window_options(p)
    p.add_argument("--step", type=duration_arg, default=0, help="interval (default 0: the whole window)")
    pinning_options(p)
    p = leaf(group, "loss", _loss, "drops, errors and the estimated BER of one port per interval")
    _window_options(p, ports=False)
    p.add_argument("--port", required=True, help="the port")
    p.add_argument("--step", type=duration_arg, default=0, help="interval (default 0: the whole window)")
    p = leaf(
        group,
        "health",
        _health,
        "link states from a source's recent error and LinkDowned counters (DEGRADED / DOWN / UP)",
        link_health.__doc__ or "",
    )
    p.add_argument("source", help="telemetry source (ID or sources/ID); its fabric's links are assessed")
    p.add_argument("--window", type=duration_arg, default=15 * 60 * 10**9, help="how far back (default 15m)")
    p.add_argument(
        "--ber-threshold",
        type=float,
        default=link_health.DEFAULT_BER_THRESHOLD,
        help="DEGRADED above this estimated bit error rate (default 1e-12), in (0, 1)",
    )
    p.add_argument("--apply", action="store_true", help="set the changes on the fabric (one routing version)")
    p.add_argument("--all", action="store_true", help="list every assessed link, not only the changes")
    cli_telemetry_ingest.register(group)
