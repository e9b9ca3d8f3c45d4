"""The packet engine's arrays: built from a snapshot and a workload, grown when the loop asks.

Memory follows the packets in flight, not the packets of the run: packet slots, reorder windows and
the event heap start small and double when the loop asks; flows are arrays of the workload's size;
the per-channel series have at most `MAX_BINS` columns (the interval doubles, merging columns, when
a run outlasts them) unless the caller fixed the interval; a fixed interval is kept while the series
fit in `MAX_SERIES_BYTES`, and doubles like the engine's own beyond that (the outcome notes it).
"""

from __future__ import annotations

import numpy as np

from services.common.errors import FailedPrecondition, InvalidArgument
from services.common.snapshot import FabricSnapshot
from services.simulator.modes import mode_of
from services.simulator.packet import layout as L
from services.simulator.packet.config import LinkLoss, PacketEngineConfig
from services.simulator.packet.heap import grow_queue, new_queue, push, queue_capacity, wheel_geometry
from services.simulator.packet.state import (
    Channels,
    Flows,
    Heap,
    LossModel,
    Packets,
    Qps,
    Reorder,
    Routing,
    Run,
    Series,
    Transfers,
)
from services.simulator.packet.stream import TransferPool
from services.simulator.routes import FlowRoutes, RouteWalker, pinned_path_rows
from services.simulator.spec import LoadBalancingSpec
from services.simulator.workload import Workload

__all__ = [
    "MAX_BINS",
    "MAX_PACKETS_PER_FLOW",
    "MAX_SERIES_BYTES",
    "EngineArrays",
    "series_cell_bytes",
]

# Deliver a sink channel's packets as they start (`_sinks`): False gives every delivery its event, as
# before (tests and benchmarks compare the two).
SINK_DELIVERY = True

MAX_BINS = 512
MAX_PACKETS_PER_FLOW = 1 << 25  # sequence numbers of a flow's packets
_NODE_KIND_SWITCH = 2
_BUDGET = 2_000_000  # events between progress reports
_ROB_WORDS = 8  # reorder window: 512 packets per flow
MAX_SERIES_BYTES = 2 << 30
_SERIES_CELL_BYTES = 8 + 4 + 8 + 4  # bytes, peak queue, queue integral, drops


def series_cell_bytes(counted: bool) -> int:
    """Bytes per channel and interval of the series; `counted`: with per-port counters (faults,
    link events, PFC or DCQCN)."""
    return _SERIES_CELL_BYTES + 8 * (L.SE_SIZE if counted else 1)


MAX_FLOW_BITS_BYTES = 256 << 20  # the flows-per-channel bitset of one run, at most
_GROUP_BATCH_KEYS = 1 << 20  # (switch, destination) pairs walked at a time (install_routes)


def flow_bits_bytes(lb: LoadBalancingSpec | None, channels: int, flows: int) -> int:
    """Bytes of the flows-per-channel bitset a run keeps: where the mode chooses per packet (where it
    pins, a flow's route says which links it used) and within MAX_FLOW_BITS_BYTES; else 0."""
    size = channels * -(-flows // 64) * 8
    if lb is None or mode_of(lb).pins_flows or size > MAX_FLOW_BITS_BYTES:
        return 0
    return size


class EngineArrays:
    """Every array of one run; `state()` groups them for the loop, `grow_*` double what the loop
    asked for."""

    def __init__(
        self,
        snapshot: FabricSnapshot,
        workload: Workload,
        routes: FlowRoutes,
        flow_route: np.ndarray,
        config: PacketEngineConfig,
        interval_ps: int,
    ) -> None:
        if config.pfc and config.vl_buffer_bytes:  # the send paths assume one or the other
            raise ValueError("PFC (RoCEv2) and credits (InfiniBand) cannot both be on")
        n_ch = snapshot.num_channels
        flows = workload.flow_count
        self._workload, self._config = workload, config
        self.destinations, dest_slot = np.unique(workload.flow_destination, return_inverse=True)
        # Pinned flows forward by tables of their own: slots after the destinations' (`_pin_slots`).
        pin_slot = self._pin_slots(snapshot, workload)
        self.num_dest = len(self.destinations) + self.pin_slot_count
        self.install_routes(snapshot, routes, flow_route)

        rate = snapshot.channel_rate_bps().astype(np.float64)
        target = snapshot.channel_target()
        is_switch = snapshot.node_kind == _NODE_KIND_SWITCH
        source = snapshot.channel_source()
        self.ch_target = target.astype(np.int32)
        self.ch_source = source.astype(np.int32)
        self.ch_ps_per_byte = 8e12 / rate
        # Propagation alone (link-level frames: credits), and with the switch latency of the far end
        # (a packet's arrival).
        self.ch_prop_ps = np.repeat(snapshot.link_latency_ns.astype(np.int64), 2) * 1000
        # The fields of every hop share a row per channel (layout.CH_*); the names below are views.
        self.ch_hot = np.zeros((n_ch, L.CH_HOT_SIZE), dtype=np.int64)
        self.ch_hot[:, L.CH_Q_HEAD] = -1
        self.ch_hot[:, L.CH_Q_TAIL] = -1
        self.ch_delay_ps = self.ch_hot[:, L.CH_DELAY_PS]
        switch_ps = np.where(is_switch[target], config.switch_latency_ns, 0) * 1000
        self.ch_delay_ps[:] = self.ch_prop_ps + switch_ps
        self.ch_from_host = (~is_switch[source]).astype(np.uint8)
        # NIC uplinks pull from their flows; they never queue, so they never drop.
        self.ch_buffer = np.where(self.ch_from_host == 1, np.iinfo(np.int64).max, config.buffer_bytes)
        self.ch_busy = np.zeros(n_ch, dtype=np.uint8)  # NIC ports: a pull is pending
        self.ch_free_at = self.ch_hot[:, L.CH_FREE_AT]  # ps; the port is transmitting until then
        self.q_head = self.ch_hot[:, L.CH_Q_HEAD]
        self.q_tail = self.ch_hot[:, L.CH_Q_TAIL]
        self.q_bytes = self.ch_hot[:, L.CH_Q_BYTES]
        self.q_last = self.ch_hot[:, L.CH_Q_LAST]
        self.ch_tx_bytes = self.ch_hot[:, L.CH_TX_BYTES]
        self.ch_tx_packets = self.ch_hot[:, L.CH_TX_PACKETS]
        self.ch_drops = np.zeros(n_ch, dtype=np.int64)
        self.ch_peak_q = np.zeros(n_ch, dtype=np.int64)
        self.ch_rr = np.full(n_ch, -1, dtype=np.int32)
        self.ch_ring_len = np.zeros(n_ch, dtype=np.int32)
        # PFC: bytes each channel's packets occupy in the switch it feeds, and its transmitter's state.
        self.ch_ing_bytes = np.zeros(n_ch, dtype=np.int64)
        self.ch_paused = np.zeros(n_ch, dtype=np.uint8)
        self.ch_pause_sent = np.zeros(n_ch, dtype=np.uint8)
        self.ch_txd_pending = np.zeros(n_ch, dtype=np.uint8)
        self.ch_pause_frames = np.zeros(n_ch, dtype=np.int64)
        self.ch_pause_ps = np.zeros(n_ch, dtype=np.int64)
        self.ch_pause_since = np.zeros(n_ch, dtype=np.int64)
        # Which flows used each channel: kept where the mode chooses per packet (where it pins, a flow's
        # route says it), within MAX_FLOW_BITS_BYTES (above it, `flows` counts the routes' flows).
        # (Not in a streamed run: its flows reuse slots, and there are far too many for a bitset.)
        kept = flow_bits_bytes(config.load_balancing, n_ch, flows) if workload.stream is None else 0
        self.ch_flow_bits = np.zeros((n_ch, -(-flows // 64) if kept else 0), dtype=np.uint64)
        self.cn = np.zeros((n_ch, L.CN_SIZE), dtype=np.int64)
        self.cn[:, L.CN_WAIT_SINCE] = -1
        self.cn[:, L.CN_DOWN_AT] = -1
        if config.vl_buffer_bytes:  # a switch input buffer advertises credits; hosts drain at line rate
            self.cn[:, L.CN_CREDITS] = np.where(is_switch[target], config.vl_buffer_bytes, 1 << 60)
            # Credits bound what a switch holds: its output queues never overflow.
            self.ch_buffer = np.full(n_ch, np.iinfo(np.int64).max, dtype=np.int64)
        self._link_losses(n_ch, config.link_losses)
        bins = MAX_BINS
        if config.sample_interval_ns and config.expected_end_ns:
            bins = max(16, int(2 * config.expected_end_ns * 1000 // interval_ps) + 2)
        # Counter series only where something can count: faults, link events, PFC or DCQCN.
        counted = bool(config.link_losses or config.link_events or config.pfc or config.dcqcn)
        self._counter_columns = L.SE_SIZE if counted else 1
        self._series_cell = series_cell_bytes(counted)
        self._alloc_series(n_ch, bins)

        # Flows.
        self.f_dst_node = snapshot.host_nodes[workload.flow_destination].astype(np.int32)
        self.f_dst_slot = dest_slot.astype(np.int32).reshape(-1)
        if pin_slot is not None:
            pinned = workload.pinned
            self.f_dst_slot[pinned] = len(self.destinations) + pin_slot
        self.f_size = workload.flow_size_bytes.astype(np.int64)
        self.f_sent = np.zeros(flows, dtype=np.int64)
        self.f_recv = np.zeros(flows, dtype=np.int64)
        self.f_lost = np.zeros(flows, dtype=np.int64)
        self.f_next_seq = np.zeros(flows, dtype=np.int64)
        self.f_start = np.full(flows, -1, dtype=np.int64)
        self.f_finish = np.full(flows, -1, dtype=np.int64)
        self.f_last_rx = np.full(flows, -1, dtype=np.int64)
        self.f_sink_wait = np.full(flows, -1, dtype=np.int64)
        self.f_transfer = np.repeat(
            np.arange(workload.transfer_count, dtype=np.int32), np.diff(workload.transfer_flow_offsets)
        )
        self.f_first_ch = self._first_channels(snapshot, RouteWalker(snapshot, config.switch_latency_ns))
        self.act_next = np.full(flows, -1, dtype=np.int32)
        self.act_prev = np.full(flows, -1, dtype=np.int32)
        self.f_rob_slot = np.full(flows, -1, dtype=np.int32)
        self.f_rob_bytes = np.zeros(flows, dtype=np.int64)
        # Go-Back-N state (sequence numbers count packets).
        self.f_npkts = -(-self.f_size // config.mtu_bytes)
        if (self.f_npkts >= MAX_PACKETS_PER_FLOW).any():  # checks.py refuses such specs up front
            raise InvalidArgument("jobs", "a flow of 2^25 packets or more; use a larger mtu_bytes")
        self.f_snd_nxt = np.zeros(flows, dtype=np.int64)
        self.f_snd_una = np.zeros(flows, dtype=np.int64)
        self.f_high = np.zeros(flows, dtype=np.int64)
        self.f_linked = np.zeros(flows, dtype=np.uint8)
        self.f_left = np.zeros(flows, dtype=np.uint8)
        self.f_nak = np.zeros(flows, dtype=np.uint8)
        self.f_since_ack = np.zeros(flows, dtype=np.int32)
        self.f_rto_at = np.full(flows, -1, dtype=np.int64)
        self.f_pend = np.zeros(flows, dtype=np.int32)  # ACK/NAK and CNP events that name it
        self.f_gen = np.zeros(flows, dtype=np.int32)  # the slot's occupant (its RTO events carry it)
        # ACKs return over the flow's path latency (propagation and switches, both ways alike).
        self.f_ack_lat = (routes.latency_ns[flow_route].astype(np.int64) * 1000).clip(min=1)
        self.fi = np.zeros((flows, L.FI_SIZE), dtype=np.int64)
        self.fi[:, L.FI_REC_START] = -1
        # DCQCN state per QP: the flows of one connection's QP across its transfers share one rate.
        self.f_qp = workload.flow_qp.astype(np.int32)
        qps = int(self.f_qp.max(initial=-1)) + 1
        self.qi = np.zeros((qps, L.QI_SIZE), dtype=np.int64)
        self.qi[:, L.QI_LAST_CNP] = np.iinfo(np.int64).min // 2
        self.qf = np.zeros((qps, L.QF_SIZE), dtype=np.float64)
        self.qf[self.f_qp, L.QF_LINE] = rate[self.f_first_ch]
        # A flow's rate cap (per QP: its share of the flow's rate_gbps), where below the line rate: a
        # static limiter paces the QP's packets (wire bytes) at it, and DCQCN treats it as the line.
        self._capped = False
        if workload.flow_rate_bps is not None:
            capped = (workload.flow_rate_bps > 0) & (workload.flow_rate_bps < rate[self.f_first_ch])
            self.qf[self.f_qp[capped], L.QF_LINE] = workload.flow_rate_bps[capped]
            self.qi[self.f_qp[capped], L.QI_CAP] = 1
            self._capped = bool(capped.any())
        self.qf[:, L.QF_RATE] = self.qf[:, L.QF_LINE]
        self.qf[:, L.QF_TARGET] = self.qf[:, L.QF_LINE]
        self.qf[:, L.QF_ALPHA] = 1.0  # DCQCN starts from alpha = 1
        self.max_hops = 2 * max(4, int(snapshot.node_tier.max(initial=0)) + 2) + 2
        self._alloc_slots(256)
        self.rob_hist = np.zeros(64, dtype=np.int64)

        # Transfers.
        self.t_pending = workload.transfer_prerequisites.astype(np.int32).copy()
        self.t_release = workload.transfer_release_ns.astype(np.int64) * 1000
        self.t_flow_off = workload.transfer_flow_offsets.astype(np.int64)
        per_transfer = np.diff(self.t_flow_off).astype(np.int32)
        self.t_unsent = per_transfer.copy()
        self.t_unarrived = per_transfer.copy()
        self.dep_off = workload.dependent_offsets.astype(np.int64)
        self.dep = workload.dependents.astype(np.int32)
        self.dep_arrival = workload.dependent_needs_arrival.astype(np.uint8)
        # Held whole: slot = transfer index (the ends are views of the offsets, the map the identity).
        self.t_flow_end = self.t_flow_off[1:]
        self.dep_end = self.dep_off[1:]
        # Every transfer exists (SC_MATERIALIZED is the count): no last dependent to check, no map.
        self.dep_last = np.zeros(0, dtype=np.int32)
        self.slot_of = np.zeros(0, dtype=np.int32)

        self._alloc_packets(4096)
        self.sc = np.zeros(L.SC_SIZE, dtype=np.int64)
        self.sc[L.SC_MATERIALIZED] = workload.transfer_count
        self.sc[L.SC_FREE], self.sc[L.SC_FREE_COUNT] = 0, len(self.p_flow)
        self.sc[L.SC_ROB_FREE], self.sc[L.SC_ROB_FREE_COUNT] = 0, len(self.rob_next)
        self.pr = np.zeros(L.PR_SIZE, dtype=np.int64)
        lb = config.load_balancing
        self.pr[L.PR_MODE] = mode_of(lb).packet_code(lb)
        self.pr[L.PR_MTU] = config.mtu_bytes
        self.pr[L.PR_HEADER] = config.header_bytes
        self.pr[L.PR_INTERVAL] = interval_ps
        self.pr[L.PR_BINS] = self.s_bytes.shape[0]
        self.pr[L.PR_FLOWLET_GAP] = lb.flowlet_gap_ns * 1000
        self.pr[L.PR_MAX_HOPS] = self.max_hops
        self.pr[L.PR_STOP] = config.time_limit_ns * 1000
        self.pr[L.PR_BUDGET] = _BUDGET
        self.sc[L.SC_BUDGET_END] = _BUDGET
        self.pr[L.PR_ROB_WORDS] = _ROB_WORDS
        self.pr[L.PR_MAX_TX] = int(
            np.ceil((config.mtu_bytes + config.header_bytes) * self.ch_ps_per_byte.max())
        )
        self.pr[L.PR_MAX_FLOWS_PER_TRANSFER] = int(per_transfer.max(initial=1))
        self.pr[L.PR_MAX_DEPENDENTS] = int(np.diff(self.dep_off).max(initial=1))
        self.pr[L.PR_GBN] = 1 if config.window_packets > 0 else 0
        self.pr[L.PR_WINDOW] = config.window_packets
        self.pr[L.PR_RTO] = config.retransmit_timeout_ns * 1000
        self.pr[L.PR_ACK_EVERY] = max(1, config.ack_every)
        self.pr[L.PR_DROP_FLOW], self.pr[L.PR_DROP_PSN] = config.drop_once or (-1, -1)
        self.pr[L.PR_MARK_FLOW], self.pr[L.PR_MARK_PSN] = config.mark_once or (-1, -1)
        self.pr[L.PR_PFC] = 1 if config.pfc else 0
        self.pr[L.PR_XOFF] = config.pfc_xoff_bytes
        self.pr[L.PR_XON] = config.pfc_xon_bytes
        self.pr[L.PR_HEADROOM] = config.pfc_headroom_bytes
        self.pf = np.zeros(L.PF_SIZE, dtype=np.float64)
        self.pf[L.PF_INV_INTERVAL] = 1.0 / interval_ps
        if config.dcqcn is not None:
            d = config.dcqcn
            self.pr[L.PR_DCQCN] = 1
            self.pr[L.PR_KMIN], self.pr[L.PR_KMAX] = d.kmin_bytes, d.kmax_bytes
            self.pr[L.PR_CNP_INTERVAL] = d.cnp_interval_ns * 1000
            self.pr[L.PR_ALPHA_TIMER] = d.alpha_timer_ns * 1000
            self.pr[L.PR_RATE_TIMER] = d.rate_increase_timer_ns * 1000
            self.pr[L.PR_BYTE_COUNTER] = d.byte_counter_bytes
            self.pr[L.PR_STAGES] = d.fast_recovery_stages
            self.pf[L.PF_PMAX], self.pf[L.PF_G] = d.pmax, d.g
            self.pf[L.PF_RAI], self.pf[L.PF_RHAI] = d.rate_ai_bps, d.rate_hai_bps
            self.pf[L.PF_MIN_RATE] = d.min_rate_bps
        self.pr[L.PR_LINK_EVENTS] = 1 if config.link_events else 0
        self.pr[L.PR_RATE_CAP] = 1 if self._capped else 0
        if config.vl_buffer_bytes:
            self.pr[L.PR_CREDITS] = 1
        self.ch_sink = self._sinks(config, target, is_switch)
        self.rng = np.array(
            [np.uint64(config.seed * 0x9E3779B97F4A7C15 % 2**64 or 0x2545F4914F6CDD1D)], dtype=np.uint64
        )
        self._alloc_heap(4096)  # grows with the events pending, not the transfers of the run
        # The first events: transfers with no prerequisite, at their release time.
        self.pool: TransferPool | None = None
        if workload.stream is not None:  # the per-flow arrays so far are its QPs' templates
            release = int(self.t_release.min(initial=0))
            self.pool = TransferPool(self, workload.stream, config.mtu_bytes, release)
            self.pool.materialize(self.schedule)
        else:
            for t in np.flatnonzero(self.t_pending == 0):
                self.schedule(int(self.t_release[t]), L.EV_RELEASE, int(t))
        for event in config.link_events:
            self.schedule(event.time_ns * 1000, L.EV_LINK, event.link << 1 | int(event.up))
        for i, epoch in enumerate(config.reroutes):
            self.schedule(epoch.time_ns * 1000, L.EV_REROUTE, i)

    def install_routes(self, snapshot: FabricSnapshot, routes: FlowRoutes, flow_route: np.ndarray) -> None:
        """Forward by `snapshot`'s routes from now on (at the start, and at each routing epoch)."""
        walker = RouteWalker(snapshot, self._config.switch_latency_ns)
        # Equal-cost groups of every (switch, destination slot), DOWN channels already removed. Only
        # switches choose (a NIC's QP is bound to its port), so hosts get no rows: a table a quarter
        # the size, which the per-hop lookup reads from cache more often.
        switches = np.flatnonzero(snapshot.node_kind == _NODE_KIND_SWITCH)
        self.node_row = np.full(snapshot.num_nodes, -1, dtype=np.int32)
        self.node_row[switches] = np.arange(len(switches), dtype=np.int32)
        real = len(self.destinations)
        # Each (switch row, slot) names its group by its span in g_ch, row-major: the destinations'
        # slots, then the pinned flows' (one channel at each switch of their paths; empty elsewhere).
        # The destinations' groups are slices of the walker's channels, which every group with the
        # same members shares (a switch's up-ports serve every remote destination): no group is
        # copied (k=32 with 8,192 destinations: 537 MB and 10 s of copying before).
        keys = len(switches) * self.num_dest
        too_large = f"{snapshot.fabric}: the forwarding tables are too large to simulate"
        if len(walker.channels) + len(self.pin_channel) >= 2**31:
            raise FailedPrecondition(too_large)
        self.g_ch = np.concatenate([walker.channels, self.pin_channel]).astype(np.int32)
        # int32 spans and int16 positions: every hop of a per-packet mode reads them at a random
        # (switch, destination), so a smaller table stays in cache more often.
        self.g_span = np.zeros((keys, 2), dtype=np.int32)
        # A batch of switches at a time: the walk's temporaries are ~150 bytes a (switch,
        # destination), 1.5 GB at once for k=32's 1,280 switches and 8,192 destinations.
        batch = max(1, _GROUP_BATCH_KEYS // max(1, real))
        table = self.g_span.reshape(len(switches), self.num_dest, 2)  # a view
        for first in range(0, len(switches), batch):
            last = min(first + batch, len(switches))
            start, size = walker.groups(
                np.repeat(switches[first:last].astype(np.int64), real),
                np.tile(self.destinations.astype(np.int64), last - first),
            )
            if size.max(initial=0) >= 2**15:
                raise FailedPrecondition(too_large)
            table[first:last, :real, 0] = start.reshape(last - first, real)
            table[first:last, :real, 1] = (start + size).reshape(last - first, real)
        pin_keys = self.node_row[self.pin_node].astype(np.int64) * self.num_dest + real + self.pin_of
        pinned_at = len(walker.channels) + np.arange(len(self.pin_channel))
        self.g_span[pin_keys, 0] = pinned_at
        self.g_span[pin_keys, 1] = pinned_at + 1
        self.g_next = np.zeros(keys, dtype=np.int16)  # round-robin position of each group
        # Each flow's route (hop h is the h-th channel), which a mode that pins flows (ECMP) follows.
        self.f_path_off = routes.offsets[flow_route].astype(np.int64)
        self.f_path_end = routes.offsets[flow_route + 1].astype(np.int64)
        self.path_ch = routes.channels.astype(np.int32)

    def _pin_slots(self, snapshot: FabricSnapshot, workload: Workload) -> np.ndarray | None:
        """Forwarding slots of the pinned flows; returns each pinned flow's slot (None: none pinned).

        Every switch picks a packet's output from the group of (switch, the flow's slot), so a flow
        whose slot holds, at each switch of its path, just the path's next channel takes that channel
        in every mode: ECMP, ADAPTIVE, SPRAY and FLOWLET all return the only member of a group of one
        (a pinned flow is never rebalanced). Paths share a slot where they agree at every switch they
        have in common (first fit), which keeps the tables small. Sets `pin_slot_count` and the
        entries (`pin_of`, `pin_node`, `pin_channel`: slot, switch, channel).
        """
        self.pin_slot_count = 0
        self.pin_of = self.pin_node = self.pin_channel = np.zeros(0, dtype=np.int64)
        pinned = workload.pinned
        if not pinned.any():
            return None
        offsets, channels, row = pinned_path_rows(workload, pinned)
        source = snapshot.channel_source()
        slots: list[dict[int, int]] = []
        slot_of_path = np.empty(len(offsets) - 1, dtype=np.int64)
        for p in range(len(offsets) - 1):
            # The switches a path leaves (its first channel leaves the source host: the NIC's port).
            hops = {int(source[c]): int(c) for c in channels[offsets[p] + 1 : offsets[p + 1]]}
            fits = (i for i, table in enumerate(slots) if all(table.get(n, c) == c for n, c in hops.items()))
            slot = next(fits, len(slots))
            if slot == len(slots):
                slots.append({})
            slots[slot].update(hops)
            slot_of_path[p] = slot
        entries = [(i, node, channel) for i, table in enumerate(slots) for node, channel in table.items()]
        self.pin_slot_count = len(slots)
        if entries:
            table = np.array(entries, dtype=np.int64)
            self.pin_of, self.pin_node, self.pin_channel = table[:, 0], table[:, 1], table[:, 2]
        return slot_of_path[row].astype(np.int32)

    def _first_channels(self, snapshot: FabricSnapshot, walker: RouteWalker) -> np.ndarray:
        workload = self._workload
        # A mode that pins each flow to one path (ECMP) binds its QP to the path's first channel.
        if mode_of(self._config.load_balancing).pins_flows:
            return self.path_ch[self.f_path_off].astype(np.int32)
        # A QP is bound to one NIC port: the LFT choice toward its destination, or its pinned path's.
        pinned = workload.pinned
        source_nodes = snapshot.host_nodes[workload.flow_source].astype(np.int64)
        first, count = walker.groups(source_nodes, workload.flow_destination.astype(np.int64))
        if (count[~pinned] == 0).any():
            raise FailedPrecondition("a source host has no route to its destination (all uplinks down)")
        channels = walker.channels[np.where(count > 0, first, 0)].astype(np.int32)
        if pinned.any():
            assert workload.pinned_offsets is not None and workload.pinned_channels is not None
            channels[pinned] = workload.pinned_channels[workload.pinned_offsets[:-1][pinned]]
        return channels

    def _sinks(self, config: PacketEngineConfig, target: np.ndarray, is_switch: np.ndarray) -> np.ndarray:
        """Channels whose packets are delivered as they start (`Channels.sink`): a switch's port to a
        host it is the only way into (so a flow's packets reach it in the order they start), with
        no bit errors, in a run where nothing acts on a packet on the wire or on what its delivery
        changes before it arrives: no link events or drop hook, no DCQCN (a delivery changes its
        QP's state, which the QP's own timers read), and not Go-Back-N under FLOWLET (a delivery that
        ends a flow takes its flowlet table from the late copies its sender may still have on the
        way). Credits are spent and returned as the packet starts; a host holds unlimited credit."""
        into = np.bincount(target, minlength=is_switch.shape[0])
        sink = (self.ch_from_host == 0) & ~is_switch[target] & (into[target] == 1) & (self.ch_loss_kind == 0)
        flowlet = self.pr[L.PR_MODE] == L.MODE_FLOWLET  # (set before the sinks)
        quiet = SINK_DELIVERY and not (
            config.link_events
            or config.dcqcn is not None
            or config.drop_once
            or (config.window_packets > 0 and flowlet)
        )
        return (sink & quiet).astype(np.uint8)

    def _link_losses(self, channels: int, losses: tuple[LinkLoss, ...]) -> None:
        self.ch_loss_kind = np.zeros(channels, dtype=np.int8)
        self.ch_loss_a = np.zeros(channels)  # BER: log(1 - ber); GE: good-state loss
        self.ch_loss_b = np.zeros(channels)  # GE: bad-state loss
        self.ch_loss_c = np.zeros(channels)  # GE: P(good -> bad) per packet
        self.ch_loss_d = np.zeros(channels)  # GE: P(bad -> good) per packet
        self.ch_loss_start = np.zeros(channels, dtype=np.int64)
        self.ch_loss_end = np.full(channels, np.iinfo(np.int64).max, dtype=np.int64)
        self.ch_ge_bad = np.zeros(channels, dtype=np.uint8)
        self.ch_rcv_errors = np.zeros(channels, dtype=np.int64)
        for loss in losses:
            for c in (2 * loss.link, 2 * loss.link + 1):
                self.ch_loss_kind[c] = loss.kind
                if loss.kind == 1:
                    self.ch_loss_a[c] = np.log1p(-loss.ber)
                else:
                    self.ch_loss_a[c], self.ch_loss_b[c] = loss.good_loss, loss.bad_loss
                    self.ch_loss_c[c], self.ch_loss_d[c] = loss.p_good_to_bad, loss.p_bad_to_good
                self.ch_loss_start[c] = loss.start_ns * 1000
                if loss.end_ns:
                    self.ch_loss_end[c] = loss.end_ns * 1000

    # -- allocation and growth ---------------------------------------------------------------------
    def _alloc_series(self, channels: int, bins: int) -> None:
        # At most what fits: a fixed interval whose run outlasts these bins doubles (grow_bins).
        bins = max(2, min(bins, MAX_SERIES_BYTES // max(1, channels * self._series_cell)))
        bins += bins % 2  # even: doubling the interval merges columns in pairs
        # Bin-major ([bins, channels]): at any moment every channel writes into the same bin, so the
        # writes of a stretch of simulated time share a few cache lines instead of one per channel.
        self.s_bytes = np.zeros((bins, channels), dtype=np.float64)
        self.s_qpeak = np.zeros((bins, channels), dtype=np.int32)
        self.s_qint = np.zeros((bins, channels), dtype=np.float64)  # byte x ps: float32 loses sums
        self.s_drops = np.zeros((bins, channels), dtype=np.int32)
        self.s_ev = np.zeros((bins, channels, self._counter_columns), dtype=np.int64)

    def _alloc_packets(self, count: int) -> None:
        self.p_flow = np.full(count, -1, dtype=np.int32)  # -1: a free slot
        self.p_seq = np.zeros(count, dtype=np.int64)
        self.p_payload = np.zeros(count, dtype=np.int32)
        self.p_wire = np.zeros(count, dtype=np.int32)
        self.p_hop = np.zeros(count, dtype=np.int32)
        self.p_ch = np.zeros(count, dtype=np.int32)
        self.p_in = np.full(count, -1, dtype=np.int32)
        self.p_ecn = np.zeros(count, dtype=np.uint8)
        self.p_next = np.arange(1, count + 1, dtype=np.int32)
        self.p_next[-1] = -1

    def _alloc_slots(self, count: int) -> None:
        self.rob_bits = np.zeros((count, _ROB_WORDS), dtype=np.uint64)
        self.rob_lost = np.zeros((count, _ROB_WORDS), dtype=np.uint64)
        self.rob_next = np.arange(1, count + 1, dtype=np.int32)
        self.rob_next[-1] = -1
        self.f_fl_ch = np.full(count * self.max_hops, -1, dtype=np.int32)
        self.f_fl_node = np.full(count * self.max_hops, -1, dtype=np.int32)
        self.f_fl_last = np.zeros(count * self.max_hops, dtype=np.int64)

    def _alloc_heap(self, count: int) -> None:
        max_tx = int(self.pr[L.PR_MAX_TX])
        shift, buckets = wheel_geometry(max_tx, int(self.ch_delay_ps.max(initial=0)), len(self.ch_target))
        self.queue = new_queue(count, shift, buckets, self._config.seed)

    def schedule(self, time_ps: int, kind: int, arg: int) -> None:
        """Schedule an event from Python (the first ones; a streamed run's releases), as the loop does."""
        push(Heap(**self.queue), time_ps, kind, arg)
        self.sc[L.SC_HEAP] += 1
        if self.sc[L.SC_HEAP] + 8 >= queue_capacity(self.queue):
            self.grow_heap()

    def grow_heap(self) -> None:
        self.queue = grow_queue(self.queue)

    def _extend_free_list(self, next_slot: np.ndarray, head: int, count: int) -> np.ndarray:
        """Double a pool whose free slots are chained through `next_slot`: the new slots go in front
        of the remaining free list (whose head and length are sc[head] and sc[count])."""
        old = len(next_slot)
        extra = np.arange(old + 1, 2 * old + 1, dtype=np.int32)
        extra[-1] = self.sc[head]
        self.sc[head] = old
        self.sc[count] += old
        return np.concatenate([next_slot, extra])

    def grow_packets(self) -> None:
        self.p_flow = np.concatenate([self.p_flow, np.full_like(self.p_flow, -1)])  # -1: a free slot
        for name in ("p_seq", "p_payload", "p_wire", "p_hop", "p_ch", "p_in", "p_ecn"):
            a = getattr(self, name)
            setattr(self, name, np.concatenate([a, np.zeros_like(a)]))
        self.p_next = self._extend_free_list(self.p_next, L.SC_FREE, L.SC_FREE_COUNT)

    def grow_slots(self) -> None:
        self.rob_bits = np.concatenate([self.rob_bits, np.zeros_like(self.rob_bits)])
        self.rob_lost = np.concatenate([self.rob_lost, np.zeros_like(self.rob_lost)])
        self.rob_next = self._extend_free_list(self.rob_next, L.SC_ROB_FREE, L.SC_ROB_FREE_COUNT)
        self.f_fl_ch = np.concatenate([self.f_fl_ch, np.full_like(self.f_fl_ch, -1)])
        self.f_fl_node = np.concatenate([self.f_fl_node, np.full_like(self.f_fl_node, -1)])
        self.f_fl_last = np.concatenate([self.f_fl_last, np.zeros_like(self.f_fl_last)])

    def grow_bins(self, fixed_interval: bool) -> None:
        bins, channels = self.s_bytes.shape
        if fixed_interval and channels * 2 * bins * self._series_cell <= MAX_SERIES_BYTES:
            # The caller chose the interval: keep it, add columns (while they fit; then it doubles).
            for name in ("s_bytes", "s_qpeak", "s_qint", "s_drops", "s_ev"):
                a = getattr(self, name)
                setattr(self, name, np.concatenate([a, np.zeros_like(a)], axis=0))
            self.pr[L.PR_BINS] = self.s_bytes.shape[0]
            return
        # Double the interval: column j of the new series is columns 2j and 2j+1 of the old.
        for name in ("s_bytes", "s_qint", "s_drops", "s_ev"):
            a = getattr(self, name)
            merged = np.zeros_like(a)
            merged[: a.shape[0] // 2] = a[0::2] + a[1::2]
            setattr(self, name, merged)
        a = self.s_qpeak
        merged = np.zeros_like(a)
        merged[: a.shape[0] // 2] = np.maximum(a[0::2], a[1::2])
        self.s_qpeak = merged
        self.pr[L.PR_INTERVAL] *= 2
        self.pf[L.PF_INV_INTERVAL] = 1.0 / self.pr[L.PR_INTERVAL]

    def state(self) -> tuple:
        """The loop's arguments: the arrays as they are now, in the groups of `state.py`."""
        return (
            Run(self.sc, self.pr, self.pf, self.rng),
            Heap(**self.queue),
            Channels(
                self.ch_target,
                self.ch_source,
                self.ch_ps_per_byte,
                self.ch_hot,
                self.ch_prop_ps,
                self.ch_buffer,
                self.ch_from_host,
                self.ch_sink,
                self.ch_busy,
                self.ch_drops,
                self.ch_peak_q,
                self.ch_rr,
                self.ch_ring_len,
                self.cn,
                self.ch_ing_bytes,
                self.ch_paused,
                self.ch_pause_sent,
                self.ch_txd_pending,
                self.ch_pause_frames,
                self.ch_pause_ps,
                self.ch_pause_since,
                self.ch_flow_bits,
            ),
            LossModel(
                self.ch_loss_kind,
                self.ch_loss_a,
                self.ch_loss_b,
                self.ch_loss_c,
                self.ch_loss_d,
                self.ch_loss_start,
                self.ch_loss_end,
                self.ch_ge_bad,
                self.ch_rcv_errors,
            ),
            Series(self.s_bytes, self.s_qpeak, self.s_qint, self.s_drops, self.s_ev),
            Routing(
                self.node_row,
                self.g_span,
                self.g_ch,
                self.num_dest,
                self.g_next,
                self.f_path_off,
                self.f_path_end,
                self.path_ch,
            ),
            Flows(
                self.f_dst_node,
                self.f_dst_slot,
                self.f_size,
                self.f_sent,
                self.f_recv,
                self.f_lost,
                self.f_next_seq,
                self.f_first_ch,
                self.f_start,
                self.f_finish,
                self.f_last_rx,
                self.f_sink_wait,
                self.f_transfer,
                self.act_next,
                self.act_prev,
                self.f_rob_slot,
                self.f_rob_bytes,
                self.f_npkts,
                self.f_snd_nxt,
                self.f_snd_una,
                self.f_high,
                self.f_linked,
                self.f_left,
                self.f_nak,
                self.f_since_ack,
                self.f_rto_at,
                self.f_ack_lat,
                self.fi,
                self.f_qp,
                self.f_fl_ch,
                self.f_fl_node,
                self.f_fl_last,
                self.f_pend,
                self.f_gen,
            ),
            Reorder(self.rob_bits, self.rob_lost, self.rob_next, self.rob_hist),
            Qps(self.qi, self.qf),
            Transfers(
                self.t_pending,
                self.t_release,
                self.t_flow_off,
                self.t_flow_end,
                self.t_unsent,
                self.t_unarrived,
                self.dep_off,
                self.dep_end,
                self.dep,
                self.dep_arrival,
                self.dep_last,
                self.slot_of,
            ),
            Packets(
                self.p_flow,
                self.p_seq,
                self.p_payload,
                self.p_wire,
                self.p_hop,
                self.p_ch,
                self.p_in,
                self.p_ecn,
                self.p_next,
            ),
        )
