"""Human-readable rendering: durations, sizes, rates, and tables of fabrics, simulations, comparisons.

The API speaks integer nanoseconds and bytes; people read "1.23 ms" and "256 MiB". These functions are
what the CLI prints when `--json` is not given, and scripts may use them too.

>>> format_duration_ns(1_234_567)
'1.23 ms'
>>> format_bytes(268435456)
'256 MiB'
>>> print(render_table(["MODE", "BUSBW"], [["ECMP", "201.3"], ["ADAPTIVE", "371.9"]]))
MODE      BUSBW
ECMP      201.3
ADAPTIVE  371.9
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterable, Sequence

from google.protobuf import timestamp_pb2

from fabrictwin.names import enum_label
from fabrictwin.v1 import common_pb2, scenario_pb2, simulation_pb2, topology_pb2

__all__ = [
    "comparison_table",
    "fabric_source",
    "fabrics_table",
    "format_bytes",
    "format_duration_ns",
    "format_percent",
    "format_ratio",
    "format_sweep_point",
    "format_timestamp",
    "nccl_tests_table",
    "render_table",
    "simulation_report",
    "simulations_table",
    "size_sweep_parameter",
]

_DURATION_UNITS = ((10**9, "s"), (10**6, "ms"), (10**3, "us"))
_BYTE_UNITS = ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB"))
# A number, optionally with a unit: 128, -3, 1.23 ms, 63.2%, 1.93x, 4.0e-06 (right-aligned in tables).
_NUMERIC = re.compile(r"^[-+]?[0-9][0-9.,]*(?:e[-+]?[0-9]+)?(?: ?[a-zA-Z/%]+)?$")


def _three_digits(value: float) -> str:
    """About three significant digits, without an exponent: 1.23, 12.3, 123, 1234."""
    if value < 10:
        return f"{value:.2f}"
    if value < 100:
        return f"{value:.1f}"
    return f"{value:.0f}"


def format_duration_ns(ns: int) -> str:
    """`512 ns`, `12.3 us`, `1.23 ms`, `2.50 s` (about three significant digits)."""
    sign = "-" if ns < 0 else ""
    ns = abs(int(ns))
    for i, (scale, unit) in enumerate(_DURATION_UNITS):
        if ns >= scale:
            text = _three_digits(ns / scale)
            if float(text) >= 1000 and i > 0:  # 999_999 ns reads "1.00 ms", not "1000 us"
                scale, unit = _DURATION_UNITS[i - 1]
                text = _three_digits(ns / scale)
            return f"{sign}{text} {unit}"
    return f"{sign}{ns} ns"


def format_bytes(size: int) -> str:
    """`512 B`, `4 KiB`, `1.50 GiB`: whole numbers of a unit print without decimals."""
    for scale, unit in _BYTE_UNITS:
        if size >= scale:
            value = size / scale
            return f"{int(value)} {unit}" if size % scale == 0 else f"{_three_digits(value)} {unit}"
    return f"{size} B"


def format_percent(fraction: float) -> str:
    """`63.2%` from 0.632."""
    return f"{fraction * 100:.1f}%"


def format_ratio(ratio: float) -> str:
    """`1.93x`; an unset (0) ratio prints as `-`."""
    return f"{ratio:.2f}x" if ratio else "-"


def format_timestamp(timestamp: timestamp_pb2.Timestamp) -> str:
    """`2025-03-01 12:00:05Z` in UTC; an unset timestamp prints as `-`."""
    if not timestamp.seconds and not timestamp.nanos:
        return "-"
    moment = datetime.datetime.fromtimestamp(timestamp.seconds, tz=datetime.timezone.utc)  # noqa: UP017 - the SDK supports 3.10
    return moment.strftime("%Y-%m-%d %H:%M:%SZ")


def render_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """Columns separated by two spaces; columns whose cells are all numbers are right-aligned."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    numeric = [
        bool(cells) and all(_NUMERIC.match(row[i]) or row[i] == "-" for row in cells)
        for i in range(len(headers))
    ]

    def line(row: Sequence[str]) -> str:
        parts = [c.rjust(w) if num else c.ljust(w) for c, w, num in zip(row, widths, numeric, strict=True)]
        return "  ".join(parts).rstrip()

    return "\n".join([line(list(headers)), *(line(row) for row in cells)])


def fabric_source(fabric: topology_pb2.Fabric) -> str:
    """How a fabric was made: `fat-tree k=8`, `leaf-spine 4x2 (8 hosts/leaf)`, `imported ibnetdiscover`."""
    if fabric.WhichOneof("source") == "imported_format":
        return f"imported {enum_label(topology_pb2.TopologyFormat, fabric.imported_format).lower()}"
    spec = fabric.spec
    generator = spec.WhichOneof("generator")
    if generator == "fat_tree":
        return f"fat-tree k={spec.fat_tree.k}"
    if generator == "leaf_spine":
        ls = spec.leaf_spine
        return f"leaf-spine {ls.leaves}x{ls.spines} ({ls.hosts_per_leaf} hosts/leaf)"
    if generator == "superpod":
        return f"superpod {spec.superpod.scalable_units} SU"
    return "-"


def fabrics_table(fabrics: Iterable[topology_pb2.Fabric], *, wide: bool = False) -> str:
    """One row per fabric: name, source, hosts, switches, links, routing engine and version (`wide`:
    display name, labels, last update)."""
    rows = []
    for f in fabrics:
        row: list[object] = [
            f.name,
            fabric_source(f),
            f.host_count,
            f.switch_count,
            f.link_count,
            fabric_routing(f),
            f.routing_version,
            format_timestamp(f.create_time),
        ]
        if wide:
            labels = ",".join(f"{k}={v}" for k, v in sorted(f.labels.items()))
            row += [f.display_name or "-", labels or "-", format_timestamp(f.update_time)]
        rows.append(row)
    headers = ["NAME", "SOURCE", "HOSTS", "SWITCHES", "LINKS", "ROUTING", "VERSION", "CREATED"]
    return render_table(headers + (["DISPLAY_NAME", "LABELS", "UPDATED"] if wide else []), rows)


def _engine(value: int) -> str:
    return enum_label(topology_pb2.RoutingEngine, value).lower()


def fabric_routing(fabric: topology_pb2.Fabric) -> str:
    """`updn`, or `ftree->minhop` where the subnet manager fell back to another engine."""
    asked = _engine(fabric.routing_engine)
    used = fabric.engine_used and _engine(fabric.engine_used)
    return f"{asked}->{used}" if used and used != asked else asked


def fabric_routing_notes(fabric: topology_pb2.Fabric) -> list[str]:
    """What to tell a user about how a fabric was routed: a fallback and its reason, updn's or
    ftree's roots and how they were chosen."""
    notes = []
    asked = _engine(fabric.routing_engine)
    if fabric.fallback_reason:
        notes.append(
            f"{asked} did not route this fabric; {_engine(fabric.engine_used)} did, as OpenSM falls back: "
            + fabric.fallback_reason
        )
    if fabric.roots_used:
        how = enum_label(topology_pb2.RootSelection, fabric.root_selection).lower()
        notes.append(f"{asked} roots ({how}): {', '.join(fabric.roots_used)}")
    return notes


def routing_summary_text(s: topology_pb2.RoutingSummary, *, switches: int = 5) -> str:
    """A routing computation in a few lines: engine (and fallback), roots, how it rerouted, what it
    changed (LFT entries and equal-cost sets, the most changed switches)."""
    engine = _engine(s.routing_engine)
    used = _engine(s.engine_used) if s.engine_used else engine
    mode = enum_label(topology_pb2.RerouteMode, s.reroute).lower()
    shown = engine if used == engine else f"{engine}->{used}"
    lines = [
        f"{s.fabric}: {shown} routing version {s.routing_version} "
        f"({mode}): {s.changed_lft_entries} LFT entries changed on {s.changed_lft_switches} switches "
        f"({s.changed_entries} with their equal-cost sets, on {s.changed_switches}), {s.unreachable_pairs} "
        f"unreachable host pairs, {s.compute_ns / 1e6:.1f} ms"
    ]
    if s.fallback_reason:
        lines.append(f"  {engine} fell back to {used}, as OpenSM does: {s.fallback_reason}")
    if s.roots:
        how = enum_label(topology_pb2.RootSelection, s.root_selection).lower()
        names = [r.rsplit("/", 1)[-1] for r in s.roots]
        lines.append(
            f"  roots ({how}): {', '.join(names[:8])}"
            + (f" and {len(names) - 8} more" if len(names) > 8 else "")
        )
    if s.changed_per_switch:
        most = ", ".join(
            f"{c.switch.rsplit('/', 1)[-1]} {c.lft_entries}" for c in s.changed_per_switch[:switches]
        )
        lines.append(f"  most changed: {most}")
    return "\n".join(lines)


def _mode(lb: common_pb2.LoadBalancing) -> str:
    return lb.label or enum_label(common_pb2.LoadBalancingMode, lb.mode)


def _state(state: int) -> str:
    return enum_label(common_pb2.JobState, state)


def simulations_table(simulations: Iterable[simulation_pb2.Simulation], *, wide: bool = False) -> str:
    """One row per simulation: name, fabric, mode, state, makespan, busbw of the first job, uplink skew
    (`wide`: fidelity, transport, routing version, creation time and the error, if any)."""
    rows = []
    for s in simulations:
        done = s.state == common_pb2.JOB_STATE_SUCCEEDED
        first = s.result.jobs[0] if done and s.result.jobs else None
        row: list[object] = [
            s.name,
            s.spec.fabric or "-",
            _mode(s.spec.load_balancing),
            _state(s.state) if done else f"{_state(s.state)} {format_percent(s.progress.fraction)}",
            format_duration_ns(s.result.makespan_ns) if done else "-",
            f"{first.busbw_gbps:.1f}" if first else "-",
            format_ratio(s.result.uplink_skew.max_over_mean) if done else "-",
        ]
        if wide:
            row += [
                enum_label(simulation_pb2.Fidelity, s.spec.fidelity or simulation_pb2.FIDELITY_FLOW),
                enum_label(simulation_pb2.Transport, s.spec.transport or simulation_pb2.TRANSPORT_ROCEV2),
                s.routing_version,
                format_timestamp(s.create_time),
                s.error.message[:80] or "-",
            ]
        rows.append(row)
    headers = ["NAME", "FABRIC", "MODE", "STATE", "MAKESPAN", "BUSBW_GBPS", "UPLINK_MAX/MEAN"]
    return render_table(
        headers + (["FIDELITY", "TRANSPORT", "ROUTING_V", "CREATED", "ERROR"] if wide else []), rows
    )


def simulation_report(simulation: simulation_pb2.Simulation) -> str:
    """Several lines on one simulation: its state and, once done, each job and the uplink skew."""
    head = f"{simulation.name}  {_mode(simulation.spec.load_balancing)}  {_state(simulation.state)}"
    if simulation.state == common_pb2.JOB_STATE_FAILED:
        return f"{head}: {simulation.error.message}"
    if simulation.state != common_pb2.JOB_STATE_SUCCEEDED:
        return f"{head} ({format_percent(simulation.progress.fraction)} {simulation.progress.stage})".rstrip()
    result = simulation.result
    jobs = render_table(
        ["JOB", "RANKS", "COMPLETION", "IDEAL", "ALGBW_GBPS", "BUSBW_GBPS"],
        [
            [
                j.label or "-",
                j.ranks,
                format_duration_ns(j.completion_ns),
                format_duration_ns(j.ideal_completion_ns),
                f"{j.algbw_gbps:.1f}",
                f"{j.busbw_gbps:.1f}",
            ]
            for j in result.jobs
        ],
    )
    skew = result.uplink_skew
    lines = [head, jobs, f"makespan {format_duration_ns(result.makespan_ns)}"]
    if skew.links:
        shares = (
            f"hot {format_percent(skew.share_hot)}, idle (no traffic) {format_percent(skew.share_idle)}, "
            f"below 20% {format_percent(skew.share_cold)}"
        )
        lines.append(
            f"uplink skew ({skew.group or 'uplinks'}, {skew.links} links): max/mean {skew.max_over_mean:.2f},"
            f" CV {skew.coefficient_of_variation:.2f}, {shares}"
        )
    if result.packets_injected:
        lines.append(
            f"packets: {result.packets_injected} sent, {result.packets_delivered} delivered, "
            f"{result.drops} dropped, {result.corrupted_packets} lost to bit errors, "
            f"{result.retransmitted_packets} resent ({result.naks} NAKs, "
            f"{result.retransmit_timeouts} timeouts), "
            f"{result.out_of_order_packets} out of order"
        )
    lines.extend(f"note: {note}" for note in result.model_notes)
    return "\n".join(lines)


def format_sweep_point(point: Iterable[tuple[str, str]]) -> str:
    """A sweep point for people: sizes in KiB/MiB/GiB."""
    shown = []
    for parameter, value in sorted(point):
        if parameter.endswith("_bytes") and value.isdigit():
            value = format_bytes(int(value))
        shown.append(f"{parameter}={value}")
    return ",".join(shown)


def _row_label(row: scenario_pb2.ComparisonRow) -> str:
    if not row.result.sweep_point:
        return row.label
    return f"{row.label.split(' [', 1)[0]} [{format_sweep_point(row.result.sweep_point.items())}]"


def size_sweep_parameter(comparison: scenario_pb2.Comparison) -> str:
    """The swept message-size parameter (`jobs.0.size_bytes`) when the comparison's rows are a size
    sweep and nothing else is swept; else ""."""
    parameters = {p for r in comparison.rows for p in r.result.sweep_point}
    if len(parameters) == 1:
        (parameter,) = parameters
        if re.fullmatch(r"jobs\.\d+\.size_bytes", parameter):
            return parameter
    return ""


def nccl_tests_table(comparison: scenario_pb2.Comparison) -> str:
    """A size sweep as nccl-tests prints one: per size, its element count and type (float: nccl-tests'
    default), then per mode the time (us), algbw = size / time and busbw (GB/s, bytes like
    nccl-tests; the simulator's busbw applies nccl-tests' factor, 2(n-1)/n for all-reduce)."""
    parameter = size_sweep_parameter(comparison)
    modes = list(dict.fromkeys(r.result.label for r in comparison.rows))
    by_size: dict[int, dict[str, scenario_pb2.ComparisonRow]] = {}
    for r in comparison.rows:
        by_size.setdefault(int(r.result.sweep_point[parameter]), {})[r.result.label] = r
    headers = ["SIZE", "COUNT", "TYPE"]
    for mode in modes:
        headers += [f"{mode} TIME_US", "ALGBW_GB/S", "BUSBW_GB/S"]
    rows = []
    for size in sorted(by_size):
        line: list[object] = [format_bytes(size), f"{size // 4:,}", "float"]
        for mode in modes:
            row = by_size[size].get(mode)
            if row is None or not row.makespan_ns:
                line += ["-", "-", "-"]
                continue
            seconds = row.makespan_ns / 1e9
            line += [
                f"{row.makespan_ns / 1e3:,.1f}",
                f"{size / seconds / 1e9:.2f}",
                f"{row.busbw_gbps / 8:.2f}",
            ]
        rows.append(line)
    return render_table(headers, rows)


def comparison_table(comparison: scenario_pb2.Comparison) -> str:
    """The rows of a comparison side by side, then its one-line summary (a size sweep also as an
    nccl-tests table)."""
    rows = [
        [
            _row_label(r),
            format_duration_ns(r.makespan_ns),
            f"{r.busbw_gbps:.1f}",
            format_ratio(r.slowdown_vs_baseline),
            format_ratio(r.slowdown_vs_ideal),
            format_ratio(r.uplink_max_over_mean),
            format_percent(r.uplink_share_hot),
            format_percent(r.uplink_share_idle),
        ]
        for r in comparison.rows
    ]
    table = render_table(
        ["LABEL", "MAKESPAN", "BUSBW_GBPS", "VS_BASELINE", "VS_IDEAL", "UPLINK_MAX/MEAN", "HOT", "IDLE"], rows
    )
    if size_sweep_parameter(comparison):
        table += "\n\n" + nccl_tests_table(comparison)
    return f"{table}\n{comparison.summary}" if comparison.summary else table
