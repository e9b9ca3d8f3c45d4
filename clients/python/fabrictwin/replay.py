"""Replaying live flows on their mirrored fabric: first as observed, then under other load balancing.

The twin earns trust by reproducing what the live fabric did before it explores what it could do:

1. `observed_flows`: each live flow's bytes and rate are *inferred* from the mirrored counters of
   every switch port on the traced paths (`fabrictwin.path_trace`): every port's transmitted bytes
   are the sum of the flows leaving by it, its received bytes the sum of those arriving, so the
   flows' bytes solve a non-negative least-squares system over all those counters (`nnls`), over the
   whole window for the sizes and step by step for the rates (each sample's bytes spread over the
   interval since the sample before it; `running_rate`: the mean over the steps it ran through). Flows
   the counters cannot tell apart (they cross exactly the same ports, or any combination the
   counters cannot separate) are named in `notes`; flows that cross the same ports share their
   bytes by `weights` (equal by default). `split="weights"` skips
   the inference and shares each host's bytes among its flows by `weights`, as asked.
2. `replay`: the flows run at FLOW fidelity (rate-capped flows are fluid) once pinned to their
   observed paths (label `AS_OBSERVED`), then unpinned under each mode asked for (SPRAY,
   ADAPTIVE, ...). Each result gives the bytes each port sent, so the as-observed replay can be
   checked against the measured counters and the modes compared with it.

Counters count frames as they leave the port: wire bytes. The replay fixes its framing (MTU 4096,
82 bytes of RoCEv2 overhead a packet) and asks each flow for the payload that puts exactly the
counted bytes on the wire, so no header is counted twice; rates are wire rates, as the FLOW engine
caps them.

The inference needs numpy (`pip install 'fabrictwin[replay]'`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from typing import Any

from fabrictwin.client import Client
from fabrictwin.errors import FailedPreconditionError, InvalidArgumentError
from fabrictwin.extras import require
from fabrictwin.path_trace import LiveFlow
from fabrictwin.specs import load_balancing
from fabrictwin.v1 import common_pb2, simulation_pb2, topology_pb2

__all__ = [
    "ModeResult",
    "ObservedFlow",
    "Replay",
    "nnls",
    "observed_flows",
    "payload_for_wire_bytes",
    "port_totals",
    "replay",
    "running_rate",
]

AS_OBSERVED = "AS_OBSERVED"
REPLAY_MTU_BYTES = 4096
REPLAY_HEADER_BYTES = 82  # RoCEv2 on the wire: Ethernet, IPv4, UDP, BTH, ICRC, FCS, preamble and gap


@dataclasses.dataclass(frozen=True)
class ObservedFlow:
    """A live flow as the twin replays it."""

    flow: LiveFlow
    path_links: tuple[str, ...]
    size_bytes: int
    rate_gbps: float


@dataclasses.dataclass
class ModeResult:
    """One replay: its simulation, and what each port sent (named as live counters name ports,
    `leaf0/p3`, so a replay compares with the mirrored tx_bytes directly)."""

    label: str
    simulation: str
    makespan_ns: int
    port_bytes: dict[str, int]
    port_utilisation: dict[str, float]  # mean over the run

    def busiest(self, ports: Iterable[str]) -> tuple[str, float]:
        """The busiest of `ports` and its mean utilisation."""
        chosen = {port: self.port_utilisation.get(port, 0.0) for port in ports}
        port = max(sorted(chosen), key=lambda name: chosen[name])
        return port, chosen[port]


@dataclasses.dataclass
class Replay:
    """The as-observed replay and the other modes, for one set of live flows."""

    observed: ModeResult
    modes: list[ModeResult]
    notes: list[str]

    def compare(self, ports: Sequence[str]) -> list[dict[str, object]]:
        """Per mode, over `ports` (e.g. the leaves' uplinks): makespan, busiest port, max/mean, idle ports."""
        rows = []
        for result in (self.observed, *self.modes):
            values = [result.port_utilisation.get(port, 0.0) for port in ports]
            mean = sum(values) / len(values) if values else 0.0
            busiest, peak = result.busiest(ports)
            rows.append({
                "label": result.label,
                "makespan_ms": result.makespan_ns / 1e6,
                "busiest_port": busiest,
                "busiest_utilisation": peak,
                "max_over_mean": peak / mean if mean else 0.0,
                "idle_ports": sum(1 for value in values if value == 0.0),
            })  # fmt: skip
        return rows


def running_rate(rates: Sequence[float]) -> float:
    """The rate a sender ran at, from its rates interval by interval in time order (NaN: unknown).

    Intervals that carried traffic (a tenth of the busiest or more) are busy; the flow ran the whole
    of a busy interval whose neighbours are busy too, so the rate is the mean over those (a flow's
    first and last intervals are partly idle, and the idle time around it is no part of its rate).
    A flow too short to have such an interval: the median of its busy ones. 0 when none is busy."""
    known = [r for r in rates if not math.isnan(r)]
    peak = max(known, default=0.0)
    if peak <= 0:
        return 0.0
    busy = [not math.isnan(r) and r > 0 and r >= 0.1 * peak for r in rates]
    inner = [
        r for i, r in enumerate(rates) if busy[i] and 0 < i < len(rates) - 1 and busy[i - 1] and busy[i + 1]
    ]
    if inner:
        return sum(inner) / len(inner)
    ran = sorted(r for i, r in enumerate(rates) if busy[i])
    return ran[len(ran) // 2]


def _active_rate_bps(times: Sequence[int], values: Sequence[float]) -> float:
    """The rate a port's samples say its traffic ran at (`running_rate` of each sample's own
    interval); 0 when fewer than two samples."""
    return running_rate([
        value * 8e9 / (time - previous) if time > previous else math.nan
        for previous, time, value in zip(times, times[1:], values[1:], strict=False)
    ])  # fmt: skip


def port_totals(
    client: Client, source: str, ports: Sequence[str], metric: str, start_ns: int, end_ns: int
) -> dict[str, float]:
    """Per port, the sum of `metric` (per-interval amounts) in [start_ns, end_ns) of a telemetry source."""
    totals = dict.fromkeys(ports, 0.0)
    for series in client.telemetry.query_series(
        source, metric, ports=list(ports), start_ns=start_ns, end_ns=end_ns
    ):
        totals[series.port] = sum(value for value in series.values if not math.isnan(value))
    return totals


def _access_port(links: Sequence[topology_pb2.Link], host: str) -> str:
    """The twin port (`leaf0/p1`) of the switch end of `host`'s only link."""
    ends = []
    for link in links:
        a, b = link.node_a.rsplit("/", 1)[-1], link.node_b.rsplit("/", 1)[-1]
        if a == host:
            ends.append(f"{b}/p{link.port_b}")
        elif b == host:
            ends.append(f"{a}/p{link.port_a}")
    if len(ends) != 1:
        raise InvalidArgumentError(
            f"flows: host {host!r} has {len(ends)} links; the replay needs exactly one"
        )
    return ends[0]


def payload_for_wire_bytes(wire_bytes: int) -> int:
    """The payload whose packets put `wire_bytes` on the wire at the replay's framing (within one
    header: the last packet's share)."""
    packets = -(-wire_bytes // (REPLAY_MTU_BYTES + REPLAY_HEADER_BYTES))
    return max(1, wire_bytes - packets * REPLAY_HEADER_BYTES)


def nnls(matrix: Any, target: Any, tolerance: float = 1e-10) -> Any:
    """x >= 0 minimising ||matrix @ x - target|| (Lawson and Hanson's active-set method, as SciPy's
    `optimize.nnls`); numpy arrays in and out."""
    np = require("numpy", "replay", "Inferring flow rates from counters")
    a = np.asarray(matrix, dtype=float)
    b = np.asarray(target, dtype=float)
    columns = a.shape[1]
    x = np.zeros(columns)
    passive = np.zeros(columns, dtype=bool)
    scale = (
        tolerance * max(1.0, float(np.abs(a).max(initial=0.0))) * max(1.0, float(np.abs(b).max(initial=0.0)))
    )
    for _ in range(3 * columns + 10):
        gradient = a.T @ (b - a @ x)
        candidates = ~passive & (gradient > scale)
        if not candidates.any():
            break
        passive[int(np.argmax(np.where(candidates, gradient, -np.inf)))] = True
        while True:
            z = np.zeros(columns)
            z[passive] = np.linalg.lstsq(a[:, passive], b, rcond=None)[0]
            if (z[passive] > 0).all():
                x = z
                break
            blocking = passive & (z <= 0)
            step = np.min(x[blocking] / np.maximum(x[blocking] - z[blocking], 1e-300))
            x = x + step * (z - x)
            passive &= x > scale
            x[~passive] = 0.0
    return x


def _directions(
    links: dict[str, topology_pb2.Link], flow: LiveFlow, path: Sequence[str]
) -> list[tuple[str, str]]:
    """(port sending, port receiving) of each link of `path`, as `node/pN`, walking from the source."""
    out, here = [], flow.source
    for name in path:
        link = links.get(name)
        if link is None:
            raise InvalidArgumentError(f"paths: {name!r} is no link of the fabric")
        a, b = link.node_a.rsplit("/", 1)[-1], link.node_b.rsplit("/", 1)[-1]
        ends = {a: f"{a}/p{link.port_a}", b: f"{b}/p{link.port_b}"}
        if here not in ends:
            raise InvalidArgumentError(
                f"paths: {name} does not continue the path of {flow.source}->{flow.destination}"
            )
        there = b if here == a else a
        out.append((ends[here], ends[there]))
        here = there
    return out


def _raw_samples(
    client: Client, source: str, metric: str, ports: Sequence[str], start_ns: int, end_ns: int
) -> dict[str, tuple[list[int], list[float]]]:
    """Per port with samples in [start_ns, end_ns), its raw samples (time, amount since the sample
    before); ports the source does not have (a host's, unmirrored) are left out."""
    out = {}
    # A name asked as itself must exist; as a glob matching only it, it may be absent.
    globs = [f"{port[:-1]}[{port[-1]}]" for port in ports]
    for series in client.telemetry.query_series(
        source, metric, ports=globs, start_ns=start_ns, end_ns=end_ns, step_ns=0
    ):
        kept = [(t, v) for t, v in zip(series.time_ns, series.values, strict=True) if not math.isnan(v)]
        if kept:
            out[series.port] = ([t for t, _ in kept], [v for _, v in kept])
    return out


def _binned(np: Any, times: Sequence[int], amounts: Sequence[float], edges: Any) -> Any:
    """The amounts of one port's samples spread evenly over each sample's own interval (from the
    sample before it to its own time) and summed into the bins between `edges`; NaN for a bin its
    samples do not cover whole. The first sample only opens the first interval.

    A sample is stamped when the counters were read, not when the poll was due: a poll a little
    late carries more than one interval's bytes, and a bin must not count them as one interval's."""
    t = np.asarray(times, dtype=float)
    cumulative = np.concatenate(([0.0], np.cumsum(np.asarray(amounts[1:], dtype=float))))
    at_edges = np.interp(edges, t, cumulative)
    out = np.diff(at_edges)
    covered = (edges[:-1] >= t[0]) & (edges[1:] <= t[-1])
    return np.where(covered, out, np.nan)


def observed_flows(
    client: Client,
    source: str,
    fabric: str,
    flows: Sequence[LiveFlow],
    paths: Sequence[Sequence[str]],
    start_ns: int,
    end_ns: int,
    *,
    weights: Sequence[float] | None = None,
    split: str = "infer",
    step_ns: int = 1_000_000_000,
) -> tuple[list[ObservedFlow], list[str]]:
    """The flows with their sizes and rates from the mirrored counters (module docstring), and notes.

    `step_ns` is the interval the rates are inferred over (each sample's bytes spread over its own
    interval, so any step works; the polling interval or a multiple of it is the natural one);
    `split` is "infer" (the default) or "weights" (each host's bytes shared among its flows by
    `weights`, as asked, without looking at other ports)."""
    if len(paths) != len(flows):
        raise InvalidArgumentError(f"paths: {len(paths)} paths for {len(flows)} flows")
    if end_ns <= start_ns:
        raise InvalidArgumentError("end_ns: the window must end after it starts")
    if split not in ("infer", "weights"):
        raise InvalidArgumentError(f"split: {split!r} is neither 'infer' nor 'weights'")
    if step_ns <= 0:
        raise InvalidArgumentError("step_ns: must be positive")
    weights = list(weights) if weights is not None else [1.0] * len(flows)
    if len(weights) != len(flows) or any(not w > 0 for w in weights):
        raise InvalidArgumentError("weights: one positive weight per flow")
    links = list(client.fabrics.links(fabric))
    if split == "weights":
        return _split_by_weights(client, source, links, flows, paths, start_ns, end_ns, weights, step_ns)
    np = require("numpy", "replay", "Inferring flow rates from counters")
    by_name = {link.display_name: link for link in links}
    hops = [_directions(by_name, flow, path) for flow, path in zip(flows, paths, strict=True)]
    rows: dict[tuple[str, str], set[int]] = {}
    for f, pairs in enumerate(hops):
        for sending, receiving in pairs:
            rows.setdefault(("tx_bytes", sending), set()).add(f)
            rows.setdefault(("rx_bytes", receiving), set()).add(f)
    # Raw samples from a little before the window: the first sample in it needs the time of the one
    # before it to know the interval its bytes came in.
    lookback = max(4 * step_ns, 60_000_000_000)
    bins = (end_ns - start_ns) // step_ns
    edges = np.array([start_ns + k * step_ns for k in range(bins + 1)], dtype=float)
    measured: dict[tuple[str, str], Any] = {}
    totals_by_key: dict[tuple[str, str], float] = {}
    for metric in ("tx_bytes", "rx_bytes"):
        ports = sorted({port for kind, port in rows if kind == metric})
        raw = _raw_samples(client, source, metric, ports, max(0, start_ns - lookback), end_ns)
        for port, (times, amounts) in raw.items():
            inside = [a for t, a in zip(times, amounts, strict=True) if t >= start_ns]
            if not inside:
                continue
            totals_by_key[(metric, port)] = sum(inside)
            measured[(metric, port)] = _binned(np, times, amounts, edges) if bins else np.zeros(0)
    keys = sorted(key for key in rows if key in measured)
    seen = [f for f in range(len(flows)) if any(f in rows[key] for key in keys)]
    unseen = sorted(set(range(len(flows))) - set(seen))
    if unseen:
        raise FailedPreconditionError(
            f"no mirrored counter on the path of {flows[unseen[0]].source}->{flows[unseen[0]].destination}: "
            "mirror its switches' ports"
        )
    matrix = np.array([[1.0 if f in rows[key] else 0.0 for f in range(len(flows))] for key in keys])
    samples = np.array([measured[key] for key in keys]).reshape(len(keys), bins)  # [rows, bins]
    notes: list[str] = []
    # Flows crossing exactly the same counted ports cannot be told apart: one unknown, shared by weight.
    columns: dict[bytes, list[int]] = {}
    for f in range(len(flows)):
        columns.setdefault(matrix[:, f].tobytes(), []).append(f)
    groups = list(columns.values())
    merged = np.stack([matrix[:, group[0]] for group in groups], axis=1)
    for group in groups:
        if len(group) > 1:
            names = ", ".join(_flow_name(flows[f]) for f in group)
            notes.append(
                f"{names} cross the same counted ports: the counters cannot tell them apart; shared by weight"
            )
    rank = np.linalg.matrix_rank(merged)
    if rank < merged.shape[1]:
        _, _, vt = np.linalg.svd(merged)
        loose = np.flatnonzero(np.abs(vt[rank:]).max(axis=0) > 1e-9)
        names = ", ".join(_flow_name(flows[groups[g][0]]) for g in loose.tolist())
        notes.append(
            f"the counters do not determine {names} separately (only their sums): a least-squares split"
        )
    complete = ~np.isnan(samples)
    totals = np.array([totals_by_key[key] for key in keys])
    sizes_by_group = nnls(merged, totals)
    # A counter's error in a step is in proportion to its traffic (its sample stamped a little off,
    # the other switches' a little otherwise): each row weighed by its traffic's inverse, so a small
    # flow's rate comes from the ports only it crosses, not from a big one's busy uplink.
    scale = 1.0 / np.maximum(totals, 1.0)
    rates_by_group: list[list[float]] = [[math.nan] * bins for _ in groups]
    for t in range(bins):
        have = complete[:, t]
        if not have.any():
            continue
        amounts = nnls(merged[have] * scale[have, None], samples[have, t] * scale[have])
        for g, amount in enumerate(amounts.tolist()):
            rates_by_group[g][t] = amount * 8e9 / step_ns
    observed = []
    sizes = [0] * len(flows)
    rates = [0.0] * len(flows)
    for g, group in enumerate(groups):
        share = sum(weights[f] for f in group)
        rate = running_rate(rates_by_group[g])
        for f in group:
            sizes[f] = round(float(sizes_by_group[g]) * weights[f] / share)
            rates[f] = rate * weights[f] / share
    residual = float(np.abs(merged @ sizes_by_group - totals).max(initial=0.0))
    if residual > 0.01 * max(float(totals.max(initial=0.0)), 1.0):
        notes.append(
            f"the counters disagree with any split of the traced flows by up to {residual:,.0f} bytes on one "
            "port (other traffic on the paths, or a path traced wrong)"
        )
    seconds = (end_ns - start_ns) / 1e9
    for f, (flow, path) in enumerate(zip(flows, paths, strict=True)):
        if sizes[f] <= 0:
            raise FailedPreconditionError(
                f"{_flow_name(flow)}: the counters show none of its bytes in the window"
            )
        observed.append(
            ObservedFlow(
                flow,
                tuple(path),
                payload_for_wire_bytes(sizes[f]),
                (rates[f] or sizes[f] * 8 / seconds) / 1e9,
            )
        )
    return observed, notes


def _flow_name(flow: LiveFlow) -> str:
    return f"{flow.source}->{flow.destination}:{flow.udp_source_port}"


def _split_by_weights(
    client: Client,
    source: str,
    links: Sequence[topology_pb2.Link],
    flows: Sequence[LiveFlow],
    paths: Sequence[Sequence[str]],
    start_ns: int,
    end_ns: int,
    weights: Sequence[float],
    step_ns: int,
) -> tuple[list[ObservedFlow], list[str]]:
    """Each host's bytes (its leaf port's received bytes) shared among its flows by `weights`."""
    access = [_access_port(links, flow.source) for flow in flows]
    received: dict[str, float] = dict.fromkeys(access, 0.0)
    rate_bps: dict[str, float] = dict.fromkeys(access, 0.0)
    for series in client.telemetry.query_series(
        source, "rx_bytes", ports=sorted(set(access)), start_ns=start_ns, end_ns=end_ns
    ):
        received[series.port] = sum(value for value in series.values if not math.isnan(value))
        rate_bps[series.port] = _active_rate_bps(list(series.time_ns), list(series.values))
    share: dict[str, float] = {}
    for port, weight in zip(access, weights, strict=True):
        share[port] = share.get(port, 0.0) + weight
    notes = [
        f"{port}: {sum(1 for p in access if p == port)} flows share the host's bytes by weight, as asked"
        for port in sorted(share)
        if sum(1 for p in access if p == port) > 1
    ]
    seconds = (end_ns - start_ns) / 1e9
    observed = []
    for flow, path, port, weight in zip(flows, paths, access, weights, strict=True):
        size = int(received[port] * weight / share[port])
        if size <= 0:
            raise FailedPreconditionError(
                f"{flow.source}: its leaf port {port} received nothing in the window"
            )
        rate = rate_bps[port] * weight / share[port] or size * 8 / seconds
        observed.append(ObservedFlow(flow, tuple(path), payload_for_wire_bytes(size), rate / 1e9))
    return observed, notes


def _job(observed: Sequence[ObservedFlow], *, pinned: bool) -> simulation_pb2.Job:
    flows = [
        simulation_pb2.FlowSpec(
            source=item.flow.source,
            destination=item.flow.destination,
            size_bytes=item.size_bytes,
            udp_source_port=item.flow.udp_source_port,
            rate_gbps=item.rate_gbps,
            path_links=list(item.path_links) if pinned else [],
        )
        for item in observed
    ]
    return simulation_pb2.Job(
        label="live-flows", collective=simulation_pb2.COLLECTIVE_POINT_TO_POINT, flows=flows
    )


def _sending_ports(links: Iterable[topology_pb2.Link]) -> dict[tuple[int, int], str]:
    """(link, direction) -> the port that sends in that direction, `node/pN` (0: a->b, 1: b->a)."""
    ports = {}
    for link in links:
        ports[(link.index, 0)] = f"{link.node_a.rsplit('/', 1)[-1]}/p{link.port_a}"
        ports[(link.index, 1)] = f"{link.node_b.rsplit('/', 1)[-1]}/p{link.port_b}"
    return ports


def _result(
    client: Client,
    label: str,
    simulation: simulation_pb2.Simulation,
    ports: dict[tuple[int, int], str],
    timeout_s: float,
) -> ModeResult:
    done = client.simulations.wait(simulation.name, timeout=timeout_s)
    if done.state != common_pb2.JOB_STATE_SUCCEEDED:
        state = common_pb2.JobState.Name(done.state)
        raise FailedPreconditionError(f"{label}: simulation {done.name} ended {state}: {done.error.message}")
    result = client.simulations.get(done.name).result
    return ModeResult(
        label=label,
        simulation=done.name,
        makespan_ns=result.makespan_ns,
        port_bytes={ports[(t.link, t.direction)]: t.bytes for t in result.links},
        port_utilisation={ports[(t.link, t.direction)]: t.mean_utilisation for t in result.links},
    )


def replay(
    client: Client,
    fabric: str,
    observed: Sequence[ObservedFlow],
    *,
    modes: Iterable[str | common_pb2.LoadBalancing] = ("spray", "adaptive"),
    notes: Sequence[str] = (),
    timeout_s: float = 300.0,
) -> Replay:
    """Run the flows as observed (pinned) and under each of `modes` (unpinned), at FLOW fidelity."""
    if not observed:
        raise InvalidArgumentError("observed: no flows to replay")

    def spec(mode: common_pb2.LoadBalancing, pinned: bool) -> simulation_pb2.SimulationSpec:
        return simulation_pb2.SimulationSpec(
            fabric=fabric if fabric.startswith("fabrics/") else f"fabrics/{fabric}",
            fidelity=simulation_pb2.FIDELITY_FLOW,
            jobs=[_job(observed, pinned=pinned)],
            load_balancing=mode,
            mtu_bytes=REPLAY_MTU_BYTES,
            header_bytes=REPLAY_HEADER_BYTES,
        )

    as_observed = load_balancing("ecmp", label=AS_OBSERVED)
    started = [(AS_OBSERVED, client.simulations.start(spec(as_observed, True)))]
    for mode in modes:
        message = load_balancing(mode)
        label = message.label or common_pb2.LoadBalancingMode.Name(message.mode).removeprefix(
            "LOAD_BALANCING_MODE_"
        )
        started.append((label, client.simulations.start(spec(message, False))))
    ports = _sending_ports(client.fabrics.links(fabric))
    results = [_result(client, label, simulation, ports, timeout_s) for label, simulation in started]
    return Replay(results[0], results[1:], list(notes))
