"""FabricTwin's JSON topology format (documented with an example in docs/topology-formats.md).

```json
{
  "version": 1,
  "nodes": [
    {"name": "leaf-0", "kind": "SWITCH", "tier": 1, "radix": 64, "guid": "0x0002c90300a1b2c3",
     "lid": 7, "rail": -1, "group": -1, "ip": ""},
    {"name": "node-0-gpu0", "kind": "HOST", "tier": 0, "radix": 1, "guid": "0x0", "lid": 8,
     "rail": 0, "group": 0, "ip": "10.0.0.1"}
  ],
  "links": [
    {"a": "leaf-0", "a_port": 1, "b": "node-0-gpu0", "b_port": 1, "speed_gbps": 400,
     "latency_ns": 500, "state": "UP", "ber": 0.0}
  ]
}
```

- `version` (optional, must be 1), `nodes` (required, at least one) and `links` (optional); no
  other top-level keys.
- a node needs `name` (unique, non-empty, at most 256 characters) and `kind` (`HOST` or `SWITCH`,
  any case). Optional: `tier` (hosts 0, switches 1..127; inferred as in assembly.py where left out),
  `radix` (1..65535; default: the highest port its links use, at least 1), `guid` (a `0x` hex
  string - JSON numbers cannot hold 64 bits exactly in every reader - or a non-negative integer;
  default 0 = unknown), `lid` (0..65535; 0 or absent = assign one), `rail` and `group` (-1..2^31-1;
  -1 = none, the default), `ip` (dotted IPv4; `""` or absent = none).
- a link needs `a`, `b` (node names) and `a_port`, `b_port` (1..radix). Optional: `speed_gbps`
  (1e-6..1.6e6; default `default_link_speed_gbps`), `latency_ns` (whole ns in 0..1e9; default
  `default_link_latency_ns`), `state` (`UP`, `DOWN`, `DEGRADED`; default UP), `ber` (0..1; 0).
- a document nested deeper than the format (Python's parser stops at ~1,000 levels) is refused, and
  one with more nodes or links than the service's limits is refused before its entries are read.
- link names are derived (`a/p1<->b/p1`), as for every fabric; unknown keys are errors, so a typo
  never silently falls back to a default.

Errors name the JSON path: `links[3].speed_gbps: must be a positive number, got -1`, or for text
that is not JSON at all, the line: `line 4: not JSON: Expecting ',' delimiter (column 9)`.
"""

from __future__ import annotations

import ipaddress
import json
import math
from typing import Any

import numpy as np

from services.common.errors import InvalidArgument, excerpt, quote
from services.topology.fabric import Fabric, LinkState, NodeKind, format_ipv4
from services.topology.formats.assembly import assemble_fabric, check_defaults, check_name, infer_tiers
from services.topology.limits import (
    DEFAULT_LIMITS,
    MAX_PORT,
    MAX_TAG,
    FabricLimits,
    FabricSize,
    check_latency_ns,
    check_speed_gbps,
)

__all__ = ["FORMAT_VERSION", "export_json", "import_json"]

FORMAT_VERSION = 1
_NODE_KEYS = ("name", "kind", "tier", "radix", "guid", "lid", "rail", "group", "ip")
_LINK_KEYS = ("a", "a_port", "b", "b_port", "speed_gbps", "latency_ns", "state", "ber")


def _gbps(rate_bps: int) -> int | float:
    gbps = rate_bps / 1e9
    return int(gbps) if gbps == int(gbps) else gbps


def export_json(fabric: Fabric) -> str:
    """The fabric in FabricTwin's JSON format, one node or link per line; import_json reads it back.

    >>> from services.topology.generators import leaf_spine
    >>> import json
    >>> doc = json.loads(export_json(leaf_spine(1, 1, 1)))
    >>> doc["links"][0]  # doctest: +NORMALIZE_WHITESPACE
    {'a': 'leaf-0', 'a_port': 1, 'b': 'host-0', 'b_port': 1, 'speed_gbps': 400, 'latency_ns': 500,
     'state': 'UP', 'ber': 0.0}
    """
    kinds = {int(k): k.name for k in NodeKind}
    states = {int(s): s.name for s in LinkState}
    names = fabric.node_names
    nodes = [
        {
            "name": name,
            "kind": kinds[kind],
            "tier": tier,
            "radix": radix,
            "guid": f"{guid:#018x}",
            "lid": lid,
            "rail": rail,
            "group": group,
            "ip": format_ipv4(ip),
        }
        for name, kind, tier, radix, guid, lid, rail, group, ip in zip(
            names,
            fabric.node_kind.tolist(),
            fabric.node_tier.tolist(),
            fabric.node_radix.tolist(),
            fabric.node_guid.tolist(),
            fabric.node_lid.tolist(),
            fabric.node_rail.tolist(),
            fabric.node_group.tolist(),
            fabric.node_ip.tolist(),
            strict=True,
        )
    ]
    links = [
        {
            "a": names[a],
            "a_port": pa,
            "b": names[b],
            "b_port": pb,
            "speed_gbps": _gbps(rate),
            "latency_ns": latency,
            "state": states[state],
            "ber": ber,
        }
        for a, pa, b, pb, rate, latency, state, ber in zip(
            fabric.link_a.tolist(),
            fabric.link_port_a.tolist(),
            fabric.link_b.tolist(),
            fabric.link_port_b.tolist(),
            fabric.link_rate_bps.tolist(),
            fabric.link_latency_ns.tolist(),
            fabric.link_state.tolist(),
            fabric.link_ber.tolist(),
            strict=True,
        )
    ]

    def rows(items: list[dict[str, Any]]) -> str:
        return ",\n".join("    " + json.dumps(item) for item in items)

    return (
        f'{{\n  "version": {FORMAT_VERSION},\n  "nodes": [\n{rows(nodes)}\n  ],\n'
        f'  "links": [\n{rows(links)}\n  ]\n}}\n'
    )


def _whole(value: Any, path: str, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(path, f"must be a whole number, got {quote(value, 60)}")
    if value < low or (high is not None and value > high):
        bounds = f"at least {low}" if high is None else f"in {low}..{high}"
        raise InvalidArgument(path, f"must be {bounds}, got {excerpt(value, 60)}")
    return value


def _number(value: Any, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidArgument(path, f"must be a number, got {quote(value, 60)}")
    return float(value)


def _enum(value: Any, path: str, enum: type[NodeKind] | type[LinkState]) -> int:
    names = [member.name for member in enum]
    if not isinstance(value, str) or value.upper() not in names:
        raise InvalidArgument(path, f"must be one of {', '.join(names)}, got {quote(value)}")
    return int(enum[value.upper()])


def _object(value: Any, path: str, keys: tuple[str, ...], required: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidArgument(path, f"must be an object, got {type(value).__name__}")
    for key in value:
        if key not in keys:
            raise InvalidArgument(
                f"{path}.{excerpt(key, 60)}",
                f"unknown key; a {path.split('[')[0][:-1]} has {', '.join(keys)}",
            )
    for key in required:
        if key not in value:
            raise InvalidArgument(f"{path}.{key}", "is required")
    return value


def _guid(value: Any, path: str) -> int:
    if isinstance(value, str):
        try:
            guid = int(value, 16) if value.lower().startswith("0x") else None
        except ValueError:
            guid = None
        if guid is None:
            raise InvalidArgument(
                path, f'must be a 0x hex string such as "0x0002c90300a1b2c3", got {quote(value, 60)}'
            )
    else:
        guid = _whole(value, path, 0)
    if not 0 <= guid < 2**64:
        raise InvalidArgument(path, f"must fit in 64 bits, got {quote(value, 60)}")
    return guid


def _ip(value: Any, path: str) -> int:
    if value is None or value == "":
        return 0
    try:
        return int(ipaddress.IPv4Address(value))
    except (ipaddress.AddressValueError, ValueError) as exc:
        raise InvalidArgument(path, f'must be a dotted IPv4 address or "", got {quote(value, 60)}') from exc


def import_json(
    text: str,
    *,
    default_link_speed_gbps: float = 400.0,
    default_link_latency_ns: int = 500,
    limits: FabricLimits = DEFAULT_LIMITS,
) -> Fabric:
    """Parse FabricTwin JSON into a validated Fabric; InvalidArgument names the JSON path.

    >>> f = import_json('{"nodes": [{"name": "s", "kind": "SWITCH"}, {"name": "h", "kind": "host"}],'
    ...                 ' "links": [{"a": "s", "a_port": 2, "b": "h", "b_port": 1}]}')
    >>> f.node_tier.tolist(), f.node_radix.tolist(), f.link_rate_bps.tolist(), f.link_names
    ([1, 0], [2, 1], [400000000000], ['s/p2<->h/p1'])
    """
    default_bps, default_latency = check_defaults(default_link_speed_gbps, default_link_latency_ns)
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidArgument(f"line {exc.lineno}", f"not JSON: {exc.msg} (column {exc.colno})") from exc
    except ValueError as exc:  # Python refuses to convert an integer literal of more than 4,300 digits
        raise InvalidArgument("$", f"a number with too many digits ({excerpt(exc, 80)})") from None
    except RecursionError:
        raise InvalidArgument(
            "$", "nested too deeply to be a topology (the format nests 3 levels: document, list, entry)"
        ) from None
    if not isinstance(document, dict):
        raise InvalidArgument(
            "$", f"must be a JSON object with nodes and links, got {type(document).__name__}"
        )
    for key in document:
        if key not in ("version", "nodes", "links"):
            raise InvalidArgument(excerpt(key, 60), "unknown key; the document has version, nodes and links")
    if document.get("version", FORMAT_VERSION) != FORMAT_VERSION:
        raise InvalidArgument("version", f"must be {FORMAT_VERSION}, got {quote(document['version'], 60)}")
    raw_nodes, raw_links = document.get("nodes"), document.get("links", [])
    if not isinstance(raw_nodes, list) or not raw_nodes:
        raise InvalidArgument("nodes", "must be a non-empty list of nodes")
    if not isinstance(raw_links, list):
        raise InvalidArgument("links", "must be a list of links")
    limits.admit(FabricSize(len(raw_nodes), len(raw_links)))

    n = len(raw_nodes)
    names: list[str] = []
    index: dict[str, int] = {}
    kind = np.zeros(n, dtype=np.int8)
    tier = np.full(n, -1, dtype=np.int64)
    radix = np.zeros(n, dtype=np.int64)
    guid = np.zeros(n, dtype=np.uint64)
    lid = np.zeros(n, dtype=np.int64)
    rail = np.full(n, -1, dtype=np.int64)
    group = np.full(n, -1, dtype=np.int64)
    ip = np.zeros(n, dtype=np.uint32)
    for i, raw in enumerate(raw_nodes):
        path = f"nodes[{i}]"
        node = _object(raw, path, _NODE_KEYS, ("name", "kind"))
        name = node["name"]
        if not isinstance(name, str) or not name:
            raise InvalidArgument(f"{path}.name", f"must be a non-empty string, got {quote(name, 60)}")
        check_name(name, f"{path}.name")
        if name in index:
            raise InvalidArgument(f"{path}.name", f"{quote(name)} is also the name of nodes[{index[name]}]")
        index[name] = i
        names.append(name)
        kind[i] = _enum(node["kind"], f"{path}.kind", NodeKind)
        if "tier" in node:
            low, high = (0, 0) if kind[i] == NodeKind.HOST else (1, 127)
            tier[i] = _whole(node["tier"], f"{path}.tier", low, high)
        radix[i] = (
            _whole(node["radix"], f"{path}.radix", 1, MAX_PORT) if "radix" in node else 0
        )  # 0: from links
        guid[i] = _guid(node.get("guid", 0), f"{path}.guid")
        lid[i] = _whole(node.get("lid", 0), f"{path}.lid", 0, 65535)
        rail[i] = _whole(node.get("rail", -1), f"{path}.rail", -1, MAX_TAG)
        group[i] = _whole(node.get("group", -1), f"{path}.group", -1, MAX_TAG)
        ip[i] = _ip(node.get("ip", ""), f"{path}.ip")

    links = _parse_links(raw_links, index, default_bps, default_latency)
    a, port_a, b, port_b = links[:4]
    # Radix where left out: the highest port the node's links use (at least 1).
    used = np.ones(n, dtype=np.int64)
    np.maximum.at(used, a, port_a)
    np.maximum.at(used, b, port_b)
    radix = np.where(radix == 0, used, radix)
    _check_ports(names, radix, a, port_a, b, port_b)
    inferred = infer_tiers(kind, a, b)
    return assemble_fabric(
        kind=kind,
        names=names,
        radix=radix,
        links=(a, port_a, b, port_b),
        rate_bps=links[4],
        latency_ns=links[5],
        tier=np.where(tier >= 0, tier, inferred),
        limits=limits,
        guid=guid,
        lid=lid,
        group=group,
        rail=rail,
        ip=ip,
        state=links[6],
        ber=links[7],
    )


def _parse_links(
    raw_links: list[Any], index: dict[str, int], default_bps: int, default_latency: int
) -> tuple[np.ndarray, ...]:
    count = len(raw_links)
    columns = {
        name: np.zeros(count, dtype=dtype)
        for name, dtype in (
            ("a", np.int64), ("a_port", np.int64), ("b", np.int64), ("b_port", np.int64),
            ("rate", np.int64), ("latency", np.int64), ("state", np.int8), ("ber", np.float64),
        )
    }  # fmt: skip
    for i, raw in enumerate(raw_links):
        path = f"links[{i}]"
        link = _object(raw, path, _LINK_KEYS, ("a", "a_port", "b", "b_port"))
        for end in ("a", "b"):
            name = link[end]
            if not isinstance(name, str) or name not in index:
                raise InvalidArgument(f"{path}.{end}", f"must name a node, got {quote(name)}")
            columns[end][i] = index[name]
            columns[f"{end}_port"][i] = _whole(link[f"{end}_port"], f"{path}.{end}_port", 1, MAX_PORT)
        if "speed_gbps" in link:
            speed = link["speed_gbps"]
            if isinstance(speed, int | float) and not isinstance(speed, bool) and speed <= 0:
                raise InvalidArgument(f"{path}.speed_gbps", f"must be a positive number, got {speed!r}")
            columns["rate"][i] = round(check_speed_gbps(speed, f"{path}.speed_gbps") * 1e9)
        else:
            columns["rate"][i] = default_bps
        latency = link.get("latency_ns", default_latency)
        columns["latency"][i] = check_latency_ns(
            _whole(latency, f"{path}.latency_ns", 0), f"{path}.latency_ns"
        )
        columns["state"][i] = _enum(link.get("state", "UP"), f"{path}.state", LinkState)
        ber = _number(link.get("ber", 0.0), f"{path}.ber")
        if not 0.0 <= ber <= 1.0:
            raise InvalidArgument(f"{path}.ber", f"must be in 0..1, got {ber!r}")
        columns["ber"][i] = ber
    return tuple(columns.values())


def _check_ports(
    names: list[str], radix: np.ndarray, a: np.ndarray, port_a: np.ndarray, b: np.ndarray, port_b: np.ndarray
) -> None:
    """The JSON path of a port beyond the radix or used twice (Fabric.validate would only say `links`)."""
    for end, node, port in (("a", a, port_a), ("b", b, port_b)):
        beyond = np.flatnonzero(port > radix[node])
        if beyond.size:
            i = int(beyond[0])
            raise InvalidArgument(
                f"links[{i}].{end}_port", f"{names[node[i]]} has {radix[node[i]]} ports, got port {port[i]}"
            )
    count = a.shape[0]
    key = np.concatenate([a, b]) * (int(radix.max(initial=1)) + 1) + np.concatenate([port_a, port_b])
    order = np.argsort(key, kind="stable")
    repeated = np.flatnonzero(key[order][1:] == key[order][:-1])
    if repeated.size:
        # Report the end that comes later in the document: (link index, a before b).
        first, second = sorted(
            (int(x) % count, int(x) // count) for x in order[[repeated[0], repeated[0] + 1]]
        )
        i, end = second[0], "ab"[second[1]]
        node, port = (a, port_a) if end == "a" else (b, port_b)
        raise InvalidArgument(
            f"links[{i}].{end}_port",
            f"port {port[i]} of {names[node[i]]} is already used by links[{first[0]}]",
        )
