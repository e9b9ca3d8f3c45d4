"""run_service in a real process: JSON logs with the bound port, graceful exit on SIGTERM and SIGINT."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time

import grpc
import pytest
from fabrictwin.v1 import topology_pb2, topology_pb2_grpc

ROOT = pathlib.Path(__file__).resolve().parents[2]
GRACE = 3.0


class ServiceProcess:
    """`python -m tests.common.serve_scripted` with its stderr parsed as JSON log lines."""

    def __init__(self, *flags: str, env: dict[str, str] | None = None) -> None:
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.common.serve_scripted",
                "--port",
                "0",
                "--log-format",
                "json",
                *flags,
            ],
            cwd=ROOT,
            env={**os.environ, **(env or {})},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stderr:
            self.lines.append(line.rstrip("\n"))

    def entries(self) -> list[dict]:
        """The JSON log entries so far (grpc's C core may add its own plain lines; those are skipped)."""
        return [json.loads(line) for line in list(self.lines) if line.startswith("{")]

    def wait_for(self, msg: str, timeout: float = 10.0) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for entry in self.entries():
                if entry["msg"] == msg:
                    return entry
            if self.process.poll() is not None and not self._reader.is_alive():
                break
            time.sleep(0.02)
        raise AssertionError(f"no {msg!r} log line; stderr was:\n" + "\n".join(self.lines))

    def finish(self, timeout: float) -> int:
        code = self.process.wait(timeout)
        self._reader.join(5)
        return code

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(5)


@pytest.fixture
def service_processes():
    started: list[ServiceProcess] = []

    def start(*flags: str, env: dict[str, str] | None = None) -> ServiceProcess:
        started.append(ServiceProcess(*flags, env=env))
        return started[-1]

    yield start
    for process in started:
        process.kill()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_a_signal_drains_in_flight_calls_and_exits_zero(service_processes, sig):
    service = service_processes("--grace-seconds", str(GRACE))
    serving = await asyncio.to_thread(service.wait_for, "serving")
    host, _, port = serving["address"].rpartition(":")
    assert host == "127.0.0.1" and int(port) > 0, "the log must show the bound port, not 0"
    assert "fabrictwin.v1.TopologyService" in serving["services"]

    async with grpc.aio.insecure_channel(serving["address"]) as channel:
        stub = topology_pb2_grpc.TopologyServiceStub(channel)
        in_flight = asyncio.ensure_future(
            stub.GetFabric(topology_pb2.GetFabricRequest(name="fabrics/slow-500"))
        )
        await asyncio.sleep(0.2)
        signalled = time.monotonic()
        service.process.send_signal(sig)
        assert (await in_flight).name == "fabrics/slow-500"

    code = await asyncio.to_thread(service.finish, GRACE + 5)
    assert code == 0, "\n".join(service.lines)
    assert time.monotonic() - signalled < GRACE
    messages = [entry["msg"] for entry in service.entries()]
    assert messages[-3:] == ["shutting down", "cleaned up", "stopped"]
    assert all(entry["service"] == "scripted" for entry in service.entries())


def test_a_sigterm_while_the_service_builds_still_stops_it_gracefully(service_processes):
    service = service_processes("--build-delay-ms", "300", env={"FABRICTWIN_GRACE_SECONDS": "1"})
    service.wait_for("building")
    service.process.send_signal(signal.SIGTERM)
    assert service.finish(10) == 0, "\n".join(service.lines)
    assert [entry["msg"] for entry in service.entries()][-3:] == ["shutting down", "cleaned up", "stopped"]


def test_a_bad_environment_value_stops_start_up_naming_the_variable(service_processes):
    service = service_processes(env={"FABRICTWIN_GRACE_SECONDS": "soon"})
    assert service.finish(10) != 0
    assert any("FABRICTWIN_GRACE_SECONDS" in line for line in service.lines), service.lines


def test_a_tls_misconfiguration_exits_2_with_a_logged_reason(service_processes, tmp_path):
    cert = tmp_path / "server.crt"
    cert.write_text("not really a certificate")
    service = service_processes("--tls-cert", str(cert))
    assert service.finish(10) == 2
    failure = service.wait_for("cannot start: TLS needs both --tls-cert and --tls-key; --tls-key is not set")
    assert failure["level"] == "ERROR"
    assert "Traceback" not in "\n".join(service.lines)
