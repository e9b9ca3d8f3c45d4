"""The local stack: the four services as separate processes on localhost.

Used by `make run` (through `python -m services.stack`, which then runs the demo) and by the system
tests, so both start the services the same way a user would.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

__all__ = ["SERVICES", "Stack", "free_port", "start_stack"]

# Process name -> the gRPC service it serves (its health-check name).
SERVICES = {
    "topology": "fabrictwin.v1.TopologyService",
    "simulator": "fabrictwin.v1.SimulationService",
    "telemetry": "fabrictwin.v1.TelemetryService",
    "orchestrator": "fabrictwin.v1.ScenarioService",
}


_EPHEMERAL_RANGE = pathlib.Path("/proc/sys/net/ipv4/ip_local_port_range")
_PORT_TRIES = 100


def _ephemeral_range() -> tuple[int, int]:
    """The kernel's range for outgoing connections and bind-to-0 (Linux's default elsewhere)."""
    try:
        low, high = _EPHEMERAL_RANGE.read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def _candidate_port(low: int, high: int) -> int:
    return random.randrange(low, high)


def free_port() -> int:
    """A TCP port nobody listens on right now, outside the kernel's ephemeral range (the services
    need fixed ports to find each other). A port the kernel hands out for a bind to 0 comes from
    that range, which every outgoing connection and every other port-0 server draws from too, and
    could be taken before the service binds it ("Address already in use"); below it (or above it)
    only another fixed choice can collide, and one is tried at random."""
    low, high = _ephemeral_range()
    span = (max(1025, low - 12_000), low) if low > 2_048 else (high + 1, 65_536)
    if span[1] - span[0] >= 64:
        for _ in range(_PORT_TRIES):
            port = _candidate_port(*span)
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    with socket.socket() as s:  # no room outside the range: the kernel's choice
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclasses.dataclass
class Stack:
    """Four running service processes and their addresses."""

    ports: dict[str, int]
    processes: dict[str, subprocess.Popen]
    data_dir: pathlib.Path

    def address(self, service: str) -> str:
        return f"127.0.0.1:{self.ports[service]}"

    @property
    def client_env(self) -> dict[str, str]:
        """Environment that points the SDK and CLI at this stack."""
        return {f"FABRICTWIN_{name.upper()}_ADDRESS": self.address(name) for name in SERVICES}

    def log_path(self, service: str) -> pathlib.Path:
        return self.data_dir / "logs" / f"{service}.log"

    def wait_serving(self, timeout: float = 60.0) -> None:
        """Block until every service answers its health check with SERVING."""
        deadline = time.monotonic() + timeout
        for name, full_name in SERVICES.items():
            with grpc.insecure_channel(self.address(name)) as channel:
                stub = health_pb2_grpc.HealthStub(channel)
                while True:
                    proc = self.processes[name]
                    if proc.poll() is not None:
                        raise RuntimeError(
                            f"{name} exited with {proc.returncode}; log: {self.log_path(name)}\n"
                            + self.log_path(name).read_text()[-3000:]
                        )
                    try:
                        request = health_pb2.HealthCheckRequest(service=full_name)
                        # types-grpcio-health-checking declares HealthStub without its methods.
                        reply = stub.Check(request, timeout=1)  # type: ignore[attr-defined]
                        if reply.status == health_pb2.HealthCheckResponse.SERVING:
                            break
                    except grpc.RpcError:
                        pass
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"{name} did not report SERVING within {timeout:.0f} s")
                    time.sleep(0.1)

    def stop(self, timeout: float = 20.0) -> dict[str, int]:
        """SIGTERM every process (graceful shutdown), then wait; returns exit codes."""
        for proc in self.processes.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        codes = {}
        for name, proc in self.processes.items():
            try:
                codes[name] = proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                codes[name] = proc.wait()
        return codes


def start_stack(
    data_dir: str | os.PathLike[str] = ".fabrictwin",
    ports: Mapping[str, int] | None = None,
    extra_env: Mapping[str, str] | None = None,
    workers: int = 1,
) -> Stack:
    """Start the four services (SQLite under data_dir) and return without waiting for them."""
    data = pathlib.Path(data_dir).resolve()
    (data / "logs").mkdir(parents=True, exist_ok=True)
    chosen = dict(ports) if ports else {name: free_port() for name in SERVICES}
    env = {**os.environ, **(extra_env or {})}
    env.update(
        FABRICTWIN_DATA_DIR=str(data),
        FABRICTWIN_LOG_FORMAT=env.get("FABRICTWIN_LOG_FORMAT", "json"),
        FABRICTWIN_TOPOLOGY_ADDRESS=f"127.0.0.1:{chosen['topology']}",
        FABRICTWIN_SIMULATOR_ADDRESSES=f"127.0.0.1:{chosen['simulator']}",
        FABRICTWIN_TELEMETRY_ADDRESS=f"127.0.0.1:{chosen['telemetry']}",
        FABRICTWIN_WORKERS=str(workers),
    )
    root = pathlib.Path(__file__).resolve().parent.parent
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH", "")]))
    processes = {}
    for name in SERVICES:
        log = open(data / "logs" / f"{name}.log", "ab")  # noqa: SIM115 - owned by the child process
        processes[name] = subprocess.Popen(
            [sys.executable, "-m", f"services.{name}", "--port", str(chosen[name])],
            cwd=root,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
    return Stack(chosen, processes, data)


@contextlib.contextmanager
def running_stack(data_dir: str | os.PathLike[str], **kwargs) -> Iterator[Stack]:
    """Start, wait for SERVING, yield, and always stop."""
    stack = start_stack(data_dir, **kwargs)
    try:
        stack.wait_serving()
        yield stack
    finally:
        stack.stop()


class _StopSignals:
    """SIGINT (Ctrl-C) and SIGTERM for `make run`: remembered, never raised.

    A KeyboardInterrupt raised wherever the main thread happens to be cuts short whatever it was
    doing: the start of a service (which is then left running), a gRPC call of the demo, or the
    stop itself (a traceback, services not waited for). Instead the handler only records the
    signal and wakes the main thread, which then stops the services in order; a second Ctrl-C
    while they stop changes nothing (each one gets `Stack.stop`'s bounded wait, then SIGKILL).
    """

    def __init__(self) -> None:
        self.received: int | None = None
        self.wake = threading.Event()  # a stop signal, or the demo thread finished

    def __call__(self, signum: int, frame: object) -> None:
        if self.received is None:
            self.received = signum
        self.wake.set()

    def wait(self) -> None:
        # Short waits: the handler runs between them even where a long wait would not be woken.
        while not self.wake.wait(0.2):
            pass
        self.wake.clear()


def main(argv: list[str] | None = None) -> int:
    """`make run`: start the stack on the default ports, run the demo, serve until Ctrl-C.

    Ctrl-C or SIGTERM at any moment stops the services cleanly: exit 0 once serving after the
    demo, 128 + the signal (130 for Ctrl-C) when it interrupted the start or the demo.
    """
    import argparse

    from fabrictwin.client import Client
    from fabrictwin.demo import run_demo

    from services.common.config import DEFAULT_PORTS

    parser = argparse.ArgumentParser(prog="python -m services.stack", description=main.__doc__)
    parser.add_argument(
        "--data-dir", default=".fabrictwin", help="SQLite databases and logs (default .fabrictwin)"
    )
    parser.add_argument("--no-demo", action="store_true", help="only start the services")
    parser.add_argument("--exit-after-demo", action="store_true", help="stop the services after the demo")
    parser.add_argument(
        "--free-ports", action="store_true", help="any free ports instead of 50051-50054 (the system tests)"
    )
    args = parser.parse_args(argv)

    signals = _StopSignals()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signals)
    stack = start_stack(args.data_dir, ports=None if args.free_ports else DEFAULT_PORTS)
    failures: list[Exception] = []
    finished = threading.Event()

    def say(text: str) -> None:
        if signals.received is None:  # once stopping, the demo's last words are noise
            print(text, flush=True)

    def start_and_demo() -> None:
        try:
            stack.wait_serving()
            for name in SERVICES:
                say(f"{name:<13} SERVING on {stack.address(name)}  (log: {stack.log_path(name)})")
            if not args.no_demo:
                say("\nrunning the demo scenario through the SDK ...\n")
                with Client(
                    topology=stack.address("topology"),
                    simulator=stack.address("simulator"),
                    telemetry=stack.address("telemetry"),
                    orchestrator=stack.address("orchestrator"),
                ) as client:
                    run_demo(client, args.data_dir, say=say)
        except Exception as exc:  # raised again below, unless a stop signal caused it
            failures.append(exc)
        finally:
            finished.set()
            signals.wake.set()

    # The demo runs beside the main thread, which only waits for it or for a stop signal.
    demo = threading.Thread(target=start_and_demo, name="demo", daemon=True)
    demo.start()
    signals.wait()
    if signals.received is None and not failures and not args.exit_after_demo:
        print("\nserving; press Ctrl-C to stop", flush=True)
        signals.wait()
    interrupted = signals.received is not None and not finished.is_set()
    if signals.received is not None:
        name = "Ctrl-C" if signals.received == signal.SIGINT else signal.Signals(signals.received).name
        print(f"\n{name}: stopping the services ...", flush=True)
    else:
        print("\nstopping ...", flush=True)
    codes = stack.stop()
    print("stopped: " + ", ".join(f"{name} exit {code}" for name, code in codes.items()), flush=True)
    demo.join(5)  # its calls fail fast once the services are gone; it is a daemon in any case
    if failures and signals.received is None:
        raise failures[0]
    return 128 + signals.received if interrupted and signals.received is not None else 0


if __name__ == "__main__":
    raise SystemExit(main())
