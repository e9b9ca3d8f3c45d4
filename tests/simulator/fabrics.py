"""Small hand-built FabricSnapshots for simulator tests (leaf-spine, k-ary fat-tree, one shared link,
a ring of switches).

Routes are all minimal paths (every equal-cost next channel), computed by a breadth-first search
from each destination host that never forwards through another host. These stand in for the
topology service's generators so that core tests need no other service.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from services.common.snapshot import FabricSnapshot

__all__ = [
    "build_snapshot",
    "fat_tree",
    "leaf_spine",
    "point_to_point_spec",
    "switch_ring",
    "two_links_in_a_row",
    "with_links_down",
]

HOST, SWITCH = 1, 2
NDR_BPS = 400_000_000_000


def _min_hop_routes(kind: np.ndarray, hosts: np.ndarray, link_a: np.ndarray, link_b: np.ndarray, down=()):
    n, h = len(kind), len(hosts)
    if len(down):  # a down link joins a phantom node to itself: no route can use it
        kind = np.append(kind, SWITCH)
        link_a, link_b = link_a.copy(), link_b.copy()
        link_a[list(down)] = link_b[list(down)] = n
    source = np.empty(2 * len(link_a), dtype=np.int64)
    target = np.empty_like(source)
    source[0::2], source[1::2] = link_a, link_b
    target[0::2], target[1::2] = link_b, link_a
    dist = np.full((h, len(kind)), -1, dtype=np.int64)
    dist[np.arange(h), hosts] = 0
    frontier = np.zeros((h, len(kind)), dtype=bool)
    frontier[np.arange(h), hosts] = True
    order = np.argsort(target, kind="stable")
    starts = np.flatnonzero(np.r_[True, target[order][1:] != target[order][:-1]])
    level = 0
    while frontier.any():
        level += 1
        expanding = frontier & ((kind == SWITCH)[None, :] | (dist == 0))
        reached = np.logical_or.reduceat(expanding[:, source[order]], starts, axis=1)
        fresh = np.zeros_like(frontier)
        fresh[:, target[order][starts]] = reached
        fresh &= dist < 0
        dist[fresh] = level
        frontier = fresh
    ds, dt = dist[:, source], dist[:, target]
    valid = (ds > 0) & (dt == ds - 1) & ((kind[target] == SWITCH)[None, :] | (dt == 0))
    dest, channel = np.nonzero(valid)
    key = source[channel] * h + dest
    order = np.lexsort((channel, key))
    offsets = np.zeros(n * h + 1, dtype=np.int64)
    np.cumsum(np.bincount(key, minlength=n * h), out=offsets[1:])
    return offsets, channel[order].astype(np.int32)


def build_snapshot(
    names: list[str],
    kind: list[int],
    tier: list[int],
    links: list[tuple[int, int]],
    rate_bps: int | list[int] = NDR_BPS,
    latency_ns: int = 500,
    rails: list[int] | None = None,
    fabric: str = "fabrics/test",
) -> FabricSnapshot:
    """A snapshot of an arbitrary graph with min-hop ECMP routes."""
    kind_array = np.array(kind, dtype=np.int8)
    hosts = np.flatnonzero(kind_array == HOST).astype(np.int32)
    link_a = np.array([a for a, _ in links], dtype=np.int32)
    link_b = np.array([b for _, b in links], dtype=np.int32)
    offsets, next_channels = _min_hop_routes(kind_array, hosts, link_a, link_b)
    rates = np.broadcast_to(np.asarray(rate_bps, dtype=np.int64), (len(links),)).copy()
    return FabricSnapshot(
        fabric=fabric,
        routing_version=1,
        node_kind=kind_array,
        node_tier=np.array(tier, dtype=np.int8),
        node_names=list(names),
        host_nodes=hosts,
        host_ip=(0x0A000001 + np.arange(len(hosts))).astype(np.uint32),
        host_rail=np.array(rails if rails is not None else [-1] * len(hosts), dtype=np.int32),
        link_a=link_a,
        link_b=link_b,
        link_rate_bps=rates,
        link_latency_ns=np.full(len(links), latency_ns, dtype=np.int64),
        link_state=np.ones(len(links), dtype=np.int8),
        link_ber=np.zeros(len(links)),
        link_names=[f"{names[a]}<->{names[b]}" for a, b in links],
        route_offsets=offsets,
        route_next_channels=next_channels,
    )


def leaf_spine(
    leaves: int, spines: int, hosts_per_leaf: int, rate_bps: int = NDR_BPS, latency_ns: int = 500
) -> FabricSnapshot:
    """Two tiers; host h sits on leaf h // hosts_per_leaf and has rail h % hosts_per_leaf."""
    hosts = leaves * hosts_per_leaf
    names = [f"host-{h}" for h in range(hosts)] + [f"leaf-{i}" for i in range(leaves)]
    names += [f"spine-{i}" for i in range(spines)]
    kind = [HOST] * hosts + [SWITCH] * (leaves + spines)
    tier = [0] * hosts + [1] * leaves + [2] * spines
    links = [(h, hosts + h // hosts_per_leaf) for h in range(hosts)]
    links += [(hosts + leaf, hosts + leaves + s) for leaf in range(leaves) for s in range(spines)]
    rails = [h % hosts_per_leaf for h in range(hosts)]
    return build_snapshot(names, kind, tier, links, rate_bps, latency_ns, rails)


def fat_tree(k: int, rate_bps: int = NDR_BPS, latency_ns: int = 500) -> FabricSnapshot:
    """k-ary fat-tree: k pods of k/2 leaves (edge) and k/2 spines (aggregation), (k/2)^2 cores."""
    half = k // 2
    hosts, leaves, spines, cores = k**3 // 4, k * half, k * half, half * half
    names = [f"host-{h}" for h in range(hosts)] + [f"leaf-{i}" for i in range(leaves)]
    names += [f"spine-{i}" for i in range(spines)] + [f"core-{i}" for i in range(cores)]
    kind = [HOST] * hosts + [SWITCH] * (leaves + spines + cores)
    tier = [0] * hosts + [1] * leaves + [2] * spines + [3] * cores
    leaf0, spine0, core0 = hosts, hosts + leaves, hosts + leaves + spines
    links = [(h, leaf0 + h // half) for h in range(hosts)]
    for pod in range(k):
        for e in range(half):
            links += [(leaf0 + pod * half + e, spine0 + pod * half + a) for a in range(half)]
        for a in range(half):
            links += [(spine0 + pod * half + a, core0 + a * half + c) for c in range(half)]
    return build_snapshot(names, kind, tier, links, rate_bps, latency_ns)


def two_links_in_a_row(rate_bps: list[int], latency_ns: int = 0) -> FabricSnapshot:
    """host-0, host-1 -> switch-0 -> switch-1 -> host-2, host-3, for max-min fairness cases.

    Links: 0 host-0/switch-0, 1 host-1/switch-0, 2 switch-0/switch-1, 3 switch-1/host-2,
    4 switch-1/host-3.
    """
    names = ["host-0", "host-1", "host-2", "host-3", "switch-0", "switch-1"]
    kind = [HOST] * 4 + [SWITCH] * 2
    links = [(0, 4), (1, 4), (4, 5), (5, 2), (5, 3)]
    return build_snapshot(names, kind, [0, 0, 0, 0, 1, 2], links, rate_bps, latency_ns)


def switch_ring(
    switches: int,
    hosts_per_switch: int = 1,
    closed: bool = True,
    rate_bps: int = NDR_BPS,
    latency_ns: int = 500,
) -> FabricSnapshot:
    """switch-0 .. switch-(n-1) in a ring (switch-i cabled to switch-(i+1) mod n); host-h on switch
    h // hosts_per_switch.

    With 5 switches the min-hop route from a host on switch-i to one on switch-(i+2) is the one two
    hops clockwise, switch-i -> switch-(i+1) -> switch-(i+2): such traffic from every switch makes
    each clockwise ring channel wait on the next, a cycle of buffer dependencies (PFC can deadlock).
    `closed=False` leaves out the switch-(n-1)<->switch-0 link: a line, whose routes cannot form
    that cycle. Links: the hosts' first, then switch-i<->switch-(i+1) for i = 0, 1, ...
    """
    hosts = switches * hosts_per_switch
    names = [f"host-{h}" for h in range(hosts)] + [f"switch-{i}" for i in range(switches)]
    kind = [HOST] * hosts + [SWITCH] * switches
    tier = [0] * hosts + [1] * switches
    links = [(h, hosts + h // hosts_per_switch) for h in range(hosts)]
    ring = switches if closed else switches - 1
    links += [(hosts + i, hosts + (i + 1) % switches) for i in range(ring)]
    return build_snapshot(names, kind, tier, links, rate_bps, latency_ns)


def with_links_down(snapshot: FabricSnapshot, links: tuple[int, ...]) -> FabricSnapshot:
    """`snapshot` with `links` DOWN and min-hop routes recomputed without them (a what-if routing)."""
    state = snapshot.link_state.copy()
    state[list(links)] = 2
    offsets, next_channels = _min_hop_routes(
        snapshot.node_kind, snapshot.host_nodes, snapshot.link_a, snapshot.link_b, links
    )
    return dataclasses.replace(
        snapshot,
        routing_version=snapshot.routing_version + 1,
        link_state=state,
        route_offsets=offsets,
        route_next_channels=next_channels,
    )


def point_to_point_spec(snapshot: FabricSnapshot, flows, **settings) -> dict:
    """A PACKET-fidelity ECMP spec of one POINT_TO_POINT job on `snapshot`: `flows` are (source host
    index, destination host index, bytes[, start_ns]); `settings` add or override spec fields."""
    names = [snapshot.node_names[h] for h in snapshot.host_nodes]
    return {
        "fabric": snapshot.fabric,
        "fidelity": "PACKET",
        "jobs": [
            {
                "collective": "POINT_TO_POINT",
                "flows": [
                    {"source": names[s], "destination": names[d], "size_bytes": size, "start_ns": start}
                    for s, d, size, start in ((*f, 0) if len(f) == 3 else f for f in flows)
                ],
            }
        ],
        "load_balancing": {"mode": "ECMP"},
        **settings,
    }
