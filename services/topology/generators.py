"""Fabric generators: two-tier leaf-spine and three-tier k-ary fat-tree, as plain functions.

(The rail-optimised SuperPOD is in `superpod.py`; building any of them from a FabricSpec is `specs.py`.)
Naming and numbering (the same every time, so names are stable across restarts):

- leaf-spine: hosts `host-0..`, then `leaf-0..`, then `spine-0..`; host i sits on leaf i // hosts_per_leaf.
  Leaf ports 1..hosts_per_leaf face its hosts, then `parallel_links` ports per spine; spine ports
  run leaf by leaf. Host IPv4 is 10.<leaf // 256>.<leaf % 256>.<host on leaf + 1>. Oversubscription
  is hosts_per_leaf x host link speed over spines x parallel_links x link speed.
- fat-tree: hosts `pod{p}-edge{e}-h{j}`, then edges `pod{p}-edge{e}`, aggregations `pod{p}-agg{a}`, cores
  `core-{c}`. Edge ports 1..k/2 face hosts, k/2+1..k face the pod's aggregations; aggregation ports
  1..k/2 face edges, k/2+1..k face cores; core c = a*(k/2)+m serves aggregation a of every pod, on port
  pod+1 (the standard wiring). Host IPv4 is 10.<pod>.<edge>.<j + 1>.
- nodes are in tier order (hosts first, so host h is node h), LIDs 1..N in node order, GUIDs 0;
  every link has its upper-tier end on the a side; links are listed host links first, then tier by tier.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from services.common.errors import InvalidArgument
from services.topology.cabling import (
    DEFAULT_LINK_LATENCY_NS,
    DEFAULT_LINK_SPEED_GBPS,
    Admit,
    FieldName,
    assemble,
    check_routable_size,
    ipv4,
    link_parameters,
    same_name,
    whole_number,
)
from services.topology.fabric import Fabric
from services.topology.limits import DEFAULT_LIMITS, FabricSize

__all__ = ["build_fat_tree", "build_leaf_spine", "fat_tree", "leaf_spine"]


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
    return build_leaf_spine(
        leaves, spines, hosts_per_leaf, parallel_links, link_speed_gbps, host_link_speed_gbps, link_latency_ns
    )


def build_leaf_spine(
    leaves: Any,
    spines: Any,
    hosts_per_leaf: Any,
    parallel_links: Any,
    link_speed_gbps: Any,
    host_link_speed_gbps: Any,
    link_latency_ns: Any,
    field: FieldName = same_name,
    admit: Admit = DEFAULT_LIMITS.admit,
) -> Fabric:
    leaves = whole_number(leaves, field("leaves"), 1)
    spines = whole_number(spines, field("spines"), 1)
    hpl = whole_number(hosts_per_leaf, field("hosts_per_leaf"), 1)
    par = whole_number(parallel_links, field("parallel_links"), 1)
    rate, host_rate, latency = link_parameters(link_speed_gbps, host_link_speed_gbps, link_latency_ns, field)
    if hpl > 254:
        raise InvalidArgument(
            field("hosts_per_leaf"), f"at most 254 hosts per leaf (one /24 each), got {hpl}"
        )
    if leaves > 65536:
        raise InvalidArgument(field("leaves"), f"at most 65536 leaves, got {leaves}")
    hosts = leaves * hpl
    n = hosts + leaves + spines
    check_routable_size(leaves + spines, hosts, field("leaves"))
    admit(FabricSize(n, hosts + leaves * spines * par, max(hpl + spines * par, leaves * par)))

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
    return assemble(
        tier=tier,
        names=names,
        radix=radix,
        group=np.full(n, -1),
        host_ip=ipv4(np.full(hosts, 10), host_leaf >> 8, host_leaf & 0xFF, host_slot + 1),
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
    return build_fat_tree(k, link_speed_gbps, link_latency_ns, host_link_speed_gbps)


def build_fat_tree(
    k: Any,
    link_speed_gbps: Any,
    link_latency_ns: Any,
    host_link_speed_gbps: Any,
    field: FieldName = same_name,
    admit: Admit = DEFAULT_LIMITS.admit,
) -> Fabric:
    k = whole_number(k, field("k"), 2)
    if k % 2:
        raise InvalidArgument(field("k"), f"must be even, got {k}")
    rate, host_rate, latency = link_parameters(link_speed_gbps, host_link_speed_gbps, link_latency_ns, field)
    h = k // 2
    hosts, pod_switches, cores = k * h * h, k * h, h * h
    check_routable_size(2 * pod_switches + cores, hosts, field("k"))
    admit(FabricSize(hosts + 2 * pod_switches + cores, 3 * hosts, k))

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
    return assemble(
        tier=tier,
        names=names,
        radix=radix,
        group=group,
        host_ip=ipv4(np.full(hosts, 10), host_pod, host_edge_in_pod, host_slot + 1),
        links=links,
        link_rate_bps=np.concatenate([np.full(hosts, host_rate), np.full(2 * p.shape[0], rate)]),
        latency_ns=latency,
    )
