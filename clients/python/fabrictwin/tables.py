"""Tables of the detail resources: nodes, links, paths, forwarding tables, link series, telemetry,
scenarios, runs and findings. The headline tables (fabrics, simulations, comparisons) are in
`fabrictwin.format`, with the unit formatting both use.
"""

from __future__ import annotations

from collections.abc import Iterable

from fabrictwin.format import (
    format_bytes,
    format_duration_ns,
    format_percent,
    format_sweep_point,
    format_timestamp,
    render_table,
)
from fabrictwin.names import enum_label
from fabrictwin.v1 import common_pb2, scenario_pb2, simulation_pb2, telemetry_pb2, topology_pb2

__all__ = [
    "findings_table",
    "forwarding_table",
    "health_table",
    "link_series_table",
    "links_table",
    "nodes_table",
    "paths_table",
    "port_values_table",
    "run_report",
    "runs_table",
    "scenarios_table",
    "series_table",
    "sources_table",
]


def _short(name: str) -> str:
    """The last segment of a resource name (`leaf-3` of `fabrics/ft8/nodes/leaf-3`)."""
    return name.rsplit("/", 1)[-1] if name else "-"


def health_table(status: dict[str, str], addresses: dict[str, str]) -> str:
    """One row per service: its address and health."""
    return render_table(
        ["SERVICE", "ADDRESS", "STATUS"], [[s, addresses.get(s, "-"), v] for s, v in status.items()]
    )


def nodes_table(nodes: Iterable[topology_pb2.Node]) -> str:
    """One row per node: index, readable name, kind, tier, radix, LID, rail, group, IP."""
    rows = [
        [
            n.index,
            n.display_name or _short(n.name),
            enum_label(topology_pb2.NodeKind, n.kind).lower(),
            n.tier,
            n.radix,
            n.lid,
            n.rail if n.kind == topology_pb2.NODE_KIND_HOST else "-",
            n.group,
            n.ip_address or "-",
        ]
        for n in nodes
    ]
    return render_table(["INDEX", "NODE", "KIND", "TIER", "RADIX", "LID", "RAIL", "GROUP", "IP"], rows)


def links_table(links: Iterable[topology_pb2.Link]) -> str:
    """One row per link: index, both ends, speed, latency, state and bit error rate."""
    rows = [
        [
            link.index,
            f"{_short(link.node_a)}/p{link.port_a}",
            f"{_short(link.node_b)}/p{link.port_b}",
            f"{link.speed_gbps:g}",
            format_duration_ns(link.latency_ns),
            enum_label(topology_pb2.LinkState, link.state).lower(),
            f"{link.bit_error_rate:.1e}" if link.bit_error_rate else "-",
        ]
        for link in links
    ]
    return render_table(["INDEX", "A", "B", "GBPS", "LATENCY", "STATE", "BER"], rows)


def paths_table(response: topology_pb2.ListPathsResponse) -> str:
    """One row per equal-cost path (the LFT path marked), then the total count."""
    rows = [
        [i, "*" if p.lft_path else "", " > ".join(_short(n) for n in p.nodes), ",".join(map(str, p.links))]
        for i, p in enumerate(response.paths)
    ]
    table = render_table(["PATH", "LFT", "NODES", "LINKS"], rows)
    return f"{table}\n{len(response.paths)} of {response.total_paths} equal-cost paths shown"


def forwarding_table(table: topology_pb2.ForwardingTable) -> str:
    """One row per destination: LID, LFT port, every ECMP port."""
    rows = [
        [_short(e.destination), e.destination_lid, e.port, ",".join(map(str, e.ecmp_ports)) or "-"]
        for e in table.entries
    ]
    header = f"{table.name} (routing version {table.routing_version})"
    return f"{header}\n{render_table(['DESTINATION', 'LID', 'PORT', 'ECMP_PORTS'], rows)}"


def link_series_table(series: Iterable[simulation_pb2.LinkSeries]) -> str:
    """One row per link direction: samples, bytes, mean and peak utilisation, drops."""
    rows = []
    for s in series:
        utilisation = list(s.utilisation)
        rows.append(
            [
                s.link,
                "a>b" if s.direction == 0 else "b>a",
                s.display_name or "-",
                len(utilisation),
                format_duration_ns(s.interval_ns),
                format_bytes(sum(s.bytes)),
                format_percent(sum(utilisation) / len(utilisation)) if utilisation else "-",
                format_percent(max(utilisation)) if utilisation else "-",
                sum(s.drops),
            ]
        )
    return render_table(
        ["LINK", "DIR", "NAME", "SAMPLES", "INTERVAL", "BYTES", "MEAN_UTIL", "PEAK_UTIL", "DROPS"], rows
    )


def sources_table(sources: Iterable[telemetry_pb2.Source], *, wide: bool = False) -> str:
    """One row per telemetry source (`wide`: ports, newest sample, retention, roll-ups)."""
    rows = []
    for s in sources:
        row: list[object] = [
            s.name,
            enum_label(telemetry_pb2.SourceKind, s.kind).lower(),
            s.fabric or "-",
            s.simulation or "-",
            s.sample_count,
            format_timestamp(s.create_time),
        ]
        if wide:
            retention = format_duration_ns(s.retention_ns) if s.retention_ns else "forever"
            row += [s.port_count, s.newest_sample_ns, retention, s.rolled_up_until_ns]
        rows.append(row)
    headers = ["NAME", "KIND", "FABRIC", "SIMULATION", "SAMPLES", "CREATED"]
    wide_headers = ["PORTS", "NEWEST_NS", "RETENTION", "ROLLED_UP_UNTIL_NS"]
    return render_table(headers + (wide_headers if wide else []), rows)


def series_table(series: Iterable[telemetry_pb2.Series]) -> str:
    """One row per (port, time) point of every series."""
    rows = [[s.port, t, f"{v:.6g}"] for s in series for t, v in zip(s.time_ns, s.values, strict=False)]
    return render_table(["PORT", "TIME_NS", "VALUE"], rows)


def port_values_table(values: Iterable[telemetry_pb2.PortValue]) -> str:
    """One row per port, in the server's order (highest first for TopLinks)."""
    return render_table(
        ["RANK", "PORT", "VALUE"], [[i + 1, p.port, f"{p.value:.6g}"] for i, p in enumerate(values)]
    )


def scenarios_table(scenarios: Iterable[scenario_pb2.Scenario], *, wide: bool = False) -> str:
    """One row per scenario: fabric, jobs, modes, seed (`wide`: display name, fidelity, sweeps, variants)."""
    rows = []
    for s in scenarios:
        row: list[object] = [
            s.name,
            s.fabric or "-",
            len(s.jobs),
            ",".join(m.label or enum_label(common_pb2.LoadBalancingMode, m.mode) for m in s.modes) or "-",
            s.seed,
            format_timestamp(s.create_time),
        ]
        if wide:
            sweeps = ";".join(f"{w.parameter}={','.join(w.values)}" for w in s.sweeps)
            row += [
                s.display_name or "-",
                enum_label(simulation_pb2.Fidelity, s.fidelity or simulation_pb2.FIDELITY_FLOW),
                sweeps[:60] or "-",
                ",".join(v.label for v in s.variants)[:60] or "-",
            ]
        rows.append(row)
    headers = ["NAME", "FABRIC", "JOBS", "MODES", "SEED", "CREATED"]
    return render_table(headers + (["DISPLAY_NAME", "FIDELITY", "SWEEPS", "VARIANTS"] if wide else []), rows)


def runs_table(runs: Iterable[scenario_pb2.Run], *, wide: bool = False) -> str:
    """One row per run: state, progress, results, creation and end times (`wide`: the routing version
    it is pinned to, its stage, and its error, if any)."""
    rows = []
    for r in runs:
        row: list[object] = [
            r.name,
            enum_label(common_pb2.JobState, r.state),
            format_percent(r.progress.fraction),
            len(r.results),
            format_timestamp(r.create_time),
            format_timestamp(r.end_time),
        ]
        if wide:
            row += [r.routing_version, r.progress.stage or "-", r.error.message[:80] or "-"]
        rows.append(row)
    headers = ["NAME", "STATE", "PROGRESS", "RESULTS", "CREATED", "ENDED"]
    return render_table(headers + (["ROUTING_V", "STAGE", "ERROR"] if wide else []), rows)


def run_report(run: scenario_pb2.Run) -> str:
    """A run's state, then one row per mode (and sweep point) with its makespan, busbw and skew."""
    state = enum_label(common_pb2.JobState, run.state)
    head = f"{run.name}  {state}  {format_percent(run.progress.fraction)} {run.progress.stage}".rstrip()
    if run.error.message:
        head += f"\nerror: {run.error.message}"
    rows = [
        [
            r.label or enum_label(common_pb2.LoadBalancingMode, r.load_balancing.mode),
            format_sweep_point(r.sweep_point.items()) or "-",
            enum_label(common_pb2.JobState, r.state),
            format_duration_ns(r.makespan_ns) if r.makespan_ns else "-",
            f"{r.busbw_gbps:.1f}" if r.busbw_gbps else "-",
            format_duration_ns(r.ideal_completion_ns) if r.ideal_completion_ns else "-",
            f"{r.uplink_skew.max_over_mean:.2f}x" if r.uplink_skew.links else "-",
            r.error.message or r.simulation or "-",
        ]
        for r in run.results
    ]
    table = render_table(
        ["MODE", "SWEEP", "STATE", "MAKESPAN", "BUSBW_GBPS", "IDEAL", "UPLINK_MAX/MEAN", "SIMULATION/ERROR"],
        rows,
    )
    return f"{head}\n{table}" if rows else head


def findings_table(diagnosis: scenario_pb2.Diagnosis) -> str:
    """Findings, most severe first, each with its evidence and suggestion on the lines below."""
    if not diagnosis.findings:
        return f"{diagnosis.source}: nothing found"
    blocks = []
    for f in diagnosis.findings:
        ports = ", ".join(f.ports[:8]) + (f" (+{len(f.ports) - 8} more)" if len(f.ports) > 8 else "")
        blocks.append(
            f"{enum_label(scenario_pb2.Severity, f.severity)}  {enum_label(scenario_pb2.FindingKind, f.kind)}"
            f"  {ports or '-'}\n  evidence: {f.evidence}\n  suggestion: {f.suggestion}"
        )
    return "\n".join(blocks)
