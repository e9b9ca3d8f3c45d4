"""Diagnosis of per-port telemetry: the signatures the seeds describe.

- ECMP pinning: links of one group far apart in the same window (services/common/pinning.py, the
  rule `telemetry skew` and the mirror apply too): the aggregate bandwidth is there but flows are
  pinned by the hash.
- Lossy link: drops or receive/symbol errors on a link (a marginal transceiver), or packets its
  egress queue discarded (congestion: `tc` qdisc drops, PortXmitDiscards).

The numbers come from the telemetry service (aggregated in SQL there); this module only judges them.
"""

from __future__ import annotations

import dataclasses
import enum
import statistics
from collections.abc import Sequence

from services.common.pinning import DEFAULT_RULE, PinningRule

__all__ = [
    "Finding",
    "FindingKind",
    "PortValue",
    "Severity",
    "Window",
    "ecmp_pinning",
    "lossy_links",
]


class FindingKind(enum.Enum):
    ECMP_PINNING = "ECMP_PINNING"
    LOSSY_LINK = "LOSSY_LINK"


class Severity(enum.IntEnum):
    """Ordered: a larger value is more severe."""

    INFO = 1
    WARNING = 2
    CRITICAL = 3


@dataclasses.dataclass(frozen=True)
class PortValue:
    """One port's aggregate over the window (mean utilisation, summed drops, ...)."""

    port: str
    value: float


@dataclasses.dataclass(frozen=True)
class Window:
    """A time window in ns; `end_ns` 0 means until the newest sample."""

    start_ns: int
    end_ns: int


@dataclasses.dataclass(frozen=True)
class Finding:
    """One thing the diagnosis found, with its evidence in numbers and what to do about it."""

    kind: FindingKind
    severity: Severity
    ports: tuple[str, ...]
    evidence: str
    suggestion: str
    window: Window | None = None


def ecmp_pinning(
    utilisation: Sequence[PortValue], window: Window | None = None, rule: PinningRule = DEFAULT_RULE
) -> Finding | None:
    """A finding when the links are pinned by `rule` (services/common/pinning.py) in the window."""
    ordered = sorted(utilisation, key=lambda p: p.port)
    values = [p.value for p in ordered]
    verdict = rule.judge(values)
    if not verdict.pinned:
        return None
    mean = statistics.fmean(values)
    hot = [ordered[i] for i in verdict.hot]
    idle = [ordered[i] for i in verdict.idle]
    return Finding(
        kind=FindingKind.ECMP_PINNING,
        severity=Severity.WARNING,
        ports=tuple(p.port for p in hot),
        evidence=(
            f"{len(hot)} of {len(values)} links hot while {len(idle)} sit idle in the same window (max "
            f"{max(values):.0%}, mean {mean:.0%}, max/mean {verdict.max_over_mean:.2f}, max - min "
            f"{verdict.spread:.0%}; pinned: {rule.describe()}); hot: {_named(hot)}; idle: {_named(idle)}"
        ),
        suggestion=(
            "Flows are pinned by ECMP hashing of low-entropy RoCEv2 headers. Use per-packet load "
            "balancing (adaptive routing or RSHP spraying), or add entropy (more QPs per connection, "
            "hash the destination QP)."
        ),
        window=window,
    )


def _named(ports: Sequence[PortValue], at_most: int = 5) -> str:
    """`leaf-0/p3 (95%), leaf-1/p4 (90%) and 2 more`."""
    named = ", ".join(f"{p.port} ({p.value:.0%})" for p in ports[:at_most])
    return named + (f" and {len(ports) - at_most} more" if len(ports) > at_most else "")


def lossy_links(
    drops: Sequence[PortValue],
    window: Window | None = None,
    errors: Sequence[PortValue] = (),
    discards: Sequence[PortValue] = (),
) -> list[Finding]:
    """One finding per link that dropped (`drops`), corrupted (`errors`: PortRcvErrors) or discarded
    on transmit (`discards`: its egress queue full) packets in the window, the worst first."""
    dropped = {p.port: p.value for p in drops if p.value > 0}
    corrupted = {p.port: p.value for p in errors if p.value > 0}
    discarded = {p.port: p.value for p in discards if p.value > 0}
    lost = {
        port: dropped.get(port, 0.0) + corrupted.get(port, 0.0) + discarded.get(port, 0.0)
        for port in dropped.keys() | corrupted.keys() | discarded.keys()
    }
    findings: list[Finding] = []
    for port, value in sorted(lost.items(), key=lambda item: (-item[1], item[0])):
        what = [f"{dropped[port]:.0f} dropped"] if port in dropped else []
        what += [f"{corrupted[port]:.0f} receive errors"] if port in corrupted else []
        what += [f"{discarded[port]:.0f} discarded by its egress queue"] if port in discarded else []
        congested = discarded.get(port, 0.0) > dropped.get(port, 0.0) + corrupted.get(port, 0.0)
        finding = Finding(
            kind=FindingKind.LOSSY_LINK,
            severity=Severity.CRITICAL,
            ports=(port,),
            evidence=f"{value:.0f} packets lost on {port} in the window ({', '.join(what)})",
            suggestion=(
                "The port's egress queue overflowed: more was sent through it than it carries. For "
                "RoCEv2 make the priority lossless (PFC) with ECN marking before the queue fills, or "
                "spread the load (the flows pinned on it); every drop costs a Go-Back-N resend."
                if congested
                else "Check the transceiver and cable of this link (symbol errors, BER); with RoCEv2 "
                "every drop costs a Go-Back-N resend of the window."
            ),
            window=window,
        )
        findings.append(finding)
    return findings
