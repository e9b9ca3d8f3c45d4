"""The demo scenario `make run` shows: ECMP against per-packet load balancing on a k=8 fat-tree.

A ring AllReduce over all 128 hosts, ranks scattered so that consecutive ranks sit on different
edge switches: every ring hop leaves its edge switch, four flows per edge share four uplinks, and
ECMP's hash of the low-entropy RoCEv2 5-tuple pins some of them onto the same uplink while others
idle (the seeds' "simultaneous flowlets"). Adaptive routing and spraying spread the same bytes
evenly. The demo prints the comparison, the diagnosis of the ECMP run's telemetry, and writes an SVG
of every mode's switch-link utilisation.
"""

from __future__ import annotations

import contextlib
import pathlib
from collections.abc import Callable
from typing import Any

from fabrictwin.client import Client
from fabrictwin.errors import AlreadyExistsError
from fabrictwin.format import comparison_table
from fabrictwin.plots import utilisation_panels_svg
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

    fabric = client.fabrics.get(FABRIC_ID)
    switch_channels = 2 * (fabric.link_count - fabric.host_count)
    panels = {}
    for result in run.results:
        links = client.simulations.get(result.simulation).result.links
        used = [link.mean_utilisation for link in links if link.tier >= 2]
        panels[result.label] = used + [0.0] * max(0, switch_channels - len(used))
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plot = out / "demo-link-utilisation.svg"
    plot.write_text(
        utilisation_panels_svg(panels, "Switch-to-switch link utilisation over the AllReduce, sorted")
    )
    say("")
    say(f"plot: {plot}")
    packet_run, packet_comparison = _packet_comparison(client, say)
    return {
        "run": run,
        "comparison": comparison,
        "diagnosis": diagnosis,
        "plot": str(plot),
        "packet_run": packet_run,
        "packet_comparison": packet_comparison,
    }


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
