"""What a PACKET run is given: the engine's parameters, link losses, link events and routing epochs."""

from __future__ import annotations

import dataclasses

import numpy as np

from services.common.snapshot import FabricSnapshot
from services.simulator.paths import FlowRoutes
from services.simulator.spec import LoadBalancingSpec

__all__ = ["DcqcnSettings", "LinkEvent", "LinkLoss", "PacketEngineConfig", "RoutingEpoch"]


@dataclasses.dataclass(frozen=True)
class PacketEngineConfig:
    """Packet-level parameters of one run."""

    load_balancing: LoadBalancingSpec  # its mode (modes/) gives the forwarding code and the gap
    mtu_bytes: int
    header_bytes: int
    buffer_bytes: int
    switch_latency_ns: int
    seed: int
    sample_interval_ns: int = 0  # 0: chosen by the engine (at most MAX_BINS intervals)
    time_limit_ns: int = 0
    expected_end_ns: int = 0  # a guess of the run's length, to size the series
    window_packets: int = 0  # Go-Back-N window; 0: no reliable transport (drops are final)
    retransmit_timeout_ns: int = 0
    ack_every: int = 1
    link_losses: tuple[LinkLoss, ...] = ()
    drop_once: tuple[int, int] | None = None  # test hook: (flow, psn) lost once
    mark_once: tuple[int, int] | None = None  # test hook: (flow, psn) CE-marked once (DCQCN)
    pfc: bool = False
    pfc_xoff_bytes: int = 0
    pfc_xon_bytes: int = 0
    pfc_headroom_bytes: int = 0
    dcqcn: DcqcnSettings | None = None
    vl_buffer_bytes: int = 0  # InfiniBand credits: receive buffer per input port and VL; 0: no credits
    link_events: tuple[LinkEvent, ...] = ()
    reroutes: tuple[RoutingEpoch, ...] = ()  # in time order


@dataclasses.dataclass(frozen=True)
class RoutingEpoch:
    """From time_ns on, switches forward by `snapshot` (routes recomputed with some links down);
    `routes`/`flow_route` are the workload routed on it (ECMP's pinned paths)."""

    time_ns: int
    snapshot: FabricSnapshot
    routes: FlowRoutes
    flow_route: np.ndarray


@dataclasses.dataclass(frozen=True)
class DcqcnSettings:
    """ECN marking in the switches and DCQCN at the NICs (defaults: packet/transport.py)."""

    kmin_bytes: int
    kmax_bytes: int
    pmax: float
    g: float
    cnp_interval_ns: int
    alpha_timer_ns: int
    rate_increase_timer_ns: int
    byte_counter_bytes: int
    fast_recovery_stages: int
    rate_ai_bps: float
    rate_hai_bps: float
    min_rate_bps: float


@dataclasses.dataclass(frozen=True)
class LinkEvent:
    """Link `link` goes down (up=False) or comes back (up=True) at time_ns."""

    time_ns: int
    link: int
    up: bool


@dataclasses.dataclass(frozen=True)
class LinkLoss:
    """Bit errors on both directions of one link from start_ns to end_ns.

    kind 1: independent bit errors at `ber`; kind 2: Gilbert-Elliott, per packet move good->bad
    with `p_good_to_bad` and bad->good with `p_bad_to_good`, then lose with `good_loss`/`bad_loss`.
    """

    link: int
    kind: int
    start_ns: int = 0
    end_ns: int = 0  # 0: until the end
    ber: float = 0.0
    good_loss: float = 0.0
    bad_loss: float = 0.0
    p_good_to_bad: float = 0.0
    p_bad_to_good: float = 0.0
