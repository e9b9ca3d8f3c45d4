"""Progress and cancellation shared between the service process and its worker processes.

The engine runs in a spawned worker and calls `progress(fraction) -> keep going?` now and then.
A `WorkerProgress` is that callable: it writes the fraction into a dict owned by a
multiprocessing manager and reads back the cancel flag, so the service can show progress and
stop a run early. It pickles (the dict is a manager proxy), so it travels with the task.
"""

from __future__ import annotations

import multiprocessing
from multiprocessing.managers import SyncManager
from typing import Any

__all__ = ["ProgressBoard", "WorkerProgress"]


class WorkerProgress:
    """One run's progress: `fraction` is None until a worker has started it."""

    def __init__(self, state: Any) -> None:
        self._state = state

    def __call__(self, fraction: float) -> bool:
        """Called in the worker: record progress; False means the run was cancelled."""
        self._state["fraction"] = float(fraction)
        return not self._state["cancelled"]

    def report_stage(self, stage: str) -> None:
        """Called in the worker: what the run is doing now, when not simply simulating ("": it is)."""
        self._state["stage"] = stage

    def stage(self) -> str:
        return str(self._state.get("stage", ""))

    def fraction(self) -> float | None:
        value = self._state["fraction"]
        return None if value < 0 else float(value)

    def cancel(self) -> None:
        self._state["cancelled"] = True


class ProgressBoard:
    """Makes WorkerProgress objects; starts its manager process on first use."""

    def __init__(self) -> None:
        self._manager: SyncManager | None = None

    def new(self) -> WorkerProgress:
        """A fresh progress record (blocking: may start the manager; call it off the event loop)."""
        if self._manager is None:
            self._manager = multiprocessing.get_context("spawn").Manager()
        return WorkerProgress(self._manager.dict(fraction=-1.0, cancelled=False, stage=""))

    def close(self) -> None:
        if self._manager is not None:
            self._manager.shutdown()
            self._manager = None
