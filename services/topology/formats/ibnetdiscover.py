"""`ibnetdiscover` topology dumps (and ibsim's short form) -> `Fabric`; the export lives in
`ibnetdiscover_export.py` and is re-exported here.

Grammar (rdma-core `infiniband-diags/man/common/sec_topology-file.rst`, as ibnetdiscover writes it):
a node block is optional id lines (`vendid=`, `devid=`, `sysimgguid=`, `switchguid=0x<guid>(<port
guid>)`, `caguid=0x<guid>`), a header `Switch <ports> "S-<guid>" # "<description>" enhanced|base port
0 lid <lid> lmc <lmc>` or `Ca <ports> "H-<guid>" # "<description>"`, then one line per connected
port: `[<port>](<port guid>)? "<peer id>"[<peer port>](<peer port guid>)? # (lid <lid> lmc <lmc>)?
"<peer description>" lid <peer lid> <width>x<speed>`. ibsim's short form (`Switch 8 "Switch1"`,
`Hca 2 "Hca1"`, `[3] "Switch2"[3] w=4`) is the same without comments; its ids are free text.

What becomes of it:
- nodes in file order; `Switch` -> SWITCH, `Ca`/`Hca` -> HOST; `Rt` (router) is refused;
  radix = the header's port count (1..65535; ports and peer ports likewise, LIDs 0..65535, GUIDs
  64 bits: a number out of range names its line); GUID from `switchguid=`/`caguid=` or else the `S-`/`H-` id
  (0 for ibsim ids); a switch's LID from its header, a CA's from its lowest-numbered port line
  (`# lid <n> lmc <m> ...`); nodes without one get fresh LIDs (see assembly.py). Per-port GUIDs
  and CA ports' other LIDs are checked for form but not kept: `Fabric` has one GUID and LID a node.
- names: the description, stripped; if several nodes share it, each of them becomes
  `<description> (<id>)`, e.g. `MT23108 InfiniHost Mellanox Technologies (H-0008f10403960984)`;
  a node without a description is named by its id.
- links: every link must be listed from both ends, and the ends must agree (same peer and port
  both ways, same width x speed; `rate_mismatch="slower"` relaxes the last for dumps known to be
  hand-edited, such as the ibnetdiscover man-page example); a port cabled to another port of the
  same node is a loopback link like any other. Rates from `link_speeds.py` (`4xQDR` = 40 Gb/s);
  a line with no width x speed, or `??`/`???` for an unknown one, takes `default_link_speed_gbps`;
  an ibsim `w=<lanes>` scales it by lanes/4, and `s=`/`e=` (ibsim's speed masks: s 1 SDR 2 DDR
  4 QDR; e 1 FDR 2 EDR 4 HDR 8 NDR) choose the highest speed they enable. Latency is
  `default_link_latency_ns`; every link UP.
- tiers inferred (assembly.py) and the upper tier put on each link's a side.

Lines skipped, because they carry no topology (and where they do carry news, nothing is lost:
every link must still be seen from both ends): blank and whitespace-only lines; comments (`#` as
the first non-blank character, including `# Spine Nodes`-style group comments); the grouping
headings `Non-Chassis Nodes`, `Chassis <n> (guid 0x..)` and `Hostname: <name>` (the nodes under
them still come in their own blocks); diagnostics the tools print to stderr that end up in a
captured dump - `<file>.c:<line>; <message>` (libibnetdisc) and lines starting `ibwarn:`,
`iberror:`, `ibpanic:` or `ibnetdiscover:` - each logged as a warning with its line number.
Anything else is an error naming the line and what was expected there.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from services.common.errors import InvalidArgument, excerpt, quote
from services.topology.fabric import Fabric, NodeKind
from services.topology.formats.assembly import assemble_fabric, check_defaults, check_name
from services.topology.formats.ibnetdiscover_export import export_ibnetdiscover
from services.topology.formats.link_pairing import PortLines, pair_port_lines
from services.topology.formats.link_speeds import LANE_GBPS, rate_bps
from services.topology.limits import DEFAULT_LIMITS, MAX_LID, MAX_PORT, FabricLimits, FabricSize

__all__ = ["export_ibnetdiscover", "import_ibnetdiscover"]

log = logging.getLogger(__name__)

_NUMBER = r"(?:0x[0-9A-Fa-f]+|\d+)"  # ibsim also writes decimal
_NODE = re.compile(r'(Switch|Ca|Hca|Rt)\s+(\d+)\s+"([^"]*)"\s*(.*)$')
_NODE_COMMENT = re.compile(r'#\s*"([^"]*)"(?:\s+(?:enhanced|base)\s+port\s+0\s+lid\s+(\d+)\s+lmc\s+\d+)?')
_PORT = re.compile(
    r"\[(\d+)\](?:\[ext \d+\])?"  # local port, then the external label `ibnetdiscover -g` adds
    r"(?:\(([0-9A-Fa-f]+)\))?\s*"  # the port's own GUID (CA ports)
    r'"([^"]*)"'  # peer id
    r"(?:\[(\d+)\])?(?:\[ext \d+\])?"  # peer port (ibsim may leave it out: port 1)
    r"\s*(?:\(([0-9A-Fa-f]+)\))?\s*"  # peer port GUID (CA peers)
    r"(.*)$"
)
_PORT_COMMENT = re.compile(r'#\s*(?:lid\s+(\d+)\s+lmc\s+\d+\s+)?"[^"]*"\s+lid\s+\d+\s+(\S+)')
_OWN_LID = re.compile(r"#\s*lid\s+(\d+)\s+lmc")
_WIDTH_SPEED = re.compile(r"(\d+)x([A-Za-z0-9]+)$")
_IBSIM_OPTION = re.compile(r"([wse])=(\d+)$")
_ID_FIELD = re.compile(
    rf"(vendid|devid|sysimgguid|switchguid|caguid|rtguid)=({_NUMBER})(?:\(([0-9A-Fa-f]+)\))?\s*(?:#.*)?$"
)
_ID_NAME = re.compile(r"(?:vendid|devid|sysimgguid|switchguid|caguid|rtguid)=")
_GUID_ID = re.compile(r"[SH]-([0-9A-Fa-f]{16})$")
_SECTION = re.compile(r"(?:Non-Chassis Nodes|Chassis \d+(?:\s+\(guid 0x[0-9A-Fa-f]+\))?|Hostname: .*)$")
_DIAGNOSTIC = re.compile(r"(?:[\w./+-]+\.c:\d+; |ibwarn: |iberror: |ibpanic: |ibnetdiscover: )")
_IBSIM_SPEEDS = {1: "SDR", 2: "DDR", 4: "QDR"}
_IBSIM_EXT_SPEEDS = {1: "FDR", 2: "EDR", 4: "HDR", 8: "NDR"}

RateMismatch = Literal["error", "slower"]


@dataclass
class _Nodes:
    """Node blocks as parsed, one entry per header line."""

    ids: list[str] = field(default_factory=list)
    kinds: list[int] = field(default_factory=list)
    radix: list[int] = field(default_factory=list)
    descriptions: list[str] = field(default_factory=list)
    guids: list[int] = field(default_factory=list)
    lids: list[int] = field(default_factory=list)
    lid_lines: list[int] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    index: dict[str, int] = field(default_factory=dict)


def _int(text: str) -> int:
    return int(text, 16) if text[:2].lower() == "0x" else int(text)


def _bounded(text: str, n: int, what: str, low: int, high: int) -> int:
    """A number of line `n` (decimal or 0x hex) in low..high; InvalidArgument naming the line otherwise.
    Digits are counted first: a 10 MB number is refused without being converted."""
    digits = text[2:] if text[:2].lower() == "0x" else text
    value = _int(text) if len(digits) <= 20 else None
    if value is None or not low <= value <= high:
        raise InvalidArgument(f"line {n}", f"{what} must be in {low:,}..{high:,}, got {excerpt(text, 30)}")
    return value


def _link_rate(tail: str, n: int, default_bps: int) -> int:
    """Rate of a port line from what follows the peer (comment or ibsim options); -1 = none given."""
    if not tail:
        return -1
    if tail.startswith("#"):
        comment = _PORT_COMMENT.match(tail)
        if comment is None:
            raise InvalidArgument(
                f"line {n}",
                'expected `# "<peer description>" lid <lid> <width>x<speed>` after the peer, '
                f"got {quote(tail)}",
            )
        token = comment.group(2)
        width_speed = _WIDTH_SPEED.match(token)
        if width_speed is not None:
            lanes = width_speed.group(1)
            rate = rate_bps(int(lanes), width_speed.group(2)) if len(lanes) <= 2 else None
            if rate is not None:
                return rate
        if "?" in token:
            return -1  # `??`/`???`: the tool could not name it; the default applies, as for none given
        raise InvalidArgument(
            f"line {n}",
            f"expected a width x speed such as 4xEDR (speeds {', '.join(LANE_GBPS)}), got {quote(token)}",
        )
    options: dict[str, int] = {}
    for token in tail.split():
        option = _IBSIM_OPTION.match(token)
        if option is None:
            raise InvalidArgument(
                f"line {n}", f"expected `# ...` or ibsim options w=, s=, e=, got {quote(token)}"
            )
        options[option.group(1)] = _bounded(option.group(2), n, f"{option.group(1)}=", 0, 255)
    lanes = options.get("w", 4)
    if lanes not in (1, 2, 4, 8, 12):
        raise InvalidArgument(f"line {n}", f"w= is a lane count (1, 2, 4, 8 or 12), got {lanes}")
    speed = None
    for key, names in (("e", _IBSIM_EXT_SPEEDS), ("s", _IBSIM_SPEEDS)):
        mask = options.get(key, 0)
        if mask and speed is None:
            enabled = [bit for bit in names if mask & bit]
            if not enabled or mask >= 2 * max(names):
                raise InvalidArgument(f"line {n}", f"{key}={mask} enables no speed in {names}")
            speed = names[max(enabled)]
    if speed is not None:
        return round(lanes * LANE_GBPS[speed] * 1e9)
    return round(default_bps * lanes / 4)


def _name_nodes(nodes: _Nodes) -> list[str]:
    names = [desc if desc else node_id for desc, node_id in zip(nodes.descriptions, nodes.ids, strict=True)]
    for i, name in enumerate(names):
        check_name(name, f"line {nodes.lines[i]}")
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    names = [
        f"{name} ({node_id})" if counts[name] > 1 else name
        for name, node_id in zip(names, nodes.ids, strict=True)
    ]
    seen: dict[str, int] = {}
    for i, name in enumerate(names):
        check_name(name, f"line {nodes.lines[i]}")
        if name in seen:
            raise InvalidArgument(
                f"line {nodes.lines[i]}",
                f"node name {quote(name)} is also the name of the node on line {nodes.lines[seen[name]]}",
            )
        seen[name] = i
    return names


def import_ibnetdiscover(
    text: str,
    *,
    default_link_speed_gbps: float = 400.0,
    default_link_latency_ns: int = 500,
    rate_mismatch: RateMismatch = "error",
    limits: FabricLimits = DEFAULT_LIMITS,
) -> Fabric:
    """Parse an ibnetdiscover dump or an ibsim net file into a validated Fabric.

    Parameters: the text; the rate for links that give no width x speed and the latency of every
    link; `rate_mismatch` says what to do when a link's two ends report different width x speed:
    "error" (the default: the dump contradicts itself) or "slower" (take the lower of the two, for
    dumps known to be hand-edited, such as the ibnetdiscover man-page example).
    Raises InvalidArgument naming the line (`line 12`) and what was expected, ResourceExhausted as soon
    as the dump holds more nodes or port lines than `limits` allow.

    >>> dump = '''Switch 8 "S-0000000000000001" # "leaf" enhanced port 0 lid 1 lmc 0
    ... [1] "H-0000000000000002"[1](3) # "node-a HCA-1" lid 2 4xNDR
    ...
    ... Ca 1 "H-0000000000000002" # "node-a HCA-1"
    ... [1](3) "S-0000000000000001"[1] # lid 2 lmc 0 "leaf" lid 1 4xNDR
    ... '''
    >>> f = import_ibnetdiscover(dump)
    >>> f.node_names, f.link_names, f.link_rate_bps.tolist(), f.node_lid.tolist()
    (['leaf', 'node-a HCA-1'], ['leaf/p1<->node-a HCA-1/p1'], [400000000000], [1, 2])
    """
    if rate_mismatch not in ("error", "slower"):
        raise InvalidArgument("rate_mismatch", f"must be 'error' or 'slower', got {rate_mismatch!r}")
    default_bps, latency_ns = check_defaults(default_link_speed_gbps, default_link_latency_ns)
    nodes = _Nodes()
    ports = PortLines()
    pending: list[tuple[int, str, int]] = []  # (line, field, value) of id lines awaiting their header
    ca_port_lid: dict[int, tuple[int, int]] = {}  # CA node -> (lowest port with a LID, that LID)
    for n, raw in enumerate(text.split("\n"), start=1):
        line = raw.strip()
        if not line or line.startswith("#") or _SECTION.match(line):
            continue
        if line.startswith("["):
            port_line = _PORT.match(line)
            if port_line is None:
                raise InvalidArgument(
                    f"line {n}", f'expected `[<port>] "<peer id>"[<peer port>] ...`, got {quote(line)}'
                )
            if not nodes.ids or pending:
                raise InvalidArgument(
                    f"line {n}", "a port line must follow its node's Switch or Ca header line"
                )
            node = len(nodes.ids) - 1
            port, _own_guid, peer_id, peer_port, _peer_guid, tail = port_line.groups()
            port = _bounded(port, n, "a port", 1, MAX_PORT)
            peer_port = _bounded(peer_port or "1", n, "a peer port", 1, MAX_PORT)
            if not 1 <= port <= nodes.radix[node]:
                raise InvalidArgument(
                    f"line {n}",
                    f"port {port} of a node with {nodes.radix[node]} ports (expected 1..{nodes.radix[node]})",
                )
            if peer_port < 1:
                raise InvalidArgument(f"line {n}", "peer ports are numbered from 1")
            ports.add(node, port, peer_id, peer_port, _link_rate(tail.strip(), n, default_bps), n)
            if len(ports.line) > 2 * limits.max_links:  # every link is listed from both ends
                limits.admit(FabricSize(len(nodes.ids), -(-len(ports.line) // 2)), f"the dump (line {n})")
            own = _OWN_LID.match(tail.strip())
            own_lid = _bounded(own.group(1), n, "a LID", 0, MAX_LID) if own else 0
            lowest_so_far = node not in ca_port_lid or port < ca_port_lid[node][0]
            if own_lid and nodes.kinds[node] == NodeKind.HOST and lowest_so_far:
                ca_port_lid[node] = (port, own_lid)
                nodes.lids[node], nodes.lid_lines[node] = own_lid, n
            continue
        header = _NODE.match(line)
        if header is not None:
            if len(nodes.ids) >= limits.max_nodes:
                limits.admit(FabricSize(len(nodes.ids) + 1, len(ports.line) // 2), f"the dump (line {n})")
            _add_node(nodes, header, pending, n)
            pending = []
            continue
        id_field = _ID_FIELD.match(line)
        if id_field is not None:
            value = _bounded(id_field.group(2), n, f"{id_field.group(1)}=", 0, 2**64 - 1)
            pending.append((n, id_field.group(1), value))
            continue
        if _ID_NAME.match(line):
            raise InvalidArgument(
                f"line {n}", f"expected <name>=0x<hex> or <name>=<decimal>, got {quote(line)}"
            )
        if _DIAGNOSTIC.match(line):
            log.warning("ibnetdiscover import: skipped tool diagnostic on line %d: %s", n, excerpt(line))
            continue
        raise InvalidArgument(
            f"line {n}",
            'expected a node header (Switch/Ca <ports> "<id>" ...), a port line ([<port>] ...), '
            "an id line (vendid=, devid=, sysimgguid=, switchguid=, caguid=), a comment or a blank line; "
            f"got {quote(line)}",
        )
    if pending:
        raise InvalidArgument(
            f"line {pending[0][0]}", "expected a Switch or Ca header line after these id lines"
        )
    if not nodes.ids:
        raise InvalidArgument("text", "no Switch or Ca node in the dump")
    _check_lids(nodes)
    names = _name_nodes(nodes)
    links = pair_port_lines(ports, nodes.index, names, nodes.radix, rate_mismatch)
    rate = np.where(links.rate_bps < 0, default_bps, links.rate_bps)
    return assemble_fabric(
        kind=np.asarray(nodes.kinds, dtype=np.int8),
        names=names,
        radix=np.asarray(nodes.radix, dtype=np.int32),
        links=(links.a, links.port_a, links.b, links.port_b),
        rate_bps=rate,
        latency_ns=np.full(rate.shape[0], latency_ns, dtype=np.int64),
        guid=np.asarray(nodes.guids, dtype=np.uint64),
        lid=np.asarray(nodes.lids, dtype=np.int64),
        orient=True,
        limits=limits,
    )


def _add_node(nodes: _Nodes, header: re.Match[str], pending: list[tuple[int, str, int]], n: int) -> None:
    kind_word, radix, node_id, tail = header.groups()
    if kind_word == "Rt":
        raise InvalidArgument(f"line {n}", "router nodes (Rt) are not modelled; expected a Switch or Ca")
    kind = NodeKind.SWITCH if kind_word == "Switch" else NodeKind.HOST
    radix = _bounded(radix, n, "a node's port count", 1, MAX_PORT)
    if node_id in nodes.index:
        raise InvalidArgument(
            f"line {n}", f'node id "{excerpt(node_id)}" is also on line {nodes.lines[nodes.index[node_id]]}'
        )
    description, lid = "", 0
    if tail:
        comment = _NODE_COMMENT.match(tail)
        if comment is None:
            raise InvalidArgument(
                f"line {n}", f'expected `# "<node description>" ...` after the node id, got {quote(tail)}'
            )
        description, lid = comment.group(1).strip(), _bounded(comment.group(2) or "0", n, "a LID", 0, MAX_LID)
    guid = 0
    from_id = _GUID_ID.match(node_id)
    if from_id is not None:
        guid = int(from_id.group(1), 16)
    for line, name, value in pending:
        if name in ("switchguid", "caguid", "rtguid"):
            expected = "switchguid" if kind == NodeKind.SWITCH else "caguid"
            if name != expected:
                raise InvalidArgument(
                    f"line {line}", f"{name}= precedes a {kind_word} header (line {n}); expected {expected}="
                )
            if from_id is not None and value != guid:
                raise InvalidArgument(
                    f"line {line}",
                    f'{name}={value:#x} disagrees with the id "{excerpt(node_id)}" on line {n}',
                )
            guid = value
    nodes.index[node_id] = len(nodes.ids)
    nodes.ids.append(node_id)
    nodes.kinds.append(int(kind))
    nodes.radix.append(int(radix))
    nodes.descriptions.append(description)
    nodes.guids.append(guid)
    nodes.lids.append(lid if kind == NodeKind.SWITCH else 0)
    nodes.lid_lines.append(n)
    nodes.lines.append(n)


def _check_lids(nodes: _Nodes) -> None:
    first: dict[int, int] = {}
    for i, lid in enumerate(nodes.lids):
        if lid and lid in first:
            raise InvalidArgument(
                f"line {nodes.lid_lines[i]}", f"LID {lid} is also given on line {nodes.lid_lines[first[lid]]}"
            )
        first.setdefault(lid, i)
    guids: dict[int, int] = {}
    for i, guid in enumerate(nodes.guids):
        if guid and guid in guids:
            raise InvalidArgument(
                f"line {nodes.lines[i]}",
                f"GUID {guid:#018x} is also the GUID of the node on line {nodes.lines[guids[guid]]}",
            )
        guids.setdefault(guid, i)
