"""Building blocks the generators share: parameter checks, IPv4 packing, and assembling a Fabric.

Every generator checks its parameters with `whole_number` / `rate_bps` (errors name the parameter
through a `FieldName` callback, so `from_spec` can report `spec.fat_tree.k`), then hands node tiers
and link end arrays to `assemble` (upper tier on the a side, LIDs 1..N in node order, GUIDs 0).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from services.common.errors import InvalidArgument, quote
from services.topology.fabric import MAX_SWITCH_HOST_PAIRS, Fabric, LinkState, NodeKind, link_display_names
from services.topology.limits import FabricSize, check_latency_ns, check_speed_gbps

__all__ = [
    "DEFAULT_LINK_LATENCY_NS",
    "DEFAULT_LINK_SPEED_GBPS",
    "Admit",
    "FieldName",
    "assemble",
    "check_routable_size",
    "ipv4",
    "link_parameters",
    "rate_bps",
    "same_name",
    "whole_number",
]

DEFAULT_LINK_SPEED_GBPS = 400.0  # NDR
DEFAULT_LINK_LATENCY_NS = 500  # about 100 m of fibre

FieldName = Callable[[str], str]
# Called by a generator with the size it is about to build, once its parameters are checked and
# before anything is allocated; raises ResourceExhausted to refuse (FabricLimits.admit).
Admit = Callable[[FabricSize], None]


def same_name(param: str) -> str:
    """The FieldName of direct calls: a parameter is reported by its own name."""
    return param


def whole_number(value: Any, field: str, minimum: int) -> int:
    """`value` as an int >= minimum; InvalidArgument naming `field` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise InvalidArgument(field, f"must be a whole number, got {quote(value, 40)}")
    if value < minimum:
        raise InvalidArgument(field, f"must be at least {minimum}, got {value}")
    return int(value)


def rate_bps(gbps: Any, field: str) -> int:
    """A speed in Gb/s (within the bounds of limits.py) as bits per second; InvalidArgument naming
    `field` otherwise."""
    if isinstance(gbps, int | float | np.number) and not isinstance(gbps, bool) and gbps <= 0:
        raise InvalidArgument(field, f"must be positive, got {gbps}")
    return round(check_speed_gbps(gbps, field) * 1e9)


def link_parameters(
    link_speed_gbps: Any, host_link_speed_gbps: Any, link_latency_ns: Any, field: FieldName
) -> tuple[int, int, int]:
    """(switch link rate, host link rate, latency) of a generator's parameters, checked and named."""
    latency = check_latency_ns(link_latency_ns, field("link_latency_ns"))
    rate = rate_bps(link_speed_gbps, field("link_speed_gbps"))
    host_rate = (
        rate
        if host_link_speed_gbps is None
        else rate_bps(host_link_speed_gbps, field("host_link_speed_gbps"))
    )
    return rate, host_rate, latency


def check_routable_size(switches: int, hosts: int, field: str) -> None:
    """Refuse fabrics whose forwarding tables (one LFT entry per switch and host) would not fit."""
    if switches * hosts > MAX_SWITCH_HOST_PAIRS:
        raise InvalidArgument(
            field,
            f"{switches} switches x {hosts} hosts is too large to route "
            f"(limit {MAX_SWITCH_HOST_PAIRS} forwarding-table entries)",
        )


def ipv4(first: Any, second: Any, third: Any, fourth: Any) -> np.ndarray:
    """uint32 addresses first.second.third.fourth, element-wise."""
    parts = [np.asarray(x, dtype=np.uint32) for x in (first, second, third, fourth)]
    return (parts[0] << 24) | (parts[1] << 16) | (parts[2] << 8) | parts[3]


def assemble(
    *,
    tier: np.ndarray,
    names: list[str],
    radix: np.ndarray,
    group: np.ndarray,
    host_ip: np.ndarray,
    links: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    link_rate_bps: np.ndarray,
    latency_ns: int,
    host_rail: np.ndarray | None = None,
) -> Fabric:
    """A Fabric from per-node tiers (0 = host), link ends (a, port_a, b, port_b) and the defaults
    generators share: hosts' rails -1 unless given, LIDs 1..N, GUIDs 0, every link UP."""
    n = tier.shape[0]
    kind = np.where(tier == 0, NodeKind.HOST, NodeKind.SWITCH).astype(np.int8)
    ip = np.zeros(n, dtype=np.uint32)
    ip[kind == NodeKind.HOST] = host_ip
    rail = np.full(n, -1, dtype=np.int32)
    if host_rail is not None:
        rail[kind == NodeKind.HOST] = host_rail
    a, port_a, b, port_b = (np.asarray(x).astype(np.int32) for x in links)
    num_links = a.shape[0]
    return Fabric(
        node_kind=kind,
        node_tier=tier.astype(np.int8),
        node_names=names,
        node_radix=radix.astype(np.int32),
        node_group=group.astype(np.int32),
        node_rail=rail,
        node_guid=np.zeros(n, dtype=np.uint64),
        node_lid=np.arange(1, n + 1, dtype=np.int32),
        node_ip=ip,
        link_a=a,
        link_port_a=port_a,
        link_b=b,
        link_port_b=port_b,
        link_rate_bps=np.asarray(link_rate_bps).astype(np.int64),
        link_latency_ns=np.full(num_links, latency_ns, dtype=np.int64),
        link_state=np.full(num_links, LinkState.UP, dtype=np.int8),
        link_ber=np.zeros(num_links, dtype=np.float64),
        link_names=link_display_names(names, a, port_a, b, port_b),
    )
