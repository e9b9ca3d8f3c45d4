"""Traffic as NCCL makes it, as arrays: transfers, their dependencies, and the QP flows that carry them.

A *transfer* is the data one rank sends to another in one step (and chunk) of a collective; it is
carried by `qps_per_connection` *flows*, one per queue pair, each with its own UDP source port, so
ECMP sees them as different flows. A transfer starts when all its prerequisite transfers have
arrived (or, for the previous send on the same connection, left); its flows start together.

Transfers are in TOPOLOGICAL order: every prerequisite has a lower index than its dependents
(jobs are concatenated, each job's transfers in its generator's topological order), so a single
pass in index order meets every prerequisite first (results.py's critical path relies on it).

Each collective's transfers and dependencies come from collectives.py (ring, double binary tree,
halving-doubling, AllToAll, broadcast) or sharp.py (SHARP AllReduce through an aggregation tree).
POINT_TO_POINT jobs: each listed flow is a connection; its repetitions run back to back (the next
starts when the previous one's last byte has left the source).

Flow endpoints are host indices, except SHARP's hops to and from switches: there an endpoint is
`num_hosts + node` for the switch `node` (its name is `endpoint_names[node]`).

Pinned flows (`pinned_offsets` / `pinned_channels`, a CSR of channels per flow, in order from the
source; an empty row is routed by the load-balancing mode) cross exactly those channels whatever
the mode: SHARP's hops, each pinned to the one channel of its tree edge, and POINT_TO_POINT flows
given a `path` or `path_links` (pinning.py), every QP of the flow on that path.

QP numbers are derived from (spec seed, job, connection, QP index) with MurmurHash3, so a run is
deterministic; the UDP source port is 49152 + (source QPN mod 16384), unless a POINT_TO_POINT
flow gives its own (`udp_source_port`). A flow's `rate_gbps` caps each of its q QPs at 1/q of it
(`flow_rate_bps`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from services.common.snapshot import FabricSnapshot
from services.simulator.collectives import (
    RING_COLLECTIVES,
    JobTransfers,
    RingBlock,
    collective_transfers,
    pipeline_chunks,
    ring_block,
    ring_sent_bytes,
    ring_steps,
    ring_transfers,
    split_bytes,
)
from services.simulator.ecmp_hash import murmur3_32
from services.simulator.pinning import PathResolver
from services.simulator.placement import HostDirectory, place_job
from services.simulator.sharp import aggregation_tree, sharp_transfers
from services.simulator.spec import (
    Algorithm,
    Collective,
    Fidelity,
    JobSpec,
    SimulationSpec,
    Transport,
    job_labels,
)

__all__ = [
    "STREAM_ABOVE_TRANSFERS",
    "STREAM_BLOCKS_HELD",
    "STREAM_BLOCK_TRANSFERS",
    "JobPlan",
    "RingStream",
    "Workload",
    "build_workload",
    "connection_workload",
    "gather_rows",
    "head_transfers",
    "is_ring",
    "one_ring_job",
    "place_jobs",
    "ring_jobs",
    "split_bytes",
    "stream_block",
    "stream_head",
    "streamable",
    "streams",
    "udp_source_port",
    "wire_bytes",
    "without_flows_by_index",
]

ROCEV2_SOURCE_PORT_BASE = 49152


@dataclasses.dataclass
class JobPlan:
    """One job as generated: its ranks' hosts and what the results need to report it."""

    label: str
    collective: Collective
    hosts: np.ndarray  # int64 [n], host index per rank
    size_bytes: int  # S of nccl-tests (POINT_TO_POINT: bytes of one repetition of all flows)
    start_ns: int
    iterations: int
    steps_per_iteration: int  # ring steps; else transfers on the longest chain of one 1-chunk iteration
    flow_count: int
    algorithm: Algorithm = Algorithm.RING
    chunks: int = 1  # pipeline chunks actually used (`chunks` 0 resolved to the algorithm's default)


# A PACKET run of more transfers than this is generated block by block (`RingStream`) where it can be.
STREAM_ABOVE_TRANSFERS = 4_000_000
# Transfers a streamed run generates at a time (whole steps, at least two): each block costs the
# run a return to Python and a scan of its slots (~1 ms at 8,192 ranks: ~2,000 blocks in a run).
STREAM_BLOCK_TRANSFERS = 65536
# Blocks' worth of transfers a streamed run holds at most, as measured (admission.py): the block
# being generated, the steps in flight behind it, and slots not yet collected.
STREAM_BLOCKS_HELD = 8


@dataclasses.dataclass
class RingStream:
    """The transfers of a ring job not held: generated block by block as a PACKET run goes
    (`collectives.ring_block`), or computed step by step at FLOW_STEADY (flow/steady.py); a 64 MiB
    ring over 8,192 ranks is 134M transfers.

    The workload's own arrays are then the jobs' connections (`connection_workload`: transfer r of
    the job is rank r's connection, its flow first_flow + r * qps + i its QP i), which is all that
    routing needs; a transfer of the job is (step, rank, chunk) in `ring_block`'s order, its flow i
    is QP i of its rank.
    """

    job: JobSpec
    ranks: int
    steps: int  # per iteration
    qps: int  # flows per transfer
    transfers: int  # of the whole job
    block_transfers: int = STREAM_BLOCK_TRANSFERS  # generated at a time, rounded up to whole steps
    first_flow: int = 0  # the flow of its rank 0's QP 0 in the workload (its connections follow)
    # (mtu, header bytes per packet): `sent_bytes` counts wire bytes (FLOW_STEADY's ideal, as FLOW
    # counts its flows' wire bytes); None: payload.
    wire: tuple[int, int] | None = None

    @property
    def block(self) -> int:
        """Transfers generated at a time: whole steps, at least two (a step's dependents are all in
        the next one)."""
        return stream_block(self.ranks, self.job, self.block_transfers)

    @property
    def flows(self) -> int:
        return self.transfers * self.qps

    def transfers_in(self, lo: int, hi: int) -> RingBlock:
        return ring_block(self.ranks, self.job, self.steps, lo, hi)

    def flow_sizes(self, transfer_sizes: np.ndarray) -> np.ndarray:
        """int64 [m, qps]: each transfer's bytes split over its QPs, as the held workload splits them."""
        return split_bytes(transfer_sizes[:, None], self.qps, np.arange(self.qps)[None, :])

    def largest_flow_bytes(self) -> int:
        """Bytes of the job's largest flow (the first QP of the first chunk of a largest segment)."""
        segment = -(-self.job.size_bytes // self.ranks)
        chunk = -(-segment // max(1, self.job.chunks))
        return -(-chunk // self.qps)

    def sent_bytes(self) -> np.ndarray:
        """int64 [ranks]: the bytes each rank sends over the job (on the wire if `wire` is set)."""
        wire = None if self.wire is None else (*self.wire, self.qps)
        return ring_sent_bytes(self.ranks, self.job, self.steps, wire)


@dataclasses.dataclass
class Workload:
    """All jobs' transfers and flows as flat arrays (transfer t's flows are a contiguous range)."""

    jobs: list[JobPlan]
    transfer_job: np.ndarray  # int32 [T]
    transfer_release_ns: np.ndarray  # int64 [T], earliest start
    transfer_prerequisites: np.ndarray  # int32 [T], transfers that must arrive first
    dependent_offsets: np.ndarray  # int64 [T+1], CSR: transfers waiting on t
    dependents: np.ndarray  # int32 [D]
    dependent_needs_arrival: np.ndarray  # bool [D]: wait for t to arrive (else only to have left)
    transfer_flow_offsets: np.ndarray  # int64 [T+1]
    flow_job: np.ndarray  # int32 [F]
    flow_source: np.ndarray  # int64 [F], host index (SHARP: num_hosts + node for a switch)
    flow_destination: np.ndarray  # int64 [F], host index (SHARP: num_hosts + node for a switch)
    flow_size_bytes: np.ndarray  # int64 [F]
    flow_source_port: np.ndarray  # int32 [F], UDP source port
    flow_destination_qp: np.ndarray  # uint32 [F], destination QP number
    # int32 [F], the flow's QP (its job, connection and QP index; the flows of a connection's QP
    # across its transfers share it, as they share a DCQCN rate), numbered 0.. in job order.
    flow_qp: np.ndarray
    # CSR over flows: the channels flow f is pinned to, pinned_channels[pinned_offsets[f] :
    # pinned_offsets[f + 1]], in order from its source; an empty row is routed by the mode. None: no
    # flow is pinned.
    pinned_offsets: np.ndarray | None = None  # int64 [F+1]
    pinned_channels: np.ndarray | None = None  # int32 [P]
    # float64 [F], cap on each flow's sending rate in bit/s (0: line rate). None: no flow is capped.
    flow_rate_bps: np.ndarray | None = None
    # Node names, when a flow ends at a switch (endpoint num_hosts + node); else empty.
    endpoint_names: list[str] = dataclasses.field(default_factory=list)
    # Rings not held, one per job (every job is one): these arrays are then their connections only
    # (RingStream). A PACKET run streams workloads of one ring job; FLOW_STEADY takes any number.
    rings: list[RingStream] | None = None

    @property
    def stream(self) -> RingStream | None:
        """The ring of a workload of one ring job generated as the run goes (None: held)."""
        return self.rings[0] if self.rings else None

    @property
    def transfer_count(self) -> int:
        return int(self.transfer_job.shape[0])

    @property
    def flow_count(self) -> int:
        return int(self.flow_job.shape[0])

    @property
    def pinned_lengths(self) -> np.ndarray:
        """int64 [F]: channels each flow is pinned to (0: routed by the mode)."""
        if self.pinned_offsets is None:
            return np.zeros(self.flow_count, dtype=np.int64)
        return np.diff(self.pinned_offsets)

    @property
    def pinned(self) -> np.ndarray:
        """bool [F]: flows pinned to a path."""
        return self.pinned_lengths > 0

    @property
    def pinned_channel(self) -> np.ndarray:
        """int32 [F]: the channel of a flow pinned to exactly one (SHARP's hops between neighbouring
        nodes, whose ends may be switches), -1 for every other flow."""
        if self.pinned_offsets is None or self.pinned_channels is None:
            return np.full(self.flow_count, -1, dtype=np.int32)
        one = self.pinned_lengths == 1
        first = np.full(self.flow_count, -1, dtype=np.int32)
        first[one] = self.pinned_channels[self.pinned_offsets[:-1][one]]
        return first


def udp_source_port(qp_number: np.ndarray) -> np.ndarray:
    """RoCEv2 UDP source port of a QP: 49152 + (QPN mod 16384)."""
    return (ROCEV2_SOURCE_PORT_BASE + np.asarray(qp_number, dtype=np.int64) % 16384).astype(np.int32)


def _qp_numbers(seed: int, job: int, connection: np.ndarray, qp: np.ndarray, role: int) -> np.ndarray:
    """24-bit QP numbers (2..2^24-1; 0 and 1 are reserved), deterministic in the seed."""
    words = np.stack(
        [np.full(len(connection), job), connection, qp, np.full(len(connection), role)], axis=1
    ).astype("<u4")
    folded = (seed ^ (seed >> 32)) & 0xFFFFFFFF
    hashes = murmur3_32(words.view(np.uint8).reshape(len(connection), 16), folded)
    return (hashes.astype(np.int64) % (2**24 - 2) + 2).astype(np.uint32)


def _distinct(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct non-negative int64 keys, sorted; each key's index among them): a table lookup
    where the keys are dense (a ring's connections), else np.unique."""
    if not len(key):
        return key, np.zeros(0, dtype=np.int64)
    largest = int(key.max())
    if largest > 4 * len(key) + 1024:
        keys, which = np.unique(key, return_inverse=True)
        return keys, which.reshape(-1)
    present = np.zeros(largest + 1, dtype=bool)
    present[key] = True
    keys = np.flatnonzero(present)
    index = np.zeros(largest + 1, dtype=np.int64)
    index[keys] = np.arange(len(keys))
    return keys, index[key]


def gather_rows(offsets: np.ndarray, values: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows `rows` of a CSR (offsets, values), in that order, as a new CSR."""
    lengths = np.diff(offsets)[rows]
    new_offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lengths, out=new_offsets[1:])
    index = np.repeat(offsets[:-1][rows] - new_offsets[:-1], lengths) + np.arange(new_offsets[-1])
    return new_offsets, values[index]


def _point_to_point_part(
    directory: HostDirectory, index: int, job: JobSpec, paths: tuple[np.ndarray, np.ndarray] | None
) -> JobTransfers:
    field = f"jobs[{index}].flows"
    source = np.array([directory.lookup(f.source, f"{field}[{j}].source") for j, f in enumerate(job.flows)])
    destination = np.array(
        [directory.lookup(f.destination, f"{field}[{j}].destination") for j, f in enumerate(job.flows)]
    )
    m, iterations = len(job.flows), max(1, job.iterations)
    t = np.arange(m * iterations, dtype=np.int64)
    flow = t % m
    later = t >= m
    part = JobTransfers(
        sizes=np.array([f.size_bytes for f in job.flows], dtype=np.int64)[flow],
        source=source[flow].astype(np.int64),
        destination=destination[flow].astype(np.int64),
        connection=flow,
        release_ns=job.start_ns + np.array([f.start_ns for f in job.flows], dtype=np.int64)[flow],
        edges=np.stack([t[later] - m, t[later], 0 * t[later]], axis=1),
    )
    if paths is not None:  # every repetition of a flow on its path
        part.pinned_offsets, part.pinned_channels = gather_rows(*paths, flow)
    if any(f.udp_source_port for f in job.flows):
        part.source_port = np.array([f.udp_source_port for f in job.flows], dtype=np.int64)[flow]
    if any(f.rate_gbps for f in job.flows):
        part.rate_bps = np.array([f.rate_gbps * 1e9 for f in job.flows], dtype=np.float64)[flow]
    return part


def _place(
    spec: SimulationSpec, snapshot: FabricSnapshot
) -> tuple[list[np.ndarray], dict[int, tuple[np.ndarray, np.ndarray]]]:
    """Every job's hosts, and the pinned paths of POINT_TO_POINT jobs (by job index) that have any."""
    directory = HostDirectory(snapshot)
    resolver = PathResolver(snapshot, directory)
    taken = np.zeros(snapshot.num_hosts, dtype=bool)
    placed, paths = [], {}
    for index, job in enumerate(spec.jobs):
        if job.collective == Collective.POINT_TO_POINT:
            field = f"jobs[{index}].flows"
            names = [(f.source, f"{field}[{j}].source") for j, f in enumerate(job.flows)]
            names += [(f.destination, f"{field}[{j}].destination") for j, f in enumerate(job.flows)]
            placed.append(np.unique([directory.lookup(name, where) for name, where in names]))
            pinned = resolver.job_paths(index, job)  # refuses a path the fabric cannot carry
            if pinned is not None:
                paths[index] = pinned
        else:
            placed.append(place_job(directory, index, job, taken, spec.seed))
            if job.algorithm == Algorithm.SHARP:
                aggregation_tree(snapshot, placed[-1], index)  # refuses a job SHARP cannot span
    return placed, paths


def place_jobs(spec: SimulationSpec, snapshot: FabricSnapshot) -> list[np.ndarray]:
    """Hosts of every job: ranks in order for rings, the hosts its flows touch for POINT_TO_POINT.

    Cheap enough to run before accepting a simulation: it is where unknown host names, jobs that
    do not fit on the fabric and pinned paths the fabric cannot carry are refused (InvalidArgument
    naming the job field and host, node or link).
    """
    return _place(spec, snapshot)[0]


def build_workload(
    spec: SimulationSpec, snapshot: FabricSnapshot, stream_above: int = STREAM_ABOVE_TRANSFERS
) -> Workload:
    """Place every job's ranks and generate its transfers and flows (spec already validated); a
    run `streamable` with more than `stream_above` transfers gets its connections and a RingStream."""
    if streams(spec, stream_above):
        return _stream(spec, snapshot)
    return _build(spec, snapshot, connections=False)


def streams(spec: SimulationSpec, stream_above: int = STREAM_ABOVE_TRANSFERS) -> bool:
    """Whether `build_workload` leaves `spec`'s rings unheld: at PACKET, `streamable` with more than
    `stream_above` transfers and fewer than 2^31 (the engine keeps transfer indices in int32); at
    FLOW_STEADY, ring jobs only, of any size (flow/steady.py computes their steps, holding none)."""
    if spec.fidelity == Fidelity.FLOW_STEADY:
        return ring_jobs(spec)
    return streamable(spec) and stream_above < _ring_transfer_count(spec.jobs[0]) < 2**31


def is_ring(job: JobSpec) -> bool:
    """An AllReduce, ReduceScatter or AllGather by RING."""
    return job.collective in RING_COLLECTIVES and job.algorithm == Algorithm.RING


def ring_jobs(spec: SimulationSpec) -> bool:
    """Whether `spec` runs at least one job and every job is a ring (`is_ring`)."""
    return bool(spec.jobs) and all(is_ring(job) for job in spec.jobs)


def one_ring_job(spec: SimulationSpec) -> bool:
    """Whether `spec` runs one job, a ring (`is_ring`)."""
    return len(spec.jobs) == 1 and ring_jobs(spec)


def streamable(spec: SimulationSpec) -> bool:
    """Whether the PACKET engine can run `spec` generating its transfers as it goes: one ring job
    (AllReduce, ReduceScatter or AllGather by RING), on RoCEv2 with no faults or test hooks (link
    events reroute every flow by index; the hooks name flows by index). Go-Back-N and DCQCN stream:
    a flow's slot is reused only once no packet, ACK, NAK or CNP names it and its retransmission
    timer is disarmed (packet/stream.py)."""
    return (
        spec.fidelity == Fidelity.PACKET
        and one_ring_job(spec)
        and spec.transport == Transport.ROCEV2
        and not any(getattr(spec, name) for name in _BY_INDEX)
    )


# Spec settings that name flows by index (link events reroute every flow; the test hooks name one),
# as they are when unset: a ring with any of them set is held whole.
_BY_INDEX: dict[str, Any] = {"faults": (), "drop_once": None, "mark_once": None}


def without_flows_by_index(spec: SimulationSpec) -> SimulationSpec:
    """`spec` without the settings that hold a ring whole because they name flows by index."""
    return dataclasses.replace(spec, **_BY_INDEX)


def head_transfers(rings: list[RingStream], flows: int) -> list[int]:
    """How many of each ring's first transfers its first `flows` flows take, ring after ring in job
    order (whole transfers: a ring's last one may pass `flows`)."""
    kept = []
    for ring in rings:
        take = min(max(0, flows), ring.flows)
        kept.append(-(-take // ring.qps))
        flows -= kept[-1] * ring.qps
    return kept


def stream_head(workload: Workload, flows: int) -> tuple[Workload, np.ndarray]:
    """The first `flows` flows of a workload of rings not held, job after job (`head_transfers`), as a
    held workload with no dependencies (for their per-flow results); and each one's QP row (its flow
    in `workload`)."""
    assert workload.rings is not None
    parts = []
    for j, (ring, transfers) in enumerate(
        zip(workload.rings, head_transfers(workload.rings, flows), strict=True)
    ):
        block = ring.transfers_in(0, transfers)
        row = ring.first_flow + (block.rank[:, None] * ring.qps + np.arange(ring.qps)).ravel()
        parts.append((j, ring, transfers, row, ring.flow_sizes(block.sizes).ravel()))
    row = np.concatenate([part[3] for part in parts])
    count = len(row)
    per_transfer = np.concatenate([np.full(part[2], part[1].qps, dtype=np.int64) for part in parts])
    offsets = np.r_[0, np.cumsum(per_transfer)].astype(np.int64)
    transfers = len(per_transfer)
    head = Workload(
        jobs=workload.jobs,
        transfer_job=np.concatenate([np.full(part[2], part[0], dtype=np.int32) for part in parts]),
        transfer_release_ns=np.concatenate(
            [np.full(part[2], part[1].job.start_ns, dtype=np.int64) for part in parts]
        ),
        transfer_prerequisites=np.zeros(transfers, dtype=np.int32),
        dependent_offsets=np.zeros(transfers + 1, dtype=np.int64),
        dependents=np.zeros(0, dtype=np.int32),
        dependent_needs_arrival=np.zeros(0, dtype=bool),
        transfer_flow_offsets=offsets,
        flow_job=np.concatenate([np.full(len(part[3]), part[0], dtype=np.int32) for part in parts]),
        flow_source=workload.flow_source[row],
        flow_destination=workload.flow_destination[row],
        flow_size_bytes=np.concatenate([part[4] for part in parts]),
        flow_source_port=workload.flow_source_port[row],
        flow_destination_qp=workload.flow_destination_qp[row],
        flow_qp=workload.flow_qp[row],
    )
    assert count == int(offsets[-1])
    return head, row


def stream_block(ranks: int, job: JobSpec, block_transfers: int = STREAM_BLOCK_TRANSFERS) -> int:
    """Transfers a streamed ring of `ranks` generates at a time (RingStream.block)."""
    step = ranks * max(1, job.chunks)
    return step * max(2, -(-block_transfers // step))


def _ring_transfer_count(job: JobSpec) -> int:
    n = len(job.hosts) or job.rank_count
    assert job.collective is not None
    return ring_steps(job.collective, n) * max(1, job.iterations) * n * max(1, job.chunks)


def _stream(spec: SimulationSpec, snapshot: FabricSnapshot) -> Workload:
    """The workload of a spec whose jobs are all rings, none held: their connections, the real
    jobs' plans, and a RingStream each."""
    workload = _build(spec, snapshot, connections=True)
    rings = []
    for j, job in enumerate(spec.jobs):
        assert job.collective is not None
        plan = workload.jobs[j]
        n = len(plan.hosts)
        steps = ring_steps(job.collective, n)
        qps = max(1, job.qps_per_connection)
        transfers = _ring_transfer_count(job)
        workload.jobs[j] = dataclasses.replace(
            plan,
            iterations=max(1, job.iterations),
            steps_per_iteration=steps,
            flow_count=transfers * qps,
            chunks=max(1, job.chunks),
        )
        first_flow = int(workload.transfer_flow_offsets[np.searchsorted(workload.transfer_job, j)])
        rings.append(
            RingStream(job=job, ranks=n, steps=steps, qps=qps, transfers=transfers, first_flow=first_flow)
        )
    workload.rings = rings
    return workload


def connection_workload(spec: SimulationSpec, snapshot: FabricSnapshot) -> Workload:
    """Every distinct flow of `build_workload(spec, snapshot)` at least once (its job, ends, UDP
    source port, destination QP and pinned path: all a route depends on), for checking routes
    without generating the whole run: each job with one iteration and one chunk (both reuse the
    connections' QPs), a ring with its first step only (its ranks' one connection each). Sizes,
    times and dependencies are not the run's."""
    return _build(spec, snapshot, connections=True)


def _build(spec: SimulationSpec, snapshot: FabricSnapshot, connections: bool) -> Workload:
    directory = HostDirectory(snapshot)
    labels = job_labels(spec.jobs)
    plans: list[JobPlan] = []
    parts: list[JobTransfers] = []
    placed, paths = _place(spec, snapshot)
    for index, (job, hosts) in enumerate(zip(spec.jobs, placed, strict=True)):
        if connections:
            job = dataclasses.replace(job, iterations=1, chunks=1)
        if connections and is_ring(job):
            part, steps, size = ring_transfers(hosts, job, 1), 1, job.size_bytes
        elif job.collective == Collective.POINT_TO_POINT:
            part = _point_to_point_part(directory, index, job, paths.get(index))
            size, steps = int(sum(f.size_bytes for f in job.flows)), 1
        elif job.algorithm == Algorithm.SHARP:
            part, steps = sharp_transfers(aggregation_tree(snapshot, hosts, index), job)
            size = job.size_bytes
        else:
            part, steps = collective_transfers(hosts, job)
            size = job.size_bytes
        qps = max(1, job.qps_per_connection)
        assert job.collective is not None, "validate the spec first: every job has a collective"
        plans.append(
            JobPlan(
                label=labels[index],
                collective=job.collective,
                hosts=hosts,
                size_bytes=size,
                start_ns=job.start_ns,
                iterations=max(1, job.iterations),
                steps_per_iteration=steps,
                flow_count=len(part.sizes) * qps,
                algorithm=job.algorithm,
                chunks=1 if job.collective == Collective.POINT_TO_POINT else pipeline_chunks(job),
            )
        )
        parts.append(part)
    workload = _assemble(spec, plans, parts)
    if any(job.algorithm == Algorithm.SHARP for job in spec.jobs):
        workload.endpoint_names = snapshot.node_names
    return workload


def _assemble(spec: SimulationSpec, plans: list[JobPlan], parts: list[JobTransfers]) -> Workload:
    transfer_base = np.cumsum([0] + [len(p.sizes) for p in parts])
    total = int(transfer_base[-1])
    # Each part's edges in the run's transfer numbers (the first part's need no shift, and one part
    # no copy: a 2,048-rank ring's 16.8M edges are 400 MB).
    shifted = [
        p.edges + np.array([base, base, 0]) if base else p.edges
        for p, base in zip(parts, transfer_base[:-1], strict=True)
    ]
    edges = shifted[0] if len(shifted) == 1 else np.concatenate(shifted)
    # By prerequisite, each one's in the generator's order (a ring's come so: no sort).
    by_prerequisite = len(edges) < 2 or bool((edges[1:, 0] >= edges[:-1, 0]).all())
    order = np.arange(len(edges)) if by_prerequisite else np.argsort(edges[:, 0], kind="stable")
    dependent_offsets = np.zeros(total + 1, dtype=np.int64)
    np.cumsum(np.bincount(edges[:, 0], minlength=total), out=dependent_offsets[1:])
    transfer_job = np.repeat(np.arange(len(parts), dtype=np.int32), [len(p.sizes) for p in parts])
    qps = np.array([max(1, job.qps_per_connection) for job in spec.jobs], dtype=np.int64)
    flows_per_transfer = qps[transfer_job]
    transfer_flow_offsets = np.zeros(total + 1, dtype=np.int64)
    np.cumsum(flows_per_transfer, out=transfer_flow_offsets[1:])
    # One QP per connection (the default) makes flow f transfer f: no per-flow gathers then.
    one_flow_each = int(transfer_flow_offsets[-1]) == total
    flow_transfer = np.arange(total) if one_flow_each else np.repeat(np.arange(total), flows_per_transfer)

    def per_flow(values: np.ndarray) -> np.ndarray:
        return values if one_flow_each else values[flow_transfer]

    qp_index = np.arange(len(flow_transfer)) - per_flow(transfer_flow_offsets[:-1])

    sizes = np.concatenate([p.sizes for p in parts])
    connection = np.concatenate([p.connection for p in parts])
    flow_job = per_flow(transfer_job)
    source_qp = np.empty(len(flow_transfer), dtype=np.uint32)
    destination_qp = np.empty(len(flow_transfer), dtype=np.uint32)
    flow_qp = np.empty(len(flow_transfer), dtype=np.int32)
    numbered = 0
    for j in range(len(parts)):
        mine = slice(None) if len(parts) == 1 else flow_job == j
        # Hash each (connection, QP) once, not each flow: every step of a ring reuses them.
        qps_of_job = int(qp_index[mine].max(initial=0)) + 1
        key = per_flow(connection)[mine] * qps_of_job + qp_index[mine]
        keys, which = _distinct(key)
        for role, out in ((0, source_qp), (1, destination_qp)):
            out[mine] = _qp_numbers(spec.seed, j, keys // qps_of_job, keys % qps_of_job, role)[which]
        flow_qp[mine] = numbered + which
        numbered += len(keys)
    source_port = udp_source_port(source_qp)
    if any(p.source_port is not None for p in parts):  # a flow's own port replaces its QP's
        given = per_flow(np.concatenate([_or_zeros(p.source_port, p) for p in parts]))
        source_port = np.where(given > 0, given, source_port).astype(np.int32)
    pinned_offsets = pinned_channels = flow_rate = None
    if any(p.pinned_offsets is not None for p in parts):
        lengths = np.concatenate(
            [np.diff(p.pinned_offsets) if p.pinned_offsets is not None else _or_zeros(None, p) for p in parts]
        )
        offsets = np.zeros(total + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        channels = np.concatenate([p.pinned_channels for p in parts if p.pinned_channels is not None]).astype(
            np.int32
        )
        pinned_offsets, pinned_channels = gather_rows(offsets, channels, flow_transfer)
    if any(p.rate_bps is not None for p in parts):  # each QP of a transfer takes its share of the cap
        transfer_rate = np.concatenate([_or_zeros(p.rate_bps, p).astype(np.float64) for p in parts])
        flow_rate = per_flow(transfer_rate) / per_flow(flows_per_transfer)
    if one_flow_each:  # a transfer's bytes split over one QP: all of them
        flow_sizes = sizes.astype(np.int64, copy=False)
    else:
        flow_sizes = split_bytes(per_flow(sizes), per_flow(flows_per_transfer), qp_index)
    return Workload(
        jobs=plans,
        transfer_job=transfer_job,
        transfer_release_ns=np.concatenate([p.release_ns for p in parts]),
        transfer_prerequisites=np.bincount(edges[:, 1], minlength=total).astype(np.int32),
        dependent_offsets=dependent_offsets,
        dependents=edges[order, 1].astype(np.int32),
        dependent_needs_arrival=edges[order, 2].astype(bool),
        transfer_flow_offsets=transfer_flow_offsets,
        flow_job=flow_job,
        flow_source=per_flow(np.concatenate([p.source for p in parts])),
        flow_destination=per_flow(np.concatenate([p.destination for p in parts])),
        flow_size_bytes=flow_sizes,
        flow_source_port=source_port,
        flow_destination_qp=destination_qp,
        flow_qp=flow_qp,
        pinned_offsets=pinned_offsets,
        pinned_channels=pinned_channels,
        flow_rate_bps=flow_rate,
    )


def _or_zeros(values: np.ndarray | None, part: JobTransfers) -> np.ndarray:
    """`values` (one per transfer of `part`), or zeros."""
    return values if values is not None else np.zeros(len(part.sizes), dtype=np.int64)


def wire_bytes(payload_bytes: np.ndarray, mtu_bytes: int, header_bytes: int) -> np.ndarray:
    """int64: bytes on the wire of flows of `payload_bytes`, cut into packets of at most `mtu_bytes`,
    each with `header_bytes` of overhead (an empty flow sends nothing).

    >>> wire_bytes(np.array([0, 1, 4096, 4097]), 4096, 82).tolist()
    [0, 83, 4178, 4261]
    """
    payload = np.asarray(payload_bytes, dtype=np.int64)
    return payload + -(-payload // mtu_bytes) * header_bytes
