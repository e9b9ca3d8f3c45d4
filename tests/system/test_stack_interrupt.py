"""`make run` (`python -m services.stack`) stopped by Ctrl-C at any moment: a clean stop, no traceback.

Ctrl-C in a terminal sends SIGINT to the whole foreground process group: the stack and its four
services alike. The stack runs here in a session of its own, so `os.killpg` is that Ctrl-C, and
an empty process group afterwards means no service was left behind.
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import threading
import time

import pytest

pytestmark = pytest.mark.system

ROOT = pathlib.Path(__file__).resolve().parents[2]


class StackProcess:
    """`python -m services.stack` in its own session, its output collected line by line."""

    def __init__(self, data_dir: pathlib.Path, *args: str, env: dict[str, str] | None = None) -> None:
        command = [sys.executable, "-m", "services.stack", "--free-ports", "--data-dir", str(data_dir), *args]
        self.process = subprocess.Popen(
            command,
            cwd=ROOT,
            env={**os.environ, **(env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_for(self, text: str, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.output:
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.kill_group()
                raise AssertionError(f"{text!r} never appeared; output:\n{self.output}")
            time.sleep(0.05)

    def ctrl_c(self) -> None:
        """What the terminal does: SIGINT to every process of the group."""
        os.killpg(self.process.pid, signal.SIGINT)

    def finish(self, timeout: float = 60.0) -> int:
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill_group()
            raise
        self._reader.join(5)
        return code

    def group_alive(self) -> bool:
        try:
            os.killpg(self.process.pid, 0)
        except ProcessLookupError:
            return False
        return True

    def kill_group(self) -> None:
        if self.group_alive():
            os.killpg(self.process.pid, signal.SIGKILL)


def assert_clean_stop(stack: StackProcess, code: int) -> None:
    assert "Traceback" not in stack.output, stack.output
    assert "KeyboardInterrupt" not in stack.output, stack.output
    assert code in (0, 130), stack.output
    stopped = [line for line in stack.lines if line.startswith("stopped:")]
    assert len(stopped) == 1, stack.output
    deadline = time.monotonic() + 10
    while stack.group_alive() and time.monotonic() < deadline:
        time.sleep(0.1)  # a service's last moments after the stack reaped it
    alive = stack.group_alive()
    stack.kill_group()
    assert not alive, "a service process outlived the stack"


@pytest.mark.parametrize("moment", ["starting", "demo"])
def test_ctrl_c_at_start_or_during_the_demo_stops_every_service_without_a_traceback(tmp_path, moment):
    stack = StackProcess(tmp_path)
    if moment == "starting":
        time.sleep(0.5)  # the services are being started, none serves yet
    else:
        stack.wait_for("running the demo")
        time.sleep(1.0)
    stack.ctrl_c()
    code = stack.finish()
    assert_clean_stop(stack, code)
    assert code == 130
    assert "running the demo" not in stack.output or "Ctrl-C: stopping" in stack.output


def test_a_second_ctrl_c_while_the_services_stop_does_not_cut_the_stop_short(tmp_path):
    # A drain second keeps the services stopping long enough for the second Ctrl-C to land then.
    stack = StackProcess(tmp_path, env={"FABRICTWIN_DRAIN_SECONDS": "1"})
    stack.wait_for("running the demo")
    stack.ctrl_c()
    stack.wait_for("stopping")
    stack.process.send_signal(signal.SIGINT)  # impatient: the stack alone this time
    code = stack.finish()
    assert_clean_stop(stack, code)


def test_ctrl_c_once_serving_after_the_demo_is_an_ordinary_stop(tmp_path):
    stack = StackProcess(tmp_path, "--no-demo")
    stack.wait_for("press Ctrl-C to stop")
    stack.ctrl_c()
    code = stack.finish()
    assert_clean_stop(stack, code)
    assert code == 0
