"""SHARP in-network AllReduce: the aggregation tree a job gets, its transfers, and what it needs.

With SHARP (Scalable Hierarchical Aggregation and Reduction Protocol) on an InfiniBand fabric, the
switches of an aggregation tree reduce the data as it passes: every host sends its S bytes once,
up to its leaf switch, and receives the reduced S bytes once, down from it. A ring AllReduce moves
2(n-1)/n x S each way through every host link, so for large messages SHARP takes n / (2(n-1)) of
the ring's time: just over half (the vendor's "up to 50% less communication time at scale").

The tree (`aggregation_tree`), chosen as SHARP's Aggregation Manager does in spirit, one tree
spanning the job's hosts, deterministically:

- each rank's host hangs off its leaf: the switch at the far end of its lowest-numbered working
  channel;
- the root is the switch nearest to all those leaves over working switch-to-switch links: the
  smallest largest hop count, then the smallest total, ties shared out by job index (job i takes
  the (i mod count)-th of the tied switches, in node order), so concurrent jobs get different roots
  where the fabric offers several; with one leaf, the leaf itself is the root;
- every other switch's parent is its lowest-numbered neighbour one hop nearer the root (through
  the lowest-numbered channel), and the tree keeps only the switches with a job leaf below them.

On a k-ary fat-tree that is the job's leaves, one aggregation switch per pod (the same position in
every pod) and one core above them; within a pod, one aggregation switch; on a leaf-spine, one
spine. A tree with no common switch is FailedPrecondition naming the job.

The transfers (`sharp_transfers`) are hops between neighbouring tree nodes, each pinned to the one
channel of its tree edge (load balancing does not move SHARP traffic: the Aggregation Manager
configures the tree's links). S is cut into `chunks` pieces (`collectives.pipeline_chunks`: one per
4 KiB, at most 256), and per chunk:

- up: a node sends the chunk to its parent once it has arrived from all its children (a host
  sends at once): that is the reduction;
- the root, once the chunk has arrived from all its children, sends it down to each of them;
- down: a switch forwards the chunk to each child once it has arrived from its parent;
- every tree edge sends its chunks in order (the next leaves once the previous one has left).

The FLOW model stores and forwards whole chunks at every switch, where SHARP's switches reduce
packets (4 KiB MTU) as they stream through, so a run costs (2h - 1) chunk times more than the
streaming ideal (h: hops from a host to the root): (2h - 1) / chunks of S over the link rate. The
default of 256 chunks for any S of 1 MiB or more keeps that at 2% on three tiers (1.2% on two), at
a cost in transfers of 2 x 256 per tree edge, whatever S. Iterations repeat the tree's DAG as
`collectives.repeat_iterations` does: a host starts the next one once it has received the last
chunk of the previous one.

Endpoints: a SHARP flow's source or destination may be a switch. Workload arrays then hold an
endpoint index: a host index below `num_hosts`, or `num_hosts + node` for the switch `node`.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from services.common.errors import FailedPrecondition, InvalidArgument
from services.common.snapshot import FabricSnapshot
from services.simulator.collectives import (
    JobTransfers,
    RankTransfers,
    dependency_edges,
    pipeline_chunks,
    repeat_iterations,
    split_bytes,
)
from services.simulator.spec import Algorithm, Collective, Fidelity, JobSpec, SimulationSpec, Transport

__all__ = ["AggregationTree", "aggregation_tree", "sharp_transfers", "validate_sharp"]

_NODE_KIND_HOST, _NODE_KIND_SWITCH, _LINK_STATE_DOWN = 1, 2, 2


def validate_sharp(field: str, job: JobSpec, spec: SimulationSpec) -> None:
    """Refuse a SHARP job the twin cannot run (`field` is the job's, e.g. `jobs[0]`).

    SHARP reduces AllReduce data in InfiniBand switches, and only the FLOW engine models it:
    another collective, RoCEv2 transport or PACKET fidelity is InvalidArgument naming
    `{field}.algorithm`. A job without a collective is left to the job checks.
    """
    if job.algorithm != Algorithm.SHARP or job.collective is None:
        return
    where = f"{field}.algorithm"
    if job.collective != Collective.ALL_REDUCE:
        raise InvalidArgument(
            where,
            f"SHARP reduces in the switches for ALL_REDUCE only, not {job.collective.value}; "
            f"{job.collective.value} takes RING",
        )
    if spec.transport != Transport.INFINIBAND:
        raise InvalidArgument(
            where,
            f"SHARP needs an InfiniBand fabric (transport INFINIBAND), got {spec.transport.value}: "
            "SHARP is reduction in InfiniBand switches, which RoCEv2/Ethernet switches do not do; "
            "choose RING, DOUBLE_BINARY_TREE or HALVING_DOUBLING there",
        )
    if spec.fidelity == Fidelity.PACKET:
        raise InvalidArgument(
            where,
            "PACKET-fidelity SHARP is not modelled (switches that reduce packets as they pass); "
            "run SHARP at FLOW fidelity",
        )


@dataclasses.dataclass
class AggregationTree:
    """A job's SHARP tree: the ranks' hosts (tree nodes 0..n-1, in rank order), then its switches.

    Switches come deepest first (then by node index), so children precede their parents.
    """

    ranks: int  # n
    nodes: np.ndarray  # int64 [m], fabric node of each tree node
    endpoints: np.ndarray  # int64 [m], host index (ranks) or num_hosts + node (switches)
    parent: np.ndarray  # int64 [m], tree node of the parent, -1 at the root
    up_channel: np.ndarray  # int64 [m], channel to the parent (its reverse, channel ^ 1, comes down)
    depth: np.ndarray  # int64 [m], hops to the root

    @property
    def root(self) -> int:
        return int(np.flatnonzero(self.parent < 0)[0])

    @property
    def height(self) -> int:
        """Hops from the farthest host up to the root."""
        return int(self.depth[: self.ranks].max())


def _hops_from(
    sources: np.ndarray, channel_from: np.ndarray, channel_to: np.ndarray, nodes: int
) -> np.ndarray:
    """int64 [len(sources), nodes]: hop counts from each source over the given channels (-1: none).

    Breadth-first, all sources at once: per level, a node is reached if any channel into it leaves
    a node of the frontier (a logical-or reduction over the channels grouped by target).
    """
    order = np.argsort(channel_to, kind="stable")
    to_sorted, from_sorted = channel_to[order], channel_from[order]
    starts = np.flatnonzero(np.r_[True, to_sorted[1:] != to_sorted[:-1]]) if len(order) else order
    rows = np.arange(len(sources))
    hops = np.full((len(sources), nodes), -1, dtype=np.int64)
    hops[rows, sources] = 0
    frontier = hops == 0
    level = 0
    while frontier.any() and len(starts):
        level += 1
        reached = np.zeros_like(frontier)
        reached[:, to_sorted[starts]] = np.logical_or.reduceat(frontier[:, from_sorted], starts, axis=1)
        reached &= hops < 0
        hops[reached] = level
        frontier = reached
    return hops


def _first_channels(mask: np.ndarray, source: np.ndarray, nodes: int) -> np.ndarray:
    """int64 [nodes]: the lowest-numbered channel in `mask` leaving each node, -1 where none."""
    candidates = np.flatnonzero(mask)
    with_one, first = np.unique(source[candidates], return_index=True)
    channel = np.full(nodes, -1, dtype=np.int64)
    channel[with_one] = candidates[first]
    return channel


def aggregation_tree(snapshot: FabricSnapshot, hosts: np.ndarray, job_index: int = 0) -> AggregationTree:
    """The SHARP tree spanning a job's `hosts` (host index per rank), chosen as the module doc says.

    Raises FailedPrecondition naming the job when a host has no working link to a switch or no
    switch reaches all the job's leaves.
    """
    hosts = np.asarray(hosts, dtype=np.int64)
    n, count = len(hosts), snapshot.num_nodes
    source = snapshot.channel_source().astype(np.int64)
    target = snapshot.channel_target().astype(np.int64)
    working = np.repeat(snapshot.link_state != _LINK_STATE_DOWN, 2)
    is_switch = snapshot.node_kind == _NODE_KIND_SWITCH
    host_node = snapshot.host_nodes[hosts].astype(np.int64)
    host_channel = _first_channels(
        working & is_switch[target] & (snapshot.node_kind[source] == _NODE_KIND_HOST), source, count
    )[host_node]
    if (host_channel < 0).any():
        stranded = snapshot.node_names[int(host_node[np.argmax(host_channel < 0)])]
        raise FailedPrecondition(
            f"jobs[{job_index}]: SHARP needs every host on a switch; {stranded} has none"
        )
    host_leaf = target[host_channel]
    leaves = np.unique(host_leaf)
    fabric_links = working & is_switch[source] & is_switch[target]
    hops = _hops_from(leaves, source[fabric_links], target[fabric_links], count)  # [leaves, nodes]
    candidates = np.flatnonzero((hops >= 0).all(axis=0) & is_switch)
    if not len(candidates):
        raise FailedPrecondition(
            f"jobs[{job_index}]: no switch reaches all {len(leaves)} leaves of the job's hosts, "
            "so SHARP has no aggregation tree"
        )
    farthest, total = hops[:, candidates].max(axis=0), hops[:, candidates].sum(axis=0)
    nearest = farthest == farthest.min()
    tied = candidates[nearest & (total == total[nearest].min())]
    root = int(tied[job_index % len(tied)])
    depth = _hops_from(np.array([root]), source[fabric_links], target[fabric_links], count)[0]
    toward_root = fabric_links & (depth[source] > 0) & (depth[target] == depth[source] - 1)
    parent_channel = _first_channels(toward_root, source, count)
    in_tree = np.zeros(count, dtype=bool)
    climbing = leaves
    while len(climbing):  # mark the leaves and every switch above them, up to the root
        in_tree[climbing] = True
        upward = parent_channel[climbing]
        climbing = np.unique(target[upward[upward >= 0]])
        climbing = climbing[~in_tree[climbing]]
    switches = np.flatnonzero(in_tree)
    switches = switches[np.lexsort((switches, -depth[switches]))]
    tree_index = np.full(count, -1, dtype=np.int64)
    tree_index[switches] = n + np.arange(len(switches))
    up_channel = np.r_[host_channel, parent_channel[switches]]
    parent = np.where(up_channel >= 0, tree_index[target[np.maximum(up_channel, 0)]], -1)
    return AggregationTree(
        ranks=n,
        nodes=np.r_[host_node, switches],
        endpoints=np.r_[hosts, snapshot.num_hosts + switches],
        parent=parent,
        up_channel=up_channel,
        depth=np.r_[depth[host_leaf] + 1, depth[switches]],
    )


def _one_iteration(tree: AggregationTree, size: int, chunks: int) -> RankTransfers:
    """Per chunk a block of 2E transfers (E tree edges): E up-sends deepest first, then E down-sends
    shallowest first, so children precede parents going up and parents precede children going down."""
    m = len(tree.parent)
    child = np.flatnonzero(tree.parent >= 0)
    edges = len(child)  # m - 1
    up_order = child[np.argsort(-tree.depth[child], kind="stable")]
    down_order = child[np.argsort(tree.depth[child], kind="stable")]
    up_at = np.full(m, -1, dtype=np.int64)  # block position of each node's up-send
    down_at = np.full(m, -1, dtype=np.int64)  # block position of the down-send to each node
    up_at[up_order] = np.arange(edges)
    down_at[down_order] = edges + np.arange(edges)
    parent = tree.parent[child]
    below_root = tree.parent[parent] >= 0  # children whose parent is not the root
    at_root = child[~below_root]
    template = np.concatenate(
        [
            dependency_edges(up_at[child[below_root]], up_at[parent[below_root]], 1),  # reduce upward
            dependency_edges(up_at[at_root][:, None], down_at[at_root][None, :], 1),  # root: all -> each
            dependency_edges(down_at[parent[below_root]], down_at[child[below_root]], 1),  # forward down
        ]
    )
    block = np.arange(chunks, dtype=np.int64)
    shifted = (template[None, :, :] + (block * 2 * edges)[:, None, None] * np.array([1, 1, 0])).reshape(-1, 3)
    later = np.arange(2 * edges, 2 * edges * chunks)  # chunk k >= 1: in order after chunk k-1 per edge
    sender = np.r_[up_order, tree.parent[down_order]]
    receiver = np.r_[tree.parent[up_order], down_order]
    source, destination = np.tile(sender, chunks), np.tile(receiver, chunks)
    return RankTransfers(
        sizes=np.repeat(split_bytes(np.full(chunks, size), chunks, block), 2 * edges),
        source=source,
        destination=destination,
        connection=source * m + destination,
        edges=np.concatenate([shifted, dependency_edges(later - 2 * edges, later, 0)]),
    )


def sharp_transfers(tree: AggregationTree, job: JobSpec) -> tuple[JobTransfers, int]:
    """The job's SHARP AllReduce over `tree`, and its steps per iteration (2 x the tree's height).

    Sources and destinations are endpoint indices (see the module doc); every transfer carries the
    channel of its tree edge.
    """
    m = len(tree.parent)
    one = _one_iteration(tree, job.size_bytes, pipeline_chunks(job))
    many = repeat_iterations(one, m, max(1, job.iterations))
    going_up = tree.parent[many.source] == many.destination
    channel = np.where(going_up, tree.up_channel[many.source], tree.up_channel[many.destination] ^ 1)
    transfers = JobTransfers(
        sizes=many.sizes.astype(np.int64),
        source=tree.endpoints[many.source],
        destination=tree.endpoints[many.destination],
        connection=many.connection,
        release_ns=np.full(len(many.sizes), job.start_ns, dtype=np.int64),
        edges=many.edges,
        pinned_offsets=np.arange(len(channel) + 1, dtype=np.int64),  # one channel per transfer
        pinned_channels=channel.astype(np.int32),
    )
    return transfers, 2 * tree.height
