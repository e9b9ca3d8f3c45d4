"""Faults and transport reliability of a simulation: validated here, resolved against a snapshot.

- BIT_ERRORS: independent bit errors at `bit_error_rate` on both directions of a link: a packet of
  b bits is lost with probability 1 - (1 - BER)^b (PortRcvErrors / SymbolErrorCounter at the
  receiving port).
- GILBERT_ELLIOTT: a marginal transceiver's bursty loss: per packet the link moves good -> bad with
  `p_good_to_bad` and bad -> good with `p_bad_to_good`, then loses the packet with the state's loss
  probability (`good_loss`, `bad_loss`).
- LINK_DOWN: the link goes down at `start_ns` (packets on its wire and in its queues are lost,
  LinkDownedCounter counts it, packets routed to it are discarded: PortXmitDiscards) and comes back
  at `end_ns` (0: stays down). The routing reaction (`reroute`: SUBNET_MANAGER, ROUTING_PROTOCOL
  or FAST_RECOVERY) installs routes recomputed without the link after its delay
  (services.simulator.packet.transport), and routes with it again the same delay after it comes back.

Go-Back-N (RoCEv2 reliable connection) is on when `window_bytes` > 0: the sender keeps at most
ceil(window_bytes / mtu) packets unacknowledged, the receiver keeps only the packet it expects and
NAKs the first gap, the sender resends everything from the NAKed PSN, and a retransmission timeout
resends from the oldest unacknowledged packet when a tail or an ACK is lost.
"""

from __future__ import annotations

import dataclasses
import enum

from services.common.errors import InvalidArgument, quote
from services.common.snapshot import FabricSnapshot

__all__ = [
    "DEFAULT_RETRANSMIT_TIMEOUT_NS",
    "FaultKind",
    "FaultSpec",
    "RerouteModel",
    "resolve_link",
    "validate_faults",
]

DEFAULT_RETRANSMIT_TIMEOUT_NS = 100_000


class FaultKind(enum.StrEnum):
    BIT_ERRORS = "BIT_ERRORS"
    GILBERT_ELLIOTT = "GILBERT_ELLIOTT"
    LINK_DOWN = "LINK_DOWN"


class RerouteModel(enum.StrEnum):
    SUBNET_MANAGER = "SUBNET_MANAGER"
    ROUTING_PROTOCOL = "ROUTING_PROTOCOL"
    FAST_RECOVERY = "FAST_RECOVERY"


@dataclasses.dataclass(frozen=True)
class FaultSpec:
    """A fault on one link (by name, index or `fabrics/f/links/l`), in simulated time."""

    link: str
    kind: FaultKind | None
    start_ns: int = 0
    end_ns: int = 0
    bit_error_rate: float = 0.0
    good_loss: float = 0.0
    bad_loss: float = 0.0
    p_good_to_bad: float = 0.0
    p_bad_to_good: float = 0.0
    reroute: RerouteModel | None = None  # LINK_DOWN only
    reroute_delay_ns: int = 0  # 0: the model's default


def _probability(value: float, field: str) -> None:
    if not 0.0 <= value <= 1.0:
        raise InvalidArgument(field, f"a probability must be in [0, 1], got {value}")


def validate_faults(faults: tuple[FaultSpec, ...], time_limit_ns: int = 0) -> None:
    """What can be judged without the fabric; names `faults[i].<field>`."""
    for i, fault in enumerate(faults):
        field = f"faults[{i}]"
        if not fault.link:
            raise InvalidArgument(f"{field}.link", "required (a link name or index)")
        if fault.kind is None:
            raise InvalidArgument(f"{field}.kind", "required (BIT_ERRORS, GILBERT_ELLIOTT or LINK_DOWN)")
        if fault.kind == FaultKind.LINK_DOWN:
            if fault.reroute is None:
                raise InvalidArgument(
                    f"{field}.reroute",
                    "LINK_DOWN needs the routing reaction: SUBNET_MANAGER, ROUTING_PROTOCOL or FAST_RECOVERY",
                )
        elif fault.reroute is not None or fault.reroute_delay_ns:
            raise InvalidArgument(f"{field}.reroute", f"applies to LINK_DOWN only, not {fault.kind.value}")
        if fault.reroute_delay_ns < 0:
            raise InvalidArgument(f"{field}.reroute_delay_ns", "must not be negative")
        if fault.start_ns < 0 or fault.end_ns < 0:
            raise InvalidArgument(f"{field}.start_ns", "times must not be negative")
        if time_limit_ns and fault.start_ns >= time_limit_ns:
            raise InvalidArgument(
                f"{field}.start_ns", f"{fault.start_ns} is outside the run (time_limit_ns={time_limit_ns})"
            )
        if fault.end_ns and fault.end_ns <= fault.start_ns:
            raise InvalidArgument(
                f"{field}.end_ns", f"must be after start_ns={fault.start_ns} (or 0: no end)"
            )
        if fault.kind == FaultKind.BIT_ERRORS and not 0.0 < fault.bit_error_rate < 1.0:
            raise InvalidArgument(f"{field}.bit_error_rate", f"must be in (0, 1), got {fault.bit_error_rate}")
        if fault.kind == FaultKind.GILBERT_ELLIOTT:
            for name in ("good_loss", "bad_loss", "p_good_to_bad", "p_bad_to_good"):
                _probability(getattr(fault, name), f"{field}.{name}")
            if fault.p_good_to_bad == 0.0 and fault.good_loss == 0.0:
                raise InvalidArgument(
                    f"{field}.p_good_to_bad", "with good_loss 0 it must be > 0, or nothing is lost"
                )


def resolve_link(snapshot: FabricSnapshot, name: str, field: str) -> int:
    """A link index from `12`, `fabrics/f/links/12` or a link's display name."""
    tail = name.rsplit("/links/", 1)[-1]
    if tail.isdigit() and int(tail) < snapshot.num_links:
        return int(tail)
    try:
        return snapshot.link_names.index(tail)
    except ValueError:
        raise InvalidArgument(field, f"{quote(name)} is not a link of {snapshot.fabric}") from None
