"""Admission control: what a simulation will cost, from its spec and the fabric, before it is accepted.

`estimate_cost` counts, with Python integers and closed forms (nothing is generated, so a spec
asking for 1e9 iterations costs microseconds to judge), the transfers, QP flows and prerequisite
edges each job expands into (collectives.py and sharp.py say how), at PACKET fidelity the packets
(payload bytes over the MTU, plus one per flow for the last, partial packet) and events (each
packet is an event at every channel of its path and at delivery), and the peak memory of the
worker that runs it. A spec whose estimate exceeds a limit is refused with ResourceExhausted
naming every estimate that does and its limit (`CostEstimate.admit`); `check_request_size` does
the same for the flows a request lists before the request is even converted.

The memory model was measured on this code (peak RSS of a worker over its base, VmHWM;
`tests/simulator/test_memory_estimate.py` holds it to within the run's own growth of the peak): FLOW
fidelity about 290 B per transfer (workload, per-flow times, the ready heap; its series no longer
grow with the events) and 110 B per further QP flow; PACKET fidelity about 330 B per QP flow (the
engine's per-flow state) and 100-130 B per transfer (440-480 B a transfer of one flow: rings of 128
to 2,048 ranks, with Go-Back-N, PFC and DCQCN or without); a POINT_TO_POINT flow listed in the spec
about 600 B more (the spec's own objects, held by the service and the worker); plus the snapshot
(twice: the service's and the worker's copy), the per-link series at their cap, and 320 MB for the
worker itself (its interpreter, modules and compiled engines: 165-256 MB measured); at FLOW and
FLOW_STEADY the routes' entries too (the engine's `flow_memory_bytes`, from each job's
connections: an even split's span every equal-cost path). The constants
below round those up. (Until issue #15's memory work they were 2.3-3.3x the peaks: 1.4 KB a PACKET
transfer of one flow, 1.2 KB a FLOW one; now 600 and 560 B.)

A PACKET ring generated as it runs (`workload.streams`) holds only its connections and a few blocks
of transfers: it is costed as `STREAM_BLOCKS_HELD` blocks of them (1.39 GB in all for 8,192 ranks on
k=32; measured: 0.44 GB in a bare interpreter, 1.23 GB for the service's worker under ECMP, at most
1.37 GB in the benchmark's process under SPRAY), and its transfer and flow counts are not limited
(its packets and events are). FLOW_STEADY's rings (any number) are not held either: each costs its
connections, its QP flows' bits per interval, and its per-chunk state and durations per phase (a
ring of many chunks is large); its events are its transfers times STEADY_PASSES, a typical number of
passes over them (~10 ns a transfer a pass), limited as a PACKET run's are.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from services.common.errors import ResourceExhausted
from services.common.snapshot import FabricSnapshot
from services.simulator.collectives import pipeline_chunks, ring_steps
from services.simulator.engines import engine_for
from services.simulator.routes import path_channels
from services.simulator.sharp import aggregation_tree
from services.simulator.spec import Algorithm, Collective, Fidelity, JobSpec, SimulationSpec
from services.simulator.workload import STREAM_BLOCKS_HELD, stream_block, streams, without_flows_by_index

__all__ = [
    "DEFAULT_LIMITS",
    "STEADY_PASSES",
    "WORKER_BASE_BYTES",
    "CostEstimate",
    "JobCost",
    "SimulationLimits",
    "check_request_size",
    "estimate_cost",
    "job_cost",
    "makespan_lower_bound_ns",
]

_GIB = 1 << 30
_NODE_KIND_SWITCH = 2
WORKER_BASE_BYTES = 320 << 20  # a worker before its run: 165-256 MB measured in fresh interpreters
_FLOW_BYTES_PER_TRANSFER = 400
_FLOW_BYTES_PER_QP_FLOW = 160
_PACKET_BYTES_PER_TRANSFER = 180
# FLOW_STEADY: passes over a run's transfers, for its events (7 at 8,192 ranks under ECMP, 2 to 19
# measured).
STEADY_PASSES = 10
_PACKET_BYTES_PER_QP_FLOW = 420
_SPEC_BYTES_PER_LISTED_FLOW = 640


@dataclasses.dataclass(frozen=True)
class SimulationLimits:
    """What one simulation may cost; 0 turns a limit off. Defaults fit a 2-core, 24 GiB machine
    running one worker: a run within them takes at most minutes."""

    max_flows: int = 5_000_000  # QP flows (a transfer of one: FLOW ~400 B, PACKET ~600 B)
    max_transfers: int = 5_000_000
    max_packets: int = 1_000_000_000  # PACKET fidelity: ~15 M events/s, 5 events a packet
    max_events: int = 20_000_000_000
    max_memory_bytes: int = 4 * _GIB  # the worker's estimated peak
    # POINT_TO_POINT flows listed in one spec: StartSimulation reads each in Python (~5 us) while the
    # service's event loop waits, and the request is kept with the simulation.
    max_listed_flows: int = 200_000

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            if getattr(self, field.name) < 0:
                raise ValueError(f"{field.name} must not be negative")


DEFAULT_LIMITS = SimulationLimits()


@dataclasses.dataclass(frozen=True)
class JobCost:
    """One job's size: transfers, QP flows, dependency edges (an upper bound), payload bytes it
    moves, the bytes of its largest QP flow, and its connections (source -> destination pairs it
    sends over, an upper bound: routes are per connection, or per QP of one)."""

    transfers: int
    flows: int
    edges: int
    payload_bytes: int
    largest_flow_bytes: int
    listed_flows: int = 0  # POINT_TO_POINT flows in the spec
    connections: int = 0


@dataclasses.dataclass(frozen=True)
class CostEstimate:
    """A whole simulation's estimated size (Python integers: no overflow at any size)."""

    transfers: int
    flows: int
    edges: int
    packets: int  # PACKET fidelity; 0 at FLOW
    events: int  # PACKET fidelity; FLOW_STEADY: transfers x STEADY_PASSES; 0 at FLOW
    memory_bytes: int
    jobs: tuple[JobCost, ...] = ()
    shortest_ns: int = 0  # no run ends sooner (makespan_lower_bound_ns)
    # Rings not held (a PACKET ring generated as it runs, FLOW_STEADY's rings: workload.RingStream):
    # their transfers and flows are never all held, so their counts are not limited (their packets
    # and events still are).
    streamed: bool = False
    # What would make this spec smaller that the generic advice does not say (`_hint`).
    hint: str = ""

    @property
    def listed_flows(self) -> int:
        return sum(job.listed_flows for job in self.jobs)

    def exceeding(self, limits: SimulationLimits) -> list[str]:
        """`estimate > limit` phrases for every limit this estimate exceeds."""
        checks = (
            ("flows listed in the spec", self.listed_flows, limits.max_listed_flows, _count),
            ("flows", 0 if self.streamed else self.flows, limits.max_flows, _count),
            ("transfers", 0 if self.streamed else self.transfers, limits.max_transfers, _count),
            ("packets", self.packets, limits.max_packets, _count),
            ("events", self.events, limits.max_events, _count),
            ("peak memory", self.memory_bytes, limits.max_memory_bytes, _bytes),
        )
        return [
            f"{name} {show(value)} (limit {show(limit)})"
            for name, value, limit, show in checks
            if limit and value > limit
        ]

    def admit(self, limits: SimulationLimits) -> None:
        """ResourceExhausted naming each estimate above its limit (and the limit)."""
        exceeding = self.exceeding(limits)
        if exceeding:
            raise too_large(exceeding, self.hint, flow=self.packets == 0)  # packets: 0 at FLOW


def too_large(exceeding: Sequence[str], hint: str = "", flow: bool = False) -> ResourceExhausted:
    """`flow`: the spec is at FLOW fidelity already (the advice does not offer it)."""
    smaller = "a larger mtu_bytes" + ("" if flow else " or FLOW fidelity")
    return ResourceExhausted(
        f"spec: the simulation is too large for this simulator: estimated {'; '.join(exceeding)}. "
        f"{hint}Fewer iterations, chunks, QPs, ranks or flows, {smaller} make it smaller (the "
        "simulator's --max-* flags set its limits)"
    )


def check_request_size(spec: Any, limits: SimulationLimits) -> None:
    """The POINT_TO_POINT flows of a request's spec (the proto message: only list lengths and
    integers are read), before it is converted: a spec listing millions of flows is refused in
    microseconds instead of after seconds of parsing on the event loop."""
    listed = sum(len(job.flows) for job in spec.jobs)
    flows = sum(len(job.flows) * max(1, job.iterations) * max(1, job.qps_per_connection) for job in spec.jobs)
    exceeding = [
        f"{name} {_count(value)} (limit {_count(limit)})"
        for name, value, limit in (
            ("flows listed in the spec", listed, limits.max_listed_flows),
            ("flows", flows, limits.max_flows),
        )
        if limit and value > limit
    ]
    if exceeding:
        raise too_large(exceeding)


def _count(value: int) -> str:
    return f"{value:,}" if value < 10**15 else f"{value:.3g}"


def _bytes(value: int) -> str:
    if value >= 1 << 40:
        return f"{value / (1 << 40):.3g} TiB"
    if value >= _GIB:
        return f"{value / _GIB:.1f} GiB"
    return f"{value / (1 << 20):.0f} MiB"


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def job_cost(job: JobSpec, ranks: int, sharp_edges: int = 0) -> JobCost:
    """The size of one job over `ranks` ranks (SHARP: over a tree of `sharp_edges` edges).

    Closed forms of collectives.py: per iteration, a ring runs steps x n x chunks transfers, the
    double binary tree 2 trees x 2(n-1) x chunks, halving-doubling 2 log2(n) x n, AllToAll
    n(n-1) x chunks, broadcast (n-1) x chunks, SHARP 2 x edges x chunks. Connections: a ring's n,
    the trees' 4(n-1) (each tree edge both ways), halving-doubling's n log2(n) partners, AllToAll's
    n(n-1), broadcast's n-1, SHARP's 2 x edges, the listed point-to-point flows.
    """
    iterations, qps = max(1, job.iterations), max(1, job.qps_per_connection)
    if job.collective == Collective.POINT_TO_POINT:
        count = len(job.flows)
        largest = max((f.size_bytes for f in job.flows), default=0)
        payload = sum(f.size_bytes for f in job.flows) * iterations
        transfers = count * iterations
        return JobCost(transfers, transfers * qps, transfers, payload, _ceil(largest, qps), count, count)
    n, size, chunks = ranks, job.size_bytes, pipeline_chunks(job)
    if job.algorithm == Algorithm.SHARP:
        per_iteration, moved, largest = 2 * sharp_edges * chunks, 2 * sharp_edges * size, _ceil(size, chunks)
        connections = 2 * sharp_edges
    elif job.collective == Collective.BROADCAST:
        per_iteration, moved, largest = (n - 1) * chunks, (n - 1) * size, _ceil(size, chunks)
        connections = n - 1
    elif job.collective == Collective.ALL_TO_ALL:
        per_iteration, moved, largest = n * (n - 1) * chunks, (n - 1) * size, _ceil(_ceil(size, n), chunks)
        connections = n * (n - 1)
    elif job.algorithm == Algorithm.DOUBLE_BINARY_TREE:
        per_iteration, moved = 4 * (n - 1) * chunks, 2 * (n - 1) * size
        largest = _ceil(_ceil(size, 2), chunks)
        connections = 4 * (n - 1)
    elif job.algorithm == Algorithm.HALVING_DOUBLING:
        levels = max(1, n.bit_length() - 1)
        per_iteration, moved, largest = 2 * levels * n, 2 * (n - 1) * size, _ceil(size, n) * max(1, n // 2)
        connections = levels * n
    else:  # ring AllReduce / ReduceScatter / AllGather: each step moves S over the n ranks
        steps = ring_steps(job.collective, n) if job.collective is not None else 0
        per_iteration, moved = steps * n * chunks, steps * size
        largest = _ceil(_ceil(size, n), chunks)
        connections = n
    transfers = per_iteration * iterations
    # Edges: in order on a connection and the data awaited (2 per transfer), plus iterations' handshakes.
    return JobCost(
        transfers,
        transfers * qps,
        3 * transfers,
        moved * iterations,
        _ceil(largest, qps),
        connections=connections,
    )


def _sharp_edges(snapshot: FabricSnapshot, hosts: np.ndarray, index: int) -> int:
    return len(aggregation_tree(snapshot, hosts, index).parent) - 1


def _snapshot_bytes(snapshot: FabricSnapshot) -> int:
    total = 0
    for value in vars(snapshot).values():
        if isinstance(value, np.ndarray):
            total += value.nbytes
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            total += sum(v.nbytes for v in vars(value).values() if isinstance(v, np.ndarray))
        elif isinstance(value, list):
            total += 64 * len(value)  # names
    return total


def _host_capacity_bps(snapshot: FabricSnapshot) -> np.ndarray:
    """float64 [H]: what each host can send at once, the sum of its links' rates."""
    source = snapshot.channel_source()
    from_host = snapshot.node_kind[source] != _NODE_KIND_SWITCH
    per_node = np.bincount(
        source[from_host],
        weights=snapshot.channel_rate_bps()[from_host].astype(np.float64),
        minlength=snapshot.num_nodes,
    )
    return per_node[snapshot.host_nodes]


def makespan_lower_bound_ns(
    spec: SimulationSpec, snapshot: FabricSnapshot, placed: Sequence[np.ndarray], costs: Sequence[JobCost]
) -> int:
    """No run of `spec` ends before this: each job's hosts must send what the job moves from hosts,
    at most at the sum of their links' rates, from the job's start (and the run stops at its time
    limit)."""
    capacity = _host_capacity_bps(snapshot)
    bound = 0
    for job, hosts, cost in zip(spec.jobs, placed, costs, strict=True):
        rate = float(capacity[hosts].sum()) if len(hosts) else 0.0
        if rate <= 0:
            continue
        from_hosts = cost.payload_bytes
        start = job.start_ns
        if job.algorithm == Algorithm.SHARP:  # switches send the reduced data back down
            from_hosts = len(hosts) * job.size_bytes * max(1, job.iterations)
        if job.flows:
            start += min(f.start_ns for f in job.flows)
        bound = max(bound, start + int(from_hosts * 8e9 / rate))
    if spec.time_limit_ns:
        bound = min(bound, spec.time_limit_ns)
    return bound


def estimate_cost(
    spec: SimulationSpec, snapshot: FabricSnapshot, placed: Sequence[np.ndarray]
) -> CostEstimate:
    """The cost of `spec` (validated) on `snapshot`, its jobs placed on `placed` (place_jobs)."""
    costs = []
    for index, (job, hosts) in enumerate(zip(spec.jobs, placed, strict=True)):
        sharp = _sharp_edges(snapshot, hosts, index) if job.algorithm == Algorithm.SHARP else 0
        ranks = len(job.hosts) or job.rank_count
        costs.append(job_cost(job, ranks, sharp))
    transfers = sum(c.transfers for c in costs)
    flows = sum(c.flows for c in costs)
    edges = sum(c.edges for c in costs)
    listed = sum(c.listed_flows for c in costs)
    memory = WORKER_BASE_BYTES + 2 * _snapshot_bytes(snapshot) + _SPEC_BYTES_PER_LISTED_FLOW * listed
    packets = events = 0
    if spec.fidelity == Fidelity.PACKET:
        packets = sum(c.payload_bytes // spec.mtu_bytes + c.flows for c in costs)
        per_packet = path_channels(snapshot) + 1
        if spec.window_bytes:  # Go-Back-N: an ACK every ack_every packets
            per_packet += 1
        events = packets * per_packet
    shortest = makespan_lower_bound_ns(spec, snapshot, placed, costs)
    streamed = streams(spec)
    if streamed and spec.fidelity == Fidelity.FLOW_STEADY:  # its connections (its bins and per-chunk
        events = transfers * STEADY_PASSES  # state: the engine's series and flow memory, below)
        for job, hosts in zip(spec.jobs, placed, strict=True):
            qps = max(1, job.qps_per_connection)
            memory += (_FLOW_BYTES_PER_TRANSFER + _FLOW_BYTES_PER_QP_FLOW * qps) * len(hosts)
    elif streamed:  # held: its connections, and the transfers of a few blocks in slots
        job = spec.jobs[0]
        ranks, qps = len(placed[0]), max(1, job.qps_per_connection)
        held = STREAM_BLOCKS_HELD * stream_block(ranks, job) + ranks
        memory += (_PACKET_BYTES_PER_TRANSFER + _PACKET_BYTES_PER_QP_FLOW * qps) * held
    elif spec.fidelity == Fidelity.PACKET:
        memory += _PACKET_BYTES_PER_TRANSFER * transfers + _PACKET_BYTES_PER_QP_FLOW * flows
    else:
        memory += _FLOW_BYTES_PER_TRANSFER * transfers + _FLOW_BYTES_PER_QP_FLOW * max(0, flows - transfers)
    memory += engine_for(spec.fidelity).series_memory_bytes(spec, snapshot, shortest)
    connections = [c.connections for c in costs]
    memory += engine_for(spec.fidelity).flow_memory_bytes(spec, snapshot, flows, connections)
    hint = "" if streamed else _hint(spec)
    return CostEstimate(
        transfers, flows, edges, packets, events, memory, tuple(costs), shortest, streamed=streamed, hint=hint
    )


def _hint(spec: SimulationSpec) -> str:
    """The advice for a ring held whole that would be generated as it runs with another setting."""
    if spec.fidelity == Fidelity.FLOW and streams(dataclasses.replace(spec, fidelity=Fidelity.PACKET)):
        return (
            "At PACKET fidelity this ring is generated as it runs (only a few steps of it are held), "
            "where FLOW holds every transfer; FLOW_STEADY computes its steady state holding none. "
        )
    if streams(without_flows_by_index(spec)):
        return (
            "Without faults or test hooks this ring would be generated as it runs (they name flows by "
            "index, so the ring is held whole). "
        )
    return ""
