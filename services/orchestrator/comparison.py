"""Side-by-side comparison of mode results from one or more runs."""

from __future__ import annotations

from collections.abc import Sequence

from fabrictwin.v1 import common_pb2, scenario_pb2

from services.common.errors import FailedPrecondition, InvalidArgument

__all__ = ["compare"]


def _row_label(run: scenario_pb2.Run, result: scenario_pb2.ModeResult, many_runs: bool) -> str:
    label = result.label
    if result.sweep_point:
        label += " [" + ",".join(f"{k}={v}" for k, v in sorted(result.sweep_point.items())) + "]"
    if many_runs:
        label = f"{run.name.rsplit('/', 1)[-1]}/{label}"
    return label


def compare(runs: Sequence[scenario_pb2.Run], baseline: str = "") -> scenario_pb2.Comparison:
    """Rows in run then mode order; slowdowns against the baseline row and against the ideal."""
    if not runs:
        raise InvalidArgument("runs", "at least one run is required")
    rows: list[scenario_pb2.ComparisonRow] = []
    for run in runs:
        if run.state != common_pb2.JOB_STATE_SUCCEEDED:
            state = common_pb2.JobState.Name(run.state)
            raise FailedPrecondition(f"runs: {run.name} is {state}; only finished runs can be compared")
        for result in run.results:
            if result.state != common_pb2.JOB_STATE_SUCCEEDED:
                continue
            ideal = result.ideal_completion_ns
            rows.append(
                scenario_pb2.ComparisonRow(
                    label=_row_label(run, result, len(runs) > 1),
                    makespan_ns=result.makespan_ns,
                    busbw_gbps=result.busbw_gbps,
                    slowdown_vs_ideal=result.makespan_ns / ideal if ideal else 0.0,
                    uplink_max_over_mean=result.uplink_skew.max_over_mean,
                    uplink_share_hot=result.uplink_skew.share_hot,
                    uplink_share_idle=result.uplink_skew.share_idle,
                    result=result,
                )
            )
    if not rows:
        raise FailedPrecondition("runs: no mode of these runs succeeded; nothing to compare")
    base = rows[0]
    if baseline:
        matches = [r for r in rows if r.label == baseline or r.result.label == baseline]
        if not matches:
            raise InvalidArgument(
                "baseline", f"no row is labelled {baseline!r}; rows: {[r.label for r in rows]}"
            )
        base = matches[0]
    for row in rows:
        row.slowdown_vs_baseline = row.makespan_ns / base.makespan_ns if base.makespan_ns else 0.0
    fastest = min(rows, key=lambda r: r.makespan_ns)
    slowest = max(rows, key=lambda r: r.makespan_ns)
    if fastest is slowest or fastest.makespan_ns == 0:
        summary = f"{fastest.label}: {fastest.makespan_ns / 1e6:.3f} ms"
    else:
        summary = (
            f"{fastest.label} finishes {slowest.makespan_ns / fastest.makespan_ns:.2f}x faster than "
            f"{slowest.label} ({fastest.makespan_ns / 1e6:.3f} ms vs {slowest.makespan_ns / 1e6:.3f} ms)"
        )
    return scenario_pb2.Comparison(rows=rows, baseline=base.label, summary=summary)
