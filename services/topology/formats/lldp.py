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
All shapes parse, and so does `-f json0` (lists kept, names as `"name"` keys; what lldpd built with
--enable-json0 prints for `-f json` too), brought to the `-f json` shape by lldpd's own clean-up rules.
A document may also hold `lldpcli -f json show chassis` (key `local-chassis`) or `show interfaces`
(the local ports, each with the local chassis and a `status` instead of `via`), as one merged object
or as the outputs one after the other (`lldpcli -f json show chassis; lldpcli -f json show neighbors`).

Rules:
- **sizes**: checked before anything is parsed: a document at most 8 MiB (a 64-port switch's `show
  neighbors` is a few hundred kB), all of them at most 256 MiB (an archive: 64 MiB packed, judged
  member by member by the sizes it declares); over either is refused naming the document.
- **names**: a node is named by its own chassis (`show chassis` or `show interfaces`) when the
  document has it (`show neighbors` alone never names its node), else by the document's file name
  without directories, `.json` and an `lldp` word at its start or end (`lldp.leaf0.json`,
  `lldp-leaf0.json`, `leaf0.lldp.json`, `leaf0.json`, `leaf0` -> `leaf0`; kept whole when the
  neighbours call the node so). Neighbours are named by the system name they advertise, so every
  neighbour must be described by a document of its own; when one is not and some document was named
  only by a file name no neighbour uses, the error names that document and says to add `show
  chassis` output to it or to name the file after its node. Two documents for one node are refused
  naming both.
- **kind**: a switch when any description of the node (its own chassis or a neighbour's view of
  it) has the Router or Bridge capability enabled, else a host. A host's IPv4 address is its first
  IPv4 management address.
- **ports**: a local interface is named by its interface name; a neighbour's port by its ID when
  the ID is an ifname, else by its description. Port numbers: when every port name of a node ends in
  a distinct number in 1..65535 (`swp1`, `Ethernet48`) that number, else 1, 2, ... in natural order
  of the names (forwarding tables hold 16-bit ports, so `swp70000` never becomes another port). The
  names (at most 256 characters, as node names) are kept on the links (`Link.port_name_a/b`).
- **links**: A's `swp3` naming B's `swp1` and B's `swp1` naming A's `swp3` is one link. Parallel
  links are kept. When B's `swp1` names a third node, or a local interface lists two neighbours, the
  documents disagree and the import is refused naming both documents and ports. A link that only
  one end lists is imported and reported as one-sided (`Fabric.import_notes`).
- **speeds** come from `port_speeds_gbps` (`node/ifname` -> Gb/s, as node_exporter's
  `node_network_speed_bytes` or SNMP `ifHighSpeed` report them; the slower end wins when both are
  given), else `default_link_speed_gbps`; latency is `default_link_latency_ns`.
"""

from __future__ import annotations

import ipaddress
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from fabrictwin.lldp import MAX_ARCHIVE_BYTES, LldpError, read_cabling
from fabrictwin.lldp import documents_from_archive as _read_archive

from services.common.errors import InvalidArgument, excerpt, quote
from services.topology.fabric import Fabric, NodeKind
from services.topology.formats.assembly import assemble_fabric, check_defaults, check_name
from services.topology.limits import DEFAULT_LIMITS, MAX_NAME_CHARS, MAX_PORT, FabricLimits, FabricSize

__all__ = ["MAX_ARCHIVE_BYTES", "documents_from_archive", "import_lldp", "neighbour_documents"]


def documents_from_archive(archive: bytes, field: str = "archive") -> list[tuple[str, str]]:
    """The `*.json` members of a tar archive (plain or compressed), as (name, text) pairs."""
    try:
        return _read_archive(archive, field)
    except LldpError as exc:
        raise InvalidArgument(exc.field, exc.problem) from None


_TRAILING_NUMBER = re.compile(r"(\d+)$")


def _natural_key(name: str) -> list[Any]:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def _port_numbers(names: Iterable[str]) -> dict[str, int]:
    """Port numbers of one node's port names (rule in the module docstring)."""
    ordered = sorted(set(names), key=_natural_key)
    trailing = [_TRAILING_NUMBER.search(name) for name in ordered]
    # Past six digits a number is beyond MAX_PORT whatever it is: not worth converting.
    numbers = [int(match[1]) if match and len(match[1]) <= 6 else 0 for match in trailing]
    if all(1 <= number <= MAX_PORT for number in numbers) and len(set(numbers)) == len(numbers):
        return dict(zip(ordered, numbers, strict=True))
    return {name: i + 1 for i, name in enumerate(ordered)}


def _speeds(port_speeds_gbps: Mapping[str, float]) -> dict[str, float]:
    speeds = {}
    for port, gbps in port_speeds_gbps.items():
        field = f"port_speeds_gbps[{quote(port)}]"
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
    limits: FabricLimits = DEFAULT_LIMITS,
) -> Fabric:
    """A fabric from one LLDP neighbour document per node, as (name, text) pairs.

    Raises InvalidArgument naming the document (and node and port) of the first problem, and
    ResourceExhausted for more documents (nodes) or cables than `limits` allow.

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
    limits.admit(FabricSize(len(documents), 0), "the documents")  # one node each
    try:
        cabling = read_cabling(documents)
    except LldpError as exc:
        # The reader quotes names and ports as the documents give them; bound what one of 10 MB echoes.
        raise InvalidArgument(excerpt(exc.field, 300), excerpt(exc.problem, 500)) from None
    except ValueError as exc:  # an integer literal of more than 4,300 digits, which Python will not convert
        raise InvalidArgument("documents", f"a document does not parse ({excerpt(exc, 80)})") from None
    links, notes = cabling.cables, cabling.notes
    names = cabling.nodes
    limits.admit(FabricSize(len(names), len(links)))
    for name in names:
        check_name(name, f"documents[{quote(name, 60)}]")
    for node, port, peer, peer_port in links:
        for owner, interface in ((node, port), (peer, peer_port)):
            if len(interface) > MAX_NAME_CHARS:
                raise InvalidArgument(
                    f"documents[{quote(owner, 60)}]",
                    f"a port name has at most {MAX_NAME_CHARS} characters, got {len(interface):,}: "
                    f"{quote(interface, 60)}",
                )
    index = {name: i for i, name in enumerate(names)}
    ports_of: dict[str, list[str]] = {name: [] for name in names}
    for node, port, peer, peer_port in links:
        ports_of[node].append(port)
        ports_of[peer].append(peer_port)
    numbers = {node: _port_numbers(ports) for node, ports in ports_of.items()}
    kind = np.array(
        [NodeKind.SWITCH if cabling.switch[name] else NodeKind.HOST for name in names], dtype=np.int8
    )
    ip = np.array(
        [cabling.ipv4[name] if kind[i] == NodeKind.HOST else 0 for i, name in enumerate(names)],
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
        limits=limits,
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
