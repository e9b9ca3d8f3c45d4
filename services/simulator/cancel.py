"""`Cancelled`: what an engine raises when its progress callback asks it to stop.

Both engines raise it and the worker entry (runner.py) turns it into a CANCELLED result, so it lives
below both engines rather than in either.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["RESULTS_STAGE", "Cancelled", "check_cancelled", "report_stage", "setup_stage"]

RESULTS_STAGE = "assembling results"  # after the event loop, until the outcome reaches the service


class Cancelled(Exception):
    """The progress callback asked the engine to stop."""


def check_cancelled(progress: Callable[[float], bool] | None) -> None:
    """Between the setup phases of a run (seconds each at scale, before any progress is made): ask
    the progress callback, at 0, whether to go on; raise Cancelled if not. A cancelled run's worker
    then stops by itself instead of being killed after the servicer's grace period."""
    if progress is not None and not progress(0.0):
        raise Cancelled()


def report_stage(progress: Callable[[float], bool] | None, stage: str) -> None:
    """Say which phase the run is in to a progress callback with a `report_stage` method, as the
    service's worker has (a watch shows it); "" is the event loop (simulating)."""
    report: Callable[[str], None] | None = getattr(progress, "report_stage", None)
    if report is not None:
        report(stage)


def setup_stage(progress: Callable[[float], bool] | None, stage: str) -> None:
    """A setup phase begins: `report_stage` (a watch shows it instead of "simulating" at 0%; "": the
    setup is over, simulating), then `check_cancelled`."""
    report_stage(progress, stage)
    check_cancelled(progress)
