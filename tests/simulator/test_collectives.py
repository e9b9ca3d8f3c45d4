"""Every collective as NCCL generates it: counts, bytes, dependencies, bounds, and runs at both fidelities."""

from __future__ import annotations

import numpy as np
import pytest

from services.common.errors import InvalidArgument
from services.simulator.collectives import (
    double_binary_tree,
    ring_block,
    ring_sent_bytes,
    ring_steps,
    ring_transfers,
    split_bytes,
)
from services.simulator.results import bus_factor
from services.simulator.runner import run_simulation
from services.simulator.spec import Collective, JobSpec, SimulationSpec
from services.simulator.workload import build_workload
from tests.simulator.fabrics import NDR_BPS, fat_tree, leaf_spine
from tests.simulator.wire import wire_bytes

FABRIC = leaf_spine(4, 4, 4)  # 16 hosts, 400 Gb/s, 500 ns per link
FAT_TREE = fat_tree(4, rate_bps=100_000_000_000)
MIB = 1 << 20

TREE = {"collective": "ALL_REDUCE", "algorithm": "DOUBLE_BINARY_TREE"}
HALVING_DOUBLING = {"collective": "ALL_REDUCE", "algorithm": "HALVING_DOUBLING"}
ALL_TO_ALL = {"collective": "ALL_TO_ALL"}
BROADCAST = {"collective": "BROADCAST"}
RING = {"collective": "ALL_REDUCE"}
REDUCE_SCATTER = {"collective": "REDUCE_SCATTER"}
ALL_GATHER = {"collective": "ALL_GATHER"}


def job(kind, n, size, **extra):
    return {**kind, "rank_count": n, "size_bytes": size, **extra}


def spec(*jobs, mode="ADAPTIVE", **extra):
    return {"fabric": "fabrics/test", "jobs": list(jobs), "load_balancing": {"mode": mode}, **extra}


def workload_of(*jobs, **extra):
    return build_workload(SimulationSpec.from_dict(spec(*jobs, **extra)), FABRIC)


def bytes_per_rank(workload, job_index=0):
    """(sent, received) bytes of every rank of a job, in rank order."""
    hosts = workload.jobs[job_index].hosts
    mine = workload.flow_job == job_index
    size = workload.flow_size_bytes[mine]
    sent = np.bincount(workload.flow_source[mine], weights=size, minlength=FABRIC.num_hosts)
    received = np.bincount(workload.flow_destination[mine], weights=size, minlength=FABRIC.num_hosts)
    return sent[hosts].astype(np.int64), received[hosts].astype(np.int64)


def edges_of(workload):
    """(prerequisite, dependent, needs_arrival) of every edge, as arrays."""
    prerequisite = np.repeat(np.arange(workload.transfer_count), np.diff(workload.dependent_offsets))
    return prerequisite, workload.dependents.astype(np.int64), workload.dependent_needs_arrival


def transfer_ranks(workload, job_index=0):
    """Source and destination rank of every transfer (from its first QP flow)."""
    rank_of_host = np.full(FABRIC.num_hosts, -1)
    rank_of_host[workload.jobs[job_index].hosts] = np.arange(len(workload.jobs[job_index].hosts))
    head = workload.transfer_flow_offsets[:-1]
    return rank_of_host[workload.flow_source[head]], rank_of_host[workload.flow_destination[head]]


# -- the double binary tree -------------------------------------------------------------------------


def test_the_second_tree_mirrors_the_first_so_no_rank_is_inner_in_both():
    for n in (7, 8):
        parents = double_binary_tree(n)
        assert parents[0].tolist() == [-1] + [(r - 1) // 2 for r in range(1, n)]
        assert parents[1].tolist() == [n - 1 - p if p >= 0 else -1 for p in parents[0][::-1]]
        inner = np.zeros((2, n), dtype=bool)
        for tree in (0, 1):
            inner[tree, parents[tree][parents[tree] >= 0]] = True
        assert not (inner[0] & inner[1]).any()
        leaf_in_both = np.flatnonzero(~inner[0] & ~inner[1]).tolist()
        assert leaf_in_both == ([] if n % 2 == 0 else [(n - 1) // 2])


@pytest.mark.parametrize(
    ("n", "halves_per_rank"),
    [
        # Per rank, in halves H = S/2: up to its parent (H per tree where it is not the root) plus H
        # down to each child, summed over both trees. Inner ranks move 2S each way, the roots 1.5S.
        (8, [3, 4, 4, 3, 3, 4, 4, 3]),
        (7, [3, 4, 4, 2, 4, 4, 3]),  # rank 3 is a leaf of both trees: S each way
    ],
)
def test_tree_allreduce_moves_at_most_2s_per_rank_each_way(n, halves_per_rank):
    size, chunks = 8 * MIB, 4
    workload = workload_of(job(TREE, n, size, chunks=chunks))
    assert workload.transfer_count == 2 * chunks * 2 * (n - 1)  # trees x chunks x (up + down)
    sent, received = bytes_per_rank(workload)
    assert sent.tolist() == [h * size // 2 for h in halves_per_rank]
    assert received.tolist() == sent.tolist()


def test_a_tree_rank_sends_a_chunk_up_once_it_has_arrived_from_all_its_children():
    n, chunks = 8, 3
    workload = workload_of(job(TREE, n, 6 * MIB, chunks=chunks))
    source, destination = transfer_ranks(workload)
    prerequisite, dependent, needs_arrival = edges_of(workload)
    parents = double_binary_tree(n)
    per_chunk = 4 * (n - 1)
    for t in range(workload.transfer_count):
        tree, chunk = (t % per_chunk) // (2 * (n - 1)), t // per_chunk
        sender, receiver = int(source[t]), int(destination[t])
        waits_for = prerequisite[(dependent == t) & needs_arrival]
        arrived_from = sorted(int(source[p]) for p in waits_for)
        children = sorted(np.flatnonzero(parents[tree] == sender).tolist())
        # Up to the parent once every child's chunk has arrived; so does the root, turning the
        # reduced chunk into the broadcast; anyone else forwards the broadcast chunk from its parent.
        if parents[tree][sender] == receiver or parents[tree][sender] < 0:
            assert arrived_from == children
        else:
            assert arrived_from == [int(parents[tree][sender])]
        assert all(p // per_chunk == chunk for p in waits_for)  # the same chunk's data
        in_order = prerequisite[(dependent == t) & ~needs_arrival]
        assert in_order.tolist() == ([t - per_chunk] if chunk > 0 else [])


def test_tree_and_broadcast_pipelines_default_to_one_mib_chunks_up_to_64_and_rings_to_one():
    assert workload_of(job(TREE, 8, 8 * MIB)).jobs[0].chunks == 4  # 4 MiB per tree
    assert workload_of(job(BROADCAST, 8, 8 * MIB)).jobs[0].chunks == 8
    assert workload_of(job(BROADCAST, 8, 1 << 30)).jobs[0].chunks == 64
    assert workload_of(job(BROADCAST, 8, 1000)).jobs[0].chunks == 1
    assert workload_of(job(TREE, 8, 8 * MIB, chunks=2)).jobs[0].chunks == 2
    ring = workload_of(job(RING, 8, 8 * MIB))
    assert ring.jobs[0].chunks == 1 and ring.transfer_count == 2 * 7 * 8


# -- halving-doubling, AllToAll, broadcast --------------------------------------------------------


def test_halving_doubling_halves_then_doubles_with_partner_i_xor_distance():
    n, size = 8, 8 * MIB
    workload = workload_of(job(HALVING_DOUBLING, n, size))
    assert workload.transfer_count == 2 * 3 * n
    source, destination = transfer_ranks(workload)
    step_distance = [4, 2, 1, 1, 2, 4]
    step_bytes = [size // 2, size // 4, size // 8, size // 8, size // 4, size // 2]
    sizes = workload.flow_size_bytes.reshape(6, n)
    assert (sizes == np.array(step_bytes)[:, None]).all()
    assert (destination.reshape(6, n) == source.reshape(6, n) ^ np.array(step_distance)[:, None]).all()
    sent, received = bytes_per_rank(workload)
    assert (sent == 2 * (n - 1) * size // n).all() and (received == sent).all()
    # Step s waits for step s-1's data from its partner and for its own previous send to leave.
    prerequisite, dependent, needs_arrival = edges_of(workload)
    for t in range(n, workload.transfer_count):
        assert sorted(source[prerequisite[(dependent == t) & needs_arrival]].tolist()) == [
            int(source[t]) ^ step_distance[t // n - 1]
        ]
        assert prerequisite[(dependent == t) & ~needs_arrival].tolist() == [t - n]


def test_halving_doubling_bytes_are_exact_when_s_does_not_divide():
    n, size = 4, 1001
    segment = [251, 250, 250, 250]  # 1001 in 4 integer segments
    workload = workload_of(job(HALVING_DOUBLING, n, size))
    source, destination = transfer_ranks(workload)
    reducing = np.arange(workload.transfer_count) < 2 * n  # log2(4) = 2 reduce-scatter steps
    sizes = workload.flow_size_bytes
    # Reduce-scatter: each rank sends all but its own segment; all-gather: receives all but it.
    scattered = np.bincount(source[reducing], weights=sizes[reducing], minlength=n)
    gathered = np.bincount(destination[~reducing], weights=sizes[~reducing], minlength=n)
    assert scattered.tolist() == gathered.tolist() == [size - s for s in segment]


def test_alltoall_sends_s_over_n_to_every_other_rank_all_at_once():
    n, size = 8, 8 * MIB
    workload = workload_of(job(ALL_TO_ALL, n, size))
    assert workload.transfer_count == n * (n - 1)
    source, destination = transfer_ranks(workload)
    assert len(set(zip(source.tolist(), destination.tolist(), strict=True))) == n * (n - 1)
    assert (source != destination).all()
    assert (workload.flow_size_bytes == size // n).all()
    assert (workload.transfer_prerequisites == 0).all()  # concurrent point-to-point sends
    chunked = workload_of(job(ALL_TO_ALL, n, size, chunks=2))
    prerequisite, dependent, needs_arrival = edges_of(chunked)
    assert (dependent - prerequisite == n * (n - 1)).all() and not needs_arrival.any()  # in order


def test_broadcast_pipelines_chunks_along_the_ring_from_rank_0():
    n, size, chunks = 8, 8 * MIB, 4
    workload = workload_of(job(BROADCAST, n, size, chunks=chunks))
    assert workload.transfer_count == (n - 1) * chunks
    source, destination = transfer_ranks(workload)
    assert (destination == source + 1).all()
    sent, received = bytes_per_rank(workload)
    assert sent.tolist() == [size] * (n - 1) + [0]
    assert received.tolist() == [0] + [size] * (n - 1)
    prerequisite, dependent, needs_arrival = edges_of(workload)
    forwarded = needs_arrival
    assert (source[prerequisite[forwarded]] == source[dependent[forwarded]] - 1).all()
    assert (dependent[forwarded] - prerequisite[forwarded] == 1).all()  # the same chunk
    assert (dependent[~forwarded] - prerequisite[~forwarded] == n - 1).all()  # previous chunk, in order
    assert workload.transfer_prerequisites.tolist().count(0) == 1  # only rank 0's first chunk


# -- order, iterations ------------------------------------------------------------------------------


ALL_KINDS = [TREE, HALVING_DOUBLING, ALL_TO_ALL, BROADCAST, RING, REDUCE_SCATTER, ALL_GATHER]


@pytest.mark.parametrize("kind", ALL_KINDS, ids=lambda k: k.get("algorithm", k["collective"]))
def test_transfers_come_in_topological_order_every_prerequisite_first(kind):
    workload = workload_of(
        job(kind, 8, 3 * MIB + 5, chunks=1 if kind is HALVING_DOUBLING else 3, iterations=2),
        job(TREE, 4, 1 * MIB, placement="SCATTERED"),
    )
    prerequisite, dependent, _ = edges_of(workload)
    assert len(prerequisite) > 0
    assert (prerequisite < dependent).all()
    assert (workload.transfer_job[prerequisite] == workload.transfer_job[dependent]).all()


def test_iterations_repeat_the_collective_and_a_rank_waits_for_its_peer_before_talking_again():
    n, chunks = 4, 2
    one = workload_of(job(TREE, n, 2 * MIB, chunks=chunks))
    two = workload_of(job(TREE, n, 2 * MIB, chunks=chunks, iterations=2))
    count, per_chunk = one.transfer_count, 4 * (n - 1)
    assert two.transfer_count == 2 * count
    assert (bytes_per_rank(two)[0] == 2 * bytes_per_rank(one)[0]).all()
    source, destination = transfer_ranks(two)
    index = np.arange(two.transfer_count)
    tree = index % per_chunk // (2 * (n - 1))
    prerequisite, dependent, needs_arrival = edges_of(two)
    roots = np.flatnonzero(one.transfer_prerequisites == 0)  # each tree's leaves' first up-sends
    assert len(roots) == n
    for root in roots:
        again = count + root
        # Its connection sends in order: after its last transfer of the first iteration has left ...
        assert prerequisite[(dependent == again) & ~needs_arrival].tolist() == [
            root + (chunks - 1) * per_chunk
        ]
        # ... and once the parent's last broadcast chunk of the first iteration has reached it.
        handshake = prerequisite[(dependent == again) & needs_arrival].tolist()
        reverse = (source == destination[root]) & (destination == source[root]) & (tree == tree[root])
        assert handshake == [index[reverse & (index < count)].max()]


# -- bounds -----------------------------------------------------------------------------------------


def test_bus_factors_are_nccl_tests_whatever_the_algorithm():
    assert bus_factor(Collective.ALL_REDUCE, 8) == 2 * 7 / 8
    for collective in (Collective.REDUCE_SCATTER, Collective.ALL_GATHER, Collective.ALL_TO_ALL):
        assert bus_factor(collective, 8) == 7 / 8
    assert bus_factor(Collective.BROADCAST, 8) == 1.0


def test_the_broadcast_bound_is_the_pipeline_closed_form():
    # Ranks on four different leaves: every hop crosses the spine, 4 links x 500 ns. Chunk k
    # reaches rank r after (r + k) chunk times of the pipeline plus r+1 hop latencies, so the last
    # chunk at the last rank: (n - 2 + C) chunk times + (n - 1) latencies (each counted 1 ns short).
    n, chunks, size = 4, 8, 8 * MIB
    outcome = run_simulation(spec(job(BROADCAST, n, size, chunks=chunks, placement="SCATTERED")), FABRIC)
    chunk_ns = wire_bytes(size // chunks) * 8e9 / NDR_BPS
    assert outcome.jobs[0].ideal_completion_ns == int((n - 2 + chunks) * chunk_ns + (n - 1) * (2000 - 1))


def test_a_send_waiting_only_for_the_previous_one_to_leave_pays_no_latency_in_the_bound():
    # Two ranks exchange S/2 in 16 chunks, in order per connection: one latency, not sixteen.
    size = 4 * MIB
    outcome = run_simulation(spec(job(ALL_TO_ALL, 2, size, chunks=16, placement="SCATTERED")), FABRIC)
    assert outcome.jobs[0].ideal_completion_ns == int(wire_bytes(size // 2) * 8e9 / NDR_BPS + 2000 - 1)


NEW_KINDS = [TREE, HALVING_DOUBLING, ALL_TO_ALL, BROADCAST]


@pytest.mark.parametrize("mode", ["ADAPTIVE", "ECMP"])
@pytest.mark.parametrize(
    ("kind", "n"), [(TREE, 8), (TREE, 7), (HALVING_DOUBLING, 8), (ALL_TO_ALL, 8), (BROADCAST, 8)]
)
def test_flow_runs_of_every_collective_finish_within_their_bounds(kind, n, mode):
    outcome = run_simulation(spec(job(kind, n, 8 * MIB, placement="SCATTERED"), mode=mode), FABRIC)
    result = outcome.jobs[0]
    assert result.completed
    assert result.completion_ns >= result.ideal_completion_ns  # a lower bound
    assert result.busbw_gbps <= NDR_BPS / 1e9  # nccl-tests factors keep busbw below the link rate
    busbw_at_bound = 8 * MIB * 8 / result.ideal_completion_ns * bus_factor(Collective(kind["collective"]), n)
    assert result.busbw_gbps <= busbw_at_bound
    if mode == "ADAPTIVE":  # a non-blocking fabric spread evenly: close to the bound
        assert result.busbw_gbps >= 0.75 * busbw_at_bound


PACKET_JOBS = [
    # Sizes that split into whole 4096-byte packets everywhere (the bound assumes full packets).
    job(TREE, 16, 2 * 4 * 16 * 4096, chunks=4),
    job(TREE, 7, 2 * 4 * 16 * 4096, chunks=4),
    job(HALVING_DOUBLING, 16, 16 * 4 * 4096),
    job(ALL_TO_ALL, 16, 16 * 4 * 4096),
    job(BROADCAST, 16, 8 * 16 * 4096, chunks=8),
]


@pytest.mark.parametrize("mode", ["ECMP", "ADAPTIVE", "SPRAY"])
@pytest.mark.parametrize(
    "collective", PACKET_JOBS, ids=lambda j: f"{j.get('algorithm', j['collective'])}-{j['rank_count']}"
)
def test_packet_runs_of_every_collective_conserve_packets_and_respect_the_bound(collective, mode):
    outcome = run_simulation(
        spec({**collective, "placement": "SCATTERED"}, mode=mode, fidelity="PACKET"), FAT_TREE
    )
    result, packets = outcome.jobs[0], outcome.packets
    assert result.completed
    assert packets.injected == packets.delivered + packets.dropped
    assert packets.injected == int(outcome.flows.size_bytes.sum()) // 4096
    if packets.dropped == 0:  # with drops, flows end when their last packet is lost (no transport yet)
        assert result.completion_ns >= result.ideal_completion_ns
    if mode != "ECMP":
        assert packets.dropped == 0


@pytest.mark.parametrize("kind", [RING, REDUCE_SCATTER, ALL_GATHER], ids=lambda k: k["collective"])
def test_packet_runs_of_the_rings_conserve_packets(kind):
    outcome = run_simulation(
        spec(job(kind, 16, 16 * 4 * 4096, placement="SCATTERED"), fidelity="PACKET"), FAT_TREE
    )
    packets = outcome.packets
    assert outcome.jobs[0].completed and packets.dropped == 0
    assert packets.injected == packets.delivered == int(outcome.flows.size_bytes.sum()) // 4096
    assert outcome.jobs[0].completion_ns == pytest.approx(outcome.jobs[0].ideal_completion_ns, rel=0.03)


# -- bad input --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "field", "reason"),
    [
        (job(HALVING_DOUBLING, 6, MIB), "jobs[0].rank_count", "power-of-two"),
        (job(HALVING_DOUBLING, 8, MIB, chunks=4), "jobs[0].chunks", "chunks"),
        (job(TREE, 1, MIB), "jobs[0].rank_count", "at least 2 ranks"),
        ({**job(TREE, 8, MIB), "collective": "REDUCE_SCATTER"}, "jobs[0].algorithm", "takes RING"),
        ({**job(TREE, 8, MIB), "collective": "ALL_GATHER"}, "jobs[0].algorithm", "takes RING"),
        ({**job(HALVING_DOUBLING, 8, MIB), "collective": "ALL_TO_ALL"}, "jobs[0].algorithm", "takes RING"),
        ({**job(TREE, 8, MIB), "collective": "BROADCAST"}, "jobs[0].algorithm", "takes RING"),
        ({**job(RING, 8, MIB), "algorithm": "SHARP"}, "jobs[0].algorithm", "needs an InfiniBand fabric"),
        ({**job(ALL_TO_ALL, 8, MIB), "algorithm": "SHARP"}, "jobs[0].algorithm", "ALL_REDUCE only"),
    ],
)
@pytest.mark.parametrize("fidelity", ["FLOW", "PACKET"])
def test_bad_collective_input_is_invalid_argument_naming_the_field(bad, field, reason, fidelity):
    with pytest.raises(InvalidArgument, match=reason) as caught:
        run_simulation(spec(bad, fidelity=fidelity), FABRIC)
    assert caught.value.field == field


def _ring_block_reference(n, job, steps, lo, hi):
    """`ring_block` in NumPy, formula by formula (what it computed before it was compiled)."""
    chunks = max(1, job.chunks)
    total_steps = steps * max(1, job.iterations)
    t = np.arange(lo, hi, dtype=np.int64)
    step, rank, chunk = t // (n * chunks), (t // chunks) % n, t % chunks
    segment_bytes = split_bytes(np.full(n, job.size_bytes), n, np.arange(n))[(rank - step % steps) % n]
    last_step = step == total_steps - 1
    dependents = np.full((len(t), 2), -1, dtype=np.int64)
    next_step_first = np.where(~last_step, ((step + 1) * n + rank) * chunks, -1)
    dependents[:, 0] = np.where(chunk < chunks - 1, t + 1, next_step_first)
    dependents[:, 1] = np.where(~last_step, ((step + 1) * n + (rank + 1) % n) * chunks + chunk, -1)
    prerequisites = ((chunk > 0) | (step > 0)).astype(np.int32) + (step > 0)
    return split_bytes(segment_bytes, chunks, chunk), rank, dependents, prerequisites


@pytest.mark.parametrize(
    ("n", "size", "chunks", "iterations"), [(5, 1000, 1, 1), (7, 12_345, 3, 2), (8192, 64 << 20, 1, 1)]
)
def test_ring_block_is_its_numpy_formula(n, size, chunks, iterations):
    """The compiled `ring_block` gives what the NumPy formula gives, over the whole ring and ranges
    cut anywhere (sizes with remainders: 12,345 bytes over 7 ranks in 3 chunks)."""
    job = JobSpec(Collective.ALL_REDUCE, size, rank_count=n, chunks=chunks, iterations=iterations)
    steps = ring_steps(job.collective, n)
    count = steps * iterations * n * chunks
    ranges = [
        (0, min(count, 200_000)),
        (max(0, count - 1000), count),
        (n * chunks - 3, n * chunks + 5),
        (17, 17),
    ]
    for lo, hi in ranges:
        block = ring_block(n, job, steps, lo, hi)
        expected = _ring_block_reference(n, job, steps, lo, hi)
        for got, want in zip(
            (block.sizes, block.rank, block.dependents, block.prerequisites), expected, strict=True
        ):
            assert got.dtype == want.dtype and np.array_equal(got, want)


@pytest.mark.parametrize(
    ("n", "size", "chunks", "iterations", "collective"),
    [
        (5, 1000, 1, 1, "ALL_REDUCE"),
        (7, 12_345, 3, 2, "ALL_REDUCE"),
        (4, 7, 2, 1, "REDUCE_SCATTER"),
        (6, 999, 1, 3, "ALL_GATHER"),
    ],
)
def test_any_block_of_a_ring_is_the_held_rings_transfers(n, size, chunks, iterations, collective):
    """`ring_block` (what a streamed run generates as it goes) gives any range of the ring exactly as
    `ring_transfers` holds it: sizes, senders, dependents and prerequisite counts; `ring_sent_bytes`
    is each rank's total."""
    job = JobSpec(Collective(collective), size, rank_count=n, chunks=chunks, iterations=iterations)
    steps = ring_steps(job.collective, n)
    held = ring_transfers(np.arange(n), job, steps)
    count = len(held.sizes)
    incoming = np.bincount(held.edges[:, 1], minlength=count)
    for lo, hi in [(0, count), (0, 1), (n * chunks - 1, min(count, 3 * n * chunks + 2)), (count - 5, count)]:
        block = ring_block(n, job, steps, lo, hi)
        assert np.array_equal(block.sizes, held.sizes[lo:hi])
        assert np.array_equal(block.rank, held.connection[lo:hi])
        assert np.array_equal(block.prerequisites, incoming[lo:hi])
        for k, t in enumerate(range(lo, hi)):
            edges = held.edges[held.edges[:, 0] == t]
            listed = block.dependents[k]
            assert listed[: len(edges)].tolist() == edges[:, 1].tolist()  # leave edge first, then arrival
            assert (listed[len(edges) :] == -1).all()  # missing ones come last
    sent = np.bincount(held.connection, weights=held.sizes, minlength=n)
    assert np.array_equal(ring_sent_bytes(n, job, steps), sent)
    for mtu, header, qps in [(4096, 82, 1), (7, 3, 2), (100, 58, 3)]:  # counted on the wire
        parts = split_bytes(held.sizes[:, None], qps, np.arange(qps)[None, :])
        on_wire = (parts + -(-parts // mtu) * header).sum(axis=1)
        expected = np.bincount(held.connection, weights=on_wire, minlength=n)
        assert np.array_equal(ring_sent_bytes(n, job, steps, (mtu, header, qps)), expected)
