"""OpenSM's `opensm-lfts.dump`: forwarding tables as text, parsed and written.

The format is the one `osm_dump.c` writes (and `osm_ucast_file.c` reads) for each switch:

    Unicast lids [0-%u] of switch Lid %u guid 0x%016llx ('%s'):
    0x%04x %03u # %s portguid 0x%016llx: '%s'      (destination LID, output port, node type, ...)
    %u lids dumped                                 (OpenSM prints the highest LID here)

The parser is strict where OpenSM is lenient (it skips what it cannot read): a line it cannot read,
an entry before any switch, a switch or LID the fabric does not have, or a port without a cable is
InvalidArgument naming the line, so a dump is loaded whole or not at all. Switches are matched by
GUID, else by LID (a dump whose GUIDs the fabric does not know); entries toward switch LIDs are
accepted and ignored (routes here are toward hosts).

GUIDs, written and matched, are the ones the topology exports write (`export_guids`: a node's GUID,
or the synthetic one where it is 0, as in generated fabrics), so OpenSM's dump of an ibsim export and
the twin's own dump of the fabric name the same switches; a CA's `portguid` is its GUID + the port
holding its LID (its lowest-numbered cabled port), as ibsim and the exports derive port GUIDs.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

import numpy as np

from services.common.errors import InvalidArgument
from services.topology.fabric import Fabric, NodeKind
from services.topology.formats.ibnetdiscover_export import export_guids

__all__ = ["FORMAT_NAME", "LftDump", "SwitchTable", "parse_lfts_dump", "resolve_lfts", "write_lfts_dump"]

FORMAT_NAME = "opensm_lfts"  # TopologyFormat OPENSM_LFTS, lower-cased as the other format names
_HEADER = re.compile(
    r"^Unicast lids \[(?:0x)?[0-9a-fA-F]+-(?:0x)?[0-9a-fA-F]+\] of switch Lid (\d+) guid 0x([0-9a-fA-F]+)"
    r"(?: \('(.*)'\))?:?\s*$"
)
_ENTRY = re.compile(r"^0x([0-9a-fA-F]+)\s+(\d+)(?:\s+#(.*))?$")
_PORT_GUID = re.compile(r"portguid 0x([0-9a-fA-F]+)")
_FOOTER = re.compile(r"^(\d+) lids dumped\s*$")
_TYPES = {NodeKind.HOST: "Channel Adapter", NodeKind.SWITCH: "Switch"}


@dataclasses.dataclass
class SwitchTable:
    """One switch block of a dump."""

    line: int  # line number of its header (1-based)
    lid: int
    guid: int
    name: str
    lids: list[int] = dataclasses.field(default_factory=list)
    ports: list[int] = dataclasses.field(default_factory=list)
    lines: list[int] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class LftDump:
    """A parsed dump: its switch blocks in file order."""

    switches: list[SwitchTable]


def parse_lfts_dump(text: str, field: str = "lfts_dump") -> LftDump:
    """Parse dump text; InvalidArgument naming `field` and the line for anything unreadable.

    >>> dump = parse_lfts_dump("Unicast lids [0-3] of switch Lid 3 guid 0x0 ('leaf'):\\n"
    ...                        "0x0001 001 # Channel Adapter portguid 0x0: 'h0'\\n3 lids dumped\\n")
    >>> dump.switches[0].lids, dump.switches[0].ports
    ([1], [1])
    """
    switches: list[SwitchTable] = []
    current: SwitchTable | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{field} line {number}"
        if line.startswith("Multicast mlids"):
            raise InvalidArgument(where, "this is a multicast dump; the file engine needs unicast LFTs")
        if line.startswith("Unicast lids"):
            match = _HEADER.match(line)
            if match is None:
                raise InvalidArgument(
                    where, "expected \"Unicast lids [0-<max>] of switch Lid <lid> guid 0x<guid> ('<name>'):\""
                )
            current = SwitchTable(number, int(match[1]), int(match[2], 16), match[3] or "")
            switches.append(current)
            continue
        match = _ENTRY.match(line)
        if match is not None:
            if current is None:
                raise InvalidArgument(
                    where, "a forwarding entry before any 'Unicast lids ... of switch' line"
                )
            current.lids.append(int(match[1], 16))
            current.ports.append(int(match[2]))
            current.lines.append(number)
            continue
        if _FOOTER.match(line):
            current = None
            continue
        raise InvalidArgument(
            where, f"expected '0x<lid> <port> # ...', '<n> lids dumped' or a switch header, got {line[:60]!r}"
        )
    if not switches:
        raise InvalidArgument(field, "no 'Unicast lids ... of switch' block: not an opensm-lfts.dump")
    return LftDump(switches)


def resolve_lfts(fabric: Fabric, dump: LftDump, field: str = "lfts_dump") -> tuple[np.ndarray, np.ndarray]:
    """(switch nodes [K], output ports [K, H]) of the dump's switches over `fabric` (0: no entry).

    Raises InvalidArgument naming the line for a switch, LID or port the fabric does not have.
    """
    switches = fabric.node_kind == NodeKind.SWITCH
    guids = export_guids(fabric, unique=False).tolist()
    by_guid = {g: i for i, g in enumerate(guids) if switches[i]}
    by_lid = {int(lid): i for i, lid in enumerate(fabric.node_lid.tolist())}
    ends = np.concatenate([fabric.link_a, fabric.link_b])
    ports = np.concatenate([fabric.link_port_a, fabric.link_port_b])
    cabled = set((ends.astype(np.int64) * (int(ports.max(initial=0)) + 1) + ports).tolist())
    width = int(ports.max(initial=0)) + 1
    nodes, tables, seen = [], [], set()
    for block in dump.switches:
        where = f"{field} line {block.line}"
        node = by_guid.get(block.guid)
        if node is None:
            node = by_lid.get(block.lid)
            if node is None or not switches[node]:
                raise InvalidArgument(
                    where, f"no switch with guid 0x{block.guid:016x} or LID {block.lid} in this fabric"
                )
        if node in seen:
            raise InvalidArgument(where, f"a second table for switch {fabric.node_names[node]}")
        seen.add(node)
        row = np.zeros(fabric.num_hosts, dtype=np.int64)
        for lid, port, number in zip(block.lids, block.ports, block.lines, strict=True):
            target = by_lid.get(lid)
            if target is None:
                raise InvalidArgument(f"{field} line {number}", f"no node has LID {lid}")
            if switches[target]:
                continue
            if not 0 < port < width or node * width + port not in cabled:
                raise InvalidArgument(
                    f"{field} line {number}", f"port {port} of {fabric.node_names[node]} has no cable"
                )
            row[fabric.node_host[target]] = port
        nodes.append(node)
        tables.append(row)
    shape = (len(nodes), fabric.num_hosts)
    return np.array(nodes, dtype=np.int64), np.array(tables, dtype=np.int64).reshape(shape)


def write_lfts_dump(fabric: Fabric, lft_of: Callable[[int], np.ndarray | None]) -> str:
    """The dump of every switch's LFT toward the hosts, in node order, as OpenSM writes it.

    `lft_of(node)` gives a switch's [H] output ports (0: no route), or None for no table. Each switch
    also lists its own LID with port 0, as OpenSM does. GUIDs as in the module docstring;
    InvalidArgument if two nodes share one (as the topology exports refuse them).
    """
    guids = export_guids(fabric).tolist()
    max_lid = int(fabric.node_lid.max(initial=0))
    host_lids = fabric.node_lid[fabric.host_nodes]
    order = np.argsort(host_lids, kind="stable")
    # The port holding a CA's LID: its lowest-numbered cabled port (1 if it has no cable).
    ends = np.concatenate([fabric.link_a, fabric.link_b])
    end_ports = np.concatenate([fabric.link_port_a, fabric.link_port_b]).astype(np.int64)
    lid_port = np.full(fabric.num_nodes, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(lid_port, ends, end_ports)
    lid_port[lid_port == np.iinfo(np.int64).max] = 1
    host_text = [
        f" # Channel Adapter portguid 0x{guids[node] + int(lid_port[node]):016x}: '{fabric.node_names[node]}'"
        for node in fabric.host_nodes.tolist()
    ]
    out: list[str] = []
    for node in np.flatnonzero(fabric.node_kind == NodeKind.SWITCH).tolist():
        name, lid, guid = fabric.node_names[node], int(fabric.node_lid[node]), guids[node]
        out.append(f"Unicast lids [0-{max_lid}] of switch Lid {lid} guid 0x{guid:016x} ('{name}'):")
        entries = [(lid, f"0x{lid:04x} 000 # {_TYPES[NodeKind.SWITCH]} portguid 0x{guid:016x}: '{name}'")]
        lft = lft_of(node)
        if lft is not None:
            for h in order[lft[order] > 0].tolist():
                entries.append(
                    (int(host_lids[h]), f"0x{int(host_lids[h]):04x} {int(lft[h]):03d}{host_text[h]}")
                )
        out.extend(text for _, text in sorted(entries))
        out.append(f"{max_lid} lids dumped")
    return "\n".join(out) + "\n"
