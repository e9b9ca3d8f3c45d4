"""The simulation spec in domain terms, and the checks that need no fabric.

The servicer turns a `fabrictwin.v1.SimulationSpec` into a `SimulationSpec` (enum names without
their proto prefix, None where the proto said UNSPECIFIED); the runner also accepts a plain dict
of the same shape. Field names in errors are relative to the spec (`jobs[0].size_bytes`); the
servicer prefixes them with `spec.`.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Mapping, Sequence
from typing import Any

from services.common.errors import InvalidArgument, quote
from services.common.resources import validate_id
from services.simulator.bounds import MAX_RATE_GBPS, check_bounds
from services.simulator.faults import FaultKind, FaultSpec, RerouteModel, validate_faults

__all__ = [
    "Algorithm",
    "Collective",
    "EcmpHashFunction",
    "Fidelity",
    "JobSpec",
    "LoadBalancingMode",
    "LoadBalancingSpec",
    "Placement",
    "PointToPointFlow",
    "SimulationSpec",
    "Transport",
    "job_labels",
    "validate_spec",
]


MAX_PACKET_MTU_BYTES = 65_536
MAX_CAPPED_FLOW_SECONDS = 1e6  # a rate-capped flow's size over its cap (int64 ps end at ~9.2e6 s)


class Fidelity(enum.StrEnum):
    FLOW = "FLOW"
    PACKET = "PACKET"


class Collective(enum.StrEnum):
    ALL_REDUCE = "ALL_REDUCE"
    REDUCE_SCATTER = "REDUCE_SCATTER"
    ALL_GATHER = "ALL_GATHER"
    ALL_TO_ALL = "ALL_TO_ALL"
    BROADCAST = "BROADCAST"
    POINT_TO_POINT = "POINT_TO_POINT"


class Algorithm(enum.StrEnum):
    RING = "RING"
    DOUBLE_BINARY_TREE = "DOUBLE_BINARY_TREE"
    HALVING_DOUBLING = "HALVING_DOUBLING"
    SHARP = "SHARP"


class Placement(enum.StrEnum):
    PACKED = "PACKED"
    RAIL_ALIGNED = "RAIL_ALIGNED"
    RANDOM = "RANDOM"
    SCATTERED = "SCATTERED"


class LoadBalancingMode(enum.StrEnum):
    ECMP = "ECMP"
    ADAPTIVE = "ADAPTIVE"
    SPRAY = "SPRAY"
    FLOWLET = "FLOWLET"


class EcmpHashFunction(enum.StrEnum):
    CRC32 = "CRC32"
    MURMUR3 = "MURMUR3"


class Transport(enum.StrEnum):
    ROCEV2 = "ROCEV2"
    INFINIBAND = "INFINIBAND"


# Wire bytes per packet beyond the payload (services.simulator.packet.outcome explains them).
WIRE_OVERHEAD_BYTES = {Transport.ROCEV2: 82, Transport.INFINIBAND: 26}
DEFAULT_VL_BUFFER_BYTES = 64 * 1024  # InfiniBand: receive buffer per input port and VL (credits)
DEFAULT_BUFFER_BYTES = 1 << 20  # PACKET fidelity: buffer per switch output port


@dataclasses.dataclass(frozen=True)
class PointToPointFlow:
    """One POINT_TO_POINT flow between two hosts, by name.

    `path` (node names, source to destination) or `path_links` (link display names, in order from
    the source) pin the flow to one path in every load-balancing mode (pinning.py resolves them
    against the fabric); `udp_source_port` replaces the port derived from the QP number (0: derived);
    `rate_gbps` caps the flow's sending rate (0: line rate).
    """

    source: str
    destination: str
    size_bytes: int
    start_ns: int = 0
    path: tuple[str, ...] = ()
    path_links: tuple[str, ...] = ()
    udp_source_port: int = 0
    rate_gbps: float = 0.0

    @property
    def pinned(self) -> bool:
        return bool(self.path or self.path_links)


@dataclasses.dataclass(frozen=True)
class JobSpec:
    """A collective over a set of ranks (see `fabrictwin.v1.Job`)."""

    collective: Collective | None
    size_bytes: int = 0
    label: str = ""
    algorithm: Algorithm = Algorithm.RING
    hosts: tuple[str, ...] = ()
    rank_count: int = 0
    placement: Placement = Placement.PACKED
    start_ns: int = 0
    qps_per_connection: int = 1
    iterations: int = 1
    chunks: int = 0  # 0: the algorithm's default (collectives.pipeline_chunks)
    flows: tuple[PointToPointFlow, ...] = ()


@dataclasses.dataclass(frozen=True)
class LoadBalancingSpec:
    """How switches pick among equal-cost next hops (see `fabrictwin.v1.LoadBalancing`)."""

    mode: LoadBalancingMode | None
    ecmp_hash: EcmpHashFunction = EcmpHashFunction.MURMUR3
    same_seed_everywhere: bool = False
    seed: int = 0
    hash_destination_qp: bool = False
    flowlet_gap_ns: int = 0
    label: str = ""
    spray_random: bool = False


@dataclasses.dataclass(frozen=True)
class SimulationSpec:
    """Everything a simulation needs, in domain terms."""

    fabric: str
    jobs: tuple[JobSpec, ...]
    load_balancing: LoadBalancingSpec | None
    fidelity: Fidelity = Fidelity.FLOW
    transport: Transport = Transport.ROCEV2
    mtu_bytes: int = 4096
    buffer_bytes: int = 0  # per switch output port; 0: DEFAULT_BUFFER_BYTES (PACKET fidelity)
    header_bytes: int = 0  # wire overhead per packet; 0: the transport's (PACKET fidelity)
    switch_latency_ns: int = 0
    sample_interval_ns: int = 0
    seed: int = 0
    telemetry_source: str = ""
    time_limit_ns: int = 0
    faults: tuple[FaultSpec, ...] = ()
    window_bytes: int = 0  # Go-Back-N window (PACKET, RoCEv2); 0: no reliable transport
    retransmit_timeout_ns: int = 0  # 0: DEFAULT_RETRANSMIT_TIMEOUT_NS
    ack_every: int = 1  # a Go-Back-N receiver acknowledges every this many in-order packets
    drop_once: tuple[int, int] | None = None  # tests only: lose packet PSN of flow F once, (F, PSN)
    mark_once: tuple[int, int] | None = None  # tests only: CE-mark packet PSN of flow F once (DCQCN)
    pfc: bool = False  # priority flow control (PACKET, RoCEv2)
    pfc_xoff_bytes: int = 0  # 0: 64 KiB
    pfc_xon_bytes: int = 0  # 0: half of XOFF
    pfc_headroom_bytes: int = 0  # 0: two round trips of the slowest link at its rate, plus two packets
    # ECN marking and DCQCN (PACKET, RoCEv2); 0 means the default (services.simulator.transport).
    dcqcn: bool = False
    ecn_kmin_bytes: int = 0
    ecn_kmax_bytes: int = 0
    ecn_pmax: float = 0.0
    dcqcn_g: float = 0.0
    cnp_interval_ns: int = 0
    alpha_timer_ns: int = 0
    rate_increase_timer_ns: int = 0
    byte_counter_bytes: int = 0
    fast_recovery_stages: int = 0
    rate_ai_mbps: float = 0.0
    rate_hai_mbps: float = 0.0
    min_rate_mbps: float = 0.0
    # InfiniBand credits (PACKET); 0 means the default (services.simulator.transport).
    virtual_lanes: int = 0
    vl_buffer_bytes: int = 0

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SimulationSpec:
        """Build a spec from a plain dict of the same shape (enum values by name)."""
        values = dict(data)
        lb = values.get("load_balancing")
        if isinstance(lb, Mapping):
            lb = dict(lb)
            if lb.get("mode") is not None:
                lb["mode"] = LoadBalancingMode(lb["mode"])
            if "ecmp_hash" in lb:
                lb["ecmp_hash"] = EcmpHashFunction(lb["ecmp_hash"])
            values["load_balancing"] = LoadBalancingSpec(**lb)
        values["jobs"] = tuple(_job_from_dict(j) for j in values.get("jobs", ()))
        values["faults"] = tuple(
            f
            if isinstance(f, FaultSpec)
            else FaultSpec(
                **{
                    **f,
                    "kind": FaultKind(f["kind"]) if f.get("kind") else None,
                    "reroute": RerouteModel(f["reroute"]) if f.get("reroute") else None,
                }
            )
            for f in values.get("faults", ())
        )
        for key, kind in (("fidelity", Fidelity), ("transport", Transport)):
            if key in values:
                values[key] = kind(values[key])
        return cls(**values)


def _job_from_dict(data: JobSpec | Mapping[str, Any]) -> JobSpec:
    if isinstance(data, JobSpec):
        return data
    values = dict(data)
    for key, kind in (("collective", Collective), ("algorithm", Algorithm), ("placement", Placement)):
        if values.get(key) is not None:
            values[key] = kind(values[key])
    values["hosts"] = tuple(values.get("hosts", ()))
    values["flows"] = tuple(
        f
        if isinstance(f, PointToPointFlow)
        else PointToPointFlow(
            **{
                **f,
                "path": tuple(f.get("path", ())),
                "path_links": tuple(f.get("path_links", ())),
            }
        )
        for f in values.get("flows", ())
    )
    return JobSpec(**values)


# Algorithms each collective can run (RING, the default, also stands for "the collective's own
# pattern" where there is no choice: AllToAll's direct sends, Broadcast's ring pipeline).
_ALGORITHMS = {
    Collective.ALL_REDUCE: (Algorithm.RING, Algorithm.DOUBLE_BINARY_TREE, Algorithm.HALVING_DOUBLING),
    Collective.REDUCE_SCATTER: (Algorithm.RING,),
    Collective.ALL_GATHER: (Algorithm.RING,),
    Collective.ALL_TO_ALL: (Algorithm.RING,),
    Collective.BROADCAST: (Algorithm.RING,),
}


def _validate_algorithm(field: str, job: JobSpec, ranks: int, spec: SimulationSpec) -> None:
    if job.algorithm == Algorithm.SHARP:
        from services.simulator.sharp import validate_sharp  # sharp.py builds on this module

        validate_sharp(field, job, spec)
        return
    assert job.collective is not None
    allowed = _ALGORITHMS[job.collective]
    if job.algorithm not in allowed:
        names = ", ".join(a.value for a in allowed)
        raise InvalidArgument(
            f"{field}.algorithm", f"{job.collective.value} cannot run {job.algorithm.value}; it takes {names}"
        )
    if job.algorithm == Algorithm.HALVING_DOUBLING:
        if ranks & (ranks - 1):
            raise InvalidArgument(
                f"{field}.rank_count", f"HALVING_DOUBLING needs a power-of-two number of ranks, got {ranks}"
            )
        if job.chunks > 1:
            raise InvalidArgument(
                f"{field}.chunks",
                f"HALVING_DOUBLING sends each step whole; chunks must be 0 or 1, got {job.chunks}",
            )


def _validate_job(index: int, job: JobSpec, spec: SimulationSpec) -> None:
    field = f"jobs[{index}]"
    if job.collective is None:
        raise InvalidArgument(f"{field}.collective", "is required")
    for name in ("qps_per_connection", "iterations", "chunks", "start_ns", "rank_count"):
        value = getattr(job, name)
        if value < 0:
            raise InvalidArgument(f"{field}.{name}", f"must not be negative, got {value}")
    if job.collective == Collective.POINT_TO_POINT:
        if not job.flows:
            raise InvalidArgument(f"{field}.flows", "POINT_TO_POINT needs at least one flow")
        for j, flow in enumerate(job.flows):
            if flow.size_bytes <= 0:
                raise InvalidArgument(f"{field}.flows[{j}].size_bytes", f"must be > 0, got {flow.size_bytes}")
            if flow.start_ns < 0:
                raise InvalidArgument(f"{field}.flows[{j}].start_ns", "must not be negative")
            if flow.source == flow.destination:
                raise InvalidArgument(
                    f"{field}.flows[{j}]", f"source and destination are both {flow.source!r}"
                )
            _validate_flow_options(f"{field}.flows[{j}]", flow, job)
        return
    if job.flows:
        raise InvalidArgument(f"{field}.flows", "only POINT_TO_POINT jobs take flows")
    if job.size_bytes <= 0:
        raise InvalidArgument(f"{field}.size_bytes", f"must be > 0, got {job.size_bytes}")
    ranks = len(job.hosts) or job.rank_count
    if job.hosts and job.rank_count and job.rank_count != len(job.hosts):
        raise InvalidArgument(
            f"{field}.rank_count", f"is {job.rank_count} but {len(job.hosts)} hosts are listed"
        )
    if ranks < 2:
        raise InvalidArgument(f"{field}.rank_count", f"a collective needs at least 2 ranks, got {ranks}")
    if len(set(job.hosts)) != len(job.hosts):
        raise InvalidArgument(f"{field}.hosts", "lists a host more than once")
    _validate_algorithm(field, job, ranks, spec)


def _validate_flow_options(field: str, flow: PointToPointFlow, job: JobSpec) -> None:
    """A flow's pinned path, source port and rate cap, as far as they can be judged without the fabric
    (pinning.py resolves the path against it)."""
    if flow.path and flow.path_links:
        raise InvalidArgument(
            f"{field}.path_links", "path and path_links are both set; pin the flow with one of them"
        )
    if flow.path and len(flow.path) < 2:
        raise InvalidArgument(
            f"{field}.path", f"needs at least the source and the destination, got {len(flow.path)} node(s)"
        )
    for j, name in enumerate(flow.path or flow.path_links):
        if not name:
            raise InvalidArgument(f"{field}.{'path' if flow.path else 'path_links'}[{j}]", "is empty")
    if not 0 <= flow.udp_source_port <= 65535:
        raise InvalidArgument(
            f"{field}.udp_source_port",
            f"must be in 1..65535 (0: derived from the QP number), got {flow.udp_source_port}",
        )
    if flow.udp_source_port and job.qps_per_connection > 1:
        raise InvalidArgument(
            f"{field}.udp_source_port",
            f"the job has qps_per_connection={job.qps_per_connection}, and each QP of a flow has its own "
            "source port; set udp_source_port only with one QP per connection",
        )
    if not math.isfinite(flow.rate_gbps) or not 0 <= flow.rate_gbps <= MAX_RATE_GBPS:
        raise InvalidArgument(
            f"{field}.rate_gbps",
            f"must be a finite number of Gb/s >= 0 and at most {MAX_RATE_GBPS:g} (0: line rate), "
            f"got {flow.rate_gbps}",
        )
    if flow.rate_gbps and flow.size_bytes * 8 / (flow.rate_gbps * 1e9) > MAX_CAPPED_FLOW_SECONDS:
        raise InvalidArgument(
            f"{field}.rate_gbps",
            f"{flow.size_bytes} bytes at {flow.rate_gbps} Gb/s take over {MAX_CAPPED_FLOW_SECONDS:.0e} s of "
            "simulated time, more than a run can count (in ps)",
        )


MAX_LABEL_CHARS = 128  # a label names a job or a mode in results and tables


def _check_label(label: str, field: str) -> None:
    if len(label) > MAX_LABEL_CHARS:
        raise InvalidArgument(
            field, f"at most {MAX_LABEL_CHARS} characters, got {len(label):,}: {quote(label)}"
        )


def validate_spec(spec: SimulationSpec) -> None:
    """Checks that need no fabric; raises InvalidArgument naming the field (relative to the spec).

    Every number is checked against its range first (bounds.py), so no later check, and no engine,
    meets a NaN or a value its arithmetic cannot hold.
    """
    check_bounds(spec)
    _check_label(spec.load_balancing.label if spec.load_balancing is not None else "", "load_balancing.label")
    for i, job in enumerate(spec.jobs):
        _check_label(job.label, f"jobs[{i}].label")
    if spec.telemetry_source:  # the id of the telemetry source the series go to (created if missing)
        validate_id(spec.telemetry_source, "telemetry_source")
    if not spec.fabric:
        raise InvalidArgument("fabric", "is required (fabrics/{fabric})")
    if spec.load_balancing is None or spec.load_balancing.mode is None:
        raise InvalidArgument("load_balancing.mode", "is required (ECMP, ADAPTIVE, SPRAY or FLOWLET)")
    if spec.load_balancing.mode == LoadBalancingMode.FLOWLET and spec.fidelity != Fidelity.PACKET:
        raise InvalidArgument("load_balancing.mode", "FLOWLET needs PACKET fidelity")
    lb = spec.load_balancing
    if lb.mode == LoadBalancingMode.FLOWLET and lb.flowlet_gap_ns <= 0:
        raise InvalidArgument(
            "load_balancing.flowlet_gap_ns",
            f"FLOWLET needs a positive idle gap (e.g. 2000 ns), got {lb.flowlet_gap_ns}; "
            "a zero gap would be per-packet adaptive routing (use ADAPTIVE)",
        )
    if lb.mode != LoadBalancingMode.FLOWLET and lb.flowlet_gap_ns:
        raise InvalidArgument(
            "load_balancing.flowlet_gap_ns", f"applies to FLOWLET only, not {lb.mode.value}"
        )
    if lb.spray_random and lb.mode != LoadBalancingMode.SPRAY:
        raise InvalidArgument("load_balancing.spray_random", f"applies to SPRAY only, not {lb.mode.value}")
    if spec.mtu_bytes <= 0:
        raise InvalidArgument("mtu_bytes", f"must be positive, got {spec.mtu_bytes}")
    if spec.fidelity == Fidelity.PACKET and spec.mtu_bytes > MAX_PACKET_MTU_BYTES:
        raise InvalidArgument(
            "mtu_bytes",
            f"{spec.mtu_bytes} is above {MAX_PACKET_MTU_BYTES}, the largest packet the packet engine carries "
            "(InfiniBand's MTU is at most 4096, Ethernet jumbo frames about 9000)",
        )
    if spec.fidelity == Fidelity.PACKET and spec.buffer_bytes and spec.buffer_bytes < spec.mtu_bytes:
        raise InvalidArgument(
            "buffer_bytes", f"{spec.buffer_bytes} cannot hold one packet of mtu_bytes={spec.mtu_bytes}"
        )
    if not spec.jobs:
        raise InvalidArgument("jobs", "at least one job is required")
    if spec.faults and spec.fidelity != Fidelity.PACKET:
        raise InvalidArgument("faults", "faults need PACKET fidelity")
    validate_faults(spec.faults, spec.time_limit_ns)
    if spec.window_bytes < 0 or spec.retransmit_timeout_ns < 0 or spec.ack_every < 0:
        raise InvalidArgument(
            "roce", "window_bytes, retransmit_timeout_ns and ack_every must not be negative"
        )
    if spec.pfc and spec.fidelity != Fidelity.PACKET:
        raise InvalidArgument("roce.pfc", "PFC needs PACKET fidelity")
    for name in ("pfc_xoff_bytes", "pfc_xon_bytes", "pfc_headroom_bytes"):
        if getattr(spec, name) < 0:
            raise InvalidArgument(f"roce.{name}", "must not be negative")
    if spec.pfc_xon_bytes and spec.pfc_xoff_bytes and spec.pfc_xon_bytes > spec.pfc_xoff_bytes:
        raise InvalidArgument(
            "roce.pfc_xon_bytes", f"XON {spec.pfc_xon_bytes} is above XOFF {spec.pfc_xoff_bytes}"
        )
    if spec.window_bytes and spec.fidelity != Fidelity.PACKET:
        raise InvalidArgument("roce.window_bytes", "Go-Back-N needs PACKET fidelity")
    _validate_dcqcn(spec)
    _validate_infiniband(spec)
    for name in (
        "switch_latency_ns",
        "sample_interval_ns",
        "time_limit_ns",
        "buffer_bytes",
        "header_bytes",
        "seed",
    ):
        if getattr(spec, name) < 0:
            raise InvalidArgument(name, f"must not be negative, got {getattr(spec, name)}")
    for i, job in enumerate(spec.jobs):
        _validate_job(i, job, spec)
    labels = job_labels(spec.jobs)
    if len(set(labels)) != len(labels):
        raise InvalidArgument("jobs", "job labels must be unique")


_DCQCN_FIELDS = (
    "ecn_kmin_bytes",
    "ecn_kmax_bytes",
    "ecn_pmax",
    "dcqcn_g",
    "cnp_interval_ns",
    "alpha_timer_ns",
    "rate_increase_timer_ns",
    "byte_counter_bytes",
    "fast_recovery_stages",
    "rate_ai_mbps",
    "rate_hai_mbps",
    "min_rate_mbps",
)


def _validate_dcqcn(spec: SimulationSpec) -> None:
    set_fields = [name for name in _DCQCN_FIELDS if getattr(spec, name)]
    if set_fields and not spec.dcqcn:
        raise InvalidArgument(f"roce.{set_fields[0]}", "applies only with roce.dcqcn on")
    if not spec.dcqcn:
        return
    if spec.fidelity != Fidelity.PACKET:
        raise InvalidArgument("roce.dcqcn", "ECN and DCQCN need PACKET fidelity")
    if spec.transport != Transport.ROCEV2:
        raise InvalidArgument("roce.dcqcn", f"DCQCN is RoCEv2 congestion control, not {spec.transport.value}")
    for name in _DCQCN_FIELDS:
        if getattr(spec, name) < 0:
            raise InvalidArgument(f"roce.{name}", f"must not be negative, got {getattr(spec, name)}")
    for name in ("ecn_pmax", "dcqcn_g"):
        if getattr(spec, name) > 1:
            value = getattr(spec, name)
            raise InvalidArgument(f"roce.{name}", f"is a probability or gain in [0, 1], got {value}")
    if spec.ecn_kmin_bytes and spec.ecn_kmax_bytes and spec.ecn_kmin_bytes >= spec.ecn_kmax_bytes:
        raise InvalidArgument(
            "roce.ecn_kmin_bytes", f"Kmin {spec.ecn_kmin_bytes} must be below Kmax {spec.ecn_kmax_bytes}"
        )


def _validate_infiniband(spec: SimulationSpec) -> None:
    if spec.virtual_lanes < 0 or spec.vl_buffer_bytes < 0:
        raise InvalidArgument("infiniband", "virtual_lanes and vl_buffer_bytes must not be negative")
    if spec.transport != Transport.INFINIBAND:
        if spec.virtual_lanes or spec.vl_buffer_bytes:
            raise InvalidArgument(
                "infiniband", f"applies to INFINIBAND transport, not {spec.transport.value}"
            )
        return
    if spec.pfc:
        raise InvalidArgument("roce.pfc", "InfiniBand is lossless by credits; PFC is a RoCEv2 setting")
    if spec.virtual_lanes > 1:
        raise InvalidArgument(
            "infiniband.virtual_lanes",
            f"one data VL is modelled (all RDMA traffic on VL0), got {spec.virtual_lanes}",
        )
    packet = spec.mtu_bytes + (spec.header_bytes or WIRE_OVERHEAD_BYTES[Transport.INFINIBAND])
    vl_buffer = spec.vl_buffer_bytes or DEFAULT_VL_BUFFER_BYTES
    if spec.fidelity == Fidelity.PACKET and vl_buffer < packet:
        raise InvalidArgument(
            "infiniband.vl_buffer_bytes",
            f"{vl_buffer} bytes of credit{'' if spec.vl_buffer_bytes else ' (the default)'} cannot hold one "
            f"packet of {packet} bytes",
        )


def job_labels(jobs: Sequence[JobSpec]) -> list[str]:
    """Each job's label, `job-{i}` where none was given."""
    return [job.label or f"job-{i}" for i, job in enumerate(jobs)]
