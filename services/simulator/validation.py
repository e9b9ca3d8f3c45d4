"""Every check of a spec that needs no fabric, in one pass: `validate_spec`.

checks.py runs it first (then the checks that need the fabric), before StartSimulation returns; the
servicer runs it alone before it asks the topology service for the fabric. Field names in errors
are relative to the spec (`jobs[0].size_bytes`); the servicer prefixes them with `spec.`. Each
load-balancing mode's own checks are its module's (modes/); SHARP's are sharp.py's.
"""

from __future__ import annotations

import math

from services.common.errors import InvalidArgument, quote
from services.common.resources import validate_id
from services.simulator.bounds import MAX_RATE_GBPS, check_bounds
from services.simulator.faults import validate_faults
from services.simulator.modes import MODES, mode_of
from services.simulator.sharp import validate_sharp
from services.simulator.spec import (
    DEFAULT_VL_BUFFER_BYTES,
    WIRE_OVERHEAD_BYTES,
    Algorithm,
    Collective,
    Fidelity,
    JobSpec,
    LinkStatePolicy,
    LoadBalancingSpec,
    PointToPointFlow,
    SimulationSpec,
    Transport,
    job_labels,
)

__all__ = ["MAX_PACKET_MTU_BYTES", "validate_spec"]

MAX_PACKET_MTU_BYTES = 65_536
MAX_CAPPED_FLOW_SECONDS = 1e6  # a rate-capped flow's size over its cap (int64 ps end at ~9.2e6 s)


def _validate_load_balancing(spec: SimulationSpec) -> None:
    """The mode is set, modelled at this fidelity, given only the fields it takes, and passes its own
    checks (modes/)."""
    lb = spec.load_balancing
    if lb is None or lb.mode is None:
        names = ", ".join(name.value for name in MODES)
        raise InvalidArgument("load_balancing.mode", f"is required ({names})")
    mode = mode_of(lb)
    if spec.fidelity not in mode.fidelities:
        needs = " or ".join(sorted(f.value for f in mode.fidelities))
        raise InvalidArgument("load_balancing.mode", f"{lb.mode.value} needs {needs} fidelity")
    defaults = LoadBalancingSpec(mode=None)
    for other in MODES.values():
        for name in other.own_fields:
            if name not in mode.own_fields and getattr(lb, name) != getattr(defaults, name):
                raise InvalidArgument(
                    f"load_balancing.{name}", f"applies to {other.mode.value} only, not {lb.mode.value}"
                )
    mode.validate(spec)


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


MAX_REPAIRED_LINKS = 10_000  # FabricState.repaired_links


def _validate_fabric_state(spec: SimulationSpec) -> None:
    """The fabric-state request on its own; the links are resolved against the fabric later."""
    state = spec.fabric_state
    if spec.routing_version < 0:
        raise InvalidArgument(
            "routing_version", f"must be 0 (the current routes) or a version, got {spec.routing_version}"
        )
    if state.repaired_links and state.link_state != LinkStatePolicy.REPAIRED:
        raise InvalidArgument(
            "fabric_state.repaired_links", "only with link_state LINK_STATE_POLICY_REPAIRED"
        )
    if state.link_state == LinkStatePolicy.REPAIRED and not state.repaired_links:
        raise InvalidArgument("fabric_state.repaired_links", "name at least one link to repair")
    if len(state.repaired_links) > MAX_REPAIRED_LINKS:
        raise InvalidArgument("fabric_state.repaired_links", f"at most {MAX_REPAIRED_LINKS:,} links")
    for i, link in enumerate(state.repaired_links):
        if not link or len(link) > 1024:
            raise InvalidArgument(f"fabric_state.repaired_links[{i}]", "a link index or display name")
    if state.routing_engine == "file":
        raise InvalidArgument("fabric_state.routing_engine", "a what-if cannot route by a dump (FILE)")


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
    _validate_fabric_state(spec)
    _validate_load_balancing(spec)
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
