"""Replaying live flows on their mirrored fabric: first as observed, then under other load balancing.

The twin earns trust by reproducing what the live fabric did before it explores what it could do:

1. `observed_flows`: each live flow's bytes come from the mirrored counters (what its source host
   pushed into its leaf over the window: the leaf port's received bytes), its rate the median rate
   of the sampling intervals in which that port carried traffic, and its path the one the switches
   chose (`fabrictwin.path_trace`). Counters cannot tell apart two flows leaving one host: their
   host's bytes (and rate) are shared in proportion to the `weights` given (equal by default), which
   `Replay.notes` says.
2. `replay`: the flows run at FLOW fidelity (rate-capped flows are fluid) once pinned to their
   observed paths (label `AS_OBSERVED`), then unpinned under each mode asked for (SPRAY,
   ADAPTIVE, ...). Each result gives the bytes each port sent, so the as-observed replay can be
   checked against the measured counters and the modes compared with it.

The byte counts are the counters' (Ethernet frames as the NIC counts them), so FLOW fidelity, which
adds no wire header of its own, carries exactly those bytes.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence

from fabrictwin.client import Client
from fabrictwin.errors import FailedPreconditionError, InvalidArgumentError
from fabrictwin.path_trace import LiveFlow
from fabrictwin.specs import load_balancing
from fabrictwin.v1 import common_pb2, simulation_pb2, topology_pb2

__all__ = ["ModeResult", "ObservedFlow", "Replay", "observed_flows", "port_totals", "replay"]

AS_OBSERVED = "AS_OBSERVED"


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


def _active_rate_bps(times: Sequence[int], values: Sequence[float]) -> float:
    """The median bit rate over the sampling intervals that carried traffic (a tenth of the busiest
    or more), so the idle time around a burst and its partial first and last intervals do not dilute
    the rate the sender ran at; 0 when fewer than two samples."""
    rates = [
        value * 8e9 / (time - previous)
        for previous, time, value in zip(times, times[1:], values[1:], strict=False)
        if time > previous and not math.isnan(value)
    ]
    if not rates:
        return 0.0
    busy = sorted(rate for rate in rates if rate >= 0.1 * max(rates))
    return busy[len(busy) // 2] if busy else 0.0


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
) -> tuple[list[ObservedFlow], list[str]]:
    """The flows with their sizes and rates from the mirrored counters (module docstring), and notes."""
    if len(paths) != len(flows):
        raise InvalidArgumentError(f"paths: {len(paths)} paths for {len(flows)} flows")
    if end_ns <= start_ns:
        raise InvalidArgumentError("end_ns: the window must end after it starts")
    weights = list(weights) if weights is not None else [1.0] * len(flows)
    links = list(client.fabrics.links(fabric))
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
        f"{port}: {sum(1 for p in access if p == port)} flows share the host's bytes by weight"
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
        observed.append(ObservedFlow(flow, tuple(path), size, rate / 1e9))
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
