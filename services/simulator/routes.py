"""Walking a snapshot's equal-cost routes hop by hop, vectorised over flows: the primitives every
load-balancing mode's FLOW path split is made of (modes/), and the routes' CSR form (`FlowRoutes`).

- `pin_flows_by_hash` (ECMP): at each node the next channel is
  `group[hash(5-tuple, seed of that node) % len(group)]`, so a flow takes exactly one path.
- `split_flows_evenly` (the fluid limit of per-packet balancing): at each node a flow's share is
  split evenly over the whole group, so it puts a fraction on every channel of every equal-cost
  path (per-hop even split; on fat-trees this equals an even split over paths).
- `pinned_path_rows`: the distinct pinned paths of a workload as rows of their own.

Channels of links that are DOWN are left out of every group, as a switch would. A flow with no
route is FailedPrecondition naming the two hosts. A route is a CSR of (channel, fraction) plus the
flow's one-way latency: link latencies plus `switch_latency_ns` per switch crossed (with a split,
the slowest of its paths).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from services.common.errors import FailedPrecondition
from services.common.snapshot import FabricSnapshot
from services.simulator.ecmp_hash import ecmp_next_hop, flow_hash, pack_five_tuples, switch_seeds
from services.simulator.workload import Workload

__all__ = [
    "FlowRoutes",
    "RouteWalker",
    "hop_latency_ns",
    "path_channels",
    "pin_flows_by_hash",
    "pinned_path_rows",
    "split_flows_evenly",
    "unique_rows",
    "widest_even_split",
]

_NODE_KIND_SWITCH = 2
_LINK_STATE_DOWN = 2


@dataclasses.dataclass
class FlowRoutes:
    """Channels crossed by each routed flow, as CSR, and its one-way latency."""

    offsets: np.ndarray  # int64 [R+1]
    channels: np.ndarray  # int32 [E]
    fractions: np.ndarray  # float64 [E], share of the flow's rate on that channel
    latency_ns: np.ndarray  # int64 [R]
    pinned: bool  # True when every flow has exactly one path (ECMP)


class RouteWalker:
    """Route groups of a snapshot with DOWN channels removed, and per-channel hop costs.

    `groups(nodes, destinations)` gives (start, size) slices of `channels`, LFT channel first
    (FabricSnapshot.route_groups, with the channels of DOWN links squeezed out of every slice).
    """

    def __init__(self, snapshot: FabricSnapshot, switch_latency_ns: int) -> None:
        self.snapshot = snapshot
        self.hosts = snapshot.num_hosts
        self.target = snapshot.channel_target().astype(np.int64)
        channel_up = np.repeat(snapshot.link_state != _LINK_STATE_DOWN, 2)
        channels = np.asarray(snapshot.route_channels, dtype=np.int64)
        keep = (channels >= 0) & channel_up[np.maximum(channels, 0)]
        self.channels = channels[keep]
        # A slice [a, a+n) of the snapshot's channels is [kept_before[a], kept_before[a+n]) here.
        self._kept_before = np.zeros(len(channels) + 1, dtype=np.int64)
        np.cumsum(keep, out=self._kept_before[1:])
        self.hop_ns = hop_latency_ns(snapshot, switch_latency_ns)

    def groups(self, nodes: np.ndarray, destinations: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        start, size = self.snapshot.route_groups(nodes, destinations)
        first = self._kept_before[start]
        return first, self._kept_before[start + size] - first

    def _pair(self, sources: np.ndarray, destinations: np.ndarray) -> str:
        names, host_nodes = self.snapshot.node_names, self.snapshot.host_nodes
        return (
            f"from {names[host_nodes[sources[0]]]} to {names[host_nodes[destinations[0]]]} "
            f"in {self.snapshot.fabric} (routing version {self.snapshot.routing_version})"
        )

    def no_route(self, sources: np.ndarray, destinations: np.ndarray) -> FailedPrecondition:
        return FailedPrecondition(f"no route {self._pair(sources, destinations)}")

    def looping(self, sources: np.ndarray, destinations: np.ndarray) -> FailedPrecondition:
        return FailedPrecondition(f"the routes loop {self._pair(sources, destinations)}")


def hop_latency_ns(snapshot: FabricSnapshot, switch_latency_ns: int) -> np.ndarray:
    """int64 [2L]: each channel's link latency, plus `switch_latency_ns` when it arrives at a switch."""
    is_switch = snapshot.node_kind == _NODE_KIND_SWITCH
    arrives_at_switch = is_switch[snapshot.channel_target()]
    latency = np.repeat(snapshot.link_latency_ns.astype(np.int64), 2)
    return latency + np.where(arrives_at_switch, switch_latency_ns, 0)


def _csr(flow: np.ndarray, channel: np.ndarray, fraction: np.ndarray, count: int) -> tuple:
    order = np.argsort(flow, kind="stable")
    offsets = np.zeros(count + 1, dtype=np.int64)
    np.cumsum(np.bincount(flow, minlength=count), out=offsets[1:])
    return offsets, channel[order].astype(np.int32), fraction[order]


def pin_flows_by_hash(
    snapshot: FabricSnapshot,
    sources: np.ndarray,
    destinations: np.ndarray,
    source_ports: np.ndarray,
    destination_qps: np.ndarray | None,
    hash_function: str,
    base_seed: int,
    same_seed_everywhere: bool,
    switch_latency_ns: int,
) -> FlowRoutes:
    """ECMP: one path per flow, chosen at every node by the hash of its 5-tuple and the node's seed."""
    walker = RouteWalker(snapshot, switch_latency_ns)
    count = len(sources)
    keys = pack_five_tuples(
        snapshot.host_ip[sources], snapshot.host_ip[destinations], source_ports, dest_qp=destination_qps
    )
    seeds = switch_seeds(base_seed, snapshot.num_nodes, same_seed_everywhere)
    flow = np.arange(count)
    node = snapshot.host_nodes[sources].astype(np.int64)
    goal = snapshot.host_nodes[destinations].astype(np.int64)
    destination = np.asarray(destinations, dtype=np.int64)
    latency = np.zeros(count, dtype=np.int64)
    hops_flow, hops_channel = [], []
    for _ in range(snapshot.num_nodes):
        moving = node != goal[flow]
        flow, node = flow[moving], node[moving]
        if not len(flow):
            break
        start, size = walker.groups(node, destination[flow])
        if (size == 0).any():
            stuck = flow[size == 0]
            raise walker.no_route(np.asarray(sources)[stuck], destination[stuck])
        choice = ecmp_next_hop(size, flow_hash(hash_function, keys[flow], seeds[node]))
        channel = walker.channels[start + choice]
        hops_flow.append(flow)
        hops_channel.append(channel)
        latency[flow] += walker.hop_ns[channel]
        node = walker.target[channel]
    else:
        raise walker.looping(np.asarray(sources)[flow], destination[flow])
    flows = np.concatenate(hops_flow) if hops_flow else np.zeros(0, dtype=np.int64)
    channels = np.concatenate(hops_channel) if hops_channel else np.zeros(0, dtype=np.int64)
    offsets, channels, fractions = _csr(flows, channels, np.ones(len(flows)), count)
    return FlowRoutes(offsets, channels, fractions, latency, pinned=True)


def split_flows_evenly(
    snapshot: FabricSnapshot, sources: np.ndarray, destinations: np.ndarray, switch_latency_ns: int
) -> FlowRoutes:
    """Fluid limit of per-packet balancing: every flow split evenly over each equal-cost group."""
    walker = RouteWalker(snapshot, switch_latency_ns)
    count = len(sources)
    destination = np.asarray(destinations, dtype=np.int64)
    goal = snapshot.host_nodes[destination].astype(np.int64)
    # The frontier: (flow, node, share of the flow at that node, latency so far).
    flow = np.arange(count)
    node = snapshot.host_nodes[sources].astype(np.int64)
    share: np.ndarray = np.ones(count)
    elapsed = np.zeros(count, dtype=np.int64)
    latency = np.zeros(count, dtype=np.int64)
    hops = []
    for _ in range(snapshot.num_nodes):
        arrived = node == goal[flow]
        np.maximum.at(latency, flow[arrived], elapsed[arrived])
        flow, node, share, elapsed = flow[~arrived], node[~arrived], share[~arrived], elapsed[~arrived]
        if not len(flow):
            break
        start, size = walker.groups(node, destination[flow])
        if (size == 0).any():
            stuck = flow[size == 0]
            raise walker.no_route(np.asarray(sources)[stuck], destination[stuck])
        parent = np.repeat(np.arange(len(flow)), size)
        member = np.arange(len(parent)) - np.repeat(np.cumsum(size) - size, size)
        channel = walker.channels[start[parent] + member]
        child_flow, child_share = flow[parent], share[parent] / size[parent]
        hops.append((child_flow, channel, child_share))
        # Merge the children that reach the same node (shares add up, latency is the slowest).
        child_node = walker.target[channel]
        child_elapsed = elapsed[parent] + walker.hop_ns[channel]
        key, inverse = np.unique(child_flow * snapshot.num_nodes + child_node, return_inverse=True)
        share = np.bincount(inverse, weights=child_share, minlength=len(key))
        elapsed = np.zeros(len(key), dtype=np.int64)
        np.maximum.at(elapsed, inverse, child_elapsed)
        flow, node = key // snapshot.num_nodes, key % snapshot.num_nodes
    else:
        raise walker.looping(np.asarray(sources)[flow], destination[flow])
    flows = np.concatenate([h[0] for h in hops]) if hops else np.zeros(0, dtype=np.int64)
    channels = np.concatenate([h[1] for h in hops]) if hops else np.zeros(0, dtype=np.int64)
    shares = np.concatenate([h[2] for h in hops]) if hops else np.zeros(0)
    # A flow could reach a node at two depths on non-minimal routes: add up its shares per channel.
    key, inverse = np.unique(flows * snapshot.num_channels + channels, return_inverse=True)
    shares = np.bincount(inverse, weights=shares, minlength=len(key))
    flows, channels = key // snapshot.num_channels, key % snapshot.num_channels
    offsets, channels, fractions = _csr(flows, channels, shares, count)
    return FlowRoutes(offsets, channels, fractions, latency, pinned=False)


def path_channels(snapshot: FabricSnapshot) -> int:
    """Channels on the longest up-down path between hosts: twice the highest switch tier."""
    return 2 * max(1, int(snapshot.node_tier.max(initial=1)))


def widest_even_split(snapshot: FabricSnapshot, samples: int = 8) -> int:
    """The most channels one host pair's even split (`split_flows_evenly`) spreads over, among pairs
    from host 0 to `samples` hosts spread over the fabric (the far ones cross its top tier): an
    estimate of route entries per pair, for admission. Pairs with no route are left out (the route
    checks name them), down to twice the highest switch tier when none has one."""
    widest = path_channels(snapshot)
    hosts = len(snapshot.host_nodes)
    for destination in np.unique(np.linspace(1, hosts - 1, min(samples, hosts - 1)).astype(np.int64)):
        try:
            routes = split_flows_evenly(snapshot, np.zeros(1, dtype=np.int64), np.array([destination]), 0)
        except FailedPrecondition:
            continue
        widest = max(widest, int(routes.offsets[-1]))
    return widest


def unique_rows(columns: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(np.stack(columns, 1), axis=0, return_inverse=True), without its row-wise sort.

    Columns are folded into one int64 key (mixed radix: each column's offset value times the product
    of the later columns' ranges), whose order is the rows' lexicographic order, for as many columns
    as the key's range fits in 2^62; then the key is ranked (a table of the keys present where their
    range is small, no sort; else one integer sort) and folding goes on from the ranks. Most tables
    are one pass; a QP's five columns (job, hosts, port, QP number) two. Rows come back in the same
    lexicographic order as np.unique's.
    """
    values = [np.asarray(c, dtype=np.int64) for c in columns]
    lows = [int(v.min(initial=0)) for v in values]
    spans = [int(v.max(initial=0)) - low + 1 for v, low in zip(values, lows, strict=True)]
    key = np.zeros(len(values[0]), dtype=np.int64)
    space = 1  # the key's values are in [0, space)
    for v, low, span in zip(values, lows, spans, strict=True):
        if space * span >= 1 << 62:  # no room for this column: rank the key so far first
            key = _dense_rank(key, space)
            space = int(key.max(initial=-1)) + 1
        key *= span
        key += v - low
        space *= span
    rank = _dense_rank(key, space)
    first = np.zeros(int(rank.max(initial=-1)) + 1, dtype=np.int64)
    first[rank[::-1]] = np.arange(len(rank) - 1, -1, -1)  # the first row of each rank
    rows = np.stack([v[first] for v in values], axis=1)
    return rows, rank


def _dense_rank(key: np.ndarray, space: int) -> np.ndarray:
    """Each key's rank among the distinct keys (0 .. distinct - 1, in key order); keys in [0, space)."""
    if space <= 4 * len(key) + 1024:  # a table of the key space: linear, no sort
        present = np.zeros(space, dtype=np.bool_)
        present[key] = True
        rank_of = np.cumsum(present, dtype=np.int32 if space < 2**31 else np.int64)
        return rank_of[key].astype(np.int64) - 1
    _, rank = np.unique(key, return_inverse=True)
    return rank.reshape(-1).astype(np.int64)


def pinned_path_rows(workload: Workload, pinned: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct paths of the pinned flows as a CSR (offsets, channels), and each pinned flow's row.

    Paths are compared as rows of channels padded with -1 (rows come in lexicographic order).
    """
    assert workload.pinned_offsets is not None and workload.pinned_channels is not None
    flows = np.flatnonzero(pinned)
    lengths = workload.pinned_lengths[flows]
    hop = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    padded = np.full((len(flows), int(lengths.max())), -1, dtype=np.int64)
    padded[np.repeat(np.arange(len(flows)), lengths), hop] = workload.pinned_channels[
        np.repeat(workload.pinned_offsets[flows], lengths) + hop
    ]
    paths, row = unique_rows([padded[:, k] for k in range(padded.shape[1])])
    kept = paths >= 0
    offsets = np.zeros(len(paths) + 1, dtype=np.int64)
    np.cumsum(kept.sum(axis=1), out=offsets[1:])
    return offsets, paths[kept].astype(np.int32), row
