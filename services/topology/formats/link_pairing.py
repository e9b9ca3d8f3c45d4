"""Pairing a dump's port lines into links: every link is listed from both ends, and the ends must agree.

A port line says "port p of node X is cabled to port q of node Y" (with an optional rate). Line i
and line j are the two ends of one link when i names j's (node, port) and j names i's. The check
is vectorised: (node, port) keys are sorted once and every line's peer key is found with
`searchsorted`, so a 10,000-line dump pairs in a few milliseconds; only the first problem, in file
order, becomes the error (naming both lines where there are two).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from services.common.errors import InvalidArgument, excerpt

__all__ = ["PairedLinks", "PortLines", "pair_port_lines"]


@dataclass
class PortLines:
    """Port lines as parsed: parallel lists, peer still a node id (resolved once all blocks are read)."""

    node: list[int] = field(default_factory=list)
    port: list[int] = field(default_factory=list)
    peer_id: list[str] = field(default_factory=list)
    peer_port: list[int] = field(default_factory=list)
    rate_bps: list[int] = field(default_factory=list)  # -1: the line gives no rate
    line: list[int] = field(default_factory=list)

    def add(self, node: int, port: int, peer_id: str, peer_port: int, rate_bps: int, line: int) -> None:
        self.node.append(node)
        self.port.append(port)
        self.peer_id.append(peer_id)
        self.peer_port.append(peer_port)
        self.rate_bps.append(rate_bps)
        self.line.append(line)


@dataclass
class PairedLinks:
    """One entry per link, a = the end listed first in the file; rate -1 where neither end gives one."""

    a: np.ndarray
    port_a: np.ndarray
    b: np.ndarray
    port_b: np.ndarray
    rate_bps: np.ndarray


def pair_port_lines(
    ports: PortLines,
    node_index: dict[str, int],
    names: list[str],
    radix: list[int],
    rate_mismatch: Literal["error", "slower"] = "error",
) -> PairedLinks:
    """Links from port lines; InvalidArgument(f"line {n}", ...) for a line without its other end,
    two lines for one port, ends that disagree, or (with rate_mismatch="error") different rates."""
    line = np.asarray(ports.line, dtype=np.int64)
    count = line.shape[0]
    if count == 0:
        empty = np.zeros(0, dtype=np.int64)
        return PairedLinks(empty, empty, empty, empty, empty)
    peer = np.asarray([node_index.get(p, -1) for p in ports.peer_id], dtype=np.int64)
    unknown = np.flatnonzero(peer < 0)
    if unknown.size:
        i = int(unknown[0])
        raise InvalidArgument(
            f"line {line[i]}", f'peer "{excerpt(ports.peer_id[i])}" has no Switch or Ca block in this dump'
        )
    node = np.asarray(ports.node, dtype=np.int64)
    port = np.asarray(ports.port, dtype=np.int64)
    peer_port = np.asarray(ports.peer_port, dtype=np.int64)
    rate = np.asarray(ports.rate_bps, dtype=np.int64)
    stride = int(max(port.max(), peer_port.max())) + 1
    key = node * stride + port
    peer_key = peer * stride + peer_port

    order = np.argsort(key, kind="stable")
    sorted_key = key[order]
    repeated = np.flatnonzero(sorted_key[1:] == sorted_key[:-1])
    if repeated.size:
        first, second = sorted(int(x) for x in order[[repeated[0], repeated[0] + 1]])
        raise InvalidArgument(
            f"line {line[second]}",
            f"port {port[second]} of {names[node[second]]} is already listed on line {line[first]}",
        )
    itself = np.flatnonzero(key == peer_key)
    if itself.size:
        i = int(itself[0])
        raise InvalidArgument(f"line {line[i]}", "a port cannot be cabled to itself")

    position = np.minimum(np.searchsorted(sorted_key, peer_key), count - 1)
    other = order[position]  # the line listing the peer's port, if there is one
    found = sorted_key[position] == peer_key
    beyond = peer_port > np.asarray(radix, dtype=np.int64)[peer]
    problems = np.flatnonzero(~found | (peer_key[other] != key) | beyond)
    if problems.size:
        i = int(problems[np.argmin(line[problems])])
        _raise_disagreement(i, int(other[i]), bool(found[i]), bool(beyond[i]), ports, names, radix, peer)

    both = (rate >= 0) & (rate[other] >= 0)
    differ = np.flatnonzero(both & (rate != rate[other]))
    if differ.size and rate_mismatch == "error":
        i = int(differ[np.argmin(line[differ])])
        j = int(other[i])
        raise InvalidArgument(
            f"line {line[i]}",
            f"{names[node[i]]} port {port[i]} reports {rate[i] / 1e9:g} Gb/s but the other end, "
            f"line {line[j]}, reports {rate[j] / 1e9:g} Gb/s; a link's two ends must agree on width x speed "
            "(set take_slower_end_on_speed_mismatch to import it at the slower end's rate)",
        )
    # Where only one end gives a rate, that rate is the link's; where both do, the lower one (equal
    # unless rate_mismatch="slower" let a disagreement through).
    link_rate = np.where(both, np.minimum(rate, rate[other]), np.maximum(rate, rate[other]))
    first_end = np.flatnonzero(line < line[other])
    return PairedLinks(
        a=node[first_end],
        port_a=port[first_end],
        b=peer[first_end],
        port_b=peer_port[first_end],
        rate_bps=link_rate[first_end],
    )


def _raise_disagreement(
    i: int,
    j: int,
    found: bool,
    beyond: bool,
    ports: PortLines,
    names: list[str],
    radix: list[int],
    peer: np.ndarray,
) -> None:
    node, port, line = ports.node[i], ports.port[i], ports.line[i]
    peer_node, peer_port = int(peer[i]), ports.peer_port[i]
    says = f"{names[node]} port {port} is cabled to {names[peer_node]} port {peer_port}"
    if beyond:
        raise InvalidArgument(f"line {line}", f"{says}, but {names[peer_node]} has {radix[peer_node]} ports")
    if not found:
        raise InvalidArgument(
            f"line {line}",
            f"{says}, but {names[peer_node]}'s block has no line for port {peer_port} "
            f"(expected its other end, a line `[{peer_port}] ...` naming port {port} of {names[node]})",
        )
    back = f"{names[int(peer[j])]} port {ports.peer_port[j]}"
    raise InvalidArgument(
        f"line {line}",
        f"{says}, but line {ports.line[j]} says {names[peer_node]} port {peer_port} is cabled to {back}",
    )
