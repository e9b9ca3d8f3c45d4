"""A PACKET-fidelity simulation from spec to SimulationOutcome (the same result shape as FLOW).

Wire overhead per packet (bytes on the wire beyond the payload) follows the transport:

- RoCEv2: Ethernet header 14 + IPv4 20 + UDP 8 + BTH 12 + ICRC 4 + FCS 4, plus preamble/SFD 8
  and inter-frame gap 12 = 82 bytes;
- InfiniBand: LRH 8 + BTH 12 + ICRC 4 + VCRC 2 = 26 bytes.

The ideal completion uses the payload rate (link rate x payload / wire bytes of a full packet)
and adds, per ring step, the store-and-forward time of one packet on each hop.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from services.common.snapshot import FabricSnapshot
from services.simulator.assemble import EngineRun, assemble_outcome
from services.simulator.bounds import run_time_limit_ns
from services.simulator.cancel import setup_stage
from services.simulator.engine import RunFabric
from services.simulator.faults import DEFAULT_RETRANSMIT_TIMEOUT_NS, FaultKind, FaultSpec, resolve_link
from services.simulator.ideal import expected_end_ns, job_ideals
from services.simulator.modes import mode_of
from services.simulator.packet import layout as L
from services.simulator.packet.config import LinkLoss, PacketEngineConfig
from services.simulator.packet.engine import simulate_packets
from services.simulator.packet.link_faults import link_fault_plan
from services.simulator.packet.report import PacketRun
from services.simulator.packet.transport import DEFAULT_IB_WINDOW_BYTES, dcqcn_settings, pfc_thresholds
from services.simulator.paths import route_workload
from services.simulator.pinning import flow_option_notes
from services.simulator.results import ChannelTotals, PacketStats, SimulationOutcome
from services.simulator.routes import FlowRoutes
from services.simulator.series import ChannelSeries
from services.simulator.spec import (
    DEFAULT_BUFFER_BYTES,
    DEFAULT_VL_BUFFER_BYTES,
    SimulationSpec,
    Transport,
    wire_overhead_bytes,
)
from services.simulator.workload import Workload, stream_head

__all__ = ["DEFAULT_BUFFER_BYTES", "packet_model_notes", "run_packet_simulation"]

_NODE_KIND_SWITCH = 2


def packet_model_notes(spec: SimulationSpec, header: int, buffer: int) -> list[str]:
    """What the PACKET model does for this spec, in words a reader can check."""
    lb = spec.load_balancing
    assert lb is not None and lb.mode is not None
    overhead = (
        f"{header} bytes of wire overhead per packet (header_bytes)"
        if spec.header_bytes
        else f"{header} bytes of {spec.transport.value} wire overhead"
    )
    notes = [
        f"PACKET fidelity: output-queued switch ports with {buffer} bytes of buffer each, store-and-"
        f"forward, {spec.mtu_bytes}-byte payloads plus {overhead}; drops on overflow.",
    ]
    infiniband = spec.transport == Transport.INFINIBAND
    window = spec.window_bytes or (DEFAULT_IB_WINDOW_BYTES if infiniband else 0)
    if infiniband:
        notes.append(
            f"InfiniBand credit-based flow control on one data VL: a transmitter starts a packet only "
            f"with credit for it in the next input buffer ({spec.vl_buffer_bytes or DEFAULT_VL_BUFFER_BYTES} "
            "bytes per port), returned one link delay after the packet leaves that buffer; no congestion "
            "drops. PortXmitWait is reported in ns."
        )
    if window:
        notes.append(
            f"{spec.transport.value} Go-Back-N: {-(-window // spec.mtu_bytes)}-packet window, an ACK every "
            f"{spec.ack_every or 1} in-order packets, a NAK per gap, retransmission timeout "
            f"{spec.retransmit_timeout_ns or DEFAULT_RETRANSMIT_TIMEOUT_NS} ns; ACKs, NAKs and CNPs return "
            "after the path latency and are never lost."
        )
    else:
        notes.append(
            "No reliable transport (roce.window_bytes unset): a dropped packet is counted and not resent."
        )
    if spec.pfc:
        notes.append(
            "PFC on the RDMA priority (one priority modelled): a switch PAUSEs an ingress port when the "
            "bytes it holds from that port pass XOFF and RESUMEs it at XON, after the link's delay; "
            "drops only past XOFF + headroom."
        )
    settings = dcqcn_settings(spec)
    if settings is not None:
        notes.append(
            f"ECN/DCQCN: switches mark packets that find more than {settings.kmin_bytes} bytes queued "
            f"(probability rising to {settings.pmax} at {settings.kmax_bytes}, all beyond); receivers send "
            f"at most one CNP per QP per {settings.cnp_interval_ns} ns; senders cut by alpha/2 and recover "
            f"(g={settings.g:.5f}, timers {settings.alpha_timer_ns}/{settings.rate_increase_timer_ns} ns, "
            f"F={settings.fast_recovery_stages}). Rate state is per QP and carries from one transfer of "
            "a connection to the next; its timers pause while the QP has nothing to send."
        )
    notes += flow_option_notes(spec)
    for fault in spec.faults:
        notes.append(
            f"Fault on link {fault.link}: {fault.kind.value if fault.kind else 'UNSPECIFIED'} from "
            f"{fault.start_ns} ns" + (f" to {fault.end_ns} ns." if fault.end_ns else ".")
        )
    notes += mode_of(lb).packet_notes(lb)
    return notes


def _link_loss(snapshot: FabricSnapshot, index: int, fault: FaultSpec) -> LinkLoss:
    return LinkLoss(
        link=resolve_link(snapshot, fault.link, f"faults[{index}].link"),
        kind=1 if fault.kind == FaultKind.BIT_ERRORS else 2,
        start_ns=fault.start_ns,
        end_ns=fault.end_ns,
        ber=fault.bit_error_rate,
        good_loss=fault.good_loss,
        bad_loss=fault.bad_loss,
        p_good_to_bad=fault.p_good_to_bad,
        p_bad_to_good=fault.p_bad_to_good,
    )


def _hops(routes: FlowRoutes) -> np.ndarray:
    # Each hop's shares over its equal-cost group add up to 1, so the shares of a route add up to
    # its number of hops (pinned or split).
    row = np.repeat(np.arange(len(routes.offsets) - 1), np.diff(routes.offsets))
    return np.rint(np.bincount(row, weights=routes.fractions, minlength=len(routes.offsets) - 1)).astype(
        np.int64
    )


def _cap_overcount_ns(
    spec: SimulationSpec, snapshot: FabricSnapshot, workload: Workload, header: int
) -> np.ndarray:
    """int64 [F]: what the ideal's bytes-over-the-cap term counts beyond a capped flow's real pacing.

    The limiter spaces a flow's packets at its cap, but its last packet leaves at the line rate:
    bytes / (cap x payload share) overcounts that packet by its payload share at the cap less its
    wire bytes at the line rate (taken at the fastest host link: the bound stays a bound).
    """
    assert workload.flow_rate_bps is not None
    cap = workload.flow_rate_bps
    size, mtu = workload.flow_size_bytes, spec.mtu_bytes
    last = size - (np.maximum(-(-size // mtu), 1) - 1) * mtu  # payload of the last packet
    from_host = snapshot.node_kind[snapshot.channel_source()] != _NODE_KIND_SWITCH
    line = float(snapshot.channel_rate_bps()[from_host].max())
    with np.errstate(divide="ignore"):
        at_cap = np.where(cap > 0, last * (1 + header / mtu) * 8e9 / cap, 0.0)
    over = np.where(cap > 0, at_cap - (last + header) * 8e9 / line, 0.0).clip(min=0.0)
    return np.ceil(over).astype(np.int64)


def run_packet_simulation(
    spec: SimulationSpec,
    fabric: RunFabric,
    workload: Workload,
    progress: Callable[[float], bool] | None = None,
) -> SimulationOutcome:
    """Simulate `spec` packet by packet (spec already checked); `fabric.what_if` holds the routes of
    the link-down sets its LINK_DOWN faults need (`link_faults.down_sets`)."""
    setup_stage(progress, "routing")
    started = time.perf_counter()
    snapshot, what_if = fabric.snapshot, fabric.what_if
    lb = spec.load_balancing
    assert lb is not None and lb.mode is not None
    header = wire_overhead_bytes(spec)
    buffer = spec.buffer_bytes or DEFAULT_BUFFER_BYTES
    routes, flow_route = route_workload(lb, snapshot, workload, spec.switch_latency_ns)
    payload_fraction = spec.mtu_bytes / (spec.mtu_bytes + header)
    # Per route: propagation + switch latency, plus one packet's serialisation on every hop after
    # the first (the first hop's serialisation is the bytes / rate term of the closed form).
    from_host = snapshot.node_kind[snapshot.channel_source()] != _NODE_KIND_SWITCH
    slowest_host_link = float(snapshot.channel_rate_bps()[from_host].min())
    # A flow smaller than one MTU travels in one smaller packet: its store-and-forward is shorter.
    # (A streamed ring's flows here are its QPs: each stands for its largest flow.)
    sizes = workload.flow_size_bytes if workload.stream is None else workload.stream.largest_flow_bytes()
    packet_bytes = np.minimum(spec.mtu_bytes, sizes) + header
    packet_ns = packet_bytes * 8e9 / slowest_host_link
    hops_after_first = (_hops(routes) - 1).clip(min=0)[flow_route]
    # In fractions of a ns: the closed form is rounded up once, at the end (a ring's 2(n-1) steps
    # each rounded up would put its ideal up to 2(n-1) ns beyond what a run reaches).
    flow_latency = routes.latency_ns[flow_route] + hops_after_first * packet_ns
    if workload.flow_rate_bps is not None:
        flow_latency -= _cap_overcount_ns(spec, snapshot, workload, header)
    ideals = job_ideals(workload, flow_latency, snapshot, payload_fraction)
    link_events, epochs, link_notes = link_fault_plan(spec, snapshot, workload, what_if or {})
    infiniband = spec.transport == Transport.INFINIBAND
    window_bytes = spec.window_bytes or (DEFAULT_IB_WINDOW_BYTES if infiniband else 0)
    vl_buffer = spec.vl_buffer_bytes or DEFAULT_VL_BUFFER_BYTES  # validate_spec checked it holds a packet
    config = PacketEngineConfig(
        load_balancing=lb,
        mtu_bytes=spec.mtu_bytes,
        header_bytes=header,
        buffer_bytes=buffer,
        switch_latency_ns=spec.switch_latency_ns,
        seed=spec.seed * 1_000_003 + lb.seed,
        sample_interval_ns=spec.sample_interval_ns,
        time_limit_ns=run_time_limit_ns(spec),
        expected_end_ns=expected_end_ns(spec, ideals),
        window_packets=-(-window_bytes // spec.mtu_bytes) if window_bytes else 0,
        retransmit_timeout_ns=spec.retransmit_timeout_ns or DEFAULT_RETRANSMIT_TIMEOUT_NS,
        ack_every=spec.ack_every or 1,
        link_losses=tuple(_link_loss(snapshot, i, fault) for i, fault in enumerate(spec.faults)),
        drop_once=spec.drop_once,
        mark_once=spec.mark_once,
        **pfc_thresholds(spec, snapshot),
        dcqcn=dcqcn_settings(spec),
        vl_buffer_bytes=vl_buffer if infiniband else 0,
        link_events=link_events,
        reroutes=epochs,
    )
    phases = {"routes": time.perf_counter() - started}
    setup_stage(progress, "setting up the engine")
    run = simulate_packets(workload, snapshot, routes, flow_route, config, progress, phases)

    # Ports that carried traffic, and ports that did not but have something to report: PAUSEs sent
    # for the data coming the other way, a link that went down, discards, receive errors.
    active = (
        (run.channel_tx_bytes > 0)
        | (run.channel_pause_frames[np.arange(len(run.channel_pause_frames)) ^ 1] > 0)
        | (run.channel_link_downed > 0)
        | (run.channel_xmit_discards > 0)
        | (run.channel_rcv_errors > 0)
    )
    carried = np.flatnonzero(active).astype(np.int32)
    rate = snapshot.channel_rate_bps()[carried].astype(np.float64)
    interval = run.interval_ns
    bins = run.channel_bytes.shape[1]
    lengths = np.minimum(interval, run.end_ns - np.arange(bins) * interval).clip(min=1)
    series_bytes = run.channel_bytes[carried]
    series = ChannelSeries(
        channels=carried,
        start_ns=0,
        interval_ns=interval,
        bytes=np.rint(series_bytes).astype(np.int64),
        utilisation=np.minimum(1.0, series_bytes * 8e9 / (rate[:, None] * lengths[None, :])),
        mean_queue_bytes=run.channel_mean_queue[carried],
        peak_queue_bytes=run.channel_peak_queue[carried],
        drops=run.channel_drops[carried],
        counters={name: values[carried] for name, values in run.channel_counter_series.items()},
    )
    tiers = snapshot.node_tier.astype(np.int32)
    source, target = snapshot.channel_source(), snapshot.channel_target()
    crossing = np.zeros(snapshot.num_channels)
    row = np.repeat(np.arange(len(routes.offsets) - 1), np.diff(routes.offsets))
    flows_per_route = np.bincount(flow_route, minlength=len(routes.offsets) - 1)
    if workload.stream is not None:  # each of its QPs carries one flow of every transfer of its rank
        flows_per_route *= workload.stream.transfers // workload.stream.ranks
    np.add.at(crossing, routes.channels, flows_per_route[row])
    capacity_bits = rate * max(1, run.end_ns) / 1e9
    totals = ChannelTotals(
        channels=carried,
        display_names=[snapshot.channel_name(int(c)) for c in carried],
        bytes=run.channel_tx_bytes[carried],
        mean_utilisation=np.minimum(1.0, run.channel_tx_bytes[carried] * 8.0 / capacity_bits),
        peak_utilisation=series.utilisation.max(axis=1, initial=0.0),
        tier=np.maximum(tiers[source[carried]], tiers[target[carried]]),
        # Under a per-packet mode, the flows that used the link; else those whose route crosses it.
        flows=(run.channel_flows if run.channel_flows.size else crossing)[carried].astype(np.int32),
        drops=run.channel_drops_total[carried],
        peak_queue_bytes=run.channel_peak_queue_total[carried],
        rcv_errors=run.channel_rcv_errors[carried],
        pause_frames=run.channel_pause_frames[carried],
        pause_ns=run.channel_pause_ns[carried],
        counters=_channel_counters(run, carried),
    )
    notes = packet_model_notes(spec, header, buffer) + link_notes
    if run.packets_dropped:
        lost_flows = run.streamed.lost_flows if run.streamed else int((run.flow_lost_bytes > 0).sum())
        notes.append(
            f"{run.packets_dropped} packets dropped; {lost_flows} flows lost bytes that no transport resent, "
            "so their completion times are when their last packet was delivered or dropped."
        )
    if run.reorder_overflow_packets:
        notes.append(
            f"{run.reorder_overflow_packets} packets arrived more than the 512-packet reorder window ahead; "
            "the reorder-buffer peak does not include them."
        )
    streamed: dict = {}
    kept_route = flow_route
    if run.streamed is not None:  # per-flow results of its first flows; the jobs from its totals
        head, qp_row = stream_head(workload, len(run.flow_finish_ns))
        kept_route = flow_route[qp_row]
        last = run.streamed.last_finish if run.streamed.unfinished == 0 else -1
        streamed = {
            "flow_workload": head,
            "job_finish_ns": [-(-last // 1000) if last >= 0 else -1],
            "flow_count": run.streamed.count,
        }
        notes.append(
            f"The ring's {run.streamed.count} flows were generated as the run went (a few steps at a "
            f"time) and each freed once done; per-flow results list its first {len(head.flow_job)}."
        )
    measured = EngineRun(
        routes=routes,
        flow_route=kept_route,
        flow_start_ns=run.flow_start_ns,
        flow_finish_ns=run.flow_finish_ns,
        end_ns=run.end_ns,
        events=run.events,
        time_limited=run.time_limited,
        series=series,
        totals=totals,
        ideals=ideals,
        notes=notes,
        packets=_packet_stats(run),
        flow_counters={
            "retransmitted_packets": run.flow_retransmitted,
            "retransmitted_bytes": run.flow_retransmitted_bytes,
            "recovery_ns": run.flow_recovery_ns,
            "cnp_sent": run.flow_cnp_sent,
            "cnp_handled": run.flow_cnp_handled,
            "dropped_packets": run.flow_dropped,
        },
        job_counters=_job_counters(workload, run),
        phase_seconds=phases,
        **streamed,
    )
    return assemble_outcome(spec, snapshot, workload, measured, started)


def _packet_stats(run: PacketRun) -> PacketStats:
    return PacketStats(
        injected=run.packets_injected,
        delivered=run.packets_delivered,
        delivered_bytes=run.delivered_payload_bytes,
        dropped=run.packets_dropped,
        retransmitted=run.retransmitted,
        peak_in_flight=run.peak_packets_in_flight,
        in_flight=run.packets_in_flight,
        naks=run.naks,
        timeouts=run.timeouts,
        corrupted=run.corrupted,
        discarded=run.discarded,
        out_of_order=run.out_of_order_packets,
        reorder_peak_bytes=run.reorder_peak_bytes,
        reorder_overflow=run.reorder_overflow_packets,
        reorder_histogram=run.reorder_histogram.tolist(),
        counters={
            "retransmitted_bytes": run.retransmitted_bytes,
            "ecn_marked_packets": run.ecn_marked,
            "cnp_sent": run.cnp_sent,
            "cnp_handled": run.cnp_handled,
            "xmit_discards": run.xmit_discards,
            "lost_on_wire": run.wire_lost,
            "xmit_wait_ns": int(run.channel_xmit_wait_ns.sum()),
        },
    )


def _channel_counters(run: PacketRun, carried: np.ndarray) -> dict[str, np.ndarray]:
    return {
        "ecn_marked_packets": run.channel_ecn_marked[carried],
        "xmit_wait_ns": run.channel_xmit_wait_ns[carried],
        "xmit_discards": run.channel_xmit_discards[carried],
        "link_downed": run.channel_link_downed[carried],
        "lost_on_wire": run.channel_wire_lost[carried],
        "peak_input_buffer_bytes": run.channel_peak_ingress[carried],
        "symbol_errors": run.channel_rcv_errors[carried],
        "pause_frames_sent": run.channel_pause_frames[carried ^ 1],  # the port's PAUSEs to the far end
    }


def _job_counters(workload: Workload, run: PacketRun) -> list[dict[str, int]]:
    if run.streamed is not None:  # one job
        return [
            {
                "retransmitted_packets": int(run.streamed.fi_sum[L.FI_RESENT]),
                "retransmitted_bytes": int(run.streamed.fi_sum[L.FI_RESENT_BYTES]),
                "max_recovery_ns": run.streamed.max_recovery_ps // 1000,
            }
        ]
    job_of_flow = np.repeat(workload.transfer_job, np.diff(workload.transfer_flow_offsets))
    counters = []
    for j in range(len(workload.jobs)):
        mine = job_of_flow == j
        counters.append(
            {
                "retransmitted_packets": int(run.flow_retransmitted[mine].sum()),
                "retransmitted_bytes": int(run.flow_retransmitted_bytes[mine].sum()),
                "max_recovery_ns": int(run.flow_recovery_ns[mine].max(initial=0)),
            }
        )
    return counters
