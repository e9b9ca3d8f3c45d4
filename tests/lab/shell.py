"""Running commands for the lab: one-shot commands, bounded waits, and daemons in their own process group."""

from __future__ import annotations

import contextlib
import os
import pathlib
import signal
import subprocess
import time
from collections.abc import Callable, Sequence


class LabError(RuntimeError):
    """Building, using or tearing down the lab failed; the message says what and why."""


def run(argv: Sequence[str], *, timeout: float = 10.0, check: bool = True, stdin: str | None = None) -> str:
    """Run a command to completion and return its stdout; raise LabError on failure or timeout."""
    try:
        done = subprocess.run(
            list(argv), input=stdin, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise LabError(f"`{' '.join(argv)}` did not finish within {timeout:g} s") from exc
    if check and done.returncode != 0:
        raise LabError(f"`{' '.join(argv)}` failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def in_netns(namespace: str, argv: Sequence[str]) -> list[str]:
    """argv run inside a named network namespace."""
    return ["ip", "netns", "exec", namespace, *argv]


def wait_until(
    probe: Callable[[], str | None], *, timeout_s: float, what: str, interval_s: float = 0.1
) -> None:
    """Call `probe` until it returns None (done); its last non-None answer explains a timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        why = probe()
        if why is None:
            return
        if time.monotonic() >= deadline:
            raise LabError(f"timed out after {timeout_s:g} s waiting for {what}: {why}")
        time.sleep(interval_s)


def live_process_groups() -> dict[int, list[int]]:
    """Process group id -> pids of its live (not zombie) processes, read from /proc."""
    groups: dict[int, list[int]] = {}
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] != "Z":
            groups.setdefault(int(fields[2]), []).append(int(entry.name))
    return groups


class Daemon:
    """A long-running command in its own session (so its whole process group can be stopped), with
    stdout and stderr in a log file."""

    def __init__(self, name: str, argv: Sequence[str], log_path: pathlib.Path) -> None:
        self.name = name
        self.log_path = log_path
        with open(log_path, "wb") as log:
            self.proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.pgid = self.proc.pid

    def alive(self) -> bool:
        """True while the main process runs."""
        return self.proc.poll() is None

    def log_tail(self, chars: int = 600) -> str:
        """The end of the daemon's output, for error messages."""
        try:
            return self.log_path.read_text(errors="replace")[-chars:].strip()
        except OSError:
            return ""

    def signal(self, sig: int) -> None:
        """Send `sig` to the daemon's whole process group (ignore a group already gone)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pgid, sig)

    def gone(self, groups: dict[int, list[int]]) -> bool:
        """True when the main process has been reaped and `groups` (live_process_groups()) shows no
        member of its group left."""
        return self.proc.poll() is not None and self.pgid not in groups


def stop_daemons(daemons: Sequence[Daemon], *, grace_s: float = 3.0, kill_wait_s: float = 3.0) -> list[str]:
    """SIGTERM every group, wait up to `grace_s`, SIGKILL the groups with anything left, wait again;
    return the names of daemons that still would not die (empty when all are gone)."""
    for daemon in daemons:
        daemon.signal(signal.SIGTERM)
    left = _wait_gone(daemons, grace_s)
    for daemon in left:
        daemon.signal(signal.SIGKILL)
    left = _wait_gone(left, kill_wait_s)
    return [d.name for d in left]


def _wait_gone(daemons: Sequence[Daemon], timeout_s: float) -> list[Daemon]:
    deadline = time.monotonic() + timeout_s
    left = [d for d in daemons if not d.gone(live_process_groups())]
    while left and time.monotonic() < deadline:
        time.sleep(0.02)
        groups = live_process_groups()
        left = [d for d in left if not d.gone(groups)]
    return left
