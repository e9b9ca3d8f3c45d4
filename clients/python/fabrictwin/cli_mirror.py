"""`fabrictwin mirror --config mirror.toml`: keep the twin in sync with a live fabric until stopped."""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import threading

from fabrictwin.cli_common import leaf, warn
from fabrictwin.client import Client
from fabrictwin.fabric_mirror import CablingReport, FabricMirror, PollReport
from fabrictwin.mirror_config import load_mirror_config

__all__ = ["register"]


def _poll_line(report: PollReport) -> str:
    line = (
        f"poll {report.poll}: {report.scraped}/{report.targets} targets, {report.ports} ports, "
        f"{report.stored} samples stored"
    )
    if report.duplicates:
        line += f", {report.duplicates} duplicates"
    if report.rejected:
        line += f", {report.rejected} rejected ({'; '.join(report.reasons)[:200]})"
    line += f" in {report.seconds:.2f} s"
    for node, why in sorted(report.failed.items()):
        line += f"\n  failed {node}: {why}"
    if report.skipped:
        line += f"\n  backing off: {', '.join(sorted(report.skipped))}"
    for change in report.link_changes:
        line += f"\n  link {change.link} {change.state}: {change.reason}"
    for change in report.health_changes:
        line += f"\n  health: link {change.link} {change.state}: {change.reason}"
    if report.health_error:
        line += f"\n  health not assessed: {report.health_error}"
    for finding in report.findings or []:
        line += f"\n  finding {finding.kind} ({finding.severity}): {finding.evidence}"
    if report.diagnosis_error:
        line += f"\n  not diagnosed: {report.diagnosis_error}"
    return line


def _cabling_line(report: CablingReport) -> str:
    if report.error:
        return f"lldp: {report.error}"
    line = f"lldp: cabling of fabrics/{report.fabric} "
    line += "changed" if report.changed else "unchanged"
    for cable in report.added:
        line += f"\n  + {cable}"
    for cable in report.removed:
        line += f"\n  - {cable}"
    if report.changed:
        line += f"\n  stored as fabrics/{report.fabric}, counters to sources/{report.source}"
    for node, why in sorted(report.failed.items()):
        line += f"\n  no table from {node}: {why}"
    for change in report.link_changes:
        line += f"\n  link {change.link} {change.state}: {change.reason}"
    return line


def open_files_raised() -> tuple[int, int]:
    """The soft limit on open files raised to the hard one, as Go's runtime (node_exporter's,
    Prometheus') does: the scraper keeps a connection per target, up to a quarter of the soft limit
    (1,024 by default: 256 targets). Returns (before, now); unchanged where it cannot be raised."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        return soft, resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):
        return -1, -1


def _mirror(client: Client, args: argparse.Namespace) -> int:
    config = load_mirror_config(args.config)
    open_files_raised()  # the mirror is its own process: a connection kept for each target
    mirror = FabricMirror(client, config)
    stop = threading.Event()

    def on_signal(number: int, _frame: object) -> None:
        warn(f"mirror: {signal.Signals(number).name}, stopping after this step")
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}

    def report(item: PollReport | CablingReport) -> None:
        if args.json:
            kind = "poll" if isinstance(item, PollReport) else "cabling"
            print(json.dumps({"kind": kind, **dataclasses.asdict(item)}), flush=True)
        else:
            print(_poll_line(item) if isinstance(item, PollReport) else _cabling_line(item), flush=True)

    try:
        for line in mirror.start():
            if args.json:
                print(json.dumps({"kind": "start", "message": line}), flush=True)
            else:
                print(f"mirror: {line}", flush=True)
        mirror.run(stop, report, polls=args.polls or None)
    finally:
        mirror.close()
        for number, handler in previous.items():
            signal.signal(number, handler)
    if stop.is_set():
        warn("mirror: stopped")
    return 0


def register(root: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = leaf(
        root,
        "mirror",
        _mirror,
        "keep the twin in sync with a live fabric: counters, link states, cabling",
        "Mirror a live fabric (README: 'Mirror a live fabric'). Every interval: scrape every target\n"
        "at once (node_exporter netdev/ethtool/infiniband, snmp_exporter if_mib), store the counters\n"
        "in the source, and set links DOWN/UP as their ports go down/up; every LLDP interval, read\n"
        "the neighbour tables again and store changed cabling as a new fabric version.\n"
        "Runs until SIGTERM or Ctrl-C (or --polls). One line per step; --json: one JSON object per line.",
    )
    p.add_argument("--config", required=True, metavar="TOML", help="the mirror's configuration file")
    p.add_argument(
        "--polls", type=int, default=0, help="stop after this many polls (default: run until stopped)"
    )
