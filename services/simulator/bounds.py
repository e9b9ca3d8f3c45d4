"""The range of every number in a simulation spec, checked before any arithmetic can overflow.

Both engines count simulated time in int64 (the packet engine in picoseconds: at most ~9.2e6 s),
packet sizes in int32 and queue peaks in int32, so each number a caller sends is bounded where the
arithmetic behind it stays exact, with room for the sums and products the engines form (a start
plus a duration, a time in ps, a window in packets). The bounds are far beyond what a real fabric
or run uses; `simulation.proto` documents each next to its field. `check_bounds` runs first in
`validate_spec`, so no later check sees a NaN or a number outside its range; an out-of-range value
is InvalidArgument naming the field (relative to the spec, as every check here).

A run without `time_limit_ns` stops at MAX_SIMULATED_NS (`run_time_limit_ns`), so no run counts
past it; `run_limit_notes` says so in the result, and when a sample interval was widened to fit.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterator, Sequence
from typing import Any

from services.common.errors import InvalidArgument

__all__ = [
    "MAX_BUFFER_BYTES",
    "MAX_BYTE_COUNTER_BYTES",
    "MAX_FAST_RECOVERY_STAGES",
    "MAX_FLOW_BYTES",
    "MAX_HEADER_BYTES",
    "MAX_INT32",
    "MAX_LATENCY_NS",
    "MAX_MTU_BYTES",
    "MAX_QPS_PER_CONNECTION",
    "MAX_RANKS",
    "MAX_RATE_GBPS",
    "MAX_SIMULATED_NS",
    "MAX_TIMER_NS",
    "MAX_VL_BUFFER_BYTES",
    "check_bounds",
    "run_limit_notes",
    "run_time_limit_ns",
]

MAX_INT32 = 2**31 - 1
# Simulated time: 1e15 ns (1e6 s, 11.6 days). In ps that is 1e18, a ninth of int64, leaving room
# for a start plus a run plus a timer.
MAX_SIMULATED_NS = 10**15
MAX_LATENCY_NS = 10**9  # a switch's forwarding latency: 1 s (real switches: under 1 us)
MAX_TIMER_NS = 10**12  # retransmission timeout, DCQCN timers, flowlet gap: 1000 s
MAX_FLOW_BYTES = 2**50  # 1 PiB per job message or flow
MAX_MTU_BYTES = 65_536
MAX_HEADER_BYTES = 4_096  # wire bytes per packet beyond the payload (RoCEv2 82, InfiniBand 26)
MAX_BUFFER_BYTES = 2**30  # per port: queue peaks are counted in int32
MAX_VL_BUFFER_BYTES = 2**24  # InfiniBand receive buffer per port and VL (16 MiB; real ones: KBs)
MAX_BYTE_COUNTER_BYTES = 2**40
MAX_FAST_RECOVERY_STAGES = 1_024
MAX_RATE_GBPS = 10_000.0  # 10 Tb/s: above any link; for rate caps and DCQCN steps (in Mb/s: 1e7)
MAX_RANKS = 2**24
MAX_QPS_PER_CONNECTION = 2**24  # every QP needs its own 24-bit QP number
MAX_ACK_EVERY = 2**20
MAX_VIRTUAL_LANES = 15

# (field relative to the spec, low, high) of the spec's own numbers; lists are checked per entry.
_SPEC_INTEGERS = (
    ("mtu_bytes", 1, MAX_MTU_BYTES),
    ("buffer_bytes", 0, MAX_BUFFER_BYTES),
    ("header_bytes", 0, MAX_HEADER_BYTES),
    ("switch_latency_ns", 0, MAX_LATENCY_NS),
    ("sample_interval_ns", 0, MAX_SIMULATED_NS),
    ("seed", 0, 2**64 - 1),
    ("time_limit_ns", 0, MAX_SIMULATED_NS),
    ("window_bytes", 0, MAX_BUFFER_BYTES),
    ("retransmit_timeout_ns", 0, MAX_TIMER_NS),
    ("ack_every", 0, MAX_ACK_EVERY),
    ("pfc_xoff_bytes", 0, MAX_BUFFER_BYTES),
    ("pfc_xon_bytes", 0, MAX_BUFFER_BYTES),
    ("pfc_headroom_bytes", 0, MAX_BUFFER_BYTES),
    ("ecn_kmin_bytes", 0, MAX_BUFFER_BYTES),
    ("ecn_kmax_bytes", 0, MAX_BUFFER_BYTES),
    ("cnp_interval_ns", 0, MAX_TIMER_NS),
    ("alpha_timer_ns", 0, MAX_TIMER_NS),
    ("rate_increase_timer_ns", 0, MAX_TIMER_NS),
    ("byte_counter_bytes", 0, MAX_BYTE_COUNTER_BYTES),
    ("fast_recovery_stages", 0, MAX_FAST_RECOVERY_STAGES),
    ("virtual_lanes", 0, MAX_VIRTUAL_LANES),
    ("vl_buffer_bytes", 0, MAX_VL_BUFFER_BYTES),
)
_SPEC_FRACTIONS = ("ecn_pmax", "dcqcn_g")  # [0, 1]
_SPEC_RATES_MBPS = ("rate_ai_mbps", "rate_hai_mbps", "min_rate_mbps")
_JOB_INTEGERS = (
    ("size_bytes", 0, MAX_FLOW_BYTES),
    ("rank_count", 0, MAX_RANKS),
    ("start_ns", 0, MAX_SIMULATED_NS),
    ("qps_per_connection", 0, MAX_QPS_PER_CONNECTION),
    ("iterations", 0, MAX_INT32),
    ("chunks", 0, MAX_INT32),
)
# A flow's udp_source_port (0..65535) and rate_gbps (0..MAX_RATE_GBPS) are checked with its other
# options (spec._validate_flow_options), which say what 0 means.
_FLOW_INTEGERS = (
    ("size_bytes", 1, MAX_FLOW_BYTES),
    ("start_ns", 0, MAX_SIMULATED_NS),
)
_FAULT_INTEGERS = (
    ("start_ns", 0, MAX_SIMULATED_NS),
    ("end_ns", 0, MAX_SIMULATED_NS),
    ("reroute_delay_ns", 0, MAX_SIMULATED_NS),
)
_FAULT_PROBABILITIES = ("bit_error_rate", "good_loss", "bad_loss", "p_good_to_bad", "p_bad_to_good")
_ROCE = {
    "window_bytes",
    "retransmit_timeout_ns",
    "pfc_xoff_bytes",
    "pfc_xon_bytes",
    "pfc_headroom_bytes",
    "cnp_interval_ns",
    "alpha_timer_ns",
    "rate_increase_timer_ns",
    "byte_counter_bytes",
    "fast_recovery_stages",
    "ecn_kmin_bytes",
    "ecn_kmax_bytes",
    *_SPEC_FRACTIONS,
    *_SPEC_RATES_MBPS,
}
_INFINIBAND = {"virtual_lanes", "vl_buffer_bytes"}


def _request_name(name: str) -> str:
    """Where a spec field sits in the request (`roce.ecn_pmax`, `infiniband.vl_buffer_bytes`)."""
    if name in _ROCE:
        return f"roce.{name}"
    if name in _INFINIBAND:
        return f"infiniband.{name}"
    return name


def _integer(field: str, value: object, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InvalidArgument(field, f"must be a whole number, got {str(value)[:40]!r}")
    if not low <= int(value) <= high:
        raise InvalidArgument(field, f"must be in {low}..{high}, got {value}")


def _real(field: str, value: object, low: float, high: float) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidArgument(field, f"must be a number, got {str(value)[:40]!r}")
    if not math.isfinite(value):
        raise InvalidArgument(field, f"must be a finite number, got {value}")
    if not low <= float(value) <= high:
        raise InvalidArgument(field, f"must be in {low:g}..{high:g}, got {value:g}")


def _numbers(spec: object) -> Iterator[tuple[str, object, float, float, bool]]:
    """(field, value, low, high, whole) for every number of the spec."""
    for name, low, high in _SPEC_INTEGERS:
        yield _request_name(name), getattr(spec, name), low, high, True
    for name in _SPEC_FRACTIONS:
        yield _request_name(name), getattr(spec, name), 0.0, 1.0, False
    for name in _SPEC_RATES_MBPS:
        yield _request_name(name), getattr(spec, name), 0.0, MAX_RATE_GBPS * 1000, False
    lb = getattr(spec, "load_balancing", None)
    if lb is not None:
        yield "load_balancing.seed", lb.seed, 0, 2**32 - 1, True
        yield "load_balancing.flowlet_gap_ns", lb.flowlet_gap_ns, 0, MAX_TIMER_NS, True
    for i, job in enumerate(getattr(spec, "jobs", ())):
        for name, low, high in _JOB_INTEGERS:
            yield f"jobs[{i}].{name}", getattr(job, name), low, high, True
        for j, flow in enumerate(job.flows):
            size, start = flow.size_bytes, flow.start_ns
            # The common case in one comparison: a spec may list 100,000s of flows.
            if (
                type(size) is int
                and type(start) is int
                and 0 < size <= MAX_FLOW_BYTES
                and 0 <= start <= MAX_SIMULATED_NS
            ):
                continue
            for name, low, high in _FLOW_INTEGERS:
                yield f"jobs[{i}].flows[{j}].{name}", getattr(flow, name), low, high, True
    for i, fault in enumerate(getattr(spec, "faults", ())):
        for name, low, high in _FAULT_INTEGERS:
            yield f"faults[{i}].{name}", getattr(fault, name), low, high, True
        for name in _FAULT_PROBABILITIES:
            yield f"faults[{i}].{name}", getattr(fault, name), 0.0, 1.0, False


def check_bounds(spec: object) -> None:
    """InvalidArgument naming the first number of `spec` (a SimulationSpec) outside its range."""
    for field, value, low, high, whole in _numbers(spec):
        if whole:
            _integer(field, value, int(low), int(high))
        else:
            _real(field, value, low, high)


def run_time_limit_ns(spec: Any) -> int:
    """Where a run stops: its time_limit_ns, else the most simulated time the engines count."""
    return spec.time_limit_ns or MAX_SIMULATED_NS


def run_limit_notes(spec: Any, jobs: Sequence[Any], time_limited: bool, interval_ns: int) -> list[str]:
    """Notes on where a run stopped early and on a sample interval widened to fit the series."""
    notes = []
    if time_limited:
        unfinished = ", ".join(job.label for job in jobs if not job.completed)
        if spec.time_limit_ns:
            notes.append(f"Stopped at time_limit_ns={spec.time_limit_ns}; unfinished jobs: {unfinished}.")
        else:
            notes.append(
                f"Stopped at {MAX_SIMULATED_NS} ns, the most simulated time the simulator counts; "
                f"unfinished jobs: {unfinished}."
            )
    if spec.sample_interval_ns and interval_ns != spec.sample_interval_ns:
        notes.append(
            f"sample_interval_ns={spec.sample_interval_ns} would give more per-link values than the series "
            f"hold for a run this long; the series use {interval_ns} ns."
        )
    return notes
