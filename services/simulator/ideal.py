"""The ideal completion of a job: what a run on a non-blocking fabric would reach (or, where no
closed form exists, a lower bound no run beats).

For rings the closed form on a non-blocking fabric at the hosts' link rate; for SHARP the streaming
closed form (S over the tree's slowest link plus the tree's latency); for every other collective a
lower bound (bandwidth and critical path). Each engine passes its own per-flow route latency (FLOW:
links and switches; PACKET: plus one packet's store-and-forward per hop after the first, in
fractions of a ns) and its bytes (FLOW: the wire bytes it moves, at the link rate; PACKET: payload
at the payload share of the link rate); the closed form is rounded once, at the end.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from services.common.snapshot import FabricSnapshot
from services.simulator.collectives import RING_COLLECTIVES
from services.simulator.spec import Algorithm, Collective, SimulationSpec
from services.simulator.workload import JobPlan, Workload

__all__ = ["critical_path_ns", "expected_end_ns", "ideal_completion_ns", "job_ideals"]


def _host_rates(snapshot: FabricSnapshot) -> tuple[np.ndarray, np.ndarray]:
    """[H] rate of each host's uplink (host -> switch) and downlink, bit/s (first link of the host)."""
    rates = snapshot.channel_rate_bps().astype(np.float64)
    source, target = snapshot.channel_source(), snapshot.channel_target()
    up = np.zeros(snapshot.num_nodes)
    down = np.zeros(snapshot.num_nodes)
    up[source[::-1]] = rates[::-1]
    down[target[::-1]] = rates[::-1]
    return up[snapshot.host_nodes], down[snapshot.host_nodes]


def _busiest_host_ns(
    source: np.ndarray, destination: np.ndarray, sizes: np.ndarray, up: np.ndarray, down: np.ndarray
) -> float:
    """Bandwidth bound: the largest of every host's bytes out over its uplink and in over its downlink."""
    host_out = np.bincount(source, weights=sizes, minlength=len(up))
    host_in = np.bincount(destination, weights=sizes, minlength=len(up))
    with np.errstate(divide="ignore", invalid="ignore"):
        return max(float(np.nanmax(host_out * 8e9 / up)), float(np.nanmax(host_in * 8e9 / down)))


@njit(cache=True)
def _latest_arrival(first, release_ns, send_ns, latency_ns, dependent_offsets, dependents, needs_arrival):
    # One pass in index order: transfers are topologically ordered, so when transfer i is reached
    # every prerequisite has already raised ready[i] to its final value. -1.0 if an edge points
    # backwards or out of the range (the order the workload promises is broken).
    count = len(send_ns)
    ready = release_ns.copy()
    latest = 0.0
    for i in range(count):
        left = ready[i] + send_ns[i]
        arrived = left + latency_ns[i]
        latest = max(latest, arrived)
        t = first + i
        for e in range(dependent_offsets[t], dependent_offsets[t + 1]):
            d = dependents[e] - first
            if d <= i or d >= count:
                return -1.0
            waited = arrived if needs_arrival[e] else left
            if waited > ready[d]:
                ready[d] = waited
    return latest


def critical_path_ns(
    workload: Workload,
    first: int,
    stop: int,
    flow_latency_ns: np.ndarray,
    up_bps: np.ndarray,
    down_bps: np.ndarray,
    channel_bps: np.ndarray | None = None,
    latency_only: bool = False,
) -> float:
    """Latest arrival (absolute ns) of transfers `first..stop-1` along their prerequisite chains.

    Each transfer costs its bytes over the slower of its source's uplink and its destination's
    downlink (`up_bps`, `down_bps`: rate per host; a transfer pinned to one channel, a SHARP hop:
    that channel's rate in `channel_bps`) once its prerequisites allow, plus its route latency
    (the smallest of its non-empty QP flows', 1 ns short; none if it carries no bytes) before it
    has arrived; a dependent that only waits for it to have *left* skips the latency. With
    `latency_only` the bytes cost nothing: the chains' latency alone. Contention is ignored, so no
    run is faster: this is the critical-path half of the lower bound. The range must hold whole
    jobs (edges stay inside it). One compiled pass in topological order (O(transfers + edges)).
    """
    offsets = workload.transfer_flow_offsets[first : stop + 1]
    flows = slice(int(offsets[0]), int(offsets[-1]))
    local = offsets - offsets[0]
    sizes = workload.flow_size_bytes[flows]
    cumulative = np.r_[0, np.cumsum(sizes)]
    transfer_bytes = (cumulative[local[1:]] - cumulative[local[:-1]]).astype(np.float64)
    head = offsets[:-1]  # first flow of each transfer: its source and destination hosts
    channel = workload.pinned_channel[head]
    on_channel = channel >= 0  # its endpoints may be switches: their rate is the channel's
    source = np.where(on_channel, 0, workload.flow_source[head])
    destination = np.where(on_channel, 0, workload.flow_destination[head])
    rate = np.minimum(up_bps[source], down_bps[destination])
    if on_channel.any():
        if channel_bps is None:
            raise ValueError("transfers pinned to a channel need channel_bps")
        rate = np.where(on_channel, channel_bps[np.maximum(channel, 0)], rate)
    with np.errstate(divide="ignore"):
        send_ns = np.zeros(len(rate)) if latency_only else transfer_bytes * 8e9 / rate
    # Route latencies may come rounded up to whole ns (PACKET store-and-forward terms), so each
    # counts 1 ns short: a bound must not overshoot by a rounding per link of a long chain.
    latency = np.minimum.reduceat(
        np.where(sizes > 0, flow_latency_ns[flows].astype(np.float64) - 1.0, np.inf), local[:-1]
    )
    latency[~np.isfinite(latency)] = 0.0  # an empty transfer arrives when it starts
    latency = latency.clip(min=0.0)
    latest = _latest_arrival(
        first,
        workload.transfer_release_ns[first:stop].astype(np.float64),
        send_ns,
        latency,
        workload.dependent_offsets,
        workload.dependents,
        workload.dependent_needs_arrival,
    )
    if latest < 0:
        raise AssertionError("transfers are not in topological order")
    return float(latest)


def ideal_completion_ns(
    plan: JobPlan,
    workload: Workload,
    job_index: int,
    flow_latency_ns: np.ndarray,
    snapshot: FabricSnapshot,
    payload_fraction: float = 1.0,
) -> int:
    """Ideal completion on a non-blocking fabric at the hosts' link rates (from the job's start).

    Ring (AllReduce, ReduceScatter, AllGather by RING), the exact closed form: every rank sends
    steps x S/n bytes in order, each step waiting one hop latency for its input, so t = steps *
    (S/n) * 8 / R + the largest sum of `steps` consecutive ring-hop latencies (R the slowest rank
    link); for AllReduce steps = 2(n-1), i.e. 2(n-1)/n * S * 8 / R.
    Point-to-point: the larger of each flow's own chain (start + iterations x (size*8/R + latency),
    R the slower of its hosts' links and its `rate_gbps` cap) and each host's total bytes over its
    link rate.
    SHARP AllReduce, the streaming closed form: iterations x S * 8 / R over the busiest channel of
    the tree (each tree link carries S up and S down, every switch reduces as the data passes),
    plus the tree's latency (the critical path with no serialisation: the slowest host-to-root
    path up, then root-to-host down, per iteration). Also a lower bound: the FLOW model's switches
    store and forward whole chunks, which costs the pipeline's fill on top (see sharp.py).
    Every other collective (tree, halving-doubling, AllToAll, broadcast), a LOWER BOUND: the larger
    of the bandwidth bound (the busiest host link's bytes over its rate, either direction) and the
    critical-path bound (`critical_path_ns`). No FLOW run finishes earlier, on any fabric. At
    PACKET fidelity the route latencies charge one full packet's store-and-forward per hop after
    the first, at the hosts' link rate, so the bound holds when transfers end in full packets,
    switch links are no faster than host links and nothing is dropped.
    `payload_fraction` scales the link rate to the payload rate (PACKET fidelity: payload share of
    the wire bytes of a full packet); the FLOW engine passes its workload in wire bytes instead, at
    the link rate, which makes every closed form exact.
    """
    up, down = _host_rates(snapshot)
    up, down = up * payload_fraction, down * payload_fraction
    mine = workload.flow_job == job_index
    source, destination = workload.flow_source[mine], workload.flow_destination[mine]
    sizes, latency = workload.flow_size_bytes[mine].astype(np.float64), flow_latency_ns[mine]
    if plan.collective == Collective.POINT_TO_POINT:
        busiest = _busiest_host_ns(source, destination, sizes, up, down)
        transfers = np.flatnonzero(workload.transfer_job == job_index)
        first = transfers[: len(transfers) // plan.iterations]  # one repetition of every flow
        offsets = workload.transfer_flow_offsets
        cumulative = np.r_[0, np.cumsum(workload.flow_size_bytes)]
        transfer_bytes = cumulative[offsets[first + 1]] - cumulative[offsets[first]]
        qp0 = offsets[first]
        rate = np.minimum(up[workload.flow_source[qp0]], down[workload.flow_destination[qp0]])
        if workload.flow_rate_bps is not None:  # a capped flow (each QP capped at its share)
            cap = workload.flow_rate_bps[qp0] * (offsets[first + 1] - qp0) * payload_fraction
            rate = np.where(cap > 0, np.minimum(rate, cap), rate)
        release = workload.transfer_release_ns[first] - plan.start_ns
        chain = release + plan.iterations * (transfer_bytes * 8e9 / rate + flow_latency_ns[qp0])
        return int(np.ceil(max(busiest, float(chain.max()))))
    if plan.algorithm == Algorithm.SHARP:
        transfers = np.flatnonzero(workload.transfer_job == job_index)  # one contiguous range
        channel_bps = snapshot.channel_rate_bps().astype(np.float64) * payload_fraction
        span = (int(transfers[0]), int(transfers[-1]) + 1)
        tree_latency = critical_path_ns(
            workload, *span, flow_latency_ns, up, down, channel_bps, latency_only=True
        )
        # Every tree link carries S each way per iteration (sharp.py): the busiest one, its bytes
        # (as the workload counts them: payload, or wire bytes) over its rate, paces the stream.
        tree = workload.pinned_channel[mine]
        carried = np.bincount(tree, weights=sizes, minlength=len(channel_bps))[tree]
        streaming = float((carried * 8e9 / channel_bps[tree]).max())
        return int(np.floor(streaming + tree_latency - plan.start_ns))
    if plan.collective not in RING_COLLECTIVES or plan.algorithm != Algorithm.RING:
        transfers = np.flatnonzero(workload.transfer_job == job_index)  # one contiguous range
        critical = critical_path_ns(
            workload, int(transfers[0]), int(transfers[-1]) + 1, flow_latency_ns, up, down
        )
        busiest = _busiest_host_ns(source, destination, sizes, up, down)
        return int(np.floor(max(busiest, critical - plan.start_ns)))  # a lower bound rounds down
    n = len(plan.hosts)
    steps = plan.steps_per_iteration * plan.iterations
    rate = float(min(up[plan.hosts].min(), down[plan.hosts].min()))
    rank_of_host = np.full(len(up), -1, dtype=np.int64)
    rank_of_host[plan.hosts] = np.arange(n)
    rank = rank_of_host[source]
    # A ring not held has its connections for flows: the bytes each rank sends come from the ring.
    sent_by_rank: np.ndarray = np.bincount(rank, weights=sizes, minlength=n)
    if workload.rings is not None:
        sent_by_rank = workload.rings[job_index].sent_bytes()
    hop = np.zeros(n)  # latency of the hop rank r -> r+1 (the slowest of its QPs)
    np.maximum.at(hop, rank, latency.astype(np.float64))
    # The largest sum of `steps` consecutive hop latencies around the ring.
    tiled = np.r_[0.0, np.cumsum(np.tile(hop, steps // n + 2))]
    windows = tiled[steps : steps + n] - tiled[:n]
    return int(np.ceil(sent_by_rank.max() * 8e9 / rate + windows.max()))


def job_ideals(
    workload: Workload, flow_latency_ns: np.ndarray, snapshot: FabricSnapshot, payload_fraction: float = 1.0
) -> list[int]:
    """`ideal_completion_ns` of every job of the workload, in order."""
    return [
        ideal_completion_ns(plan, workload, j, flow_latency_ns, snapshot, payload_fraction)
        for j, plan in enumerate(workload.jobs)
    ]


def expected_end_ns(spec: SimulationSpec, ideals: list[int]) -> int:
    """When a run of `spec` is expected to end: its longest job ideal after its latest job start
    (what the engines size their first sample interval by)."""
    return max(ideals, default=0) + max((job.start_ns for job in spec.jobs), default=0)
