"""`perfquery` text (infiniband-diags): PortCounters and the extended form (`perfquery -x`).

perfquery prints one block per port: a header naming the LID and port, then `Name:....value` lines.

    # Port counters: Lid 12 port 1 (CapMask: 0x5A00)
    PortXmitData:....................4294967200
    ...
    # Port extended counters: Lid 12 port 1 (CapMask: 0x5A00 CapMask2: 0x0000002)
    PortXmitData:....................36298026860928

Widths follow the InfiniBand PortCounters attribute: PortXmitData/PortRcvData are 32-bit counts of
4-octet units (kind `ib_data_32`), packet and wait counters 32-bit, SymbolErrorCounter,
PortRcvErrors and PortXmitDiscards 16-bit, LinkDownedCounter 8-bit. In the extended block every
counter is 64-bit (`ib_data_64` for the data counters). When a port has both blocks in one output,
the extended values win. Blocks of other attributes (PortRcvErrorDetails, ...) and `-a` aggregates
(port 255) are skipped, as are stray lines such as `ibwarn: ...`.

perfquery prints no time. A line `# timestamp <seconds since the epoch>` (as collection scripts
append after each query) times the blocks read since the previous such line; blocks without one
take the `time_ns` given to `parse` (the mirror passes the moment it ran the command).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from fabrictwin.errors import InvalidArgumentError
from fabrictwin.importers import FormatError, PortReading

__all__ = ["BASIC_COUNTERS", "EXTENDED_COUNTERS", "parse"]

# perfquery field -> (metric, counter kind) in the PortCounters block.
BASIC_COUNTERS = {
    "PortXmitData": ("tx_bytes", "ib_data_32"),
    "PortRcvData": ("rx_bytes", "ib_data_32"),
    "PortXmitPkts": ("tx_packets", "cumulative_32"),
    "PortRcvPkts": ("rx_packets", "cumulative_32"),
    "PortXmitWait": ("xmit_wait", "cumulative_32"),
    "PortXmitDiscards": ("xmit_discards", "cumulative_16"),
    "SymbolErrorCounter": ("symbol_errors", "cumulative_16"),
    "PortRcvErrors": ("rcv_errors", "cumulative_16"),
    "LinkDownedCounter": ("link_downed", "cumulative_8"),
}
# ... and in the PortCountersExtended block, where every counter is 64-bit.
EXTENDED_COUNTERS = {
    field: (metric, "ib_data_64" if kind == "ib_data_32" else "cumulative_64")
    for field, (metric, kind) in BASIC_COUNTERS.items()
}

_HEADER = re.compile(r"#\s*Port (?P<extended>extended )?counters:\s*Lid (?P<lid>\d+) port (?P<port>\d+)\b")
_OTHER_HEADER = re.compile(r"#\s*\w.*counters:", re.IGNORECASE)
_TIMESTAMP = re.compile(r"#\s*timestamp\s+(?P<seconds>\d+(\.\d+)?)\s*$")
_FIELD = re.compile(r"(?P<name>[A-Za-z0-9]+):\.*(?P<value>\S+)\s*$")
_ALL_PORTS = 255


def _port_name(template: str, lid: int, port: int, nodes: Mapping[int, str], node: str) -> str:
    name = nodes.get(lid) or node or f"lid-{lid}"
    try:
        return template.format(node=name, lid=lid, port=port)
    except (KeyError, IndexError, ValueError, AttributeError) as exc:
        raise InvalidArgumentError(
            f"port_name: {template[:200]!r} is not a template over {{node}}, {{lid}} and {{port}} "
            f"({exc!r:.80})"
        ) from None


def parse(
    text: str,
    time_ns: int,
    *,
    where: str = "<perfquery>",
    node: str = "",
    nodes: Mapping[int, str] | None = None,
    port_name: str = "{node}/p{port}",
    link_gbps: float = 0.0,
) -> list[PortReading]:
    """Port readings of a perfquery output; FormatError names the line of a malformed counter.

    A port's node is `nodes[LID]`, else `node` (output of one node), else `lid-<LID>`; `port_name`
    is a template over {node}, {lid} and {port}. `link_gbps` (perfquery does not print it) is the
    ports' link rate, which lets the service derive utilisation from PortXmitData.

    >>> text = "# Port counters: Lid 3 port 1 (CapMask: 0x5A00)\\nPortXmitData:......40\\n"
    >>> parse(text, 7, nodes={3: "leaf-0"})[0].values
    {'tx_bytes': (40, 'ib_data_32')}
    """
    nodes = nodes or {}
    # (lid, port) -> {"basic": {...}, "extended": {...}} for the blocks awaiting a timestamp line.
    pending: dict[tuple[int, int], dict[str, dict[str, tuple[int, str]]]] = {}
    readings: list[PortReading] = []
    current: dict[str, tuple[int, str]] | None = None
    mapping: Mapping[str, tuple[str, str]] = BASIC_COUNTERS

    def flush(at: int) -> None:
        for (lid, port), blocks in pending.items():
            values = {**blocks.get("basic", {}), **blocks.get("extended", {})}
            if values:
                name = _port_name(port_name, lid, port, nodes, node)
                readings.append(PortReading(name, at, values, link_gbps * 1e9))
        pending.clear()

    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        header = _HEADER.match(stripped)
        if header is not None:
            lid, port = int(header["lid"]), int(header["port"])
            if port == _ALL_PORTS:  # `perfquery -a`: a sum over ports, not a port
                current = None
                continue
            block = "extended" if header["extended"] else "basic"
            mapping = EXTENDED_COUNTERS if header["extended"] else BASIC_COUNTERS
            current = pending.setdefault((lid, port), {}).setdefault(block, {})
            continue
        stamp = _TIMESTAMP.match(stripped)
        if stamp is not None:
            flush(round(float(stamp["seconds"]) * 1e9))
            current = None
            continue
        if _OTHER_HEADER.match(stripped):
            current = None  # PortRcvErrorDetails and friends: not mapped
            continue
        field = _FIELD.match(stripped)
        if field is None or current is None or field["name"] not in mapping:
            continue
        text_value = field["value"]
        try:
            value = int(text_value, 16) if text_value.lower().startswith("0x") else int(text_value)
        except ValueError:
            raise FormatError(
                f"{where}:{number}: {field['name']} {field['value']!r} is not an integer"
            ) from None
        if value < 0:
            raise FormatError(f"{where}:{number}: {field['name']} {value} is negative")
        metric, kind = mapping[field["name"]]
        current[metric] = (value, kind)
    flush(time_ns)
    return readings
