"""UDP flows between lab hosts: the flow description, the sender/sink/probe command lines (udp_sender.py
run in a host namespace), and collecting what each sender reports."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from .shell import Daemon, LabError, in_netns

SENDER_SCRIPT = pathlib.Path(__file__).resolve().with_name("udp_sender.py")
ROCE_PORT = 4791


@dataclass(frozen=True)
class Flow:
    """A RoCEv2-like UDP flow: src host -> dst host, from source port `sport` to 4791, at `rate_mbit`
    (Ethernet frame bytes), `payload_bytes` of UDP payload per packet."""

    src: str
    dst: str
    sport: int
    rate_mbit: float
    payload_bytes: int = 1000


@dataclass(frozen=True)
class FlowResult:
    """What a sender reports at exit. wire_bytes = packets x (payload + 42), what a veth counts."""

    flow: Flow
    packets: int
    payload_bytes: int
    wire_bytes: int
    send_errors: int
    seconds: float


def as_flow(spec: Flow | Sequence) -> Flow:
    """Accept a Flow or a tuple (src_host, dst_host, sport, rate_mbit[, payload_bytes])."""
    return spec if isinstance(spec, Flow) else Flow(*spec)


def _script(mode: str, *args: str) -> list[str]:
    return [sys.executable, "-I", "-S", str(SENDER_SCRIPT), mode, *args]


def sink_argv(namespace: str) -> list[str]:
    """A UDP sink on port 4791 inside a host namespace."""
    return in_netns(namespace, _script("sink", "--port", str(ROCE_PORT)))


def probe_argv(namespace: str, destinations: Iterable[str], timeout_s: float) -> list[str]:
    """A reachability probe from a host namespace to each destination address."""
    return in_netns(namespace, _script("probe", *destinations, "--timeout", str(timeout_s)))


def sender_argv(
    namespace: str, flow: Flow, src_ip: str, dst_ip: str, seconds: float, start_at: float
) -> list[str]:
    """The paced sender of one flow, inside the source host's namespace."""
    return in_netns(
        namespace,
        _script(
            "send",
            f"--src={src_ip}",
            f"--sport={flow.sport}",
            f"--dst={dst_ip}",
            f"--dport={ROCE_PORT}",
            f"--rate-mbit={flow.rate_mbit}",
            f"--payload={flow.payload_bytes}",
            f"--seconds={seconds}",
            f"--start-at={start_at}",
        ),
    )


def collect_results(senders: Sequence[tuple[Flow, Daemon]], timeout_s: float) -> list[FlowResult]:
    """Wait (bounded) for every sender to exit and parse the JSON line each prints."""
    deadline = time.monotonic() + timeout_s
    results = []
    for flow, daemon in senders:
        try:
            daemon.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired as exc:
            raise LabError(f"sender of {flow} still running after {timeout_s:g} s") from exc
        lines = [ln for ln in daemon.log_tail(4000).splitlines() if ln.startswith("{")]
        if daemon.proc.returncode != 0 or not lines:
            raise LabError(f"sender of {flow} failed ({daemon.proc.returncode}): {daemon.log_tail()}")
        report = json.loads(lines[-1])
        results.append(
            FlowResult(
                flow=flow,
                packets=report["packets"],
                payload_bytes=report["payload_bytes"],
                wire_bytes=report["wire_bytes"],
                send_errors=report["send_errors"],
                seconds=report["seconds"],
            )
        )
    return results


def check_reachability(
    namespaces: Mapping[str, str], host_ip: Callable[[str], str], timeout_s: float = 5.0
) -> None:
    """Every host (name -> namespace) reaches every other (a UDP probe answered by port-unreachable);
    the probes run in parallel, bounded by `timeout_s` per destination."""
    probes = []
    for host, namespace in namespaces.items():
        others = [host_ip(h) for h in namespaces if h != host]
        argv = probe_argv(namespace, others, timeout_s)
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        probes.append((host, proc))
    failures = []
    for host, proc in probes:
        try:
            out, _ = proc.communicate(timeout=timeout_s * len(namespaces) + 5)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        if proc.returncode != 0:
            failures.append(f"{host}: {out.strip()}")
    if failures:
        raise LabError(f"hosts cannot reach each other: {'; '.join(failures)}")
