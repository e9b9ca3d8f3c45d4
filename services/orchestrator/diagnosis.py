"""Diagnosis of per-port telemetry: the signatures the seeds describe.

- ECMP pinning: in the same window some links run hot (> 80 % mean utilisation) while links of the
  same group sit idle (< 20 %): the aggregate bandwidth is there but flows are pinned by the hash.
- Lossy link: drops or receive/symbol errors on a link (a marginal transceiver).

The numbers come from the telemetry service (aggregated in SQL there); this module only judges them.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from fabrictwin.v1 import scenario_pb2, telemetry_pb2

__all__ = ["HOT", "IDLE", "ecmp_pinning", "lossy_links"]

HOT = 0.8
IDLE = 0.2


def ecmp_pinning(
    utilisation: Sequence[telemetry_pb2.PortValue], window: telemetry_pb2.TimeRange | None = None
) -> scenario_pb2.Finding | None:
    """A finding when hot and idle links coexist among links that carried traffic at all."""
    values = [p.value for p in utilisation]
    if len(values) < 2:
        return None
    hot = [p for p in utilisation if p.value > HOT]
    idle = [p for p in utilisation if p.value < IDLE]
    if not hot or not idle:
        return None
    mean = statistics.fmean(values)
    hot.sort(key=lambda p: (-p.value, p.port))
    idle.sort(key=lambda p: (p.value, p.port))
    finding = scenario_pb2.Finding(
        kind=scenario_pb2.FINDING_KIND_ECMP_PINNING,
        severity=scenario_pb2.SEVERITY_WARNING,
        ports=[p.port for p in hot],
        evidence=(
            f"{len(hot)} of {len(values)} links above {HOT:.0%} mean utilisation while {len(idle)} sit below "
            f"{IDLE:.0%} in the same window (max {max(values):.0%}, mean {mean:.0%}, "
            f"max/mean {max(values) / mean if mean else 0:.2f}); hot: {_named(hot)}; idle: {_named(idle)}"
        ),
        suggestion=(
            "Flows are pinned by ECMP hashing of low-entropy RoCEv2 headers. Use per-packet load "
            "balancing (adaptive routing or RSHP spraying), or add entropy (more QPs per connection, "
            "hash the destination QP)."
        ),
    )
    if window is not None:
        finding.time_range.CopyFrom(window)
    return finding


def _named(ports: Sequence[telemetry_pb2.PortValue], at_most: int = 5) -> str:
    """`leaf-0/p3 (95%), leaf-1/p4 (90%) and 2 more`."""
    named = ", ".join(f"{p.port} ({p.value:.0%})" for p in ports[:at_most])
    return named + (f" and {len(ports) - at_most} more" if len(ports) > at_most else "")


def lossy_links(
    drops: Sequence[telemetry_pb2.PortValue],
    window: telemetry_pb2.TimeRange | None = None,
    errors: Sequence[telemetry_pb2.PortValue] = (),
) -> list[scenario_pb2.Finding]:
    """One finding per link that dropped (`drops`) or corrupted (`errors`: PortRcvErrors) packets in
    the window, the worst first."""
    dropped = {p.port: p.value for p in drops if p.value > 0}
    corrupted = {p.port: p.value for p in errors if p.value > 0}
    lost = {
        port: dropped.get(port, 0.0) + corrupted.get(port, 0.0) for port in dropped.keys() | corrupted.keys()
    }
    findings = []
    for port, value in sorted(lost.items(), key=lambda item: (-item[1], item[0])):
        what = [f"{dropped[port]:.0f} dropped"] if port in dropped else []
        what += [f"{corrupted[port]:.0f} receive errors"] if port in corrupted else []
        finding = scenario_pb2.Finding(
            kind=scenario_pb2.FINDING_KIND_LOSSY_LINK,
            severity=scenario_pb2.SEVERITY_CRITICAL,
            ports=[port],
            evidence=f"{value:.0f} packets lost on {port} in the window ({', '.join(what)})",
            suggestion=(
                "Check the transceiver and cable of this link (symbol errors, BER); with RoCEv2 every "
                "drop costs a Go-Back-N resend of the window."
            ),
        )
        if window is not None:
            finding.time_range.CopyFrom(window)
        findings.append(finding)
    return findings
