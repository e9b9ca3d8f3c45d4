"""The fabric model: nodes and links of a network held as numpy arrays, one entry per node or link.

A `Fabric` is plain data. Generators (`generators.py`) and, later, importers build one; routing
engines (`routing/`) read it; the store (`store.py`) writes it as rows. Conventions:

- nodes are indexed 0..N-1; hosts are the nodes whose kind is HOST, numbered 0..H-1 in node order
  (`host_nodes[h]` is the node of host h); LIDs are 1..N in node order unless a dump gives them;
- links are indexed 0..L-1; a link joins port `link_port_a` of node `link_a` to port `link_port_b` of
  node `link_b`; ports are numbered from 1 on each node; generators put the upper tier on the a side;
- channel 2*l is link l in the a->b direction and channel 2*l+1 the b->a direction (as in snapshots);
- rates are bits per second, latencies integer nanoseconds; IPv4 addresses are uint32 (0 = none).
"""

from __future__ import annotations

import dataclasses
import enum
import functools

import numpy as np

from services.common.errors import InvalidArgument, quote
from services.topology.limits import (
    MAX_LINK_LATENCY_NS,
    MAX_LINK_SPEED_GBPS,
    MAX_NAME_CHARS,
    MAX_PORT,
    MIN_LINK_SPEED_GBPS,
)

__all__ = [
    "MAX_SWITCH_HOST_PAIRS",
    "Fabric",
    "LinkState",
    "NodeKind",
    "format_ipv4",
    "link_display_names",
]

# Forwarding tables hold one LFT port per (switch, destination host) (uint8: 1 byte each); beyond this
# many the tables pass 200 MB, so generators refuse such fabrics up front (k=32 has 10.5 million).
MAX_SWITCH_HOST_PAIRS = 200_000_000


class NodeKind(enum.IntEnum):
    """What a node is; values are fabrictwin.v1.NodeKind."""

    HOST = 1
    SWITCH = 2


class LinkState(enum.IntEnum):
    """Operational state of a link; values are fabrictwin.v1.LinkState."""

    UP = 1
    DOWN = 2
    DEGRADED = 3


def format_ipv4(address: int) -> str:
    """Dotted form of a uint32 IPv4 address; 0 (no address) gives ''.

    >>> format_ipv4(0x0A010203)
    '10.1.2.3'
    """
    address = int(address)
    if address == 0:
        return ""
    return ".".join(str((address >> shift) & 0xFF) for shift in (24, 16, 8, 0))


def link_display_names(
    node_names: list[str], a: np.ndarray, port_a: np.ndarray, b: np.ndarray, port_b: np.ndarray
) -> list[str]:
    """Readable link names such as `spine-3/p5<->leaf-1/p33`."""
    return [
        f"{node_names[i]}/p{pi}<->{node_names[j]}/p{pj}"
        for i, pi, j, pj in zip(a.tolist(), port_a.tolist(), b.tolist(), port_b.tolist(), strict=True)
    ]


@dataclasses.dataclass(eq=False)
class Fabric:
    """A fabric as parallel arrays: `node_*` have one entry per node, `link_*` one per link."""

    node_kind: np.ndarray  # int8 [N], NodeKind
    node_tier: np.ndarray  # int8 [N], 0 host, 1 leaf/edge, 2 spine/aggregation, 3 core
    node_names: list[str]
    node_radix: np.ndarray  # int32 [N], number of ports
    node_group: np.ndarray  # int32 [N], pod / scalable unit, -1 if none
    node_rail: np.ndarray  # int32 [N], rail of a host in rail-optimised designs, else -1
    node_guid: np.ndarray  # uint64 [N], 0 where unknown
    node_lid: np.ndarray  # int32 [N]
    node_ip: np.ndarray  # uint32 [N], hosts' IPv4 address, 0 for switches
    link_a: np.ndarray  # int32 [L]
    link_port_a: np.ndarray  # int32 [L]
    link_b: np.ndarray  # int32 [L]
    link_port_b: np.ndarray  # int32 [L]
    link_rate_bps: np.ndarray  # int64 [L]
    link_latency_ns: np.ndarray  # int64 [L]
    link_state: np.ndarray  # int8 [L], LinkState
    link_ber: np.ndarray  # float64 [L], bit error rate (meaningful while DEGRADED)
    link_names: list[str]
    # Interface names of each link's ends where the source knows them (LLDP: `swp3`), else None.
    link_port_names: tuple[list[str], list[str]] | None = None
    # What an importer noticed and accepted (links seen from one end only, ...), one line each.
    import_notes: list[str] = dataclasses.field(default_factory=list)

    @property
    def num_nodes(self) -> int:
        return int(self.node_kind.shape[0])

    @property
    def num_links(self) -> int:
        return int(self.link_a.shape[0])

    @functools.cached_property
    def host_nodes(self) -> np.ndarray:
        """[H] int32: node index of each host, in node order."""
        return np.flatnonzero(self.node_kind == NodeKind.HOST).astype(np.int32)

    @functools.cached_property
    def node_host(self) -> np.ndarray:
        """[N] int32: host index of each node, -1 for switches."""
        out = np.full(self.num_nodes, -1, dtype=np.int32)
        out[self.host_nodes] = np.arange(self.host_nodes.shape[0], dtype=np.int32)
        return out

    @property
    def num_hosts(self) -> int:
        return int(self.host_nodes.shape[0])

    @property
    def num_switches(self) -> int:
        return int(np.count_nonzero(self.node_kind == NodeKind.SWITCH))

    @functools.cached_property
    def _node_by_name(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.node_names)}

    @functools.cached_property
    def _link_by_name(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.link_names)}

    def node_index(self, name: str) -> int | None:
        """Index of the node with this readable name, or None."""
        return self._node_by_name.get(name)

    def link_index(self, name: str) -> int | None:
        """Index of the link with this readable name, or None."""
        return self._link_by_name.get(name)

    def channel_port(self) -> np.ndarray:
        """[2L] int32: the port each channel leaves its node by (port_a for a->b, port_b for b->a)."""
        out = np.empty(2 * self.num_links, dtype=np.int32)
        out[0::2] = self.link_port_a
        out[1::2] = self.link_port_b
        return out

    def validate(self) -> None:
        """Check the arrays agree with each other; raises InvalidArgument naming what is wrong.

        Generators build valid fabrics; importers (issue #3) call this on what they parsed.
        """
        n, links = self.num_nodes, self.num_links
        for name in (
            "node_tier",
            "node_radix",
            "node_group",
            "node_rail",
            "node_guid",
            "node_lid",
            "node_ip",
        ):
            if getattr(self, name).shape != (n,):
                raise InvalidArgument(name, f"has shape {getattr(self, name).shape}, expected ({n},)")
        if len(self.node_names) != n:
            raise InvalidArgument("node_names", f"has {len(self.node_names)} entries for {n} nodes")
        if len(set(self.node_names)) != n:
            raise InvalidArgument("node_names", "node names must be unique")
        too_long = next((i for i, name in enumerate(self.node_names) if len(name) > MAX_NAME_CHARS), None)
        if too_long is not None:
            name = self.node_names[too_long]
            raise InvalidArgument(
                f"node_names[{too_long}]",
                f"at most {MAX_NAME_CHARS} characters, got {len(name):,}: {quote(name, 60)}",
            )
        if n and not 1 <= self.node_radix.min() <= self.node_radix.max() <= MAX_PORT:
            raise InvalidArgument("node_radix", f"every node has 1..{MAX_PORT} ports")
        for name in (
            "link_port_a",
            "link_b",
            "link_port_b",
            "link_rate_bps",
            "link_latency_ns",
            "link_state",
            "link_ber",
        ):
            if getattr(self, name).shape != (links,):
                raise InvalidArgument(name, f"has shape {getattr(self, name).shape}, expected ({links},)")
        if len(self.link_names) != links:
            raise InvalidArgument("link_names", f"has {len(self.link_names)} entries for {links} links")
        if self.link_port_names is not None and any(len(side) != links for side in self.link_port_names):
            raise InvalidArgument("link_port_names", f"needs two lists of {links} interface names")
        if not np.isin(self.node_kind, [NodeKind.HOST, NodeKind.SWITCH]).all():
            raise InvalidArgument("node_kind", "every node must be a HOST or a SWITCH")
        ends = np.concatenate([self.link_a, self.link_b])
        if links and (ends.min() < 0 or ends.max() >= n):
            raise InvalidArgument("links", "a link end refers to a node that does not exist")
        ports = np.concatenate([self.link_port_a, self.link_port_b])
        if links and ports.min() < 1:
            raise InvalidArgument("links", "ports are numbered from 1")
        if links and (ports > self.node_radix[ends]).any():
            bad = int(np.flatnonzero(ports > self.node_radix[ends])[0] % links)
            raise InvalidArgument(f"links[{bad}]", f"{self.link_names[bad]} uses a port beyond the radix")
        keys = ends.astype(np.int64) * (int(ports.max(initial=0)) + 1) + ports
        if np.unique(keys).shape[0] != keys.shape[0]:
            raise InvalidArgument("links", "two links use the same port of a node")
        if not np.isin(self.link_state, [s.value for s in LinkState]).all():
            raise InvalidArgument("link_state", "every link must be UP, DOWN or DEGRADED")
        if (self.link_rate_bps <= 0).any():
            raise InvalidArgument("link_rate_bps", "every link needs a positive rate")
        low, high = round(MIN_LINK_SPEED_GBPS * 1e9), round(MAX_LINK_SPEED_GBPS * 1e9)
        if ((self.link_rate_bps < low) | (self.link_rate_bps > high)).any():
            raise InvalidArgument("link_rate_bps", f"every rate is in [{low:,}, {high:,}] bit/s")
        if (self.link_latency_ns < 0).any():
            raise InvalidArgument("link_latency_ns", "latencies must not be negative")
        if (self.link_latency_ns > MAX_LINK_LATENCY_NS).any():
            raise InvalidArgument("link_latency_ns", f"latencies are at most {MAX_LINK_LATENCY_NS:,} ns")
