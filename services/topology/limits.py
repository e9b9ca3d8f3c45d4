"""What a fabric may hold: fixed bounds of its numbers, and the service's configurable size limits.

Bounds (documented in topology.proto) follow from the encodings: a port number is 1..65535 because
forwarding tables hold 16-bit ports (in snapshots and in opensm-lfts dumps); a LID is 16 bits; a
link's rate in bit/s and its latency in ns are int64 that the simulator adds up, so speeds stay in
[1e-6, 1.6e6] Gb/s and latencies in [0, 1 s]; a node name fits the store's column. A number out of
its bounds is InvalidArgument naming the field or line, checked before any arithmetic on it.

Limits (`FabricLimits`) bound what one request may make the service build: nodes, links, ports per
switch and the labels' total size. A fabric beyond them is ResourceExhausted naming the estimate and
the limit, refused before anything is built, from the generator's parameters or a dump's header.
The defaults fit a 2-core machine: the largest allowed fabric builds, routes and stores in seconds
and a few hundred MB (a k=48 fat-tree has 30,528 nodes and 82,944 links).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from services.common.errors import InvalidArgument, ResourceExhausted, quote

__all__ = [
    "DEFAULT_LIMITS",
    "MAX_LID",
    "MAX_LINK_LATENCY_NS",
    "MAX_LINK_SPEED_GBPS",
    "MAX_NAME_CHARS",
    "MAX_PORT",
    "MAX_TAG",
    "MIN_LINK_SPEED_GBPS",
    "FabricLimits",
    "FabricSize",
    "check_latency_ns",
    "check_speed_gbps",
    "check_whole",
]

MAX_PORT = 65_535  # forwarding tables hold uint16 ports
MAX_LID = 65_535  # InfiniBand LIDs are 16 bits
MIN_LINK_SPEED_GBPS = 1e-6  # 1 kb/s
MAX_LINK_SPEED_GBPS = 1.6e6  # 1.6 Pb/s, a thousand times the fastest link made
MAX_LINK_LATENCY_NS = 1_000_000_000  # 1 s
MAX_NAME_CHARS = 256  # the store's node name column
MAX_TAG = 2**31 - 1  # rails, groups: int32


def check_whole(value: Any, field: str, low: int, high: int) -> int:
    """`value` as an int in low..high; InvalidArgument naming `field` otherwise (bools are not numbers).

    >>> check_whole(7, "a_port", 1, MAX_PORT)
    7
    """
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise InvalidArgument(field, f"must be a whole number, got {quote(value, 40)}")
    value = int(value)
    if not low <= value <= high:
        raise InvalidArgument(field, f"must be in {low:,}..{high:,}, got {_short(value)}")
    return value


def check_speed_gbps(gbps: Any, field: str) -> float:
    """A link speed in Gb/s within [MIN_LINK_SPEED_GBPS, MAX_LINK_SPEED_GBPS]; InvalidArgument otherwise.

    >>> check_speed_gbps(400, "speed_gbps")
    400.0
    """
    if isinstance(gbps, bool) or not isinstance(gbps, int | float | np.number):
        raise InvalidArgument(field, f"must be a number of Gb/s, got {quote(gbps, 40)}")
    try:
        value = float(gbps)
    except OverflowError:  # an int beyond any float
        value = math.inf
    if not MIN_LINK_SPEED_GBPS <= value <= MAX_LINK_SPEED_GBPS:  # NaN fails too
        raise InvalidArgument(
            field, f"must be in [{MIN_LINK_SPEED_GBPS:g}, {MAX_LINK_SPEED_GBPS:g}] Gb/s, got {_short(gbps)}"
        )
    return value


def check_latency_ns(value: Any, field: str) -> int:
    """A link latency in whole ns within 0..MAX_LINK_LATENCY_NS; InvalidArgument otherwise."""
    return check_whole(value, field, 0, MAX_LINK_LATENCY_NS)


def _short(value: Any) -> str:
    """A number for an error message: digits of a huge int are not worth quoting in full."""
    if isinstance(value, int) and abs(value) >= 10**30:  # str() of a 4,300-digit int would even fail
        return f"a {value.bit_length()}-bit number"
    return f"{value:,}" if isinstance(value, int) else f"{value!r}"


@dataclasses.dataclass(frozen=True)
class FabricSize:
    """What building a fabric would make: counted from a generator's parameters or a dump's header."""

    nodes: int
    links: int
    ports_per_switch: int = 0  # the most ports any one node (switch, or host in a dump) would have


# (attribute, config key / flag, unit, ceiling)
_KNOBS = (
    ("max_nodes", "max_fabric_nodes", "nodes", None),
    ("max_links", "max_fabric_links", "links", None),
    ("max_ports_per_switch", "max_fabric_ports", "ports per switch", MAX_PORT),
    ("max_label_bytes", "max_label_bytes", "bytes of labels", None),
)


@dataclasses.dataclass(frozen=True)
class FabricLimits:
    """The most one fabric may hold on this service (flags `--max-fabric-nodes` etc., see `flags`)."""

    max_nodes: int = 131_072
    max_links: int = 262_144
    max_ports_per_switch: int = MAX_PORT
    max_label_bytes: int = 16_384

    @classmethod
    def from_config(cls, extra: Mapping[str, Any]) -> FabricLimits:
        """The limits in a service config's `extra` (defaults where absent); ValueError naming the flag
        for a value that cannot work."""
        values = {}
        for attribute, key, _, ceiling in _KNOBS:
            value = extra.get(key)
            if value is None:
                continue
            flag = "--" + key.replace("_", "-")
            if value <= 0:
                raise ValueError(f"{flag}={value}: must be positive")
            if ceiling is not None and value > ceiling:
                raise ValueError(f"{flag}={value}: at most {ceiling} (forwarding tables hold 16-bit ports)")
            values[attribute] = int(value)
        return cls(**values)

    def admit(self, size: FabricSize, what: str = "the fabric") -> None:
        """ResourceExhausted naming the estimate and the limit when `size` is beyond the limits."""
        for count, limit, unit in (
            (size.links, self.max_links, "links"),
            (size.nodes, self.max_nodes, "nodes"),
        ):
            if count > limit:
                raise ResourceExhausted(
                    f"{what} would have {count:,} {unit}; this service takes at most {limit:,} {unit} "
                    "per fabric"
                )
        if size.ports_per_switch > self.max_ports_per_switch:
            raise ResourceExhausted(
                f"{what} would have a node with {size.ports_per_switch:,} ports; a node has at most "
                f"{self.max_ports_per_switch:,} ports here (forwarding tables hold 16-bit port numbers)"
            )

    def admit_labels(self, labels: Mapping[str, str], field: str = "labels") -> None:
        """ResourceExhausted when the labels' keys and values together exceed `max_label_bytes` (UTF-8)."""
        size = sum(len(key.encode()) + len(value.encode()) for key, value in labels.items())
        if size > self.max_label_bytes:
            raise ResourceExhausted(
                f"{field}: {size:,} bytes of keys and values; "
                f"at most {self.max_label_bytes:,} bytes per fabric"
            )


DEFAULT_LIMITS = FabricLimits()


def flags(parser: Any) -> None:
    """Add `--max-fabric-nodes`, `--max-fabric-links`, `--max-fabric-ports` and `--max-label-bytes`
    (each also FABRICTWIN_MAX_...) to a service's argument parser."""
    for attribute, key, unit, _ in _KNOBS:
        default = getattr(DEFAULT_LIMITS, attribute)
        parser.add_argument(
            "--" + key.replace("_", "-"),
            dest=key,
            type=int,
            default=default,
            help=f"refuse fabrics with more {unit} (RESOURCE_EXHAUSTED); default {default}",
        )
