"""What a PACKET run produced (`PacketRun`, from the loop's arrays), and the watchdogs that end a
run which can no longer make progress (a PFC deadlock, traffic with no usable path)."""

from __future__ import annotations

import dataclasses

import numpy as np

from services.common.errors import FailedPrecondition
from services.common.snapshot import FabricSnapshot
from services.simulator.packet import layout as L
from services.simulator.packet.arrays import EngineArrays
from services.simulator.packet.config import PacketEngineConfig
from services.simulator.packet.stream import StreamedFlows

__all__ = ["STALL_NS", "PacketRun", "check_progress", "pause_cycle", "report_pause_deadlock", "run_result"]


def _empty() -> np.ndarray:
    return np.zeros(0, dtype=np.int64)


@dataclasses.dataclass
class PacketRun:
    """What the packet engine produced (times in ns)."""

    end_ns: int
    time_limited: bool
    flow_start_ns: np.ndarray  # int64 [F], -1 never started
    flow_finish_ns: np.ndarray  # int64 [F], -1 unfinished
    flow_lost_bytes: np.ndarray  # int64 [F]
    interval_ns: int
    channel_bytes: np.ndarray  # float64 [C, B] wire bytes per interval
    channel_mean_queue: np.ndarray  # float64 [C, B] bytes
    channel_peak_queue: np.ndarray  # int64 [C, B] bytes
    channel_drops: np.ndarray  # int64 [C, B] packets
    # Per-interval counters by LinkSeries field name (rcv_errors, xmit_discards, ecn_marked_packets,
    # pause_frames, pause_ns), each int64 [C, B]; empty when the run had nothing to count.
    channel_counter_series: dict[str, np.ndarray]
    channel_tx_bytes: np.ndarray  # int64 [C] wire bytes
    channel_tx_packets: np.ndarray  # int64 [C]
    channel_peak_queue_total: np.ndarray  # int64 [C]
    channel_drops_total: np.ndarray  # int64 [C]
    events: int
    packets_injected: int
    packets_delivered: int
    packets_dropped: int
    delivered_payload_bytes: int
    peak_packets_in_flight: int
    packets_in_flight: int  # at the end (a time-limited run stops with packets on the wire)
    retransmitted: int
    naks: int
    timeouts: int
    corrupted: int
    discarded: int
    channel_rcv_errors: np.ndarray  # int64 [C]
    channel_pause_frames: np.ndarray  # int64 [C]: PAUSEs its transmitter received (rx_prio3_pause)
    channel_pause_ns: np.ndarray  # int64 [C]: time its transmitter spent paused (rx_prio3_pause_duration)
    out_of_order_packets: int
    reorder_overflow_packets: int
    reorder_peak_bytes: int
    reorder_histogram: np.ndarray  # int64 [64]: deliveries seen with k packets held (last bin: >=63)
    retransmitted_bytes: int = 0
    cnp_sent: int = 0  # np_cnp_sent, all NICs
    cnp_handled: int = 0  # rp_cnp_handled, all NICs
    ecn_marked: int = 0
    xmit_discards: int = 0
    wire_lost: int = 0
    # int64 [C]
    channel_ecn_marked: np.ndarray = dataclasses.field(default_factory=_empty)
    channel_xmit_wait_ns: np.ndarray = dataclasses.field(
        default_factory=_empty
    )  # int64 [C]: data queued, no credit (PortXmitWait)
    channel_xmit_discards: np.ndarray = dataclasses.field(
        default_factory=_empty
    )  # int64 [C]: discarded, link down (PortXmitDiscards)
    channel_link_downed: np.ndarray = dataclasses.field(
        default_factory=_empty
    )  # int64 [C] (LinkDownedCounter)
    channel_wire_lost: np.ndarray = dataclasses.field(
        default_factory=_empty
    )  # int64 [C]: on the wire when the link went down
    channel_peak_ingress: np.ndarray = dataclasses.field(
        default_factory=_empty
    )  # int64 [C]: most bytes held in the next input buffer
    # int64 [F] packets
    flow_retransmitted: np.ndarray = dataclasses.field(default_factory=_empty)
    # int64 [F]
    flow_retransmitted_bytes: np.ndarray = dataclasses.field(default_factory=_empty)
    flow_recovery_ns: np.ndarray = dataclasses.field(
        default_factory=_empty
    )  # int64 [F]: time in Go-Back-N loss recovery
    # int64 [F]: CNPs its receiver sent
    flow_cnp_sent: np.ndarray = dataclasses.field(default_factory=_empty)
    flow_cnp_handled: np.ndarray = dataclasses.field(
        default_factory=_empty
    )  # int64 [F]: CNPs its sender acted on
    flow_dropped: np.ndarray = dataclasses.field(
        default_factory=_empty
    )  # int64 [F]: its packets full switch buffers dropped
    # int64 [C]: flows whose packets crossed each channel (empty: not kept; count the routes' flows)
    channel_flows: np.ndarray = dataclasses.field(default_factory=_empty)
    # A streamed run (stream.py): the per-flow arrays above are its first flows; this has the totals.
    streamed: StreamedFlows | None = None


STALL_NS = 1_000_000_000  # no delivery for this long, nothing scheduled to change: the run is stuck


def _reached_ps(a: EngineArrays) -> int:
    """The latest time the run reached so far: its last event's, or a sink delivery's handled ahead
    of the loop (`layout.SC_REACHED`). Where the run ends, or a time limit stopped it, this is the
    moment open intervals (a Go-Back-N recovery, a port waiting for credit) count up to."""
    return int(max(a.sc[L.SC_NOW], a.sc[L.SC_REACHED]))


def check_progress(a: EngineArrays, config: PacketEngineConfig) -> None:
    """Retransmission timers keep a stuck run busy forever (a link down for good, a NIC paused for
    good): stop it once nothing was delivered for STALL_NS after the last scheduled link change."""
    now_ns = _reached_ps(a) // 1000
    last_change = max(
        [e.time_ns for e in config.link_events]
        + [e.time_ns for e in config.reroutes]
        + [int(a.t_release.max(initial=0)) // 1000],  # a transfer released later is not a stall
        default=0,
    )
    since = now_ns - max(int(a.sc[L.SC_LAST_DELIVERY]) // 1000, last_change)
    if since > STALL_NS:
        waiting = int((a.f_finish < 0).sum())
        raise FailedPrecondition(
            f"the run made no progress for {since / 1e9:.1f} s of simulated time with {waiting} flows "
            "unfinished: their traffic has no usable path (a link down for good, or ports paused for good)"
        )


def pause_cycle(a: EngineArrays) -> list[int]:
    """Ports c1 -> c2 -> ... -> c1, each PAUSEd by the switch it feeds (no RESUME on its way) while
    more than XON bytes it sent wait there in the queue of the next one, itself paused: none can
    send until another does, whatever timers fire. Empty if there is no such cycle."""
    held: dict[tuple[int, int], int] = {}  # (ingress port, paused egress port) -> wire bytes queued
    for egress in np.flatnonzero((a.q_head >= 0) & (a.ch_paused == 1)):
        p = int(a.q_head[egress])
        while p >= 0:
            key = (int(a.p_in[p]), int(egress))
            held[key] = held.get(key, 0) + int(a.p_wire[p])
            p = int(a.p_next[p])
    xon = int(a.pr[L.PR_XON])
    waits: dict[int, list[int]] = {}
    for (c, c2), size in held.items():
        if c >= 0 and a.ch_paused[c] and a.ch_pause_sent[c] and size > xon:
            waits.setdefault(c, []).append(c2)
    done: set[int] = set()  # depth-first search over every successor, not only the first
    for root in sorted(waits):
        if root in done:
            continue
        path, todo = [root], [iter(waits[root])]
        while todo:
            nxt = next(todo[-1], None)
            if nxt is None:
                done.add(path.pop())
                todo.pop()
            elif nxt in path:
                return path[path.index(nxt) :]
            elif nxt not in done and nxt in waits:
                path.append(nxt)
                todo.append(iter(waits[nxt]))
    return []


def report_pause_deadlock(a: EngineArrays, snapshot: FabricSnapshot) -> None:
    """Flows unfinished, ports paused: name the cycle of pauses, or the ports paused for good."""
    cycle = pause_cycle(a)
    paused = np.flatnonzero(a.ch_paused)
    names = [snapshot.channel_name(int(c)) for c in (cycle or paused[:8])]
    what = "a PFC deadlock: a cycle of paused ports" if cycle else "ports paused for good"
    raise FailedPrecondition(f"the run stalled on {what}: {' -> '.join(names)}")


def run_result(a: EngineArrays, stopped: bool) -> PacketRun:
    sc = a.sc
    interval_ps = int(a.pr[L.PR_INTERVAL])
    end_ps = int(a.pr[L.PR_STOP]) if stopped else int(sc[L.SC_LAST_DELIVERY] or _reached_ps(a))
    used_bins = max(1, -(-end_ps // interval_ps))
    streamed = a.pool.finish(_reached_ps(a)) if a.pool is not None else None
    if streamed is not None:  # its first flows, whole; the rest are in its totals
        start, finish, lost, fi = streamed.start, streamed.finish, streamed.lost, streamed.fi
    else:
        start, finish, lost, fi = a.f_start, a.f_finish, a.f_lost, a.fi
    finish = np.where(finish >= 0, -(-finish // 1000), -1)
    bits = a.ch_flow_bits
    channel_flows = np.bitwise_count(bits).sum(axis=1, dtype=np.int64) if bits.shape[1] else _empty()
    return PacketRun(
        channel_flows=channel_flows,
        end_ns=-(-end_ps // 1000),
        time_limited=stopped,
        flow_start_ns=np.where(start >= 0, start // 1000, -1),
        flow_finish_ns=finish,
        flow_lost_bytes=lost.copy(),
        interval_ns=interval_ps // 1000,
        channel_bytes=a.s_bytes[:used_bins].T.copy(),
        channel_mean_queue=a.s_qint[:used_bins].T.astype(np.float64) / interval_ps,
        channel_peak_queue=a.s_qpeak[:used_bins].T.astype(np.int64),
        channel_drops=a.s_drops[:used_bins].T.astype(np.int64),
        channel_counter_series=_counter_series(a, used_bins),
        channel_tx_bytes=a.ch_tx_bytes.copy(),
        channel_tx_packets=a.ch_tx_packets.copy(),
        channel_peak_queue_total=a.ch_peak_q.copy(),
        channel_drops_total=a.ch_drops.copy(),
        events=int(sc[L.SC_EVENTS]),
        packets_injected=int(sc[L.SC_INJECTED]),
        packets_delivered=int(sc[L.SC_DELIVERED]),
        packets_dropped=int(sc[L.SC_DROPPED]),
        delivered_payload_bytes=int(sc[L.SC_DELIVERED_BYTES]),
        peak_packets_in_flight=int(sc[L.SC_PEAK_LIVE]),
        packets_in_flight=int(sc[L.SC_LIVE]),
        retransmitted=int(sc[L.SC_RESENT]),
        naks=int(sc[L.SC_NAKS]),
        timeouts=int(sc[L.SC_TIMEOUTS]),
        corrupted=int(sc[L.SC_CORRUPTED]),
        discarded=int(sc[L.SC_DISCARDED]),
        channel_rcv_errors=a.ch_rcv_errors.copy(),
        channel_pause_frames=a.ch_pause_frames.copy(),
        channel_pause_ns=a.ch_pause_ps // 1000,
        out_of_order_packets=int(sc[L.SC_OUT_OF_ORDER]),
        reorder_overflow_packets=int(sc[L.SC_ROB_OVERFLOW]),
        reorder_peak_bytes=int(sc[L.SC_ROB_PEAK_BYTES]),
        reorder_histogram=a.rob_hist.copy(),
        retransmitted_bytes=int(sc[L.SC_RESENT_BYTES]),
        cnp_sent=int(sc[L.SC_CNP_SENT]),
        cnp_handled=int(sc[L.SC_CNP_HANDLED]),
        ecn_marked=int(sc[L.SC_ECN_MARKED]),
        xmit_discards=int(sc[L.SC_XMIT_DISCARDS]),
        wire_lost=int(sc[L.SC_WIRE_LOST]),
        channel_ecn_marked=a.cn[:, L.CN_ECN_MARKED].copy(),
        channel_xmit_wait_ns=_xmit_wait_ns(a),
        channel_xmit_discards=a.cn[:, L.CN_XMIT_DISCARDS].copy(),
        channel_link_downed=a.cn[:, L.CN_LINK_DOWNED].copy(),
        channel_wire_lost=a.cn[:, L.CN_WIRE_LOST].copy(),
        channel_peak_ingress=a.cn[:, L.CN_PEAK_INGRESS].copy(),
        flow_retransmitted=fi[:, L.FI_RESENT].copy(),
        flow_retransmitted_bytes=fi[:, L.FI_RESENT_BYTES].copy(),
        flow_recovery_ns=_recovery_ns(fi, _reached_ps(a)),
        flow_cnp_sent=fi[:, L.FI_CNP_SENT].copy(),
        flow_cnp_handled=fi[:, L.FI_CNP_HANDLED].copy(),
        flow_dropped=fi[:, L.FI_DROPS].copy(),
        streamed=streamed,
    )


def _counter_series(a: EngineArrays, bins: int) -> dict[str, np.ndarray]:
    if a.s_ev.shape[2] == 1:
        return {}
    series = a.s_ev[:bins].transpose(1, 0, 2)
    return {
        "rcv_errors": series[:, :, L.SE_RCV_ERRORS].copy(),
        "xmit_discards": series[:, :, L.SE_XMIT_DISCARDS].copy(),
        "ecn_marked_packets": series[:, :, L.SE_ECN_MARKED].copy(),
        "pause_frames": series[:, :, L.SE_PAUSES].copy(),
        # Rounded on the cumulative curve, so that the intervals add up to the total in whole ns.
        "pause_ns": np.diff(np.cumsum(series[:, :, L.SE_PAUSE_PS], axis=1) // 1000, axis=1, prepend=0),
    }


def _xmit_wait_ns(a: EngineArrays) -> np.ndarray:
    # A port still waiting for credit when the run ended waited until then.
    now = _reached_ps(a)
    waiting = a.cn[:, L.CN_WAIT_SINCE] >= 0
    wait = a.cn[:, L.CN_XMIT_WAIT] + np.where(waiting, now - a.cn[:, L.CN_WAIT_SINCE], 0)
    return wait // 1000


def _recovery_ns(fi: np.ndarray, now: int) -> np.ndarray:
    # A recovery still open at the end (a time-limited run) counts until then.
    open_ = fi[:, L.FI_REC_START] >= 0
    return (fi[:, L.FI_REC_PS] + np.where(open_, now - fi[:, L.FI_REC_START], 0)) // 1000
