"""Waiting in the CLI: progress where a person watches, and a clean stop.

- On a terminal, one progress bar per simulation (simulated time reached as a fraction, its stage —
  "compiling the packet engine (first run only)", events done — elapsed time and tqdm's estimate),
  or per mode/variant of a run, refreshed in place (tqdm, the `fabrictwin[cli]` extra). Without a
  terminal (or without tqdm), a plain line on stderr when something changes, at most every
  `LINE_INTERVAL_S`. With --json nothing is added: stdout stays one JSON document.
- Ctrl-C during a wait cancels the work on the server and says so (exit 130); with --detach it is
  left running and the CLI prints how to follow or cancel it.
- --wait-timeout: what is still running, and how to cancel it (exit 1).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TextIO

from fabrictwin.client import Client
from fabrictwin.errors import DeadlineExceededError, FabricTwinError
from fabrictwin.extras import MissingExtraError, require
from fabrictwin.format import format_duration_ns, format_percent
from fabrictwin.jobs import is_done
from fabrictwin.names import enum_label
from fabrictwin.v1 import common_pb2, scenario_pb2, simulation_pb2

__all__ = [
    "LINE_INTERVAL_S",
    "ProgressView",
    "Stopped",
    "add_wait_options",
    "wait_run",
    "wait_simulations",
    "working",
]

LINE_INTERVAL_S = 5.0


class Stopped(Exception):
    """The wait ended without a result: Ctrl-C (exit 130) or --wait-timeout (exit 1); already said."""

    def __init__(self, exit_code: int) -> None:
        super().__init__(exit_code)
        self.exit_code = exit_code


def add_wait_options(parser: argparse.ArgumentParser, what: str) -> None:
    """--wait, --wait-timeout and --detach."""
    parser.add_argument("--wait", action="store_true", help=f"wait for the {what}, showing progress")
    parser.add_argument(
        "--wait-timeout", type=float, default=None, help="give up waiting after this many seconds"
    )
    parser.add_argument(
        "--detach",
        action="store_true",
        help=f"on Ctrl-C (or --wait-timeout) leave the {what} running instead of cancelling it",
    )


def _state(state: int) -> str:
    return enum_label(common_pb2.JobState, state)


class ProgressView:
    """Bars (tqdm) on a terminal, plain lines elsewhere, nothing when disabled; keyed by name."""

    def __init__(self, enabled: bool, stream: TextIO | None = None, *, bars: bool | None = None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self._tqdm: Any = None
        if bars is None:
            bars = enabled and self.stream.isatty()
        if bars:  # the `fabrictwin[cli]` extra; without it, plain lines
            with contextlib.suppress(MissingExtraError):
                self._tqdm = require("tqdm", "cli", "progress bars").tqdm
        self._bars: dict[str, Any] = {}
        self._shown: dict[str, str] = {}
        self._last_line = 0.0
        self._started = time.monotonic()

    @property
    def bars(self) -> bool:
        return self._tqdm is not None

    def show(self, key: str, fraction: float, text: str) -> None:
        """The progress of `key`: `fraction` of its work done (0..1) and what it is doing."""
        if not self.enabled:
            return
        if self._tqdm is not None:
            bar = self._bars.get(key)
            if bar is None:
                bar = self._tqdm(
                    total=1000,
                    desc=key,
                    position=len(self._bars),
                    file=self.stream,
                    leave=True,
                    dynamic_ncols=True,
                    bar_format="{desc} {percentage:3.0f}%|{bar}| [{elapsed}<{remaining}] {postfix}",
                )
                self._bars[key] = bar
            bar.n = round(max(0.0, min(1.0, fraction)) * 1000)
            bar.set_postfix_str(text, refresh=False)
            bar.refresh()
            return
        line = f"{format_percent(fraction)} {text}".strip()
        now = time.monotonic()
        if self._shown.get(key) == line and now - self._last_line < LINE_INTERVAL_S:
            return
        if key in self._shown and now - self._last_line < LINE_INTERVAL_S and fraction < 1.0:
            self._shown[key] = line  # changed, but not worth a line yet
            return
        self._shown[key] = line
        self._last_line = now
        print(f"[{now - self._started:6.1f} s] {key}: {line}", file=self.stream, flush=True)

    def close(self) -> None:
        for bar in self._bars.values():
            bar.close()
        self._bars.clear()


def _simulation_text(simulation: simulation_pb2.Simulation) -> str:
    stage = simulation.progress.stage
    if is_done(simulation):
        text = _state(simulation.state)
        if simulation.state == common_pb2.JOB_STATE_SUCCEEDED:
            text += f" in {format_duration_ns(simulation.result.makespan_ns)} simulated"
        return text
    return stage or _state(simulation.state)


def wait_simulations(
    client: Client, names: Sequence[str], args: argparse.Namespace
) -> list[simulation_pb2.Simulation]:
    """Wait for every simulation, showing each one's progress; see the module for Ctrl-C and timeouts."""
    view = ProgressView(enabled=not args.json)

    def show(simulation: simulation_pb2.Simulation) -> None:
        view.show(
            simulation.name,
            1.0 if is_done(simulation) else simulation.progress.fraction,
            _simulation_text(simulation),
        )

    done: list[simulation_pb2.Simulation] = []
    try:
        deadline = None if args.wait_timeout is None else time.monotonic() + args.wait_timeout
        for name in names:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            done.append(client.simulations.wait(name, timeout=left, progress=show))
    except KeyboardInterrupt:
        view.close()
        _stop(list(names[len(done) :]), args, client.simulations.cancel, "simulation", "Ctrl-C")
        raise Stopped(130) from None
    except DeadlineExceededError:
        view.close()
        _stop(list(names[len(done) :]), args, None, "simulation", f"--wait-timeout {args.wait_timeout:g} s")
        raise Stopped(1) from None
    view.close()
    return done


def wait_run(client: Client, name: str, args: argparse.Namespace) -> scenario_pb2.Run:
    """Wait for a run, one bar per mode (or what-if variant) and sweep point; see the module."""
    view = ProgressView(enabled=not args.json)

    def show(run: scenario_pb2.Run) -> None:
        for result in run.results:
            label = result.label + (
                " [" + ",".join(f"{k}={v}" for k, v in sorted(result.sweep_point.items())) + "]"
                if result.sweep_point
                else ""
            )
            finished = result.state in (
                common_pb2.JOB_STATE_SUCCEEDED,
                common_pb2.JOB_STATE_FAILED,
                common_pb2.JOB_STATE_CANCELLED,
            )
            text = _state(result.state)
            if result.state == common_pb2.JOB_STATE_SUCCEEDED:
                text += f": {format_duration_ns(result.makespan_ns)}"
            view.show(label, 1.0 if finished else 0.0, text)

    try:
        run = client.scenarios.wait_run(name, timeout=args.wait_timeout, progress=show)
    except KeyboardInterrupt:
        view.close()
        _stop([name], args, client.scenarios.cancel_run, "scenario", "Ctrl-C", run=True)
        raise Stopped(130) from None
    except DeadlineExceededError:
        view.close()
        _stop([name], args, None, "scenario", f"--wait-timeout {args.wait_timeout:g} s", run=True)
        raise Stopped(1) from None
    view.close()
    return run


def _stop(
    names: list[str],
    args: argparse.Namespace,
    cancel: Callable[[str], object] | None,
    group: str,
    why: str,
    *,
    run: bool = False,
) -> None:
    """Cancel what is unfinished (Ctrl-C without --detach) or say how to follow and cancel it."""
    follow = "scenario get" if run else f"{group} watch"
    stop = "scenario cancel" if run else f"{group} cancel"
    for name in names:
        if cancel is not None and not args.detach:
            try:
                cancel(name)
                print(f"{why}: cancelled {name}", file=sys.stderr)
            except FabricTwinError as exc:
                print(f"{why}: could not cancel {name}: {exc}", file=sys.stderr)
        else:
            print(
                f"{why}: {name} is still running; follow it with `fabrictwin {follow} {name}`, "
                f"stop it with `fabrictwin {stop} {name}`",
                file=sys.stderr,
            )


@contextlib.contextmanager
def working(view: ProgressView, key: str, what: str, tick_s: float = 0.5) -> Iterator[None]:
    """Show that one long call (an import of a large dump: a single RPC, so no fraction to report) is
    still going: `what` and the time so far, refreshed every `tick_s`, then how long it took. A call
    over before the first tick shows nothing; one that fails shows no "done" (its error says why)."""
    started = time.monotonic()
    done = threading.Event()
    shown = threading.Event()

    def tick() -> None:
        while not done.wait(tick_s):
            shown.set()
            view.show(key, 0.0, f"{what}: {time.monotonic() - started:.1f} s")

    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    try:
        yield
    except BaseException:
        done.set()
        ticker.join()
        view.close()
        raise
    done.set()
    ticker.join()
    if shown.is_set():
        view.show(key, 1.0, f"{what}: done in {time.monotonic() - started:.1f} s")
    view.close()
