"""What a simulation achieved, assembled from an engine's raw output (shared by every fidelity).

- Per job: completion time (last byte delivered minus job start), nccl-tests algbw = S / t and
  busbw = algbw x factor (AllReduce 2(n-1)/n whatever the algorithm, ReduceScatter, AllGather and
  AllToAll (n-1)/n, Broadcast and point-to-point 1), in Gb/s; with several iterations t is the
  mean time of one iteration.
- Ideal completion: ideal.py computes it, the engine passes it in. busbw for SHARP is reported as
  nccl-tests does (AllReduce factor), so it can exceed the link rate.
- Per channel that carried traffic: bytes, mean utilisation over the makespan, peak utilisation
  in any sample interval, number of flows crossing it, tier.
- Skew of the leaf->spine uplinks ("tier2": channels from a tier-1 to a tier-2 switch, of the
  leaves that host at least one rank): max/mean, coefficient of variation, share above 80% mean
  utilisation (hot), share that carried no byte at all (idle) and share below 20% (cold, the idle
  ones included).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from services.common.snapshot import FabricSnapshot
from services.simulator.series import ChannelSeries
from services.simulator.spec import Collective
from services.simulator.workload import JobPlan, Workload, gather_rows

__all__ = [
    "FLOW_RESULTS_LIMIT",
    "ChannelTotals",
    "FlowOutcomes",
    "JobOutcome",
    "PacketStats",
    "SimulationOutcome",
    "UtilisationSkew",
    "bus_factor",
    "channel_totals",
    "job_last_finish_ns",
    "job_outcome",
    "uplink_skew",
]

HOT_UTILISATION, COLD_UTILISATION = 0.8, 0.2


@dataclasses.dataclass
class JobOutcome:
    """What one job achieved."""

    label: str
    collective: str
    completion_ns: int  # 0 when the job did not finish (time limit)
    algbw_gbps: float
    busbw_gbps: float
    ideal_completion_ns: int
    ranks: int
    flows: int
    hosts: list[str]
    completed: bool
    # PACKET fidelity: JobResult fields by name (retransmitted_packets, max_recovery_ns, ...).
    counters: dict[str, int] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class UtilisationSkew:
    """Spread of mean utilisation over a group of channels."""

    group: str
    links: int
    max_over_mean: float
    coefficient_of_variation: float
    share_hot: float  # above HOT_UTILISATION
    share_idle: float  # carried nothing at all
    share_cold: float = 0.0  # below COLD_UTILISATION (the idle ones included)


@dataclasses.dataclass
class ChannelTotals:
    """Totals of each channel that carried traffic, as parallel arrays."""

    channels: np.ndarray  # int32 [C], 2*link + direction
    display_names: list[str]
    bytes: np.ndarray  # int64 [C]
    mean_utilisation: np.ndarray  # float64 [C], over the makespan
    peak_utilisation: np.ndarray  # float64 [C], over sample intervals
    tier: np.ndarray  # int32 [C]
    flows: np.ndarray  # int32 [C], flows crossing it
    drops: np.ndarray | None = None  # int64 [C], packets (PACKET fidelity)
    peak_queue_bytes: np.ndarray | None = None  # int64 [C] (PACKET fidelity)
    rcv_errors: np.ndarray | None = None  # int64 [C], packets lost to bit errors (PACKET fidelity)
    pause_frames: np.ndarray | None = None  # int64 [C], PFC PAUSEs received by its transmitter
    pause_ns: np.ndarray | None = None  # int64 [C], time its transmitter was paused
    # PACKET fidelity: more per-port counters, by their LinkTotal field name (ecn_marked_packets, ...).
    counters: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class FlowOutcomes:
    """Per-flow results as arrays; `path_links` is the CSR of links per route (empty when split)."""

    job: np.ndarray  # int32 [F], index into SimulationOutcome.jobs
    source: np.ndarray  # int64 [F], host index
    destination: np.ndarray  # int64 [F]
    size_bytes: np.ndarray  # int64 [F]
    start_ns: np.ndarray  # int64 [F], -1 if it never started
    finish_ns: np.ndarray  # int64 [F], -1 if it never finished
    udp_source_port: np.ndarray  # int32 [F]
    route: np.ndarray  # int64 [F], row of path_offsets
    path_offsets: np.ndarray  # int64 [R+1]
    path_links: np.ndarray  # int32 [P]
    host_names: list[str]
    # PACKET fidelity: per-flow counters by their FlowResult field name (retransmitted_packets, ...).
    counters: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    count: int = -1  # flows of the run (these are its first ones when fewer); -1: as many as these

    def __post_init__(self) -> None:
        if self.count < 0:
            self.count = len(self.job)

    def first(self, limit: int) -> FlowOutcomes:
        """The first `limit` flows (each with its route's links), still counting all of them."""
        if len(self.job) <= limit:
            return self
        kept = slice(0, limit)
        routes, route = np.unique(self.route[kept], return_inverse=True)
        path_offsets, path_links = gather_rows(self.path_offsets, self.path_links, routes)
        return FlowOutcomes(
            job=self.job[kept].copy(),
            source=self.source[kept].copy(),
            destination=self.destination[kept].copy(),
            size_bytes=self.size_bytes[kept].copy(),
            start_ns=self.start_ns[kept].copy(),
            finish_ns=self.finish_ns[kept].copy(),
            udp_source_port=self.udp_source_port[kept].copy(),
            route=route.reshape(-1).astype(np.int64),
            path_offsets=path_offsets,
            path_links=path_links.astype(np.int32),
            host_names=self.host_names,
            counters={name: values[kept].copy() for name, values in self.counters.items()},
            count=self.count,
        )


# The per-flow results a simulation's result carries at most (GetSimulation): a worker sends back
# only these (and the count of all), not every flow of a large run.
FLOW_RESULTS_LIMIT = 10_000


@dataclasses.dataclass
class SimulationOutcome:
    """The picklable result of `run_simulation`, converted to protos by the servicer."""

    fabric: str
    routing_version: int
    jobs: list[JobOutcome]
    makespan_ns: int
    channels: ChannelTotals
    series: ChannelSeries
    flows: FlowOutcomes
    uplink_skew: UtilisationSkew
    events: int
    wall_seconds: float
    sample_interval_ns: int
    model_notes: list[str]
    packets: PacketStats | None = None  # PACKET fidelity only
    # Where the wall time went, in seconds by phase (workload, routes, engine setup, event loop,
    # results; "engine" where an engine does not split its own), in the order they ran.
    phase_seconds: dict[str, float] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class PacketStats:
    """What only a packet-level run can tell."""

    injected: int
    delivered: int
    delivered_bytes: int  # payload
    dropped: int
    retransmitted: int
    peak_in_flight: int
    in_flight: int  # at the end: injected == delivered + dropped + corrupted + in_flight
    out_of_order: int
    reorder_peak_bytes: int
    reorder_overflow: int
    reorder_histogram: list[int]  # deliveries that saw k packets held in the reorder buffer
    naks: int = 0
    timeouts: int = 0
    corrupted: int = 0  # lost to bit errors
    discarded: int = 0  # delivered to a Go-Back-N receiver that did not want them
    # More totals by their SimulationResult field name (cnp_sent, ecn_marked_packets, ...).
    counters: dict[str, int] = dataclasses.field(default_factory=dict)


def bus_factor(collective: Collective, ranks: int) -> float:
    """nccl-tests busbw / algbw for a collective over `ranks` ranks (whatever the algorithm).

    >>> bus_factor(Collective.ALL_REDUCE, 8), bus_factor(Collective.ALL_TO_ALL, 8)
    (1.75, 0.875)
    """
    if collective == Collective.ALL_REDUCE:
        return 2 * (ranks - 1) / ranks
    if collective in (Collective.REDUCE_SCATTER, Collective.ALL_GATHER, Collective.ALL_TO_ALL):
        return (ranks - 1) / ranks
    return 1.0


def job_last_finish_ns(workload: Workload, job_index: int, finish_ns: np.ndarray) -> int:
    """When the job's last flow finished (`finish_ns`: per flow of the workload), -1 if one never did."""
    finish = finish_ns[workload.flow_job == job_index]
    if not len(finish) or (finish < 0).any():
        return -1
    return int(finish.max())


def job_outcome(plan: JobPlan, last_finish_ns: int, ideal_ns: int, host_names: list[str]) -> JobOutcome:
    """Completion, algbw and busbw of one job from when its last flow finished (-1: one never did)."""
    completed = last_finish_ns >= 0
    completion = int(last_finish_ns - plan.start_ns) if completed else 0
    per_iteration = completion / plan.iterations
    algbw = plan.size_bytes * 8 / per_iteration if completion > 0 else 0.0
    ranks = len(plan.hosts)
    return JobOutcome(
        label=plan.label,
        collective=plan.collective.value,
        completion_ns=completion,
        algbw_gbps=algbw,
        busbw_gbps=algbw * bus_factor(plan.collective, ranks),
        ideal_completion_ns=ideal_ns,
        ranks=ranks,
        flows=plan.flow_count,
        hosts=[host_names[int(h)] for h in plan.hosts],
        completed=completed,
    )


def channel_totals(
    snapshot: FabricSnapshot, series: ChannelSeries, flows_crossing: np.ndarray, makespan_ns: int
) -> ChannelTotals:
    """Totals of the channels in `series` (those that carried traffic)."""
    channels = series.channels.astype(np.int64)
    rate = snapshot.channel_rate_bps()[channels].astype(np.float64)
    total = series.total_bytes
    capacity_bits = rate * makespan_ns / 1e9
    mean = np.divide(total * 8.0, capacity_bits, out=np.zeros(len(channels)), where=capacity_bits > 0)
    tiers = snapshot.node_tier.astype(np.int32)
    tier = np.maximum(tiers[snapshot.channel_source()[channels]], tiers[snapshot.channel_target()[channels]])
    return ChannelTotals(
        channels=series.channels,
        display_names=[snapshot.channel_name(int(c)) for c in channels],
        bytes=total,
        mean_utilisation=mean,
        peak_utilisation=series.utilisation.max(axis=1, initial=0.0),
        tier=tier,
        flows=flows_crossing[channels].astype(np.int32),
    )


def uplink_skew(
    snapshot: FabricSnapshot, totals: ChannelTotals, rank_hosts: np.ndarray, makespan_ns: int
) -> UtilisationSkew:
    """Skew of the leaf->spine channels leaving the leaves that host ranks (idle ones count as 0)."""
    source, target = snapshot.channel_source(), snapshot.channel_target()
    tier = snapshot.node_tier
    host_node_set = snapshot.host_nodes[np.asarray(rank_hosts, dtype=np.int64)]
    leaves = np.unique(target[np.isin(source, host_node_set)])
    group = np.flatnonzero((tier[source] == 1) & (tier[target] == 2) & np.isin(source, leaves))
    if not len(group):
        return UtilisationSkew("tier2", 0, 0.0, 0.0, 0.0, 0.0, 0.0)
    utilisation = np.zeros(snapshot.num_channels)
    utilisation[totals.channels] = totals.mean_utilisation
    carried = np.zeros(snapshot.num_channels, dtype=np.int64)
    carried[totals.channels] = totals.bytes
    values = utilisation[group]
    mean = float(values.mean())
    return UtilisationSkew(
        group="tier2",
        links=len(group),
        max_over_mean=float(values.max() / mean) if mean > 0 else 0.0,
        coefficient_of_variation=float(values.std() / mean) if mean > 0 else 0.0,
        share_hot=float((values > HOT_UTILISATION).mean()),
        share_idle=float((carried[group] == 0).mean()),
        share_cold=float((values < COLD_UTILISATION).mean()),
    )
