"""Side-by-side comparison of mode results from one or more runs."""

from __future__ import annotations

from collections.abc import Sequence

from services.common.errors import FailedPrecondition, InvalidArgument
from services.orchestrator.model import Comparison, ComparisonRow, JobState, ModeResult, Outcome, Run

__all__ = ["compare"]


def _row_label(run: Run, result: ModeResult, many_runs: bool) -> str:
    label = result.label
    if result.sweep_point:
        label += " [" + ",".join(f"{k}={v}" for k, v in sorted(result.sweep_point.items())) + "]"
    if many_runs:
        label = f"{run.name.rsplit('/', 1)[-1]}/{label}"
    return label


def compare(runs: Sequence[Run], baseline: str = "") -> Comparison:
    """Rows in run then mode order; slowdowns against the baseline row and against the ideal."""
    if not runs:
        raise InvalidArgument("runs", "at least one run is required")
    found: list[tuple[str, ModeResult]] = []
    for run in runs:
        if run.state is not JobState.SUCCEEDED:
            state = f"JOB_STATE_{run.state.value}"
            raise FailedPrecondition(f"runs: {run.name} is {state}; only finished runs can be compared")
        found.extend(
            (_row_label(run, result, len(runs) > 1), result)
            for result in run.results
            if result.state is JobState.SUCCEEDED and result.outcome is not None
        )
    if not found:
        raise FailedPrecondition("runs: no mode of these runs succeeded; nothing to compare")
    makespans = [_outcome(r).makespan_ns for _, r in found]
    base = 0
    if baseline:
        matches = [i for i, (label, r) in enumerate(found) if baseline in (label, r.label)]
        if not matches:
            raise InvalidArgument(
                "baseline", f"no row is labelled {baseline!r}; rows: {[label for label, _ in found]}"
            )
        base = matches[0]
    rows = tuple(
        ComparisonRow(
            label=label,
            result=result,
            makespan_ns=makespan,
            busbw_gbps=_outcome(result).busbw_gbps,
            slowdown_vs_baseline=makespan / makespans[base] if makespans[base] else 0.0,
            slowdown_vs_ideal=(
                makespan / _outcome(result).ideal_completion_ns
                if _outcome(result).ideal_completion_ns
                else 0.0
            ),
        )
        for (label, result), makespan in zip(found, makespans, strict=True)
    )
    fastest = min(rows, key=lambda r: r.makespan_ns)
    slowest = max(rows, key=lambda r: r.makespan_ns)
    if fastest is slowest or fastest.makespan_ns == 0:
        summary = f"{fastest.label}: {fastest.makespan_ns / 1e6:.3f} ms"
    else:
        summary = (
            f"{fastest.label} finishes {slowest.makespan_ns / fastest.makespan_ns:.2f}x faster than "
            f"{slowest.label} ({fastest.makespan_ns / 1e6:.3f} ms vs {slowest.makespan_ns / 1e6:.3f} ms)"
        )
    return Comparison(rows=rows, baseline=rows[base].label, summary=summary)


def _outcome(result: ModeResult) -> Outcome:
    """The outcome of a result `compare` kept (a succeeded one, which always has one)."""
    assert result.outcome is not None
    return result.outcome
