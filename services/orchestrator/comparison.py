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


def _point_key(result: ModeResult) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(result.sweep_point.items()))


def _size_text(value: str) -> str:
    """`268435456` -> `256MiB` (exact binary multiples), else the value as it is."""
    try:
        number = int(value)
    except ValueError:
        return value
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if number >= factor and number % factor == 0:
            return f"{number // factor}{unit}"
    return value


def _point_text(key: tuple[tuple[str, str], ...]) -> str:
    """A sweep point for people: `1MiB` for a size sweep, else `parameter=value` pairs."""
    shown = []
    for parameter, value in key:
        if parameter.endswith("size_bytes"):
            shown.append(_size_text(value) if len(key) == 1 else f"{parameter}={_size_text(value)}")
        else:
            shown.append(f"{parameter}={value}")
    return ",".join(shown)


def compare(runs: Sequence[Run], baseline: str = "") -> Comparison:
    """Rows in run then mode order; slowdowns against the baseline row *of the same sweep point*
    (the named mode there, else the point's first row) and against the ideal. A point whose baseline
    did not succeed gets no slowdowns (0). Modes are never compared across sweep points."""
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
    if baseline and not any(baseline in (label, r.label) for label, r in found):
        raise InvalidArgument(
            "baseline", f"no row is labelled {baseline!r}; rows: {[label for label, _ in found]}"
        )
    points: dict[tuple[tuple[str, str], ...], list[int]] = {}
    for i, (_, result) in enumerate(found):
        points.setdefault(_point_key(result), []).append(i)
    base_of: dict[int, int | None] = {}
    for members in points.values():
        if baseline:
            named = [i for i in members if baseline in (found[i][0], found[i][1].label)]
            reference = named[0] if named else None
        else:
            reference = members[0]
        for i in members:
            base_of[i] = reference
    makespans = [_outcome(r).makespan_ns for _, r in found]
    rows = tuple(
        ComparisonRow(
            label=label,
            result=result,
            makespan_ns=makespan,
            busbw_gbps=_outcome(result).busbw_gbps,
            slowdown_vs_baseline=_ratio(makespan, makespans, base_of[i]),
            slowdown_vs_ideal=(
                makespan / _outcome(result).ideal_completion_ns
                if _outcome(result).ideal_completion_ns
                else 0.0
            ),
        )
        for i, ((label, result), makespan) in enumerate(zip(found, makespans, strict=True))
    )
    first_base = next((b for b in base_of.values() if b is not None), 0)
    if all(run.scenario.variants for run in runs) and len(points) == 1 and len(rows) > 1:
        summary = _what_each_change_buys(rows, first_base)
    else:
        summaries = []
        for key, members in points.items():
            text = _fastest_and_slowest([rows[i] for i in members])
            summaries.append(f"{_point_text(key)}: {text}" if key else text)
        summary = "; ".join(summaries[:12]) + ("; ..." if len(summaries) > 12 else "")
    baseline_label = baseline or found[first_base][1].label
    return Comparison(rows=rows, baseline=baseline_label, summary=summary)


def _ratio(makespan: int, makespans: Sequence[int], reference: int | None) -> float:
    if reference is None or not makespans[reference]:
        return 0.0
    return makespan / makespans[reference]


def _fastest_and_slowest(rows: Sequence[ComparisonRow]) -> str:
    """`ADAPTIVE finishes 1.90x faster than ECMP (...)` among rows of one sweep point."""
    fastest = min(rows, key=lambda r: r.makespan_ns)
    slowest = max(rows, key=lambda r: r.makespan_ns)
    if fastest is slowest or fastest.makespan_ns == 0 or fastest.makespan_ns == slowest.makespan_ns:
        return f"{_without_point(fastest)}: {fastest.makespan_ns / 1e6:.3f} ms"
    times = f"({fastest.makespan_ns / 1e6:.3f} ms vs {slowest.makespan_ns / 1e6:.3f} ms)"
    ratio = slowest.makespan_ns / fastest.makespan_ns
    return f"{_without_point(fastest)} finishes {ratio:.2f}x faster than {_without_point(slowest)} {times}"


def _without_point(row: ComparisonRow) -> str:
    """The row's label (`run/MODE` across runs) without its sweep point, which the summary gives."""
    return row.label.split(" [", 1)[0] if row.result.sweep_point else row.label


def _what_each_change_buys(rows: Sequence[ComparisonRow], base: int) -> str:
    """A what-if's summary: each variant against the baseline (`as-is`), in the run's order."""
    reference = rows[base]
    parts = []
    for row in rows:
        if row is reference:
            continue
        if row.makespan_ns == reference.makespan_ns or not row.makespan_ns or not reference.makespan_ns:
            parts.append(f"{row.label}: no change")
        elif row.makespan_ns < reference.makespan_ns:
            saved = _duration(reference.makespan_ns - row.makespan_ns)
            ratio = reference.makespan_ns / row.makespan_ns
            parts.append(f"{row.label}: {ratio:.3g}x faster (saves {saved})")
        else:
            lost = _duration(row.makespan_ns - reference.makespan_ns)
            ratio = row.makespan_ns / reference.makespan_ns
            parts.append(f"{row.label}: {ratio:.3g}x slower (costs {lost})")
    return f"against {reference.label} ({reference.makespan_ns / 1e6:.3f} ms): " + "; ".join(parts)


def _duration(ns: int) -> str:
    """`840 ns`, `12.5 us`, `3.210 ms`: a difference in the unit that shows it."""
    if ns < 1_000:
        return f"{ns} ns"
    if ns < 1_000_000:
        return f"{ns / 1e3:.3g} us"
    return f"{ns / 1e6:.3f} ms"


def _outcome(result: ModeResult) -> Outcome:
    """The outcome of a result `compare` kept (a succeeded one, which always has one)."""
    assert result.outcome is not None
    return result.outcome
