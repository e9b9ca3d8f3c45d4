"""Link health from a source's counters: which links should be DEGRADED, DOWN or UP again.

The telemetry service sums each port's counters over a window (GetPortHealth): bytes received,
symbol errors, receive errors, LinkDownedCounter. A link has two ports, and each port's receive side
sees the direction that ends there, so for each link:

- **DOWN** when LinkDownedCounter (on Ethernet, carrier-down transitions) moved at either end in the
  window: the link dropped, however briefly (a flapping link is not one to route over);
- else **DEGRADED** with the worse direction's estimated bit error rate when it is above
  `ber_threshold`: (symbol errors + receive errors) over bits received, a lower bound of the true
  rate (each counted error is at least one bit in error; a receive error is a packet with one or
  more);
- else **UP**: a DEGRADED link whose rate fell to the threshold or below, and a DOWN link that
  carried traffic in the window without dropping.

A link with no samples at either end, or a DOWN one that carried nothing, keeps its state: the
counters say nothing about it. The default threshold, 1e-12, is the bit error rate InfiniBand and
Ethernet links are specified to (IEEE 802.3, IBTA).

`assess` is pure (links and port health in, verdicts out); `check_links` reads both from the
services and, with `apply=True`, sets every change with one SetLinkStates: one routing version, all
or nothing, streamed to WatchFabric.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping

from fabrictwin.client import Client
from fabrictwin.errors import InvalidArgumentError
from fabrictwin.v1 import telemetry_pb2, topology_pb2

__all__ = ["DEFAULT_BER_THRESHOLD", "HealthReport", "LinkVerdict", "apply_verdicts", "assess", "check_links"]

DEFAULT_BER_THRESHOLD = 1e-12
_MAX_BER = 0.5  # a DEGRADED link's rate must be below 1; half the bits wrong is noise already

_STATE_NAMES = {
    topology_pb2.LINK_STATE_UP: "UP",
    topology_pb2.LINK_STATE_DOWN: "DOWN",
    topology_pb2.LINK_STATE_DEGRADED: "DEGRADED",
}


@dataclasses.dataclass(frozen=True)
class LinkVerdict:
    """What the counters say of one link: its state now, the state they call for, and why."""

    index: int
    name: str  # display name
    current: str  # UP, DOWN or DEGRADED
    state: str
    bit_error_rate: float  # DEGRADED only, else 0
    reason: str
    stored_ber: float = 0.0  # the link's bit error rate now (DEGRADED only)

    @property
    def changed(self) -> bool:
        """True when applying it would change the link."""
        return self.state != self.current or (
            self.state == "DEGRADED" and self.bit_error_rate != self.stored_ber
        )


@dataclasses.dataclass(frozen=True)
class HealthReport:
    """Verdicts for every link the counters cover, the window read, and what applying them did."""

    fabric: str
    window: tuple[int, int]
    verdicts: list[LinkVerdict]
    applied: topology_pb2.SetLinkStatesResponse | None = None

    @property
    def changes(self) -> list[LinkVerdict]:
        """The verdicts that would change (or changed) a link."""
        return [v for v in self.verdicts if v.changed]


def _check_threshold(ber_threshold: float) -> None:
    if not (isinstance(ber_threshold, (int, float)) and 0.0 < ber_threshold < 1.0):
        raise InvalidArgumentError(f"ber_threshold: must be in (0, 1), got {ber_threshold!r}")


def _port_key(node: str, port: int) -> str:
    return f"{node.rsplit('/', 1)[-1]}/p{port}"


def _count(value: float) -> float:
    return 0.0 if math.isnan(value) else value


def _judge(
    current: str, ends: list[tuple[str, telemetry_pb2.PortHealth]], ber_threshold: float
) -> tuple[str, float, str]:
    """(state, bit error rate, reason) for a link now `current` whose ports' health is `ends`."""
    downed = [(key, _count(h.link_downed)) for key, h in ends if _count(h.link_downed) > 0]
    if downed:
        where = ", ".join(f"{key} {count:g}x" for key, count in downed)
        return "DOWN", 0.0, f"LinkDownedCounter moved ({where})"
    rated = [(h.estimated_ber, key, h) for key, h in ends if not math.isnan(h.estimated_ber)]
    worst = max(rated, default=None, key=lambda r: r[0])
    if worst is not None and worst[0] > ber_threshold:
        ber, key, h = worst
        errors = _count(h.symbol_errors) + _count(h.rcv_errors)
        bits = _count(h.rx_bytes) * 8
        return (
            "DEGRADED",
            min(ber, _MAX_BER),
            f"estimated BER {ber:.3g} at {key} ({errors:g} errors in {bits:.4g} bits)",
        )
    carried = sum(_count(h.rx_bytes) for _, h in ends) * 8
    if current == "DOWN" and carried <= 0:
        return "DOWN", 0.0, "no traffic in the window: nothing says it is back"
    shown = "no errors" if worst is None or worst[0] == 0 else f"estimated BER {worst[0]:.3g}"
    return "UP", 0.0, f"{shown} over {carried:.4g} bits (threshold {ber_threshold:g})"


def assess(
    links: Iterable[topology_pb2.Link],
    ports: Iterable[telemetry_pb2.PortHealth],
    *,
    ber_threshold: float = DEFAULT_BER_THRESHOLD,
) -> list[LinkVerdict]:
    """A verdict for every link with samples at one end at least, in link order (see the module)."""
    _check_threshold(ber_threshold)
    health: Mapping[str, telemetry_pb2.PortHealth] = {p.port: p for p in ports}
    verdicts = []
    for link in links:
        keys = (_port_key(link.node_a, link.port_a), _port_key(link.node_b, link.port_b))
        ends = [(key, health[key]) for key in keys if key in health]
        if not ends:
            continue
        current = _STATE_NAMES.get(link.state, "UP")
        state, ber, reason = _judge(current, ends, ber_threshold)
        stored = link.bit_error_rate if current == "DEGRADED" else 0.0
        verdicts.append(LinkVerdict(link.index, link.display_name, current, state, ber, reason, stored))
    return verdicts


def check_links(
    client: Client,
    source: str,
    *,
    window_ns: int,
    ber_threshold: float = DEFAULT_BER_THRESHOLD,
    apply: bool = False,
) -> HealthReport:
    """Assess the links of `source`'s fabric from its last `window_ns` of counters; with `apply`,
    set every change in one SetLinkStates (one routing version; nothing changes when one fails)."""
    _check_threshold(ber_threshold)
    record = client.telemetry.get_source(source)
    if not record.fabric:
        raise InvalidArgumentError(f"source: {record.name} names no fabric; its ports map to no links")
    health = client.telemetry.port_health(source, window_ns=window_ns)
    links = client.fabrics.links(record.fabric, page_size=10_000)
    verdicts = assess(links, health.ports, ber_threshold=ber_threshold)
    report = HealthReport(record.fabric, (health.time_range.start_ns, health.time_range.end_ns), verdicts)
    if apply and report.changes:
        report = dataclasses.replace(report, applied=apply_verdicts(client, record.fabric, report.changes))
    return report


def apply_verdicts(
    client: Client, fabric: str, verdicts: Iterable[LinkVerdict]
) -> topology_pb2.SetLinkStatesResponse | None:
    """Set the links the verdicts change, all in one SetLinkStates (None when none changes)."""
    changes = [(v.index, v.state, v.bit_error_rate) for v in verdicts if v.changed]
    return client.fabrics.set_link_states(fabric, changes) if changes else None
