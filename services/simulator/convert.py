"""fabrictwin.v1 simulation messages <-> the simulator's domain objects (no logic beyond mapping).

Enums map by name without their proto prefix (`LOAD_BALANCING_MODE_ECMP` -> `ECMP`); UNSPECIFIED
becomes None or the documented default. Field names in errors are those of the request.
"""

from __future__ import annotations

from typing import Any

from fabrictwin.v1 import common_pb2, simulation_pb2, topology_pb2

from services.common.errors import InvalidArgument, status_code_number
from services.simulator import spec as domain
from services.simulator.faults import FaultKind, FaultSpec, RerouteModel
from services.simulator.registry import SimulationRecord
from services.simulator.results import FLOW_RESULTS_LIMIT, SimulationOutcome
from services.simulator.series import ChannelSeries

__all__ = ["FLOW_RESULTS_LIMIT", "record_to_proto", "result_to_proto", "series_to_protos", "spec_from_proto"]


def _enum(kind: type, proto_enum: Any, value: int, prefix: str, field: str, default: Any = None) -> Any:
    try:
        name = proto_enum.Name(value)
    except ValueError as exc:
        raise InvalidArgument(field, f"unknown value {value}") from exc
    if name.endswith("_UNSPECIFIED"):
        return default
    return kind(name.removeprefix(prefix))


def _job_from_proto(index: int, job: simulation_pb2.Job) -> domain.JobSpec:
    field = f"spec.jobs[{index}]"
    return domain.JobSpec(
        collective=_enum(
            domain.Collective, simulation_pb2.Collective, job.collective, "COLLECTIVE_", f"{field}.collective"
        ),
        size_bytes=job.size_bytes,
        label=job.label,
        algorithm=_enum(
            domain.Algorithm,
            simulation_pb2.CollectiveAlgorithm,
            job.algorithm,
            "COLLECTIVE_ALGORITHM_",
            f"{field}.algorithm",
            domain.Algorithm.RING,
        ),
        hosts=tuple(job.hosts),
        rank_count=job.rank_count,
        placement=_enum(
            domain.Placement,
            simulation_pb2.PlacementPolicy,
            job.placement,
            "PLACEMENT_POLICY_",
            f"{field}.placement",
            domain.Placement.PACKED,
        ),
        start_ns=job.start_ns,
        qps_per_connection=job.qps_per_connection or 1,
        iterations=job.iterations or 1,
        chunks=job.chunks,
        flows=tuple(
            domain.PointToPointFlow(
                f.source,
                f.destination,
                f.size_bytes,
                f.start_ns,
                path=tuple(f.path),
                path_links=tuple(f.path_links),
                udp_source_port=f.udp_source_port,
                rate_gbps=f.rate_gbps,
            )
            for f in job.flows
        ),
    )


def _engine_name(value: int) -> str:
    """`ftree` for ROUTING_ENGINE_FTREE; INVALID_ARGUMENT naming the field for an unknown number."""
    if value not in topology_pb2.RoutingEngine.values():
        raise InvalidArgument("spec.fabric_state.routing_engine", f"unknown routing engine {value}")
    return topology_pb2.RoutingEngine.Name(value).removeprefix("ROUTING_ENGINE_").lower()  # type: ignore[arg-type]


def spec_from_proto(message: simulation_pb2.SimulationSpec) -> domain.SimulationSpec:
    """The domain spec of a request's `spec` (no validation beyond enum values).

    Transport settings the engines do not model yet are refused, not ignored.
    """
    roce = message.roce
    load_balancing = None
    if message.HasField("load_balancing"):
        lb = message.load_balancing
        field = "spec.load_balancing"
        load_balancing = domain.LoadBalancingSpec(
            mode=_enum(
                domain.LoadBalancingMode,
                common_pb2.LoadBalancingMode,
                lb.mode,
                "LOAD_BALANCING_MODE_",
                f"{field}.mode",
            ),
            ecmp_hash=_enum(
                domain.EcmpHashFunction,
                common_pb2.EcmpHash,
                lb.ecmp_hash,
                "ECMP_HASH_",
                f"{field}.ecmp_hash",
                domain.EcmpHashFunction.MURMUR3,
            ),
            same_seed_everywhere=lb.same_seed_everywhere,
            seed=lb.seed,
            hash_destination_qp=lb.hash_destination_qp,
            flowlet_gap_ns=lb.flowlet_gap_ns,
            label=lb.label,
            spray_random=lb.spray_random,
        )
    state = message.fabric_state
    fabric_state = domain.FabricStateSpec(
        link_state=_enum(
            domain.LinkStatePolicy,
            simulation_pb2.LinkStatePolicy,
            state.link_state,
            "LINK_STATE_POLICY_",
            "spec.fabric_state.link_state",
            domain.LinkStatePolicy.AS_STORED,
        ),
        repaired_links=tuple(state.repaired_links),
        routing_engine=(
            ""
            if state.routing_engine == topology_pb2.ROUTING_ENGINE_UNSPECIFIED
            else _engine_name(state.routing_engine)
        ),
    )
    return domain.SimulationSpec(
        fabric=message.fabric,
        fabric_state=fabric_state,
        routing_version=message.routing_version,
        jobs=tuple(_job_from_proto(i, job) for i, job in enumerate(message.jobs)),
        load_balancing=load_balancing,
        fidelity=_enum(
            domain.Fidelity,
            simulation_pb2.Fidelity,
            message.fidelity,
            "FIDELITY_",
            "spec.fidelity",
            domain.Fidelity.FLOW,
        ),
        transport=_enum(
            domain.Transport,
            simulation_pb2.Transport,
            message.transport,
            "TRANSPORT_",
            "spec.transport",
            domain.Transport.ROCEV2,
        ),
        mtu_bytes=message.mtu_bytes or 4096,
        buffer_bytes=message.buffer_bytes,
        header_bytes=message.header_bytes,
        switch_latency_ns=message.switch_latency_ns,
        sample_interval_ns=message.sample_interval_ns,
        seed=message.seed,
        telemetry_source=message.telemetry_source,
        time_limit_ns=message.time_limit_ns,
        faults=tuple(_fault_from_proto(i, f) for i, f in enumerate(message.faults)),
        window_bytes=roce.window_bytes,
        pfc=roce.pfc,
        pfc_xoff_bytes=roce.pfc_xoff_bytes,
        pfc_xon_bytes=roce.pfc_xon_bytes,
        pfc_headroom_bytes=roce.pfc_headroom_bytes,
        retransmit_timeout_ns=roce.retransmit_timeout_ns,
        dcqcn=roce.dcqcn,
        ecn_kmin_bytes=roce.ecn_kmin_bytes,
        ecn_kmax_bytes=roce.ecn_kmax_bytes,
        ecn_pmax=roce.ecn_pmax,
        dcqcn_g=roce.dcqcn_g,
        cnp_interval_ns=roce.cnp_interval_ns,
        alpha_timer_ns=roce.alpha_timer_ns,
        rate_increase_timer_ns=roce.rate_increase_timer_ns,
        byte_counter_bytes=roce.byte_counter_bytes,
        fast_recovery_stages=roce.fast_recovery_stages,
        rate_ai_mbps=roce.rate_ai_mbps,
        rate_hai_mbps=roce.rate_hai_mbps,
        min_rate_mbps=roce.min_rate_mbps,
        virtual_lanes=message.infiniband.virtual_lanes,
        vl_buffer_bytes=message.infiniband.vl_buffer_bytes,
    )


def _fault_from_proto(index: int, fault: simulation_pb2.Fault) -> FaultSpec:
    kind = _enum(FaultKind, simulation_pb2.FaultKind, fault.kind, "FAULT_KIND_", f"spec.faults[{index}].kind")
    return FaultSpec(
        link=fault.link,
        kind=kind,
        start_ns=fault.start_ns,
        end_ns=fault.end_ns,
        bit_error_rate=fault.bit_error_rate,
        good_loss=fault.good_loss,
        bad_loss=fault.bad_loss,
        p_good_to_bad=fault.p_good_to_bad,
        p_bad_to_good=fault.p_bad_to_good,
        reroute=_enum(
            RerouteModel,
            simulation_pb2.RerouteModel,
            fault.reroute,
            "REROUTE_MODEL_",
            f"spec.faults[{index}].reroute",
        ),
        reroute_delay_ns=fault.reroute_delay_ns,
    )


def _flow_results(outcome: SimulationOutcome, limit: int) -> list[simulation_pb2.FlowResult]:
    flows = outcome.flows
    labels = [job.label for job in outcome.jobs]
    names = flows.host_names
    results = []
    for f in range(min(limit, len(flows.job))):
        route = int(flows.route[f])
        links = flows.path_links[flows.path_offsets[route] : flows.path_offsets[route + 1]]
        results.append(
            simulation_pb2.FlowResult(
                job=labels[int(flows.job[f])],
                source=names[int(flows.source[f])],
                destination=names[int(flows.destination[f])],
                size_bytes=int(flows.size_bytes[f]),
                start_ns=int(flows.start_ns[f]),
                finish_ns=int(flows.finish_ns[f]),
                udp_source_port=int(flows.udp_source_port[f]),
                links=links.tolist(),
                **{name: int(values[f]) for name, values in flows.counters.items()},
            )
        )
    return results


def result_to_proto(outcome: SimulationOutcome, with_flows: bool) -> simulation_pb2.SimulationResult:
    """The result summary; per-flow results (at most FLOW_RESULTS_LIMIT) only if `with_flows`."""
    channels = outcome.channels
    skew = outcome.uplink_skew
    notes = list(outcome.model_notes)
    shown = min(FLOW_RESULTS_LIMIT, len(outcome.flows.job))
    if with_flows and outcome.flows.count > shown:
        notes.append(f"Per-flow results truncated to the first {shown} of {outcome.flows.count} flows.")
    return simulation_pb2.SimulationResult(
        jobs=[
            simulation_pb2.JobResult(
                label=job.label,
                completion_ns=job.completion_ns,
                algbw_gbps=job.algbw_gbps,
                busbw_gbps=job.busbw_gbps,
                ideal_completion_ns=job.ideal_completion_ns,
                ranks=job.ranks,
                flows=job.flows,
                hosts=job.hosts,
                **job.counters,
            )
            for job in outcome.jobs
        ],
        makespan_ns=outcome.makespan_ns,
        links=[
            simulation_pb2.LinkTotal(
                link=int(c) // 2,
                direction=int(c) % 2,
                display_name=channels.display_names[i],
                bytes=int(channels.bytes[i]),
                mean_utilisation=float(channels.mean_utilisation[i]),
                peak_utilisation=float(channels.peak_utilisation[i]),
                tier=int(channels.tier[i]),
                flows=int(channels.flows[i]),
                drops=int(channels.drops[i]) if channels.drops is not None else 0,
                peak_queue_bytes=int(channels.peak_queue_bytes[i])
                if channels.peak_queue_bytes is not None
                else 0,
                rcv_errors=int(channels.rcv_errors[i]) if channels.rcv_errors is not None else 0,
                pause_frames=int(channels.pause_frames[i]) if channels.pause_frames is not None else 0,
                pause_ns=int(channels.pause_ns[i]) if channels.pause_ns is not None else 0,
                **{name: int(values[i]) for name, values in channels.counters.items()},
            )
            for i, c in enumerate(channels.channels)
        ],
        flows=_flow_results(outcome, FLOW_RESULTS_LIMIT) if with_flows else [],
        uplink_skew=simulation_pb2.UtilisationSkew(
            group=skew.group,
            links=skew.links,
            max_over_mean=skew.max_over_mean,
            coefficient_of_variation=skew.coefficient_of_variation,
            share_hot=skew.share_hot,
            share_idle=skew.share_idle,
            share_cold=skew.share_cold,
        ),
        events=outcome.events,
        wall_seconds=outcome.wall_seconds,
        sample_interval_ns=outcome.sample_interval_ns,
        model_notes=notes,
        drops=outcome.packets.dropped if outcome.packets else 0,
        retransmitted_packets=outcome.packets.retransmitted if outcome.packets else 0,
        reorder_buffer_peak_bytes=outcome.packets.reorder_peak_bytes if outcome.packets else 0,
        **_packet_fields(outcome),
    )


def _packet_fields(outcome: SimulationOutcome) -> dict[str, Any]:
    stats = outcome.packets
    if stats is None:
        return {}
    return {
        "packets_injected": stats.injected,
        "packets_delivered": stats.delivered,
        "packets_in_flight": stats.in_flight,
        "out_of_order_packets": stats.out_of_order,
        "reorder_buffer_histogram": stats.reorder_histogram,
        "peak_packets_in_flight": stats.peak_in_flight,
        "naks": stats.naks,
        "retransmit_timeouts": stats.timeouts,
        "corrupted_packets": stats.corrupted,
        "discarded_packets": stats.discarded,
        **stats.counters,
    }


_STATES = {
    "PENDING": common_pb2.JOB_STATE_PENDING,
    "RUNNING": common_pb2.JOB_STATE_RUNNING,
    "SUCCEEDED": common_pb2.JOB_STATE_SUCCEEDED,
    "FAILED": common_pb2.JOB_STATE_FAILED,
    "CANCELLED": common_pb2.JOB_STATE_CANCELLED,
}


def record_to_proto(record: SimulationRecord, with_flows: bool = False) -> simulation_pb2.Simulation:
    """A Simulation message; the result (when SUCCEEDED) with per-flow results only if asked."""
    message = simulation_pb2.Simulation(
        name=record.name,
        state=_STATES[record.state.value],
        progress=common_pb2.Progress(fraction=record.fraction, stage=record.stage),
        routing_version=record.routing_version,
    )
    if record.request_spec is not None:
        message.spec.CopyFrom(record.request_spec)
    message.create_time.FromDatetime(record.create_time)
    if record.end_time is not None:
        message.end_time.FromDatetime(record.end_time)
    if record.error_code:
        message.error.CopyFrom(
            common_pb2.ErrorStatus(code=status_code_number(record.error_code), message=record.error_message)
        )
    if record.outcome is not None:
        message.result.CopyFrom(result_to_proto(record.outcome, with_flows))
    return message


def series_to_protos(
    series: ChannelSeries, names: list[str], start: int, stop: int
) -> list[simulation_pb2.LinkSeries]:
    """LinkSeries of channels start..stop-1 of `series` (names parallel to series.channels)."""
    return [
        simulation_pb2.LinkSeries(
            link=int(series.channels[i]) // 2,
            direction=int(series.channels[i]) % 2,
            display_name=names[i],
            start_ns=series.start_ns,
            interval_ns=series.interval_ns,
            bytes=series.bytes[i].tolist(),
            utilisation=series.utilisation[i].tolist(),
            mean_queue_bytes=series.mean_queue_bytes[i].tolist()
            if series.mean_queue_bytes is not None
            else [],
            peak_queue_bytes=series.peak_queue_bytes[i].tolist()
            if series.peak_queue_bytes is not None
            else [],
            drops=series.drops[i].tolist() if series.drops is not None else [],
            **{name: values[i].tolist() for name, values in series.counters.items()},
        )
        for i in range(start, min(stop, len(series.channels)))
    ]
