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
`num_hosts + node` for the switch `node` (its name is `endpoint_names[node]`), and the flow is
pinned to the one channel of its tree edge (`flow_channel`; -1 for flows routed between hosts).

QP numbers are derived from (spec seed, job, connection, QP index) with MurmurHash3, so a run is
deterministic; the UDP source port is 49152 + (source QPN mod 16384).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from services.common.snapshot import FabricSnapshot
from services.simulator.collectives import JobTransfers, collective_transfers, pipeline_chunks, split_bytes
from services.simulator.ecmp_hash import murmur3_32
from services.simulator.placement import HostDirectory, place_job
from services.simulator.sharp import aggregation_tree, sharp_transfers
from services.simulator.spec import Algorithm, Collective, JobSpec, SimulationSpec, job_labels

__all__ = ["JobPlan", "Workload", "build_workload", "place_jobs", "split_bytes", "udp_source_port"]

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
    # int32 [F], the one channel a SHARP hop is pinned to; -1: routed between hosts. None: all -1.
    flow_channel: np.ndarray | None = None
    # Node names, when a flow ends at a switch (endpoint num_hosts + node); else empty.
    endpoint_names: list[str] = dataclasses.field(default_factory=list)

    @property
    def transfer_count(self) -> int:
        return int(self.transfer_job.shape[0])

    @property
    def flow_count(self) -> int:
        return int(self.flow_job.shape[0])

    @property
    def pinned_channel(self) -> np.ndarray:
        """int32 [F]: `flow_channel`, or -1 for every flow when no flow is pinned to a channel."""
        if self.flow_channel is None:
            return np.full(self.flow_count, -1, dtype=np.int32)
        return self.flow_channel


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


def _point_to_point_part(directory: HostDirectory, index: int, job: JobSpec) -> JobTransfers:
    field = f"jobs[{index}].flows"
    source = np.array([directory.lookup(f.source, f"{field}[{j}].source") for j, f in enumerate(job.flows)])
    destination = np.array(
        [directory.lookup(f.destination, f"{field}[{j}].destination") for j, f in enumerate(job.flows)]
    )
    m, iterations = len(job.flows), max(1, job.iterations)
    t = np.arange(m * iterations, dtype=np.int64)
    flow = t % m
    later = t >= m
    return JobTransfers(
        sizes=np.array([f.size_bytes for f in job.flows], dtype=np.int64)[flow],
        source=source[flow].astype(np.int64),
        destination=destination[flow].astype(np.int64),
        connection=flow,
        release_ns=job.start_ns + np.array([f.start_ns for f in job.flows], dtype=np.int64)[flow],
        edges=np.stack([t[later] - m, t[later], 0 * t[later]], axis=1),
    )


def place_jobs(spec: SimulationSpec, snapshot: FabricSnapshot) -> list[np.ndarray]:
    """Hosts of every job: ranks in order for rings, the hosts its flows touch for POINT_TO_POINT.

    Cheap enough to run before accepting a simulation: it is where unknown host names and jobs
    that do not fit on the fabric are refused (InvalidArgument naming the job field and host).
    """
    directory = HostDirectory(snapshot)
    taken = np.zeros(snapshot.num_hosts, dtype=bool)
    placed = []
    for index, job in enumerate(spec.jobs):
        if job.collective == Collective.POINT_TO_POINT:
            field = f"jobs[{index}].flows"
            names = [(f.source, f"{field}[{j}].source") for j, f in enumerate(job.flows)]
            names += [(f.destination, f"{field}[{j}].destination") for j, f in enumerate(job.flows)]
            placed.append(np.unique([directory.lookup(name, where) for name, where in names]))
        else:
            placed.append(place_job(directory, index, job, taken, spec.seed))
            if job.algorithm == Algorithm.SHARP:
                aggregation_tree(snapshot, placed[-1], index)  # refuses a job SHARP cannot span
    return placed


def build_workload(spec: SimulationSpec, snapshot: FabricSnapshot) -> Workload:
    """Place every job's ranks and generate its transfers and flows (spec already validated)."""
    directory = HostDirectory(snapshot)
    labels = job_labels(spec.jobs)
    plans: list[JobPlan] = []
    parts: list[JobTransfers] = []
    for index, (job, hosts) in enumerate(zip(spec.jobs, place_jobs(spec, snapshot), strict=True)):
        if job.collective == Collective.POINT_TO_POINT:
            part = _point_to_point_part(directory, index, job)
            size, steps = int(sum(f.size_bytes for f in job.flows)), 1
        elif job.algorithm == Algorithm.SHARP:
            part, steps = sharp_transfers(aggregation_tree(snapshot, hosts, index), job)
            size = job.size_bytes
        else:
            part, steps = collective_transfers(hosts, job)
            size = job.size_bytes
        qps = max(1, job.qps_per_connection)
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
    if workload.flow_channel is not None:
        workload.endpoint_names = snapshot.node_names
    return workload


def _assemble(spec: SimulationSpec, plans: list[JobPlan], parts: list[JobTransfers]) -> Workload:
    transfer_base = np.cumsum([0] + [len(p.sizes) for p in parts])
    total = int(transfer_base[-1])
    shifts = [np.array([base, base, 0]) for base in transfer_base[:-1]]
    edges = np.concatenate([p.edges + shift for p, shift in zip(parts, shifts, strict=True)])
    order = np.argsort(edges[:, 0], kind="stable")
    dependent_offsets = np.zeros(total + 1, dtype=np.int64)
    np.cumsum(np.bincount(edges[:, 0], minlength=total), out=dependent_offsets[1:])
    transfer_job = np.repeat(np.arange(len(parts), dtype=np.int32), [len(p.sizes) for p in parts])
    qps = np.array([max(1, job.qps_per_connection) for job in spec.jobs], dtype=np.int64)
    flows_per_transfer = qps[transfer_job]
    transfer_flow_offsets = np.zeros(total + 1, dtype=np.int64)
    np.cumsum(flows_per_transfer, out=transfer_flow_offsets[1:])
    flow_transfer = np.repeat(np.arange(total), flows_per_transfer)
    qp_index = np.arange(len(flow_transfer)) - transfer_flow_offsets[flow_transfer]
    sizes = np.concatenate([p.sizes for p in parts])
    connection = np.concatenate([p.connection for p in parts])
    flow_job = transfer_job[flow_transfer]
    pinned = any(p.channel is not None for p in parts)
    transfer_channel = np.concatenate(
        [p.channel if p.channel is not None else np.full(len(p.sizes), -1) for p in parts]
    )
    source_qp = np.empty(len(flow_transfer), dtype=np.uint32)
    destination_qp = np.empty(len(flow_transfer), dtype=np.uint32)
    for j in range(len(parts)):
        mine = flow_job == j
        source_qp[mine] = _qp_numbers(spec.seed, j, connection[flow_transfer[mine]], qp_index[mine], 0)
        destination_qp[mine] = _qp_numbers(spec.seed, j, connection[flow_transfer[mine]], qp_index[mine], 1)
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
        flow_source=np.concatenate([p.source for p in parts])[flow_transfer],
        flow_destination=np.concatenate([p.destination for p in parts])[flow_transfer],
        flow_size_bytes=split_bytes(sizes[flow_transfer], flows_per_transfer[flow_transfer], qp_index),
        flow_source_port=udp_source_port(source_qp),
        flow_destination_qp=destination_qp,
        flow_channel=transfer_channel[flow_transfer].astype(np.int32) if pinned else None,
    )
