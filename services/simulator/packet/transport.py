"""Transport settings of a PACKET run: the defaults and how a spec's zeros resolve to them.

DCQCN (Zhu et al., "Congestion Control for Large-Scale RDMA Deployments", SIGCOMM 2015). The
defaults follow the paper's recommended settings where it gives one:

| setting | default | role |
|---|---|---|
| Kmin / Kmax | 5 KB / 200 KB | ECN marking starts above Kmin, every packet from Kmax |
| Pmax | 0.01 | marking probability just below Kmax (linear from Kmin) |
| g | 1/256 | alpha gain: alpha <- (1-g) alpha + g on a CNP, (1-g) alpha per quiet period |
| CNP interval (N) | 50 us | a receiver sends at most one CNP per QP per interval |
| alpha timer (K) | 55 us | period of alpha's decay without CNPs |
| rate-increase timer (T) | 55 us | one increase event per period |
| byte counter (B) | 10 MiB | one increase event per B bytes sent |
| F | 5 | increase events of fast recovery before additive increase |
| R_AI | 40 Mb/s | additive increase step of the target rate |
| R_HAI | 400 Mb/s | hyper increase step (our choice: ten times R_AI) |
| minimum rate | 100 Mb/s | a cut never goes below it (ns-3 HPCC's MinRate) |

On a CNP the sender sets its target rate to its current rate, cuts the current rate by a factor
(1 - alpha/2), then raises alpha. An increase event moves the current rate halfway to the target;
after F events of one counter the target grows by R_AI, after F events of both by i x R_HAI.

InfiniBand: one data VL (VL0) with `spec.DEFAULT_VL_BUFFER_BYTES` (64 KiB) of receive buffer per input port,
advertised as credits. Its reliable connection is Go-Back-N like RoCEv2's (`roce.window_bytes`
sets the window of both; InfiniBand defaults to `DEFAULT_IB_WINDOW_BYTES`).

Link-down routing reactions (`faults[i].reroute`), delays when `reroute_delay_ns` is 0:
SUBNET_MANAGER: the topology service's measured recompute time plus `SM_SWEEP_DELAY_NS` (trap,
heavy sweep and LFT upload: our assumption for a small fabric); ROUTING_PROTOCOL (BGP/OSPF with
BFD): `ROUTING_PROTOCOL_DELAY_NS`; FAST_RECOVERY (switch-local, SHIELD-like):
`FAST_RECOVERY_DELAY_NS`.
"""

from __future__ import annotations

from typing import Any

from services.common.errors import InvalidArgument
from services.common.snapshot import FabricSnapshot
from services.simulator.faults import RerouteModel
from services.simulator.packet.config import DcqcnSettings
from services.simulator.spec import DEFAULT_BUFFER_BYTES, WIRE_OVERHEAD_BYTES, SimulationSpec

__all__ = [
    "DEFAULT_IB_WINDOW_BYTES",
    "DEFAULT_PFC_XOFF_BYTES",
    "FAST_RECOVERY_DELAY_NS",
    "ROUTING_PROTOCOL_DELAY_NS",
    "SM_SWEEP_DELAY_NS",
    "dcqcn_settings",
    "pfc_thresholds",
    "reroute_delay_ns",
]

DEFAULT_IB_WINDOW_BYTES = 1 << 20
SM_SWEEP_DELAY_NS = 50_000_000
ROUTING_PROTOCOL_DELAY_NS = 1_000_000_000
FAST_RECOVERY_DELAY_NS = 10_000
DEFAULT_PFC_XOFF_BYTES = 64 * 1024


def pfc_thresholds(spec: SimulationSpec, snapshot: FabricSnapshot) -> dict[str, Any]:
    """PFC's XOFF, XON and headroom for the run (PacketEngineConfig fields; empty when PFC is off),
    each zero replaced by its default; InvalidArgument when they do not fit the port buffer.

    XOFF defaults to 64 KiB and XON to half of it. The headroom is what can still arrive after a
    PAUSE leaves: a round trip of the longest link (plus a switch's latency) at the fastest rate,
    and the packets being serialised at both ends. StartSimulation runs this (checks.py) before it
    accepts a spec, so the engine never meets a buffer too small for its thresholds.
    """
    if not spec.pfc:
        return {}
    header = spec.header_bytes or WIRE_OVERHEAD_BYTES[spec.transport]
    buffer = spec.buffer_bytes or DEFAULT_BUFFER_BYTES
    xoff = spec.pfc_xoff_bytes or DEFAULT_PFC_XOFF_BYTES
    xon = spec.pfc_xon_bytes or xoff // 2
    delay_ns = int(snapshot.link_latency_ns.max(initial=0)) + spec.switch_latency_ns
    rate = float(snapshot.link_rate_bps.max(initial=0))
    headroom = spec.pfc_headroom_bytes or int(2 * delay_ns * rate / 8e9) + 2 * (spec.mtu_bytes + header)
    if xon > xoff:
        raise InvalidArgument("roce.pfc_xon_bytes", f"XON {xon} is above XOFF {xoff}")
    if xoff + headroom > buffer:
        how = "" if spec.pfc_headroom_bytes else " (two round trips of the longest link at the fastest rate)"
        raise InvalidArgument(
            "roce.pfc_xoff_bytes",
            f"XOFF {xoff} + headroom {headroom}{how} is above the port buffer of {buffer} bytes"
            f"{'' if spec.buffer_bytes else ' (the default buffer_bytes)'}",
        )
    return {"pfc": True, "pfc_xoff_bytes": xoff, "pfc_xon_bytes": xon, "pfc_headroom_bytes": headroom}


def dcqcn_settings(spec: SimulationSpec) -> DcqcnSettings | None:
    """The run's DCQCN settings (None when off), each zero replaced by its default."""
    if not spec.dcqcn:
        return None
    return DcqcnSettings(
        kmin_bytes=spec.ecn_kmin_bytes or 5_000,
        kmax_bytes=spec.ecn_kmax_bytes or 200_000,
        pmax=spec.ecn_pmax or 0.01,
        g=spec.dcqcn_g or 1 / 256,
        cnp_interval_ns=spec.cnp_interval_ns or 50_000,
        alpha_timer_ns=spec.alpha_timer_ns or 55_000,
        rate_increase_timer_ns=spec.rate_increase_timer_ns or 55_000,
        byte_counter_bytes=spec.byte_counter_bytes or 10 * 1024 * 1024,
        fast_recovery_stages=spec.fast_recovery_stages or 5,
        rate_ai_bps=(spec.rate_ai_mbps or 40.0) * 1e6,
        rate_hai_bps=(spec.rate_hai_mbps or 400.0) * 1e6,
        min_rate_bps=(spec.min_rate_mbps or 100.0) * 1e6,
    )


def reroute_delay_ns(model: RerouteModel, configured_ns: int, measured_recompute_s: float) -> int:
    """How long after a link changes state the routing reaction takes effect."""
    if configured_ns:
        return configured_ns
    if model == RerouteModel.SUBNET_MANAGER:
        return int(measured_recompute_s * 1e9) + SM_SWEEP_DELAY_NS
    if model == RerouteModel.ROUTING_PROTOCOL:
        return ROUTING_PROTOCOL_DELAY_NS
    return FAST_RECOVERY_DELAY_NS
