"""ns-3 HPCC topology text (`mix/topology.txt` of alibaba-edu/High-Precision-Congestion-Control) <-> `Fabric`.

```
5 1 4                       <- total nodes, switches, links
4                           <- the switch node ids
0 4 100Gbps 0.001ms 0       <- src dst rate delay error_rate, one line per link
1 4 100Gbps 0.001ms 0
...
```

Import:
- nodes 0..N-1 in id order; the listed ids are switches (named `switch-<id>`), the others hosts
  (`host-<id>`), each host with the IPv4 address HPCC gives it (`11.<id // 256>.<id % 256>.1`);
- ports are numbered 1, 2, ... per node in the order its links appear, as ns-3 numbers a node's
  devices; radix = the node's link count (at least 1); tiers inferred (assembly.py); link a = src;
- rate: a number with an ns-3 DataRate unit (`bps`, `kbps`/`Kbps`, `Mbps`, `Gbps`, `Tbps`, the same
  with `b/s`, and byte rates `Bps`, `KBps`, `MBps`, `GBps` x 8); delay: a number with an ns-3 Time
  unit (`s`, `ms`, `us`, `ns`, `ps`; bare = seconds), rounded to whole ns;
- error_rate is HPCC's per-packet loss probability (ERROR_UNIT_PACKET): 0 -> UP; 1 -> DOWN (every
  packet lost); in between -> DEGRADED with `ber = 1 - (1 - error_rate) ** (1 / PACKET_BITS)`,
  PACKET_BITS = 8000 (HPCC's default 1000-byte payload);
- bounds: rates 1 kb/s..1.6 Pb/s, delays 0..1 s, node ids below the header's node count; a header
  declaring more nodes or links than the service's limits is refused (ResourceExhausted) before any
  line after it is read, and so is a node with more links than a switch has ports (65,535);
- the header's counts must match: fewer link lines than declared is an error, and so is a link line
  beyond the declared count. Text after the declared links that is separated from them by a blank
  line and is not a link line (HPCC's own topology.txt ends with such notes) is ignored with a
  logged warning. Each header and link must be on one line (HPCC writes them so).
Export writes node ids = node indices, each link as `a b rate delay error_rate` (rate in whole Gbps
where it is one, else bps; delay in ns). Names, GUIDs, LIDs, tiers, rails and ports are not in the
format: a round trip keeps counts, kinds, link ends, rates, latencies and states (and BER to float
precision; a DEGRADED link with BER 0 comes back UP).
"""

from __future__ import annotations

import logging
import math
import re

import numpy as np

from services.common.errors import InvalidArgument, quote
from services.topology.fabric import Fabric, LinkState, NodeKind
from services.topology.formats.assembly import assemble_fabric, check_defaults
from services.topology.limits import (
    DEFAULT_LIMITS,
    MAX_LINK_LATENCY_NS,
    MAX_LINK_SPEED_GBPS,
    MIN_LINK_SPEED_GBPS,
    FabricLimits,
    FabricSize,
)

__all__ = ["PACKET_BITS", "export_ns3_hpcc", "import_ns3_hpcc"]

log = logging.getLogger(__name__)

PACKET_BITS = 8000
_NUMBER = r"([0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?)"
_RATE = re.compile(_NUMBER + r"([A-Za-z/]*)$")
_DELAY = re.compile(_NUMBER + r"([a-z]*)$")
_RATE_UNITS = {
    "bps": 1, "b/s": 1, "kbps": 1e3, "Kbps": 1e3, "kb/s": 1e3, "Kb/s": 1e3, "Mbps": 1e6, "Mb/s": 1e6,
    "Gbps": 1e9, "Gb/s": 1e9, "Tbps": 1e12, "Tb/s": 1e12,
    "Bps": 8, "B/s": 8, "KBps": 8e3, "kBps": 8e3, "KB/s": 8e3, "MBps": 8e6, "MB/s": 8e6,
    "GBps": 8e9, "GB/s": 8e9,
}  # fmt: skip
_DELAY_NS = {"": 1e9, "s": 1e9, "ms": 1e6, "us": 1e3, "ns": 1.0, "ps": 1e-3}


_MAX_COUNT = 2**31 - 1  # node and link indices are int32


def _ints(line: str, n: int, what: str) -> list[int]:
    tokens = line.split()
    if not all(token.isascii() and token.isdigit() for token in tokens):
        raise InvalidArgument(f"line {n}", f"expected {what} (whole numbers), got {quote(line.strip())}")
    # Digits are counted before conversion: a 10 MB number is refused without being converted.
    if any(len(token) > 10 or int(token) > _MAX_COUNT for token in tokens):
        raise InvalidArgument(f"line {n}", f"{what}: each at most {_MAX_COUNT:,}, got {quote(line.strip())}")
    return [int(token) for token in tokens]


def _link(tokens: list[str], n: int, node_count: int) -> tuple[int, int, int, int, float]:
    """(src, dst, rate bit/s, delay ns, error rate) of a link line."""
    if len(tokens) != 5:
        raise InvalidArgument(
            f"line {n}",
            "expected `src dst rate delay error_rate` such as `0 4 100Gbps 0.001ms 0`, "
            f"got {quote(' '.join(tokens))}",
        )
    if not all(token.isascii() and token.isdigit() and len(token) <= 10 for token in tokens[:2]):
        raise InvalidArgument(
            f"line {n}", f"src and dst must be node ids, got {quote(tokens[0], 40)} {quote(tokens[1], 40)}"
        )
    src, dst = int(tokens[0]), int(tokens[1])
    for end in (src, dst):
        if not 0 <= end < node_count:
            raise InvalidArgument(
                f"line {n}",
                f"node {end} is not among the {node_count} nodes of the header (0..{node_count - 1})",
            )
    if src == dst:
        raise InvalidArgument(f"line {n}", f"a link joins two nodes, got {src} to itself")
    rate = _RATE.match(tokens[2])
    if rate is None or rate.group(2) not in _RATE_UNITS or float(rate.group(1)) <= 0:
        raise InvalidArgument(
            f"line {n}", f"expected a positive rate such as 100Gbps, got {quote(tokens[2])}"
        )
    rate_bps = float(rate.group(1)) * _RATE_UNITS[rate.group(2)]  # inf for 1e400: refused below
    if not MIN_LINK_SPEED_GBPS * 1e9 <= rate_bps <= MAX_LINK_SPEED_GBPS * 1e9:
        raise InvalidArgument(
            f"line {n}",
            f"a rate is {MIN_LINK_SPEED_GBPS * 1e6:g}kbps..{MAX_LINK_SPEED_GBPS:g}Gbps, "
            f"got {quote(tokens[2], 40)}",
        )
    delay = _DELAY.match(tokens[3])
    if delay is None or delay.group(2) not in _DELAY_NS:
        raise InvalidArgument(
            f"line {n}", f"expected a delay such as 0.001ms or 500ns, got {quote(tokens[3])}"
        )
    delay_ns = float(delay.group(1)) * _DELAY_NS[delay.group(2)]
    if not delay_ns <= MAX_LINK_LATENCY_NS:
        raise InvalidArgument(f"line {n}", f"a delay is at most 1s, got {quote(tokens[3], 40)}")
    try:
        error_rate = float(tokens[4])
    except ValueError:
        error_rate = math.nan
    if not 0.0 <= error_rate <= 1.0:
        raise InvalidArgument(f"line {n}", f"expected an error rate in 0..1, got {quote(tokens[4])}")
    return src, dst, round(rate_bps), round(delay_ns), error_rate


def import_ns3_hpcc(
    text: str,
    *,
    default_link_speed_gbps: float = 400.0,
    default_link_latency_ns: int = 500,
    limits: FabricLimits = DEFAULT_LIMITS,
) -> Fabric:
    """Parse ns-3 HPCC topology text into a validated Fabric; InvalidArgument names the line.

    Every link line carries its own rate and delay, so the defaults are only checked for form.

    >>> f = import_ns3_hpcc("3 1 2\\n2\\n0 2 100Gbps 0.001ms 0\\n1 2 25Gbps 500ns 0\\n")
    >>> f.node_names, f.link_rate_bps.tolist(), f.link_latency_ns.tolist(), f.link_port_b.tolist()
    (['host-0', 'host-1', 'switch-2'], [100000000000, 25000000000], [1000, 500], [1, 2])
    """
    check_defaults(default_link_speed_gbps, default_link_latency_ns)
    lines = [(n, line) for n, line in enumerate(text.split("\n"), start=1) if line.strip()]
    if not lines:
        raise InvalidArgument("line 1", "expected the header `nodes switches links`, got an empty text")
    n, header = lines[0]
    counts = _ints(header, n, "the header `nodes switches links`")
    if len(counts) != 3 or min(counts) < 0 or counts[0] < 1:
        raise InvalidArgument(
            f"line {n}",
            f"expected the header `nodes switches links` (nodes >= 1), got {quote(header.strip())}",
        )
    node_count, switch_count, link_count = counts
    limits.admit(FabricSize(node_count, link_count), f"line {n}: the header's fabric")
    if switch_count > node_count:
        raise InvalidArgument(f"line {n}", f"{switch_count} switches among {node_count} nodes")
    rest = lines[1:]
    kind = np.full(node_count, NodeKind.HOST, dtype=np.int8)
    if switch_count:
        if not rest:
            raise InvalidArgument(
                f"line {n + 1}", f"expected the {switch_count} switch ids, got the end of the text"
            )
        n, ids_line = rest[0]
        rest = rest[1:]
        ids = _ints(ids_line, n, "the switch ids")
        if len(ids) != switch_count:
            raise InvalidArgument(f"line {n}", f"expected {switch_count} switch ids, got {len(ids)}")
        ids_array = np.asarray(ids, dtype=np.int64)
        if ids_array.min() < 0 or ids_array.max() >= node_count or np.unique(ids_array).size != switch_count:
            raise InvalidArgument(f"line {n}", f"switch ids must be distinct node ids in 0..{node_count - 1}")
        kind[ids_array] = NodeKind.SWITCH
    if len(rest) < link_count:
        last = rest[-1][0] if rest else n
        raise InvalidArgument(
            f"line {last + 1}",
            f"expected link {len(rest) + 1} of the {link_count} the header declares, got the end of the text",
        )
    parsed = [_link(line.split(), n, node_count) for n, line in rest[:link_count]]
    _check_trailing(text, rest[link_count:], link_count, node_count)
    return _assemble(kind, parsed, limits)


def _check_trailing(text: str, trailing: list[tuple[int, str]], link_count: int, node_count: int) -> None:
    if not trailing:
        return
    n, line = trailing[0]
    try:
        _link(line.split(), n, node_count)
        is_link = True
    except InvalidArgument:
        is_link = False
    preceded_by_blank = not text.split("\n")[n - 2].strip()
    if is_link or not preceded_by_blank:
        raise InvalidArgument(
            f"line {n}",
            f"the header declares {link_count} links and they end on the line before; "
            f"got {quote(line.strip())}",
        )
    log.warning("ns3_hpcc import: ignored %d lines of notes after the links, from line %d", len(trailing), n)


def _assemble(
    kind: np.ndarray, parsed: list[tuple[int, int, int, int, float]], limits: FabricLimits
) -> Fabric:
    node_count, link_count = kind.shape[0], len(parsed)
    columns = np.asarray([p[:4] for p in parsed], dtype=np.int64).reshape(link_count, 4)
    src, dst, rate, delay = columns.T
    error_rate = np.asarray([p[4] for p in parsed], dtype=np.float64)
    # Ports: the k-th appearance of a node (src before dst within a line) is its port k, as ns-3
    # numbers a node's devices. Stable sort by node, then position within the node's run.
    ends = np.stack([src, dst], axis=1).ravel()
    order = np.argsort(ends, kind="stable")
    starts = np.searchsorted(ends[order], np.arange(node_count))
    port = np.empty_like(ends)
    port[order] = np.arange(ends.shape[0]) - starts[ends[order]] + 1
    radix = np.maximum(np.bincount(ends, minlength=node_count), 1)
    state = np.where(
        error_rate >= 1.0, LinkState.DOWN, np.where(error_rate > 0, LinkState.DEGRADED, LinkState.UP)
    )
    degraded = state == LinkState.DEGRADED
    ber = np.zeros(link_count)
    ber[degraded] = -np.expm1(np.log1p(-error_rate[degraded]) / PACKET_BITS)
    ids = np.arange(node_count)
    is_host = kind == NodeKind.HOST
    ip = np.where(is_host, 0x0B000001 + (ids // 256) * 0x10000 + (ids % 256) * 0x100, 0)
    names = [f"{'host' if h else 'switch'}-{i}" for i, h in enumerate(is_host.tolist())]
    return assemble_fabric(
        kind=kind,
        names=names,
        radix=radix,
        links=(src, port[0::2], dst, port[1::2]),
        rate_bps=rate,
        latency_ns=delay,
        ip=ip,
        state=state,
        ber=ber,
        limits=limits,
    )


def _rate_text(rate: int) -> str:
    return f"{rate // 10**9}Gbps" if rate % 10**9 == 0 else f"{rate}bps"


def export_ns3_hpcc(fabric: Fabric) -> str:
    """The fabric as ns-3 HPCC topology text (see the module docstring for what it keeps).

    >>> from services.topology.generators import leaf_spine
    >>> print(export_ns3_hpcc(leaf_spine(1, 1, 2)), end="")
    4 2 3
    2 3
    2 0 400Gbps 500ns 0
    2 1 400Gbps 500ns 0
    3 2 400Gbps 500ns 0
    """
    switches = np.flatnonzero(fabric.node_kind == NodeKind.SWITCH)
    error_rate = np.where(
        fabric.link_state == LinkState.DOWN,
        1.0,
        np.where(
            fabric.link_state == LinkState.DEGRADED, -np.expm1(PACKET_BITS * np.log1p(-fabric.link_ber)), 0.0
        ),
    )
    lines = [
        f"{fabric.num_nodes} {switches.shape[0]} {fabric.num_links}",
        " ".join(map(str, switches.tolist())),
    ]
    lines += [
        f"{a} {b} {_rate_text(rate)} {delay}ns {per if per else 0!r}"
        for a, b, rate, delay, per in zip(
            fabric.link_a.tolist(),
            fabric.link_b.tolist(),
            fabric.link_rate_bps.tolist(),
            fabric.link_latency_ns.tolist(),
            error_rate.tolist(),
            strict=True,
        )
    ]
    return "\n".join(lines) + "\n"
