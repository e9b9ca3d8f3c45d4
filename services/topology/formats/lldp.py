"""LLDP neighbour tables -> `Fabric`: one `lldpcli -f json show neighbors` document per node.

Every node of an Ethernet fabric that runs lldpd (switches and hosts) knows, per local interface,
who is on the other end of the cable: the neighbour's chassis (system name, capabilities,
management addresses) and port (an ID typed `ifname`, `mac` or `local`, and a description). The
documents of all nodes together are the cabling. A document is what lldpcli prints:

```json
{"lldp": {"interface": {"swp3": {"via": "LLDP",
  "chassis": {"spine0": {"id": {"type": "mac", "value": "..."}, "mgmt-ip": "10.0.0.1",
                         "capability": [{"type": "Bridge", "enabled": false},
                                        {"type": "Router", "enabled": true}]}},
  "port": {"id": {"type": "ifname", "value": "swp1"}, "descr": "swp1"}}}}}
```

lldpcli's JSON collapses one-element lists: with one neighbour `interface` is an object, with
several a list of one-key objects; `capability` and `mgmt-ip` likewise are a single value or a list.
All shapes parse. A document may also hold `lldpcli -f json show chassis` (key `local-chassis`),
as one merged object or as the two outputs one after the other (`lldpcli -f json show chassis;
lldpcli -f json show neighbors`).

Rules:
- **names**: a node is named by its own chassis (`show chassis`) when the document has it, else by
  the document's name (`leaf0.json` -> `leaf0`). Neighbours are named by the system name they
  advertise, so every neighbour must be described by a document of its own; two documents for one
  node are refused naming both.
- **kind**: a switch when any description of the node (its own chassis or a neighbour's view of
  it) has the Router or Bridge capability enabled, else a host. A host's IPv4 address is its first
  IPv4 management address.
- **ports**: a local interface is named by its interface name; a neighbour's port by its ID when
  the ID is an ifname, else by its description. Port numbers: when every port name of a node ends in
  a distinct number >= 1 (`swp1`, `Ethernet48`) that number, else 1, 2, ... in natural order of the
  names. The names are kept on the links (`Link.port_name_a/b`).
- **links**: A's `swp3` naming B's `swp1` and B's `swp1` naming A's `swp3` is one link. Parallel
  links are kept. When B's `swp1` names a third node, or a local interface lists two neighbours, the
  documents disagree and the import is refused naming both documents and ports. A link that only
  one end lists is imported and reported as one-sided (`Fabric.import_notes`).
- **speeds** come from `port_speeds_gbps` (`node/ifname` -> Gb/s, as node_exporter's
  `node_network_speed_bytes` or SNMP `ifHighSpeed` report them; the slower end wins when both are
  given), else `default_link_speed_gbps`; latency is `default_link_latency_ns`.
"""

from __future__ import annotations

import io
import ipaddress
import json
import math
import re
import tarfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from services.common.errors import InvalidArgument
from services.topology.fabric import Fabric, NodeKind
from services.topology.formats.assembly import assemble_fabric, check_defaults

__all__ = ["MAX_ARCHIVE_BYTES", "documents_from_archive", "import_lldp", "neighbour_documents"]

MAX_ARCHIVE_BYTES = 64 * 1024 * 1024
_MAX_EXTRACTED_BYTES = 256 * 1024 * 1024
_SWITCH_CAPABILITIES = frozenset({"router", "bridge"})
_TRAILING_NUMBER = re.compile(r"(\d+)$")
_QUOTE = 200


def _quote(text: str) -> str:
    text = str(text)
    return repr(text if len(text) <= _QUOTE else text[:_QUOTE] + "...")


@dataclass(frozen=True)
class _Neighbour:
    """One entry of a neighbour table: `node`'s interface `port` sees `peer`'s port `peer_port`."""

    document: str
    node: str
    port: str
    peer: str
    peer_port: str


@dataclass
class _Description:
    """What is known of a node: does anyone see it as a switch, and its IPv4 addresses."""

    switch: bool = False
    ipv4: int = 0


def documents_from_archive(archive: bytes, field: str = "archive") -> list[tuple[str, str]]:
    """The `NODE.json` members of a tar archive (plain or gzip/bz2/xz), as (name, text) pairs.

    Directories and members not ending in `.json` are skipped; an archive holding no `.json` file,
    one that is not tar at all, or one that unpacks past 256 MiB is refused.
    """
    if len(archive) > MAX_ARCHIVE_BYTES:
        raise InvalidArgument(field, f"{len(archive)} bytes; at most {MAX_ARCHIVE_BYTES} are accepted")
    documents: list[tuple[str, str]] = []
    extracted = 0
    try:
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:*") as tar:
            for member in tar:
                if not member.isfile() or not member.name.endswith(".json"):
                    continue
                extracted += member.size
                if extracted > _MAX_EXTRACTED_BYTES:
                    raise InvalidArgument(field, f"unpacks to more than {_MAX_EXTRACTED_BYTES} bytes")
                stream = tar.extractfile(member)
                data = stream.read() if stream is not None else b""
                try:
                    documents.append((member.name, data.decode("utf-8")))
                except UnicodeDecodeError as exc:
                    raise InvalidArgument(
                        f"{field}: {_quote(member.name)}", f"not UTF-8 text (byte {exc.start})"
                    ) from None
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise InvalidArgument(field, f"not a readable tar archive: {exc}") from None
    if not documents:
        raise InvalidArgument(field, "holds no NODE.json file")
    return documents


def _node_name_of(document_name: str) -> str:
    """`dumps/leaf0.json` -> `leaf0`."""
    base = document_name.replace("\\", "/").rsplit("/", 1)[-1]
    return base[: -len(".json")] if base.endswith(".json") else base


def _load(name: str, text: str) -> dict[str, Any]:
    """The document's JSON values merged into one object (lldpcli may print two, one after the other)."""
    decoder = json.JSONDecoder()
    merged: dict[str, Any] = {}
    position, values = 0, 0
    while True:
        while position < len(text) and text[position].isspace():
            position += 1
        if position >= len(text):
            break
        try:
            value, position = decoder.raw_decode(text, position)
        except json.JSONDecodeError as exc:
            raise InvalidArgument(
                f"documents[{_quote(name)}]", f"line {exc.lineno}: not JSON: {exc.msg} (column {exc.colno})"
            ) from None
        except RecursionError:
            raise InvalidArgument(f"documents[{_quote(name)}]", "JSON nested too deeply") from None
        if not isinstance(value, dict):
            raise InvalidArgument(
                f"documents[{_quote(name)}]",
                f"expected a JSON object as lldpcli prints, got {type(value).__name__}",
            )
        merged.update(value)
        values += 1
    if not values:
        raise InvalidArgument(f"documents[{_quote(name)}]", "is empty")
    return merged


def _as_list(value: Any) -> list[Any]:
    """lldpcli's one-or-many: a list stays, anything else becomes a one-element list, None none."""
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def _pairs(value: Any, where: str) -> list[tuple[str, Any]]:
    """`{"a": x, "b": y}` or `[{"a": x}, {"b": y}]` -> [("a", x), ("b", y)] (repeated keys kept)."""
    pairs: list[tuple[str, Any]] = []
    for item in _as_list(value):
        if not isinstance(item, dict):
            raise InvalidArgument(where, f"expected objects keyed by name, got {type(item).__name__}")
        pairs.extend(item.items())
    return pairs


def _chassis(value: Any, where: str) -> tuple[str, dict[str, Any]]:
    """(system name, chassis fields) of a `chassis` object; the name is '' when none is advertised."""
    if not isinstance(value, dict):
        raise InvalidArgument(where, "chassis must be an object")
    if "id" in value:  # no system name: the fields sit directly under `chassis`
        return "", value
    named = _pairs(value, where)
    if len(named) != 1 or not isinstance(named[0][1], dict):
        raise InvalidArgument(where, "expected one chassis, keyed by its system name")
    return str(named[0][0]), named[0][1]


def _capable_switch(fields: Mapping[str, Any]) -> bool:
    for capability in _as_list(fields.get("capability")):
        if (
            isinstance(capability, dict)
            and str(capability.get("type", "")).lower() in _SWITCH_CAPABILITIES
            and capability.get("enabled") in (True, "on", "true", "yes")
        ):
            return True
    return False


def _first_ipv4(fields: Mapping[str, Any]) -> int:
    for address in _as_list(fields.get("mgmt-ip")):
        try:
            parsed = ipaddress.ip_address(str(address))
        except ValueError:
            continue
        if parsed.version == 4:
            return int(parsed)
    return 0


def _port_name(port: Any, where: str) -> str:
    """The neighbour's port: its ID when typed ifname, else its description, else the raw ID."""
    if not isinstance(port, dict):
        raise InvalidArgument(where, "port must be an object")
    port_id = port.get("id")
    id_type, id_value = "", ""
    if isinstance(port_id, dict):
        id_type, id_value = str(port_id.get("type", "")), str(port_id.get("value", ""))
    elif port_id is not None:
        id_value = str(port_id)
    if id_type == "ifname" and id_value:
        return id_value
    description = port.get("descr")
    if isinstance(description, str) and description:
        return description
    if id_value:
        return id_value
    raise InvalidArgument(where, "the neighbour's port has neither an ID nor a description")


class _Parsed:
    """Every document read: neighbour entries, node descriptions, which document names which node."""

    def __init__(self) -> None:
        self.entries: list[_Neighbour] = []
        self.described: dict[str, _Description] = {}
        self.document_of: dict[str, str] = {}

    def describe(self, node: str, switch: bool, ipv4: int) -> None:
        description = self.described.setdefault(node, _Description())
        description.switch |= switch
        if ipv4 and not description.ipv4:
            description.ipv4 = ipv4

    def read(self, document: str, text: str) -> None:
        value = _load(document, text)
        where = f"documents[{_quote(document)}]"
        node = _node_name_of(document)
        local = value.get("local-chassis")
        if local is not None:
            fields = local.get("chassis") if isinstance(local, dict) else None
            if fields is None:
                raise InvalidArgument(f"{where}.local-chassis", "has no chassis")
            name, chassis = _chassis(fields, f"{where}.local-chassis.chassis")
            node = name or node
            self.describe(node, _capable_switch(chassis), _first_ipv4(chassis))
        if not node:
            raise InvalidArgument(where, "names no node (give the document a file name or `show chassis`)")
        if node in self.document_of:
            raise InvalidArgument(
                where, f"describes node {_quote(node)}, as does document {_quote(self.document_of[node])}"
            )
        self.document_of[node] = document
        self.described.setdefault(node, _Description())
        if "lldp" not in value:
            if local is None:
                raise InvalidArgument(where, "has no `lldp` key: not `lldpcli -f json show neighbors` output")
            return
        lldp = value["lldp"]
        for table in _as_list(lldp):  # lldpcli prints {} or [{}] for a node without neighbours
            if not isinstance(table, dict):
                raise InvalidArgument(f"{where}.lldp", "must be an object")
            for port, entry in _pairs(table.get("interface"), f"{where}.lldp.interface"):
                self._entry(document, node, str(port), entry, f"{where}.lldp.interface.{port}")

    def _entry(self, document: str, node: str, port: str, entry: Any, where: str) -> None:
        if not isinstance(entry, dict):
            raise InvalidArgument(where, "must be an object")
        if "chassis" not in entry or "port" not in entry:
            raise InvalidArgument(where, "needs `chassis` and `port`")
        peer, chassis = _chassis(entry["chassis"], f"{where}.chassis")
        if not peer:
            raise InvalidArgument(
                f"{where}.chassis", "the neighbour advertises no system name (enable it in its lldpd)"
            )
        self.describe(peer, _capable_switch(chassis), _first_ipv4(chassis))
        peer_port = _port_name(entry["port"], f"{where}.port")
        self.entries.append(_Neighbour(document, node, port, peer, peer_port))


def _pair_links(parsed: _Parsed) -> tuple[list[tuple[str, str, str, str]], list[str]]:
    """Links (node, port, peer, peer port), each once, and notes about the one-sided ones."""
    by_port: dict[tuple[str, str], _Neighbour] = {}
    pointing_at: dict[tuple[str, str], list[_Neighbour]] = {}  # (node, peer) -> entries of node seeing peer
    for entry in parsed.entries:
        key = (entry.node, entry.port)
        if key in by_port:
            raise InvalidArgument(
                f"documents[{_quote(entry.document)}]",
                f"interface {entry.port} of {entry.node} lists two neighbours ({by_port[key].peer} and "
                f"{entry.peer}): not a point-to-point link",
            )
        by_port[key] = entry
        pointing_at.setdefault((entry.node, entry.peer), []).append(entry)
    links: list[tuple[str, str, str, str]] = []
    notes: list[str] = []
    cabled: dict[tuple[str, str], _Neighbour] = {}  # port end -> the entry whose link took it
    for entry in parsed.entries:
        if (entry.node, entry.port) in cabled:
            continue
        where = f"documents[{_quote(entry.document)}]"
        if entry.peer not in parsed.document_of:
            raise InvalidArgument(
                where,
                f"{entry.node}:{entry.port} sees {_quote(entry.peer)}:{entry.peer_port}, which no document "
                "describes (give one document per node, hosts included)",
            )
        other = by_port.get((entry.peer, entry.peer_port))
        if other is not None and (other.peer, other.peer_port) != (entry.node, entry.port):
            raise InvalidArgument(
                where,
                f"{entry.node}:{entry.port} says its neighbour is {entry.peer}:{entry.peer_port}, but "
                f"document {_quote(other.document)} says {other.node}:{other.port} sees "
                f"{other.peer}:{other.peer_port}",
            )
        if other is None:
            # The peer may know the port by another name (its ID a MAC, say): its entry pointing back.
            back = [
                candidate
                for candidate in pointing_at.get((entry.peer, entry.node), [])
                if candidate.peer_port == entry.port and (candidate.node, candidate.port) not in cabled
            ]
            other = back[0] if len(back) == 1 else None
        peer_end = (other.node, other.port) if other is not None else (entry.peer, entry.peer_port)
        if peer_end in cabled:
            taken = cabled[peer_end]
            raise InvalidArgument(
                where,
                f"{entry.node}:{entry.port} sees {peer_end[0]}:{peer_end[1]}, which document "
                f"{_quote(taken.document)} already cables to {taken.node}:{taken.port}",
            )
        links.append((entry.node, entry.port, *peer_end))
        cabled[(entry.node, entry.port)] = entry
        cabled[peer_end] = entry
        if other is None:
            notes.append(
                f"one-sided link {entry.node}:{entry.port} <-> {entry.peer}:{entry.peer_port}: only "
                f"document {_quote(entry.document)} lists it"
            )
    return links, notes


def _natural_key(name: str) -> list[Any]:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def _port_numbers(names: Iterable[str]) -> dict[str, int]:
    """Port numbers of one node's port names (rule in the module docstring)."""
    ordered = sorted(set(names), key=_natural_key)
    trailing = [_TRAILING_NUMBER.search(name) for name in ordered]
    numbers = [int(match[1]) if match else 0 for match in trailing]
    if all(number >= 1 for number in numbers) and len(set(numbers)) == len(numbers):
        return dict(zip(ordered, numbers, strict=True))
    return {name: i + 1 for i, name in enumerate(ordered)}


def _speeds(port_speeds_gbps: Mapping[str, float]) -> dict[str, float]:
    speeds = {}
    for port, gbps in port_speeds_gbps.items():
        field = f"port_speeds_gbps[{_quote(port)}]"
        if isinstance(gbps, bool) or not isinstance(gbps, int | float) or not math.isfinite(gbps):
            raise InvalidArgument(field, f"must be a positive number of Gb/s, got {gbps!r}")
        if not 0 < gbps <= 1.6e6:
            raise InvalidArgument(field, f"must be in (0, 1.6e6] Gb/s, got {gbps}")
        speeds[port] = float(gbps)
    return speeds


def import_lldp(
    documents: Sequence[tuple[str, str]],
    *,
    default_link_speed_gbps: float = 400.0,
    default_link_latency_ns: int = 500,
    port_speeds_gbps: Mapping[str, float] | None = None,
) -> Fabric:
    """A fabric from one LLDP neighbour document per node, as (name, text) pairs.

    Raises InvalidArgument naming the document (and node and port) of the first problem.

    >>> leaf = '{"lldp": {"interface": {"swp1": {"chassis": {"h0": {"id": {"type": "mac", "value": "x"}}},'
    >>> leaf += ' "port": {"id": {"type": "ifname", "value": "eth0"}}}}}}'
    >>> host = '{"lldp": {"interface": {"eth0": {"chassis": {"leaf0": {"id": {"type": "mac", "value": "y"},'
    >>> host += ' "capability": {"type": "Router", "enabled": true}}}, "port": {"id": {"type": "ifname",'
    >>> host += ' "value": "swp1"}}}}}}'
    >>> fabric = import_lldp([("leaf0.json", leaf), ("h0.json", host)])
    >>> fabric.link_names, fabric.link_port_names
    (['leaf0/p1<->h0/p1'], (['swp1'], ['eth0']))
    """
    default_rate_bps, latency_ns = check_defaults(default_link_speed_gbps, default_link_latency_ns)
    speeds = _speeds(port_speeds_gbps or {})
    if not documents:
        raise InvalidArgument("documents", "give one LLDP document per node")
    parsed = _Parsed()
    for name, text in documents:
        parsed.read(str(name), text)
    links, notes = _pair_links(parsed)
    names = list(parsed.document_of)
    index = {name: i for i, name in enumerate(names)}
    ports_of: dict[str, list[str]] = {name: [] for name in names}
    for node, port, peer, peer_port in links:
        ports_of[node].append(port)
        ports_of[peer].append(peer_port)
    numbers = {node: _port_numbers(ports) for node, ports in ports_of.items()}
    kind = np.array(
        [NodeKind.SWITCH if parsed.described[name].switch else NodeKind.HOST for name in names], dtype=np.int8
    )
    ip = np.array(
        [parsed.described[name].ipv4 if kind[i] == NodeKind.HOST else 0 for i, name in enumerate(names)],
        dtype=np.uint32,
    )
    radix = np.array([max(numbers[name].values(), default=1) for name in names], dtype=np.int32)
    rate = []
    for node, port, peer, peer_port in links:
        given = [speeds[key] for key in (f"{node}/{port}", f"{peer}/{peer_port}") if key in speeds]
        rate.append(round(min(given) * 1e9) if given else default_rate_bps)
    count = len(links)
    return assemble_fabric(
        kind=kind,
        names=names,
        radix=radix,
        links=(
            np.array([index[node] for node, _, _, _ in links], dtype=np.int32),
            np.array([numbers[node][port] for node, port, _, _ in links], dtype=np.int32),
            np.array([index[peer] for _, _, peer, _ in links], dtype=np.int32),
            np.array([numbers[peer][port] for _, _, peer, port in links], dtype=np.int32),
        ),
        rate_bps=np.array(rate, dtype=np.int64),
        latency_ns=np.full(count, latency_ns, dtype=np.int64),
        ip=ip,
        orient=True,
        port_names=([port for _, port, _, _ in links], [port for _, _, _, port in links]),
        import_notes=notes,
    )


def neighbour_documents(
    fabric: Fabric, port_name: str = "swp{port}", host_port_name: str = "eth{index}"
) -> list[tuple[str, str]]:
    """What `lldpcli -f json show neighbors` prints on each node of `fabric`, as (NODE.json, text).

    Ports are named by `port_name` on switches and `host_port_name` on hosts (templates over {port},
    the port number, and {index}, its 0-based position among the node's ports), unless the fabric
    keeps interface names. Switches advertise Bridge and Router enabled, hosts Station only. For
    benchmarks and tests of the importer, and to check a mirror configuration against a twin fabric.
    """
    names = fabric.node_names
    is_switch = (fabric.node_kind == NodeKind.SWITCH).tolist()
    ends: dict[int, list[tuple[int, int, int]]] = {i: [] for i in range(fabric.num_nodes)}
    a, pa = fabric.link_a.tolist(), fabric.link_port_a.tolist()
    b, pb = fabric.link_b.tolist(), fabric.link_port_b.tolist()
    for link in range(fabric.num_links):
        ends[a[link]].append((pa[link], b[link], link))
        ends[b[link]].append((pb[link], a[link], link))
    interface: dict[tuple[int, int], str] = {}
    for node, ports in ends.items():
        ports.sort()
        for index, (port, _, _) in enumerate(ports):
            template = port_name if is_switch[node] else host_port_name
            interface[(node, port)] = template.format(port=port, index=index)
    if fabric.link_port_names is not None:
        for link in range(fabric.num_links):
            if fabric.link_port_names[0][link]:
                interface[(a[link], pa[link])] = fabric.link_port_names[0][link]
            if fabric.link_port_names[1][link]:
                interface[(b[link], pb[link])] = fabric.link_port_names[1][link]
    peer_port = {}
    for link in range(fabric.num_links):
        peer_port[(a[link], pa[link])] = (b[link], pb[link])
        peer_port[(b[link], pb[link])] = (a[link], pa[link])

    def chassis(node: int) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "id": {
                "type": "mac",
                "value": f"02:00:{node >> 24 & 255:02x}:"
                f"{node >> 16 & 255:02x}:{node >> 8 & 255:02x}:{node & 255:02x}",
            }
        }
        if fabric.node_ip[node]:
            fields["mgmt-ip"] = str(ipaddress.IPv4Address(int(fabric.node_ip[node])))
        if is_switch[node]:
            fields["capability"] = [{"type": "Bridge", "enabled": True}, {"type": "Router", "enabled": True}]
        else:
            fields["capability"] = {"type": "Station", "enabled": True}
        return {names[node]: fields}

    documents = []
    for node, ports in ends.items():
        entries = []
        for port, _, _ in ports:
            peer, their_port = peer_port[(node, port)]
            name = interface[(peer, their_port)]
            entries.append({interface[(node, port)]: {
                "via": "LLDP", "chassis": chassis(peer),
                "port": {"id": {"type": "ifname", "value": name}, "descr": name},
            }})  # fmt: skip
        table: Any = entries[0] if len(entries) == 1 else entries
        document = {"lldp": {"interface": table}} if entries else {"lldp": {}}
        documents.append((f"{names[node]}.json", json.dumps(document)))
    return documents
