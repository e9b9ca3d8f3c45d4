"""The Ethernet mirror end to end on the namespace lab: discover, mirror, diagnose, replay, link down.

`run_mirror_lab(lab, stack, workdir)` drives the real services (a `services.stack` of subprocesses)
and the real `fabrictwin mirror` CLI (a subprocess) against the lab's real lldpd, node_exporter and
kernel ECMP, and yields one dict per step, with what it measured. `tests/lab/test_lab_mirror.py`
asserts on them; `make lab` (`python -m tests.lab`) prints them as JSON lines and a table.

The traffic: four flows of rates 1:2:4:8 (a unit of 6 Mb/s on 100 Mb/s links). h0->h2 (1) and h1->h3
(8) leave leaf0 with source ports the kernel hashes onto the same uplink (toward spine0): it runs
at 54 %, nowhere near "hot" by an absolute 80 %, while leaf0's other uplink idles; h2->h0 (2) and
h3->h1 (4) leave leaf1, which bridges its hosts (br0), on one uplink each. Source ports are chosen by
asking the kernel (`ip route get`), which is what makes the collision certain whatever its hash
seed. The replay infers each flow's rate from the counters (it is not told them).
"""

from __future__ import annotations

import contextlib
import json
import pathlib
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from fabrictwin import Client
from fabrictwin.importers import prometheus
from fabrictwin.path_trace import LiveFlow, linux_route_get, trace_path
from fabrictwin.replay import observed_flows, port_totals, replay

from services.stack import Stack
from tests.lab.netns_fabric import LeafSpineLab
from tests.lab.traffic import Flow

FABRIC, SOURCE = "lab", "lab-live"
LINK_MBIT = 100.0
UNIT_MBIT = 6.0  # the flows run at 1, 2, 4 and 8 units
FLOW_SECONDS = 8.0
INTERVAL_S = 1.0
DIAGNOSIS_WINDOW_S = 5.0
OVERLOAD_SECONDS = 4.0
UPLINKS = ("leaf0/p3", "leaf0/p4", "leaf1/p3", "leaf1/p4")


def mirror_config(lab: LeafSpineLab) -> str:
    """The mirror's TOML for the lab: LLDP through each lldpd's socket, node_exporter by command."""
    socket = f"{lab.workdir}/{{node}}.lldpd.sock"
    lldp = f"lldpcli -u {socket} -f json show chassis; lldpcli -u {socket} -f json show neighbors"
    text = (
        f'fabric = "{FABRIC}"\nsource = "{SOURCE}"\ninterval_s = {INTERVAL_S}\ntimeout_s = 3\n\n'
        f"[lldp]\ninterval_s = 3600\ncommand = {json.dumps(lldp)}\nnodes = {json.dumps(list(lab.nodes))}\n"
        f"default_speed_gbps = {LINK_MBIT / 1000}\n\n"
        f'[diagnosis]\nwindow_s = {DIAGNOSIS_WINDOW_S}\nports = ["group:uplinks"]\n'
    )
    for switch in lab.switches:
        # veth reports 10 Gb/s; the links are shaped to LINK_MBIT with tbf, which no exporter sees.
        text += (
            f'\n[[targets]]\nnode = "{switch}"\ncommand = {json.dumps(lab.scrape_command(switch))}\n'
            f"speed_gbps = {LINK_MBIT / 1000}\n"
        )
    return text


class MirrorProcess:
    """`fabrictwin mirror --config ... --json` as a subprocess, its JSON lines read by a thread."""

    def __init__(self, stack: Stack, config: pathlib.Path) -> None:
        command = [
            sys.executable,
            "-m",
            "fabrictwin.cli",
            f"--topology={stack.address('topology')}",
            f"--telemetry={stack.address('telemetry')}",
            f"--orchestrator={stack.address('orchestrator')}",
            "mirror",
            "--config",
            str(config),
            "--json",
        ]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(json.loads(line))

    def next(self, kind: str, timeout_s: float) -> dict[str, Any]:
        """The next line of `kind` (`start`, `poll`, `cabling`), waiting at most `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or (self.process.poll() is not None and self.lines.empty()):
                raise TimeoutError(
                    f"no {kind} line from the mirror within {timeout_s:g} s: {self.stderr_tail()}"
                )
            try:
                line = self.lines.get(timeout=min(left, 0.5))
            except queue.Empty:
                continue
            self.seen.append(line)
            if line["kind"] == kind:
                return line

    def polls_after(self, time_ns: int, count: int, timeout_s: float) -> list[dict[str, Any]]:
        """`count` polls that started after `time_ns`."""
        polls = []
        while len(polls) < count:
            line = self.next("poll", timeout_s)
            if line["time_ns"] > time_ns:
                polls.append(line)
        return polls

    def stderr_tail(self) -> str:
        if self.process.poll() is None:
            return "(still running)"
        return (self.process.stderr.read() if self.process.stderr else "")[-1000:]

    def stop(self) -> tuple[int, str]:
        """SIGTERM, then its exit code and stderr."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            _, err = self.process.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            _, err = self.process.communicate()
        return self.process.returncode, err


def _switch_tx(lab: LeafSpineLab) -> dict[str, float]:
    """Every switch port's node_exporter transmit bytes now, named as the twin names ports."""
    totals = {}
    for switch in lab.switches:
        for reading in prometheus.parse(
            lab.scrape(switch), time.time_ns(), node=switch, device_port_name="{node}/{device}"
        ):
            if "tx_bytes" in reading.values:
                device = reading.port.split("/", 1)[1]
                if device.startswith("swp"):
                    totals[f"{switch}/p{device.removeprefix('swp')}"] = float(reading.values["tx_bytes"][0])
    return totals


def _cable(link: Any) -> str:
    """`spine0:swp1<->leaf0:swp3`: a link by its nodes' interface names."""
    a, b = link.node_a.rsplit("/", 1)[-1], link.node_b.rsplit("/", 1)[-1]
    return f"{a}:{link.port_name_a}<->{b}:{link.port_name_b}"


FLOW_UNITS = {("h0", "h2"): 1, ("h1", "h3"): 8, ("h2", "h0"): 2, ("h3", "h1"): 4}


def _flows(lab: LeafSpineLab) -> list[Flow]:
    pairs = [("h0", "h2", "spine0"), ("h1", "h3", "spine0"), ("h2", "h0", "spine0"), ("h3", "h1", "spine1")]
    flows = []
    for src, dst, spine in pairs:
        (sport,) = lab.pick_source_ports(src, dst, spine, 1, start=49152 + 97 * len(flows))
        flows.append(Flow(src, dst, sport, UNIT_MBIT * FLOW_UNITS[src, dst]))
    return flows


def run_mirror_lab(lab: LeafSpineLab, stack: Stack, workdir: pathlib.Path) -> Iterator[dict[str, Any]]:
    """Run the five steps, yielding what each found (module docstring)."""
    config = workdir / "mirror.toml"
    config.write_text(mirror_config(lab))
    with contextlib.ExitStack() as cleanup:
        client = cleanup.enter_context(
            Client(**{s: stack.address(s) for s in ("topology", "telemetry", "simulator", "orchestrator")})
        )
        mirror = MirrorProcess(stack, config)
        stopped: dict[str, Any] = {}
        cleanup.callback(lambda: stopped.update(zip(("code", "stderr"), mirror.stop(), strict=True)))

        # 1. Discover the lab by LLDP (the mirror imports it on start).
        started = mirror.next("start", 60)
        mirror.next("poll", 30)
        fabric = client.fabrics.get(FABRIC)
        nodes = {n.display_name: n for n in client.fabrics.nodes(FABRIC)}
        links = list(client.fabrics.links(FABRIC))
        yield {
            "step": "discover",
            "message": started["message"],
            "switches": sorted(name for name, n in nodes.items() if n.kind == 2),
            "hosts": sorted(name for name, n in nodes.items() if n.kind == 1),
            "links": sorted(_cable(link) for link in links),
            "speeds_gbps": sorted({link.speed_gbps for link in links}),
            "import_notes": list(fabric.import_notes),
        }

        # 2. Mirror the switches' counters while the flows run.
        flows = _flows(lab)
        mirror.polls_after(time.time_ns(), 2, 30)
        window_start = time.time_ns()
        before = _switch_tx(lab)
        traffic_start = time.time_ns()
        lab.start_udp_flows(flows, FLOW_SECONDS)
        sent = lab.wait_flows()
        traffic_end = time.time_ns()
        mirror.polls_after(traffic_end, 2, 30)
        after = _switch_tx(lab)
        window_end = time.time_ns()
        twin = port_totals(client, SOURCE, sorted(before), "tx_bytes", window_start, window_end)
        exporter = {port: after[port] - before[port] for port in before}
        errors = {
            port: abs(twin[port] - exporter[port]) / exporter[port]
            for port in exporter
            if exporter[port] > 1e6
        }
        yield {
            "step": "mirror",
            "flows": [
                {"src": f.flow.src, "dst": f.flow.dst, "sport": f.flow.sport, "wire_bytes": f.wire_bytes}
                for f in sent
            ],
            "uplink_bytes_exporter": {port: exporter[port] for port in UPLINKS},
            "uplink_bytes_twin": {port: twin[port] for port in UPLINKS},
            "max_relative_error": max(errors.values()),
            "ports_compared": len(errors),
        }

        # 3. Diagnose from the real counters, over the heart of the traffic.
        heart = (traffic_start + int(2e9), traffic_end - int(2e9))
        skew = client.telemetry.utilisation_skew(
            SOURCE, ports=["group:uplinks"], start_ns=heart[0], end_ns=heart[1]
        )
        diagnosis = client.scenarios.diagnose(
            SOURCE, ports=["group:uplinks"], start_ns=heart[0], end_ns=heart[1]
        )
        pinning = [f for f in diagnosis.findings if f.kind == 1]  # FINDING_KIND_ECMP_PINNING
        measured = client.telemetry.top_links(
            SOURCE, "utilisation", ports=list(UPLINKS), start_ns=heart[0], end_ns=heart[1], aggregation="avg"
        )
        yield {
            "step": "diagnose",
            "uplink_utilisation": {value.port: value.value for value in measured},
            "skew": [
                {
                    "max_over_mean": p.max_over_mean,
                    "share_hot": p.share_hot,
                    "share_idle": p.share_idle,
                    "pinned": p.pinned,
                }
                for p in skew
            ],
            "findings": [
                {"kind": f.kind, "ports": list(f.ports), "evidence": f.evidence} for f in diagnosis.findings
            ],
            "hot": list(pinning[0].ports) if pinning else [],
        }

        # 4. Replay the same flows on the mirrored fabric: as observed (rates inferred from the
        # counters), then sprayed and adaptive.
        route_get = linux_route_get({node: f"ip netns exec {lab.namespace(node)}" for node in lab.nodes})
        live = [LiveFlow(f.src, f.dst, lab.host_ip(f.src), lab.host_ip(f.dst), f.sport) for f in flows]
        paths = [trace_path(links, flow, route_get) for flow in live]
        observed, notes = observed_flows(
            client, SOURCE, FABRIC, live, paths, window_start, window_end, step_ns=int(INTERVAL_S * 1e9)
        )
        result = replay(client, FABRIC, observed, modes=("spray", "adaptive"), notes=notes)
        # The live uplinks' mean utilisation while the flows ran: the bytes their counters carried in
        # the window over the time the senders sent (the flows' own clock, as the replay's run).
        ran_s = max(f.seconds for f in sent)
        measured_util = {port: twin[port] * 8 / (ran_s * LINK_MBIT * 1e6) for port in UPLINKS}
        replay_errors = {
            port: abs(result.observed.port_bytes.get(port, 0) - twin[port]) / twin[port]
            for port in UPLINKS
            if twin[port] > 1e6
        }
        util_errors = {
            port: abs(result.observed.port_utilisation.get(port, 0.0) - measured_util[port])
            / measured_util[port]
            for port in UPLINKS
            if measured_util.get(port, 0.0) > 0.01
        }
        sent_rate = {(f.flow.src, f.flow.dst): f.wire_bytes * 8 / f.seconds / 1e6 for f in sent}
        yield {
            "step": "replay",
            "paths": {f"{f.src}->{f.dst}:{f.sport}": list(p) for f, p in zip(flows, paths, strict=True)},
            "observed_sizes": [o.size_bytes for o in observed],
            "inferred_mbit": {
                f"{o.flow.source}->{o.flow.destination}": round(o.rate_gbps * 1e3, 3) for o in observed
            },
            "sent_mbit": {f"{src}->{dst}": round(rate, 3) for (src, dst), rate in sent_rate.items()},
            "notes": list(notes),
            "uplink_bytes_as_observed": {port: result.observed.port_bytes.get(port, 0) for port in UPLINKS},
            "uplink_bytes_measured": {port: twin[port] for port in UPLINKS},
            "uplink_utilisation_as_observed": {
                port: result.observed.port_utilisation.get(port, 0.0) for port in UPLINKS
            },
            "uplink_utilisation_measured": {port: measured_util.get(port, 0.0) for port in UPLINKS},
            "uplink_utilisation_sample_mean": {value.port: value.value for value in measured},
            "max_relative_error": max(replay_errors.values()),
            "max_utilisation_error": max(util_errors.values()),
            "comparison": result.compare(UPLINKS),
            "uplink_bytes_by_mode": {
                m.label: {port: m.port_bytes.get(port, 0) for port in UPLINKS} for m in result.modes
            },
        }

        # 5. Overload leaf0's spine0 uplink: h0 and h1 each send what their own link carries through
        # it, twice what it carries, so its tbf drops; the mirror's diagnosis names it lossy, by the
        # qdisc drops node_exporter reports, as many as tc counted.
        heavy = [
            Flow(src, dst, sport, 4 * LINK_MBIT, 1400)
            for src, dst in (("h0", "h2"), ("h1", "h3"))
            for sport in lab.pick_source_ports(src, dst, "spine0", 1, start=50_000)
        ]
        drops_before = lab.qdisc_drops("leaf0", "swp3")
        overload_start = time.time_ns()
        lab.start_udp_flows(heavy, OVERLOAD_SECONDS)
        lab.wait_flows()
        overload_end = time.time_ns()
        polls = mirror.polls_after(overload_end, 2, 30)
        drops = lab.qdisc_drops("leaf0", "swp3") - drops_before
        after = client.scenarios.diagnose(
            SOURCE, ports=["group:uplinks"], start_ns=overload_start, end_ns=time.time_ns()
        )
        yield {
            "step": "overload",
            "tc_drops": drops,
            "findings": [
                {"kind": f.kind, "ports": list(f.ports), "evidence": f.evidence, "suggestion": f.suggestion}
                for f in after.findings
            ],
            "mirror_findings": [finding for poll in polls for finding in poll.get("findings") or []],
            "mirror_diagnosis_errors": [poll["diagnosis_error"] for poll in polls if poll["diagnosis_error"]],
        }

        # 6. Take a leaf uplink down: the mirror marks its link DOWN.
        link = next(link for link in links if _cable(link).startswith("spine1:swp1<->leaf0:"))
        down_at = time.monotonic()
        lab.link_down("leaf0", "swp4")
        state, waited = link.state, 0.0
        while time.monotonic() - down_at < 2 * INTERVAL_S + 5:
            state = client.fabrics.link(FABRIC, link.index).state
            waited = time.monotonic() - down_at
            if state == 2:  # LINK_STATE_DOWN
                break
            time.sleep(0.05)
        # The poll that set it printed its line when it ended; lines of earlier polls may still be
        # queued, so read on until one names the link (or the mirror has polled well past the down).
        changes: list[dict[str, Any]] = []
        deadline = time.monotonic() + 10 * INTERVAL_S + 10
        while time.monotonic() < deadline:
            said = mirror.next("poll", max(0.1, deadline - time.monotonic()))["link_changes"]
            changes += said
            if any(change["link"] == link.display_name for change in said):
                break
        yield {
            "step": "link_down",
            "link": link.display_name,
            "state": state,
            "seconds": round(waited, 2),
            "intervals": round(waited / INTERVAL_S, 2),
            "mirror_said": changes,
        }
    yield {
        "step": "stop",
        "exit_code": stopped.get("code"),
        "traceback": "Traceback" in stopped.get("stderr", ""),
    }
