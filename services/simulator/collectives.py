"""Collectives as NCCL runs them: each algorithm's transfers and the prerequisite edges between them.

A generator returns one job's transfers with job-local indices and its edges
(prerequisite, dependent, needs_arrival), in TOPOLOGICAL order: every edge has
prerequisite < dependent, so one pass in index order meets every prerequisite before its
dependents (the critical path in results.py relies on it; tests assert it). needs_arrival = 1
waits for the prerequisite's last byte to arrive (data the dependent forwards or reduces); 0 only
for it to have left the source NIC (a connection sends in order).

Connections (a connection's QPs keep their UDP source ports across transfers, see workload.py):
rings use connection = rank (rank i -> i+1); every other algorithm uses
(channel * n + source rank) * n + destination rank, the channel being the tree (0, 1) of the
double binary tree and 0 elsewhere. S is the job's `size_bytes`; n its ranks.

- Ring AllReduce / ReduceScatter / AllGather: `ring_transfers` (and `ring_block`: any range of
  its transfers from their indices alone).
- Double binary tree AllReduce (`double_binary_tree`): tree 0 is the complete binary tree over
  ranks in order, heap-numbered (rank r's parent is (r-1)//2, root rank 0); tree 1 is its mirror
  (rank r sits where rank n-1-r sits in tree 0, root rank n-1). Tree 0's inner nodes are ranks
  0..n//2-1 and tree 1's are ranks n-1-n//2+1..n-1, so no rank is inner in both; with n even every
  rank is a leaf in exactly one tree, with n odd rank (n-1)//2 is a leaf in both. Each tree carries
  half of S (the first ceil(S/2) bytes on tree 0) in `chunks` chunks. Per chunk and tree: a
  non-root rank sends the chunk to its parent once it has arrived from all its children (reduce);
  the root, once it has it from all its children, sends it to each child (broadcast); a rank
  forwards a broadcast chunk to each child once it has arrived from its parent. Every connection
  sends its chunks in order. Per chunk: 2(n-1) transfers per tree.
- Recursive halving-doubling AllReduce (n a power of two, L = log2 n): reduce-scatter steps
  s = 0..L-1 with partner i XOR (n >> (s+1)), each rank sending the half of its current block the
  partner keeps (S/2, S/4, ..., S/n); then all-gather steps with partner i XOR (1 << g), g =
  0..L-1, sending the block it owns (S/n, ..., S/2). Blocks are unions of the n integer segments
  of S, so bytes are exact. A step waits for the previous step's data from its partner to arrive
  and for the rank's own previous send to have left (a sendrecv per step). One transfer per step.
- AllToAll: rank i sends segment j of S (S/n) to every rank j != i, all at once (NCCL's grouped
  point-to-point sends), in `chunks` pieces, in order per connection.
- Broadcast from rank 0 (NCCL's ring broadcast): a pipeline 0 -> 1 -> ... -> n-1; rank r forwards
  chunk k once it has arrived from rank r-1, in order on its connection.
- SHARP AllReduce (in-network reduction through switches): sharp.py, which builds on
  `RankTransfers`, `dependency_edges` and `repeat_iterations` here.

`chunks` 0 means the algorithm's default (`pipeline_chunks`): 1 for rings, halving-doubling and
AllToAll; for the tree and broadcast pipelines one chunk per MiB of what one pipeline carries
(S/2 per tree, S for broadcast), rounded up, at least 1 and at most 64; for SHARP one chunk per
4 KiB of S (an InfiniBand MTU), at most 256 (why finer: sharp.py).

Iterations: a ring's steps simply continue. Every other algorithm repeats its one-iteration
DAG: a connection sends in order across iterations (its first transfer of iteration i+1 waits
for its last of iteration i to have left), and a transfer with no prerequisite inside its
iteration also waits for the last transfer of iteration i on the reverse connection (peer -> it)
to have arrived. That is a pairwise handshake, not NCCL's per-rank kernel boundary, which would
cost O(n^3) edges for AllToAll.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from numba import njit

from services.simulator.spec import Algorithm, Collective, JobSpec

__all__ = [
    "MAX_PIPELINE_CHUNKS",
    "MAX_SHARP_CHUNKS",
    "PIPELINE_CHUNK_BYTES",
    "RING_COLLECTIVES",
    "SHARP_CHUNK_BYTES",
    "JobTransfers",
    "RankTransfers",
    "RingBlock",
    "collective_transfers",
    "dependency_edges",
    "double_binary_tree",
    "pipeline_chunks",
    "repeat_iterations",
    "ring_block",
    "ring_sent_bytes",
    "ring_steps",
    "ring_transfers",
    "split_bytes",
]

PIPELINE_CHUNK_BYTES = 1 << 20
MAX_PIPELINE_CHUNKS = 64
SHARP_CHUNK_BYTES = 4096
MAX_SHARP_CHUNKS = 256
RING_COLLECTIVES = (Collective.ALL_REDUCE, Collective.REDUCE_SCATTER, Collective.ALL_GATHER)


def split_bytes(total: np.ndarray, parts: int | np.ndarray, index: np.ndarray) -> np.ndarray:
    """Piece `index` of `total` bytes split into `parts` integer pieces (the first ones 1 byte larger)."""
    total = np.asarray(total, dtype=np.int64)
    return total // parts + (np.asarray(index) < total % parts)


@dataclasses.dataclass
class JobTransfers:
    """One job's transfers with job-local indices, in topological order (see the module doc)."""

    sizes: np.ndarray  # int64 [T], transfer bytes
    source: np.ndarray  # int64 [T], host index
    destination: np.ndarray  # int64 [T], host index
    connection: np.ndarray  # int64 [T], job-local connection id (QP numbers hash it)
    release_ns: np.ndarray  # int64 [T]
    edges: np.ndarray  # int64 [E, 3]: (prerequisite, dependent, 1 if it must have arrived else 0)
    # CSR over transfers: the channels a transfer is pinned to, in order from its source (SHARP's
    # hop between neighbouring tree nodes: one channel; a POINT_TO_POINT flow's given path); an empty
    # row is routed between hosts by the load-balancing mode. None: every transfer is routed.
    pinned_offsets: np.ndarray | None = None  # int64 [T+1]
    pinned_channels: np.ndarray | None = None  # int32 [P]
    source_port: np.ndarray | None = None  # int64 [T]: UDP source port (0: from the QP number)
    rate_bps: np.ndarray | None = None  # float64 [T]: cap on the transfer's sending rate (0: none)


@dataclasses.dataclass
class RankTransfers:
    """One iteration of a collective, in ranks (SHARP: in nodes of its aggregation tree)."""

    sizes: np.ndarray  # int64 [T]
    source: np.ndarray  # int64 [T], rank
    destination: np.ndarray  # int64 [T], rank
    connection: np.ndarray  # int64 [T], (channel * n + source) * n + destination
    edges: np.ndarray  # int64 [E, 3]


def dependency_edges(prerequisite: np.ndarray, dependent: np.ndarray, needs_arrival: int) -> np.ndarray:
    """int64 [E, 3] edges (prerequisite, dependent, needs_arrival) of two broadcast index arrays."""
    prerequisite, dependent = np.broadcast_arrays(np.asarray(prerequisite), np.asarray(dependent))
    flag = np.full(prerequisite.shape, needs_arrival)
    return np.stack([prerequisite.ravel(), dependent.ravel(), flag.ravel()], axis=1).astype(np.int64)


def pipeline_chunks(job: JobSpec) -> int:
    """Chunks the job's pipeline uses: `job.chunks`, or the algorithm's default when it is 0."""
    if job.chunks > 0:
        return job.chunks
    if job.algorithm == Algorithm.SHARP:
        return int(min(MAX_SHARP_CHUNKS, max(1, -(-job.size_bytes // SHARP_CHUNK_BYTES))))
    if job.collective == Collective.ALL_REDUCE and job.algorithm == Algorithm.DOUBLE_BINARY_TREE:
        carried = -(-job.size_bytes // 2)
    elif job.collective == Collective.BROADCAST:
        carried = job.size_bytes
    else:
        return 1
    return int(min(MAX_PIPELINE_CHUNKS, max(1, -(-carried // PIPELINE_CHUNK_BYTES))))


def ring_steps(collective: Collective, n: int) -> int:
    """Steps of one ring iteration: 2(n-1) for AllReduce, n-1 for ReduceScatter and AllGather."""
    return 2 * (n - 1) if collective == Collective.ALL_REDUCE else n - 1


@dataclasses.dataclass
class RingBlock:
    """Transfers `lo..hi-1` of a ring job (`ring_block`), each with its dependents by index."""

    sizes: np.ndarray  # int64 [m]
    rank: np.ndarray  # int64 [m], the sending rank: its connection (rank -> rank + 1)
    # int64 [m, 2]: the next transfer of its connection (it only has to have left), then the one
    # on rank + 1 that forwards what it carried (arrival); -1: none (the job's last step), only
    # ever after those that exist.
    dependents: np.ndarray
    prerequisites: np.ndarray  # int32 [m], edges into each


def ring_block(n: int, job: JobSpec, steps: int, lo: int, hi: int) -> RingBlock:
    """Transfers `lo..hi-1` of a ring job of n ranks and `steps` steps per iteration, computed from
    their index alone (so a run can generate a ring of 134M transfers block by block)."""
    m = max(0, hi - lo)
    block = RingBlock(
        sizes=np.empty(m, dtype=np.int64),
        rank=np.empty(m, dtype=np.int64),
        dependents=np.empty((m, 2), dtype=np.int64),
        prerequisites=np.empty(m, dtype=np.int32),
    )
    total_steps = steps * max(1, job.iterations)
    sizes, rank, dependents, prerequisites = block.sizes, block.rank, block.dependents, block.prerequisites
    _ring_block(
        n, job.size_bytes, max(1, job.chunks), steps, total_steps, lo, sizes, rank, dependents, prerequisites
    )
    return block


@njit(cache=True)
def _ring_block(n, size_bytes, chunks, steps, total_steps, lo, sizes, rank, dependents, prerequisites):
    # Transfer t is (step, rank, chunk); step s of rank r carries segment (r - s) mod n of the
    # message (S split into n integer segments, each into `chunks` pieces: split_bytes).
    for i in range(sizes.shape[0]):
        t = lo + i
        step, r, chunk = t // (n * chunks), (t // chunks) % n, t % chunks
        segment = (r - step % steps) % n
        segment_bytes = size_bytes // n + (1 if segment < size_bytes % n else 0)
        sizes[i] = segment_bytes // chunks + (1 if chunk < segment_bytes % chunks else 0)
        rank[i] = r
        last_step = step == total_steps - 1
        # The next transfer on its connection (it only has to have left), then the one on rank + 1
        # that forwards what it carried (arrival); -1 (the job's last step) only after those.
        if chunk < chunks - 1:
            dependents[i, 0] = t + 1
        else:
            dependents[i, 0] = -1 if last_step else ((step + 1) * n + r) * chunks
        dependents[i, 1] = -1 if last_step else ((step + 1) * n + (r + 1) % n) * chunks + chunk
        prerequisites[i] = (1 if chunk > 0 or step > 0 else 0) + (1 if step > 0 else 0)


def ring_sent_bytes(n: int, job: JobSpec, steps: int, wire: tuple[int, int, int] | None = None) -> np.ndarray:
    """int64 [n]: the bytes each rank of a ring job sends over the whole job (what `ring_block`'s
    transfers of that rank add up to), in O(n x chunks x QPs). `wire` = (mtu, header bytes, QPs):
    counted on the wire instead, each chunk split over the QPs and each QP flow cut into packets of at
    most mtu payload bytes, each with its header (an empty flow sends nothing)."""
    segment_bytes = split_bytes(np.full(n, job.size_bytes), n, np.arange(n))
    if wire is not None:
        mtu, header, qps = wire
        chunks = max(1, job.chunks)
        chunk = split_bytes(segment_bytes[:, None], chunks, np.arange(chunks)[None, :])
        part = split_bytes(chunk[:, :, None], qps, np.arange(qps)[None, None, :])
        segment_bytes = (part + -(-part // mtu) * header).sum(axis=(1, 2))
    # Step s of rank r carries segment (r - s) mod n: a window of `steps` segments ending at r.
    tiled = np.r_[0, np.cumsum(np.tile(segment_bytes, steps // n + 2))]
    end = np.arange(n) + (steps // n + 1) * n + 1  # one past segment r, in a later tile
    return (tiled[end] - tiled[end - steps]) * max(1, job.iterations)


def ring_transfers(hosts: np.ndarray, job: JobSpec, steps: int) -> JobTransfers:
    """Ring collectives (n ranks, rank i sends to rank (i+1) % n over one connection).

    - AllReduce = reduce-scatter + all-gather: 2(n-1) steps; ReduceScatter and AllGather: n-1
      steps. In step s rank i sends segment (i - s) mod n of the message, S/n bytes (S split into n
      integer segments), optionally in `chunks` pieces. Transfer index: (step, rank, chunk).
    - Chunk k of step s+1 of rank i starts when rank i has *received* chunk k of step s from rank
      i-1 (the data it forwards or reduces), and when its own previous send on the connection has
      left its NIC (a connection sends in order). Per rank, not a global barrier.
    - `iterations` repeat the collective back to back over the same connections (same QPs, so
      the same ECMP paths: sequential flowlets); the steps simply continue.
    """
    n, chunks, iterations = len(hosts), max(1, job.chunks), max(1, job.iterations)
    count = steps * iterations * n * chunks
    block = ring_block(n, job, steps, 0, count)
    t = np.arange(count, dtype=np.int64)
    # Each transfer's dependents, by prerequisite (the order workload.py files them in: no sort).
    kept = block.dependents.ravel() >= 0
    edges = np.empty((int(kept.sum()), 3), dtype=np.int64)
    edges[:, 0] = np.repeat(t, 2)[kept]
    edges[:, 1] = block.dependents.ravel()[kept]
    edges[:, 2] = np.tile(np.array([0, 1]), len(t))[kept]
    return JobTransfers(
        sizes=block.sizes,
        source=hosts[block.rank],
        destination=hosts[(block.rank + 1) % n],
        connection=block.rank,
        release_ns=np.full(len(t), job.start_ns, dtype=np.int64),
        edges=edges,
    )


def double_binary_tree(n: int) -> np.ndarray:
    """int64 [2, n]: parent rank of every rank in tree 0 and tree 1 (-1 at the root).

    >>> double_binary_tree(4).tolist()
    [[-1, 0, 0, 1], [2, 3, 3, -1]]
    """
    position = np.arange(n)
    heap_parent = np.where(position > 0, (position - 1) // 2, -1)
    mirrored = heap_parent[n - 1 - position]  # tree 1: rank r at heap position n-1-r
    return np.stack([heap_parent, np.where(mirrored >= 0, n - 1 - mirrored, -1)])


def _tree(n: int, size: int, chunks: int) -> RankTransfers:
    """Double binary tree AllReduce: blocks of (chunk, tree), each its reduce then its broadcast."""
    m = n - 1  # transfers per chunk, tree and direction
    # A block in heap positions: m up-sends, deepest first (from position n-1 down to 1), then m
    # down-sends, shallowest first (to position 1 up to n-1): children come before their parent
    # going up, parents before their children going down.
    child = np.arange(1, n)
    parent = (child - 1) // 2
    up_from, down_to = n - 1 - child, m + child - 1  # block index of each position's up/down send
    inner = parent >= 1
    template = np.concatenate(
        [
            dependency_edges(up_from[inner], n - 1 - parent[inner], 1),  # up once every child's chunk arrived
            dependency_edges(
                up_from[~inner][:, None], down_to[~inner][None, :], 1
            ),  # root: reduce -> broadcast
            dependency_edges(m + parent[inner] - 1, down_to[inner], 1),  # forward down once it arrived
        ]
    )
    sender = np.r_[child[::-1], parent]  # heap positions, in block order
    receiver = np.r_[parent[::-1], child]
    block = np.arange(2 * chunks)
    chunk, tree = block // 2, block % 2
    position = np.arange(n)[None, :]
    rank_at = np.where(tree[:, None] == 0, position, n - 1 - position)  # [block, position]
    source = rank_at[:, sender].ravel()
    destination = rank_at[:, receiver].ravel()
    half = split_bytes(np.full(len(block), size), 2, tree)  # tree 0 carries the first ceil(S/2)
    sizes = np.repeat(split_bytes(half, chunks, chunk), 2 * m)
    shifted = (template[None, :, :] + (block * 2 * m)[:, None, None] * np.array([1, 1, 0])).reshape(-1, 3)
    later = np.arange(4 * m, 4 * m * chunks)  # chunk k >= 1: in order after chunk k-1 per connection
    edges = np.concatenate([shifted, dependency_edges(later - 4 * m, later, 0)])
    connection = (np.repeat(tree, 2 * m) * n + source) * n + destination
    return RankTransfers(sizes, source, destination, connection, edges)


def _halving_doubling(n: int, size: int) -> RankTransfers:
    """Recursive halving (reduce-scatter) then doubling (all-gather); transfer index (step, rank)."""
    levels = n.bit_length() - 1
    t = np.arange(2 * levels * n, dtype=np.int64)
    step, rank = t // n, t % n
    reducing = step < levels
    distance = np.where(reducing, n >> (step + 1), 1 << (step - levels))
    partner = rank ^ distance
    # Reduce-scatter sends the partner's half (the distance-aligned block holding the partner);
    # all-gather sends the block the rank owns.
    block = np.where(reducing, partner, rank) // distance
    segment_end = np.r_[0, np.cumsum(split_bytes(np.full(n, size), n, np.arange(n)))]
    sizes = segment_end[(block + 1) * distance] - segment_end[block * distance]
    later = t[step > 0]
    previous_distance = distance[later - n]
    edges = np.concatenate(
        [
            dependency_edges(
                (step[later] - 1) * n + (rank[later] ^ previous_distance), later, 1
            ),  # partner's data
            dependency_edges(later - n, later, 0),  # own previous send has left (sendrecv per step)
        ]
    )
    return RankTransfers(sizes, rank, partner, rank * n + partner, edges)


def _all_to_all(n: int, size: int, chunks: int) -> RankTransfers:
    """Every rank to every other rank at once; transfer index (chunk, rank, peer offset)."""
    per_chunk = n * (n - 1)
    t = np.arange(chunks * per_chunk, dtype=np.int64)
    chunk, rank, offset = t // per_chunk, (t // (n - 1)) % n, t % (n - 1) + 1
    peer = (rank + offset) % n
    sizes = split_bytes(split_bytes(np.full(len(t), size), n, peer), chunks, chunk)
    later = t[chunk > 0]
    return RankTransfers(sizes, rank, peer, rank * n + peer, dependency_edges(later - per_chunk, later, 0))


def _broadcast(n: int, size: int, chunks: int) -> RankTransfers:
    """Ring pipeline from rank 0; transfer index (chunk, sending rank)."""
    t = np.arange(chunks * (n - 1), dtype=np.int64)
    chunk, rank = t // (n - 1), t % (n - 1)
    sizes = split_bytes(np.full(len(t), size), chunks, chunk)
    forwarded, later = t[rank > 0], t[chunk > 0]
    edges = np.concatenate(
        [dependency_edges(forwarded - 1, forwarded, 1), dependency_edges(later - (n - 1), later, 0)]
    )
    return RankTransfers(sizes, rank, rank + 1, rank * n + rank + 1, edges)


def repeat_iterations(one: RankTransfers, n: int, iterations: int) -> RankTransfers:
    """`iterations` copies of one iteration, chained per connection (see the module doc).

    Connections must be numbered (channel * n + source) * n + destination over `n` endpoints.
    """
    if iterations == 1:
        return one
    count = len(one.sizes)
    shift = (np.arange(iterations) * count)[:, None, None] * np.array([1, 1, 0])
    inner = (one.edges[None, :, :] + shift).reshape(-1, 3)
    connections, first = np.unique(one.connection, return_index=True)
    _, from_end = np.unique(one.connection[::-1], return_index=True)
    last = count - 1 - from_end
    previous = (np.arange(iterations - 1) * count)[:, None]
    in_order = dependency_edges(previous + last, previous + count + first, 0)
    roots = np.flatnonzero(np.bincount(one.edges[:, 1], minlength=count) == 0)
    channel, source = one.connection[roots] // (n * n), one.connection[roots] // n % n
    reverse = (channel * n + one.connection[roots] % n) * n + source
    slot = np.searchsorted(connections, reverse).clip(max=len(connections) - 1)
    found = connections[slot] == reverse
    handshake = dependency_edges(previous + last[slot[found]], previous + count + roots[found], 1)
    return RankTransfers(
        sizes=np.tile(one.sizes, iterations),
        source=np.tile(one.source, iterations),
        destination=np.tile(one.destination, iterations),
        connection=np.tile(one.connection, iterations),
        edges=np.concatenate([inner, in_order, handshake]),
    )


def collective_transfers(hosts: np.ndarray, job: JobSpec) -> tuple[JobTransfers, int]:
    """The job's transfers over its ranks' `hosts` (spec validated), and its steps per iteration.

    Steps per iteration: the ring's steps; otherwise the transfers on the longest chain of one
    iteration with one chunk (tree 2 * floor(log2 n), halving-doubling 2 log2 n, AllToAll 1,
    broadcast n - 1).
    """
    n = len(hosts)
    if job.collective in RING_COLLECTIVES and job.algorithm == Algorithm.RING:
        steps = ring_steps(job.collective, n)
        return ring_transfers(hosts, job, steps), steps
    chunks = pipeline_chunks(job)
    if job.collective == Collective.BROADCAST:
        one, steps = _broadcast(n, job.size_bytes, chunks), n - 1
    elif job.collective == Collective.ALL_TO_ALL:
        one, steps = _all_to_all(n, job.size_bytes, chunks), 1
    elif job.algorithm == Algorithm.DOUBLE_BINARY_TREE:
        one, steps = _tree(n, job.size_bytes, chunks), 2 * (n.bit_length() - 1)
    elif job.algorithm == Algorithm.HALVING_DOUBLING:
        one, steps = _halving_doubling(n, job.size_bytes), 2 * (n.bit_length() - 1)
    else:  # pragma: no cover - validate_spec refuses every other combination
        raise AssertionError(f"no generator for {job.collective} by {job.algorithm}")
    many = repeat_iterations(one, n, max(1, job.iterations))
    return (
        JobTransfers(
            sizes=many.sizes.astype(np.int64),
            source=hosts[many.source],
            destination=hosts[many.destination],
            connection=many.connection,
            release_ns=np.full(len(many.sizes), job.start_ns, dtype=np.int64),
            edges=many.edges,
        ),
        steps,
    )
