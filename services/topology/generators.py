"""Fabric generators: two-tier leaf-spine and three-tier k-ary fat-tree, as plain functions.

Naming and numbering (the same every time, so names are stable across restarts):

- leaf-spine: hosts `host-0..`, then `leaf-0..`, then `spine-0..`; host i sits on leaf i // hosts_per_leaf.
  Leaf ports 1..hosts_per_leaf face its hosts, then `parallel_links` ports per spine; spine ports
  run leaf by leaf. Host IPv4 is 10.<leaf // 256>.<leaf % 256>.<host on leaf + 1>.
- fat-tree: hosts `pod{p}-edge{e}-h{j}`, then edges `pod{p}-edge{e}`, aggregations `pod{p}-agg{a}`, cores
  `core-{c}`. Edge ports 1..k/2 face hosts, k/2+1..k face the pod's aggregations; aggregation ports
  1..k/2 face edges, k/2+1..k face cores; core c = a*(k/2)+m serves aggregation a of every pod, on port
  pod+1 (the standard wiring). Host IPv4 is 10.<pod>.<edge>.<j + 1>.
- nodes are in tier order (hosts first, so host h is node h), LIDs 1..N in node order, GUIDs 0;
  every link has its upper-tier end on the a side; links are listed host links first, then tier by tier.

`from_spec` builds from a FabricSpec-shaped dict (proto field names, as `MessageToDict(...,
preserving_proto_field_name=True)` gives) and names fields as `spec.fat_tree.k` in its errors.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from services.common.errors import InvalidArgument
from services.topology.fabric import MAX_NODE_HOST_PAIRS, Fabric, LinkState, NodeKind, link_display_names

__all__ = [
    "DEFAULT_LINK_LATENCY_NS",
    "DEFAULT_LINK_SPEED_GBPS",
    "fat_tree",
    "from_spec",
    "leaf_spine",
    "normalise_spec",
]

DEFAULT_LINK_SPEED_GBPS = 400.0  # NDR
DEFAULT_LINK_LATENCY_NS = 500  # about 100 m of fibre
GENERATORS = ("leaf_spine", "fat_tree", "superpod")

FieldName = Callable[[str], str]


def _same(param: str) -> str:
    return param


def _count(value: Any, field: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise InvalidArgument(field, f"must be a whole number, got {value!r}")
    if value < minimum:
        raise InvalidArgument(field, f"must be at least {minimum}, got {value}")
    return int(value)


def _rate_bps(gbps: Any, field: str) -> int:
    if isinstance(gbps, bool) or not isinstance(gbps, int | float | np.number) or not math.isfinite(gbps):
        raise InvalidArgument(field, f"must be a number of Gb/s, got {gbps!r}")
    if gbps <= 0:
        raise InvalidArgument(field, f"must be positive, got {gbps}")
    return round(float(gbps) * 1e9)


def _check_size(nodes: int, hosts: int, field: str) -> None:
    if nodes * hosts > MAX_NODE_HOST_PAIRS:
        raise InvalidArgument(
            field,
            f"{nodes} nodes x {hosts} hosts is too large to route "
            f"(limit {MAX_NODE_HOST_PAIRS} node-host pairs)",
        )


def _assemble(
    *,
    tier: np.ndarray,
    names: list[str],
    radix: np.ndarray,
    group: np.ndarray,
    host_ip: np.ndarray,
    links: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    link_rate_bps: np.ndarray,
    latency_ns: int,
) -> Fabric:
    """A Fabric from per-node tiers (0 = host) and link end arrays; fills the defaults generators share."""
    n = tier.shape[0]
    kind = np.where(tier == 0, NodeKind.HOST, NodeKind.SWITCH).astype(np.int8)
    ip = np.zeros(n, dtype=np.uint32)
    ip[kind == NodeKind.HOST] = host_ip
    a, port_a, b, port_b = (x.astype(np.int32) for x in links)
    num_links = a.shape[0]
    return Fabric(
        node_kind=kind,
        node_tier=tier.astype(np.int8),
        node_names=names,
        node_radix=radix.astype(np.int32),
        node_group=group.astype(np.int32),
        node_rail=np.full(n, -1, dtype=np.int32),
        node_guid=np.zeros(n, dtype=np.uint64),
        node_lid=np.arange(1, n + 1, dtype=np.int32),
        node_ip=ip,
        link_a=a,
        link_port_a=port_a,
        link_b=b,
        link_port_b=port_b,
        link_rate_bps=link_rate_bps.astype(np.int64),
        link_latency_ns=np.full(num_links, latency_ns, dtype=np.int64),
        link_state=np.full(num_links, LinkState.UP, dtype=np.int8),
        link_ber=np.zeros(num_links, dtype=np.float64),
        link_names=link_display_names(names, a, port_a, b, port_b),
    )


def _ipv4(first: np.ndarray, second: np.ndarray, third: np.ndarray, fourth: np.ndarray) -> np.ndarray:
    parts = [np.asarray(x, dtype=np.uint32) for x in (first, second, third, fourth)]
    return (parts[0] << 24) | (parts[1] << 16) | (parts[2] << 8) | parts[3]


def leaf_spine(
    leaves: int,
    spines: int,
    hosts_per_leaf: int,
    *,
    parallel_links: int = 1,
    link_speed_gbps: float = DEFAULT_LINK_SPEED_GBPS,
    host_link_speed_gbps: float | None = None,
    link_latency_ns: int = DEFAULT_LINK_LATENCY_NS,
) -> Fabric:
    """A two-tier leaf-spine (Clos): every leaf cabled to every spine `parallel_links` times.

    Parameters: counts of leaves, spines and hosts per leaf (all >= 1); link speed in Gb/s for
    leaf-spine links and, if given, a different one for host links; propagation latency in ns.
    Returns the Fabric; raises InvalidArgument naming the parameter that is wrong.

    >>> f = leaf_spine(4, 2, 8)
    >>> f.num_hosts, f.num_switches, f.num_links
    (32, 6, 40)
    """
    return _leaf_spine(
        leaves, spines, hosts_per_leaf, parallel_links, link_speed_gbps, host_link_speed_gbps, link_latency_ns
    )


def _leaf_spine(
    leaves: Any,
    spines: Any,
    hosts_per_leaf: Any,
    parallel_links: Any,
    link_speed_gbps: Any,
    host_link_speed_gbps: Any,
    link_latency_ns: Any,
    field: FieldName = _same,
) -> Fabric:
    leaves = _count(leaves, field("leaves"), 1)
    spines = _count(spines, field("spines"), 1)
    hpl = _count(hosts_per_leaf, field("hosts_per_leaf"), 1)
    par = _count(parallel_links, field("parallel_links"), 1)
    latency = _count(link_latency_ns, field("link_latency_ns"), 0)
    rate = _rate_bps(link_speed_gbps, field("link_speed_gbps"))
    host_rate = (
        rate
        if host_link_speed_gbps is None
        else _rate_bps(host_link_speed_gbps, field("host_link_speed_gbps"))
    )
    if hpl > 254:
        raise InvalidArgument(
            field("hosts_per_leaf"), f"at most 254 hosts per leaf (one /24 each), got {hpl}"
        )
    if leaves > 65536:
        raise InvalidArgument(field("leaves"), f"at most 65536 leaves, got {leaves}")
    hosts = leaves * hpl
    n = hosts + leaves + spines
    _check_size(n, hosts, field("leaves"))

    host_ids = np.arange(hosts)
    host_leaf, host_slot = np.divmod(host_ids, hpl)
    leaf_node = hosts + np.arange(leaves)
    spine_node = hosts + leaves + np.arange(spines)
    tier = np.concatenate([np.zeros(hosts), np.ones(leaves), np.full(spines, 2)])
    names = (
        [f"host-{i}" for i in range(hosts)]
        + [f"leaf-{i}" for i in range(leaves)]
        + [f"spine-{i}" for i in range(spines)]
    )
    radix = np.concatenate(
        [np.ones(hosts), np.full(leaves, hpl + spines * par), np.full(spines, leaves * par)]
    )

    # Spine-leaf cables in (spine, leaf, parallel) order.
    s, lf, q = (
        x.ravel() for x in np.meshgrid(np.arange(spines), np.arange(leaves), np.arange(par), indexing="ij")
    )
    links = (
        np.concatenate([leaf_node[host_leaf], spine_node[s]]),
        np.concatenate([host_slot + 1, lf * par + q + 1]),
        np.concatenate([host_ids, leaf_node[lf]]),
        np.concatenate([np.ones(hosts), hpl + s * par + q + 1]),
    )
    return _assemble(
        tier=tier,
        names=names,
        radix=radix,
        group=np.full(n, -1),
        host_ip=_ipv4(np.full(hosts, 10), host_leaf >> 8, host_leaf & 0xFF, host_slot + 1),
        links=links,
        link_rate_bps=np.concatenate([np.full(hosts, host_rate), np.full(s.shape[0], rate)]),
        latency_ns=latency,
    )


def fat_tree(
    k: int,
    *,
    link_speed_gbps: float = DEFAULT_LINK_SPEED_GBPS,
    link_latency_ns: int = DEFAULT_LINK_LATENCY_NS,
    host_link_speed_gbps: float | None = None,
) -> Fabric:
    """A three-tier k-ary fat-tree: k pods of k/2 edge and k/2 aggregation switches, (k/2)^2 cores.

    k must be even and >= 2; the fabric has k^3/4 hosts, 5k^2/4 switches and 3k^3/4 links.
    Raises InvalidArgument naming the parameter that is wrong.

    >>> f = fat_tree(4)
    >>> f.num_hosts, f.num_switches, f.num_links
    (16, 20, 48)
    """
    return _fat_tree(k, link_speed_gbps, link_latency_ns, host_link_speed_gbps)


def _fat_tree(
    k: Any,
    link_speed_gbps: Any,
    link_latency_ns: Any,
    host_link_speed_gbps: Any,
    field: FieldName = _same,
) -> Fabric:
    k = _count(k, field("k"), 2)
    if k % 2:
        raise InvalidArgument(field("k"), f"must be even, got {k}")
    latency = _count(link_latency_ns, field("link_latency_ns"), 0)
    rate = _rate_bps(link_speed_gbps, field("link_speed_gbps"))
    host_rate = (
        rate
        if host_link_speed_gbps is None
        else _rate_bps(host_link_speed_gbps, field("host_link_speed_gbps"))
    )
    h = k // 2
    hosts, pod_switches, cores = k * h * h, k * h, h * h
    n = hosts + 2 * pod_switches + cores
    _check_size(n, hosts, field("k"))

    edge0, agg0, core0 = hosts, hosts + pod_switches, hosts + 2 * pod_switches
    host_ids = np.arange(hosts)
    host_edge, host_slot = np.divmod(host_ids, h)  # host_edge = pod * h + edge
    host_pod, host_edge_in_pod = np.divmod(host_edge, h)
    tier = np.concatenate(
        [np.zeros(hosts), np.ones(pod_switches), np.full(pod_switches, 2), np.full(cores, 3)]
    )
    names = (
        [f"pod{p}-edge{e}-h{j}" for p in range(k) for e in range(h) for j in range(h)]
        + [f"pod{p}-edge{e}" for p in range(k) for e in range(h)]
        + [f"pod{p}-agg{a}" for p in range(k) for a in range(h)]
        + [f"core-{c}" for c in range(cores)]
    )
    pods = np.repeat(np.arange(k), h)
    group = np.concatenate([host_pod, pods, pods, np.full(cores, -1)])
    radix = np.concatenate([np.ones(hosts), np.full(2 * pod_switches + cores, k)])

    # Edge-aggregation cables in (pod, agg, edge) order; aggregation-core in (pod, agg, core slot).
    p, a, e = (x.ravel() for x in np.meshgrid(np.arange(k), np.arange(h), np.arange(h), indexing="ij"))
    core = a * h + e  # the third index doubles as the core slot m of aggregation a
    links = (
        np.concatenate([edge0 + host_edge, agg0 + p * h + a, core0 + core]),
        np.concatenate([host_slot + 1, e + 1, p + 1]),
        np.concatenate([host_ids, edge0 + p * h + e, agg0 + p * h + a]),
        np.concatenate([np.ones(hosts), h + a + 1, h + e + 1]),
    )
    return _assemble(
        tier=tier,
        names=names,
        radix=radix,
        group=group,
        host_ip=_ipv4(np.full(hosts, 10), host_pod, host_edge_in_pod, host_slot + 1),
        links=links,
        link_rate_bps=np.concatenate([np.full(hosts, host_rate), np.full(2 * p.shape[0], rate)]),
        latency_ns=latency,
    )


def _number(spec: Mapping[str, Any], key: str, field: str, kind: type) -> Any:
    """A spec value as `kind`; int64 fields arrive as strings from MessageToDict."""
    value = spec.get(key, 0)
    try:
        if isinstance(value, bool):
            raise ValueError
        return kind(value) if kind is float else int(str(value))
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(field, f"must be a number, got {value!r}") from exc


def normalise_spec(spec: Mapping[str, Any] | None) -> dict[str, Any]:
    """The spec with proto defaults filled (0 means default) and exactly one generator; validates names.

    Returns a new dict with proto field names, suitable for storing and for `from_spec`.
    """
    if not spec:
        raise InvalidArgument("spec", "choose a generator: leaf_spine, fat_tree or superpod")
    known = {*GENERATORS, "link_speed_gbps", "link_latency_ns", "host_link_speed_gbps"}
    for key in spec:
        if key not in known:
            raise InvalidArgument(f"spec.{key}", "unknown field")
    chosen = [g for g in GENERATORS if g in spec]
    if not chosen:
        raise InvalidArgument("spec", "choose a generator: leaf_spine, fat_tree or superpod")
    if len(chosen) > 1:
        raise InvalidArgument("spec", f"choose exactly one generator, got {', '.join(chosen)}")
    generator = chosen[0]
    if generator == "superpod":
        raise InvalidArgument("spec.superpod", "the SuperPOD generator is not implemented yet (issue #3)")
    speed = _number(spec, "link_speed_gbps", "spec.link_speed_gbps", float) or DEFAULT_LINK_SPEED_GBPS
    out: dict[str, Any] = {
        "link_speed_gbps": speed,
        "link_latency_ns": _number(spec, "link_latency_ns", "spec.link_latency_ns", int)
        or DEFAULT_LINK_LATENCY_NS,
        "host_link_speed_gbps": _number(spec, "host_link_speed_gbps", "spec.host_link_speed_gbps", float)
        or speed,
    }
    params = spec[generator] or {}
    if not isinstance(params, Mapping):
        raise InvalidArgument(f"spec.{generator}", "must be a message")
    allowed = {"leaf_spine": ("leaves", "spines", "hosts_per_leaf", "parallel_links"), "fat_tree": ("k",)}
    for key in params:
        if key not in allowed[generator]:
            raise InvalidArgument(f"spec.{generator}.{key}", "unknown field")
    values = {key: _number(params, key, f"spec.{generator}.{key}", int) for key in allowed[generator]}
    if generator == "leaf_spine":
        values["parallel_links"] = values["parallel_links"] or 1
    out[generator] = values
    return out


def from_spec(spec: Mapping[str, Any] | None) -> Fabric:
    """Build the fabric a FabricSpec-shaped dict describes; errors name fields as `spec.fat_tree.k`."""
    spec = normalise_spec(spec)
    common = ("link_speed_gbps", "link_latency_ns", "host_link_speed_gbps")
    if "fat_tree" in spec:
        params = spec["fat_tree"]

        def field(param: str) -> str:
            return f"spec.{param}" if param in common else f"spec.fat_tree.{param}"

        return _fat_tree(
            params["k"], spec["link_speed_gbps"], spec["link_latency_ns"], spec["host_link_speed_gbps"], field
        )
    params = spec["leaf_spine"]

    def field(param: str) -> str:
        return f"spec.{param}" if param in common else f"spec.leaf_spine.{param}"

    return _leaf_spine(
        params["leaves"],
        params["spines"],
        params["hosts_per_leaf"],
        params["parallel_links"],
        spec["link_speed_gbps"],
        spec["host_link_speed_gbps"],
        spec["link_latency_ns"],
        field,
    )
