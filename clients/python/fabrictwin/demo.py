"""The demo scenario `make run` shows: ECMP against per-packet load balancing on a k=8 fat-tree.

A ring AllReduce over all 128 hosts, ranks scattered so that consecutive ranks sit on different
edge switches: every ring hop leaves its edge switch, four flows per edge share four uplinks, and
ECMP's hash of the low-entropy RoCEv2 5-tuple pins some of them onto the same uplink while others
idle (the seeds' "simultaneous flowlets"). Adaptive routing and spraying spread the same bytes
evenly. The demo prints the comparison, the diagnosis of the ECMP run's telemetry, and draws every
mode's edge-aggregation link utilisation, sorted, and ECMP's over time (PNGs, `fabrictwin[plots]`).
"""

from __future__ import annotations

import contextlib
import pathlib
from collections.abc import Callable
from typing import Any

from fabrictwin import plot_data, plots
from fabrictwin.client import Client
from fabrictwin.errors import AlreadyExistsError
from fabrictwin.extras import MissingExtraError
from fabrictwin.format import comparison_table
from fabrictwin.specs import collective_job, load_balancing
from fabrictwin.v1 import common_pb2, scenario_pb2

__all__ = ["run_demo"]

FABRIC_ID = "demo-ft8"
UPLINKS = "pod*-edge*->pod*-agg*"


def _fabric(client: Client) -> None:
    # A previous `make run` may have left it in .fabrictwin/: reuse it.
    with contextlib.suppress(AlreadyExistsError):
        client.fabrics.create_fat_tree(8, fabric_id=FABRIC_ID, display_name="k=8 fat-tree (demo)")


def run_demo(
    client: Client, out_dir: str | pathlib.Path = ".fabrictwin", say: Callable[[str], None] = print
) -> dict[str, Any]:
    """Run the demo scenario on the services `client` points at; returns what it printed, as data."""
    _fabric(client)
    modes = [
        load_balancing("ecmp", seed=1, label="ECMP"),
        load_balancing("adaptive", label="ADAPTIVE"),
        load_balancing("spray", label="SPRAY"),
    ]
    job = collective_job(ranks=128, size="1GiB", placement="scattered", label="allreduce-1GiB")
    scenario = client.scenarios.create(
        FABRIC_ID,
        [job],
        modes,
        display_name="ring AllReduce, 128 ranks scattered over a k=8 fat-tree",
        seed=7,
        store_telemetry=True,
    )
    say(f"scenario {scenario.name}: {scenario.display_name}; modes {', '.join(m.label for m in modes)}")
    run = client.scenarios.wait_run(client.scenarios.run(scenario.name).name, timeout=900)
    if run.state != common_pb2.JOB_STATE_SUCCEEDED:
        raise RuntimeError(f"{run.name} {common_pb2.JobState.Name(run.state)}: {run.error.message}")
    comparison = client.scenarios.compare(run.name)
    say("")
    say(comparison_table(comparison))
    shared = set.intersection(*(set(r.model_notes) for r in run.results))
    for note in sorted(shared):
        say(f"  note: {note}")
    for result in run.results:
        for note in result.model_notes:
            if note not in shared:
                say(f"  note ({result.label}): {note}")

    ecmp = run.results[0]
    diagnosis = client.scenarios.diagnose(ecmp.telemetry_source, ports=[UPLINKS])
    say("")
    say(f"diagnosis of {ecmp.label}'s telemetry ({ecmp.telemetry_source}, edge->aggregation uplinks):")
    for finding in diagnosis.findings:
        kind = scenario_pb2.FindingKind.Name(finding.kind).removeprefix("FINDING_KIND_")
        say(f"  {kind}: {finding.evidence}")
        say(f"    -> {finding.suggestion}")
    if not diagnosis.findings:
        say("  nothing found")

    say("")
    pictures = _pictures(client, run, pathlib.Path(out_dir), say)
    packet_run, packet_comparison = _packet_comparison(client, say)
    return {
        "run": run,
        "comparison": comparison,
        "diagnosis": diagnosis,
        "plot": pictures.get("utilisation", ""),
        "heatmap": pictures.get("heatmap", ""),
        "packet_run": packet_run,
        "packet_comparison": packet_comparison,
    }


def _pictures(
    client: Client, run: scenario_pb2.Run, out: pathlib.Path, say: Callable[[str], None]
) -> dict[str, str]:
    """Every mode's edge-aggregation links sorted on one time scale, and ECMP's over time."""
    out.mkdir(parents=True, exist_ok=True)
    try:
        # Tier 2, the edge-aggregation links: where the rings' flows meet (the scattered ring stays in
        # its pods, so the core links idle in every mode and would only blur the picture).
        panels, busy = plot_data.run_link_utilisation(client, run, tier=2)
        sorted_figure = plots.sorted_utilisation(
            panels, busy_ns=busy, title="Edge-aggregation links over the AllReduce, sorted, on one time scale"
        )
        ecmp = run.results[0]
        uplinks = plot_data.simulation_tier_series(client, ecmp.simulation, tier=2)
        heatmap = plots.link_heatmap(uplinks, title=f"{ecmp.label}: edge-aggregation links over time")
    except MissingExtraError as exc:
        say(f"no pictures: {exc.details}")
        return {}
    written = {
        "utilisation": str(plots.save(sorted_figure, out / "demo-link-utilisation.png")),
        "heatmap": str(plots.save(heatmap, out / "demo-ecmp-heatmap.png")),
    }
    for path in written.values():
        say(f"plot: {path}")
    return written


def _packet_comparison(
    client: Client, say: Callable[[str], None]
) -> tuple[scenario_pb2.Run, scenario_pb2.Comparison]:
    """The same ring, smaller, packet by packet: queues, drops, reordering, flowlets."""
    modes = [
        load_balancing("ecmp", seed=1, label="ECMP"),
        load_balancing("adaptive", label="ADAPTIVE"),
        load_balancing("spray", label="SPRAY"),
        load_balancing("flowlet", flowlet_gap_ns=2000, label="FLOWLET"),
    ]
    job = collective_job(ranks=128, size="16MiB", placement="scattered", label="allreduce-16MiB")
    scenario = client.scenarios.create(
        FABRIC_ID,
        [job],
        modes,
        display_name="the same ring, 16 MiB, packet by packet",
        fidelity="packet",
        seed=7,
    )
    say("")
    say(f"scenario {scenario.name}: {scenario.display_name} (1 MiB of buffer per switch port)")
    run = client.scenarios.wait_run(client.scenarios.run(scenario.name).name, timeout=900)
    if run.state != common_pb2.JOB_STATE_SUCCEEDED:
        raise RuntimeError(f"{run.name} {common_pb2.JobState.Name(run.state)}: {run.error.message}")
    comparison = client.scenarios.compare(run.name)
    say("")
    say(comparison_table(comparison))
    for mode in run.results:
        result = client.simulations.get(mode.simulation).result
        say(
            f"  {mode.label:<9} {result.packets_delivered:>9} packets delivered, {result.drops:>7} dropped, "
            f"{result.out_of_order_packets:>8} out of order, reorder buffer peak "
            f"{result.reorder_buffer_peak_bytes} B, {result.wall_seconds:.1f} s of engine time"
        )
    return run, comparison
