"""The simulation spec in domain terms (its checks: validation.py, and checks.py for those that need
the fabric).

The servicer turns a `fabrictwin.v1.SimulationSpec` into a `SimulationSpec` (enum names without
their proto prefix, None where the proto said UNSPECIFIED); the runner also accepts a plain dict
of the same shape.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping, Sequence
from typing import Any

from services.simulator.faults import FaultKind, FaultSpec, RerouteModel

__all__ = [
    "Algorithm",
    "Collective",
    "EcmpHashFunction",
    "FabricStateSpec",
    "Fidelity",
    "JobSpec",
    "LinkStatePolicy",
    "LoadBalancingMode",
    "LoadBalancingSpec",
    "Placement",
    "PointToPointFlow",
    "SimulationSpec",
    "Transport",
    "job_labels",
    "wire_overhead_bytes",
]


class Fidelity(enum.StrEnum):
    FLOW = "FLOW"
    PACKET = "PACKET"
    FLOW_STEADY = "FLOW_STEADY"  # ring jobs' steady state (flow/steady.py)


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


class LinkStatePolicy(enum.StrEnum):
    """What a simulation makes of the links' stored states (simulation.proto LinkStatePolicy)."""

    AS_STORED = "AS_STORED"  # DEGRADED links lose packets at their BER (PACKET), DOWN ones routed around
    ALL_UP = "ALL_UP"  # every link UP and clean, routed as if none had failed
    REPAIRED = "REPAIRED"  # as stored, except `repaired_links`: UP and clean, routed over again


@dataclasses.dataclass(frozen=True)
class FabricStateSpec:
    """The fabric a simulation runs on, relative to the stored one (nothing stored changes)."""

    link_state: LinkStatePolicy = LinkStatePolicy.AS_STORED
    repaired_links: tuple[str, ...] = ()  # REPAIRED: link indices or display names
    routing_engine: str = ""  # route with this engine for the run ("" : the fabric's own routes)


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
    # ECN marking and DCQCN (PACKET, RoCEv2); 0 means the default (services.simulator.packet.transport).
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
    # InfiniBand credits (PACKET); 0 means the default (DEFAULT_VL_BUFFER_BYTES above).
    virtual_lanes: int = 0
    vl_buffer_bytes: int = 0
    # The fabric as stored, or a what-if of it, on the routes of `routing_version` (0: current).
    fabric_state: FabricStateSpec = FabricStateSpec()
    routing_version: int = 0
    # Filled when the simulation is accepted: how the stored link states shaped the run (model_notes).
    fabric_notes: tuple[str, ...] = ()

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


def job_labels(jobs: Sequence[JobSpec]) -> list[str]:
    """Each job's label, `job-{i}` where none was given."""
    return [job.label or f"job-{i}" for i, job in enumerate(jobs)]


def wire_overhead_bytes(spec: SimulationSpec) -> int:
    """Bytes on the wire per packet beyond its payload: `header_bytes`, else the transport's."""
    return spec.header_bytes or WIRE_OVERHEAD_BYTES[spec.transport]
