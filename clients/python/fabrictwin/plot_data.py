"""What each picture of `fabrictwin.plots` needs, fetched from the services: a run's link
utilisation per mode, a tier's link series (idle links included), a run's flows per mode.

The simulator reports only the link directions that carried traffic; the links a mode left idle
are the point of the pictures, so they are added back here, from the fabric, at zero.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from fabrictwin.client import Client
from fabrictwin.errors import InvalidArgumentError
from fabrictwin.names import resource_name
from fabrictwin.v1 import common_pb2, scenario_pb2, simulation_pb2, telemetry_pb2

__all__ = [
    "Channel",
    "fabric_channels",
    "run_flows",
    "run_link_utilisation",
    "simulation_tier_series",
    "telemetry_utilisation_series",
]


@dataclass(frozen=True)
class Channel:
    """One direction of a link, as the simulator names it (`leaf-0->spine-1`)."""

    link: int
    direction: int
    display_name: str
    tier: int


def _short(node: str) -> str:
    return node.rsplit("/", 1)[-1]


def fabric_channels(client: Client, fabric: str) -> list[Channel]:
    """Both directions of every link of `fabric`, with the link's tier (the higher of its ends':
    1 host-leaf, 2 leaf-spine, 3 spine-core)."""
    tiers, names = {}, {}
    for node in client.fabrics.nodes(fabric):
        tiers[node.name] = node.tier
        names[node.name] = node.display_name or _short(node.name)
    channels = []
    for link in client.fabrics.links(fabric):
        tier = max(tiers.get(link.node_a, 0), tiers.get(link.node_b, 0))
        a, b = names.get(link.node_a, _short(link.node_a)), names.get(link.node_b, _short(link.node_b))
        channels.append(Channel(link.index, 0, f"{a}->{b}", tier))
        channels.append(Channel(link.index, 1, f"{b}->{a}", tier))
    return channels


def _in_tier(tier: int | None, link_tier: int) -> bool:
    """`tier` None: the switch-to-switch links (tier 2 and above), where load balancing matters."""
    return link_tier >= 2 if tier is None else link_tier == tier


def _label(result: scenario_pb2.ModeResult) -> str:
    if not result.sweep_point:
        return result.label
    return result.label + " [" + ",".join(f"{k}={v}" for k, v in sorted(result.sweep_point.items())) + "]"


def _succeeded(run: scenario_pb2.Run) -> list[scenario_pb2.ModeResult]:
    done = [r for r in run.results if r.state == common_pb2.JOB_STATE_SUCCEEDED and r.simulation]
    if not done:
        raise InvalidArgumentError(f"{run.name}: no mode result succeeded, nothing to draw")
    return done


def run_link_utilisation(
    client: Client, run: scenario_pb2.Run, *, tier: int | None = None
) -> tuple[dict[str, list[float]], dict[str, int]]:
    """Per succeeded mode result of `run`: every link direction's mean utilisation in `tier` (idle
    ones as 0), and the mode's completion time; what `plots.sorted_utilisation` draws."""
    results = _succeeded(run)
    in_tier = sum(_in_tier(tier, c.tier) for c in fabric_channels(client, run.scenario.fabric))
    panels: dict[str, list[float]] = {}
    busy: dict[str, int] = {}
    for result in results:
        simulation = client.simulations.get(result.simulation).result
        used = [link.mean_utilisation for link in simulation.links if _in_tier(tier, link.tier)]
        panels[_label(result)] = used + [0.0] * max(0, in_tier - len(used))
        busy[_label(result)] = result.jobs[0].completion_ns if result.jobs else result.makespan_ns
    return panels, busy


def simulation_tier_series(
    client: Client, simulation: str, *, tier: int | None = None
) -> list[simulation_pb2.LinkSeries]:
    """A simulation's link series in `tier`, with an all-zero series for each link direction of the
    tier that carried nothing (the simulator stores only those that did)."""
    done = client.simulations.get(simulation)
    if done.state != common_pb2.JOB_STATE_SUCCEEDED:
        raise InvalidArgumentError(f"{done.name} has no results ({common_pb2.JobState.Name(done.state)})")
    channels = [c for c in fabric_channels(client, done.spec.fabric) if _in_tier(tier, c.tier)]
    wanted = {(c.link, c.direction) for c in channels}
    series = [s for s in client.simulations.link_series(done.name) if (s.link, s.direction) in wanted]
    if not series:
        raise InvalidArgumentError(f"{done.name}: no link of tier {tier or '2+'} carried traffic")
    template = series[0]
    bins = len(template.utilisation)
    seen = {(s.link, s.direction) for s in series}
    for c in channels:
        if (c.link, c.direction) not in seen:
            series.append(
                simulation_pb2.LinkSeries(
                    link=c.link,
                    direction=c.direction,
                    display_name=c.display_name,
                    start_ns=template.start_ns,
                    interval_ns=template.interval_ns,
                    bytes=[0] * bins,
                    utilisation=[0.0] * bins,
                )
            )
    return series


def telemetry_utilisation_series(
    client: Client,
    source: str,
    *,
    ports: Iterable[str] = ("group:uplinks",),
    start_ns: int = 0,
    end_ns: int = 0,
    step_ns: int = 0,
) -> list[telemetry_pb2.Series]:
    """Utilisation per port of a telemetry source (live or simulated), bucketed by `step_ns`."""
    series = list(
        client.telemetry.query_series(
            resource_name("sources", source),
            "utilisation",
            ports=list(ports),
            start_ns=start_ns,
            end_ns=end_ns,
            step_ns=step_ns,
        )
    )
    if not any(s.time_ns for s in series):
        raise InvalidArgumentError(f"{source}: no utilisation samples for {', '.join(ports)} in the window")
    return series


def run_flows(client: Client, run: scenario_pb2.Run) -> dict[str, list[simulation_pb2.FlowResult]]:
    """Every succeeded mode result's flows (start and finish per flow), by label."""
    return {
        _label(result): list(client.simulations.get(result.simulation).result.flows)
        for result in _succeeded(run)
    }
