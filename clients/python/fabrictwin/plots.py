"""Pictures of runs and telemetry that tell the truth at a glance (matplotlib, an optional extra).

Every function returns a `matplotlib.figure.Figure` (no pyplot, no global state, no display needed);
`save(figure, "x.png")` writes PNG or SVG by the file's suffix. The data come as the SDK returns
them: a scenario `Run`, `Comparison` or `ModeResult`s, `LinkSeries` or telemetry `Series`,
`FlowResult`s. `fabrictwin.plot_data` fetches what a picture needs from the services.

One colour code everywhere: a link above the hot threshold (0.8, the skew's default) is drawn in
the warning colour whichever mode it belongs to, a link below the idle threshold (0.2) in grey,
the others in blue; modes get colours that are never the warning colour.

matplotlib is an optional extra: `pip install 'fabrictwin[plots]'`. Without it the SDK imports as
before and these functions raise `MissingExtraError` saying what to install.
"""

from __future__ import annotations

import math
import pathlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from fabrictwin.errors import InvalidArgumentError
from fabrictwin.extras import require
from fabrictwin.format import format_bytes, format_duration_ns
from fabrictwin.v1 import scenario_pb2, simulation_pb2, telemetry_pb2

__all__ = [
    "BUSY",
    "HOT",
    "IDLE",
    "MODE_COLOURS",
    "busbw_sweep",
    "completion_and_busbw",
    "completion_cdf",
    "link_heatmap",
    "save",
    "sorted_utilisation",
    "utilisation_colour",
]

# matplotlib's own type information is not needed by callers: figures are passed through as `Any`.
Figure = Any

HOT, BUSY, IDLE = "#d62728", "#1f77b4", "#9e9e9e"  # warning red, blue, grey
# tab10 without its red and orange, so that no mode is ever mistaken for a hot link.
MODE_COLOURS = ("#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f")
HOT_ABOVE, IDLE_BELOW = 0.8, 0.2
FORMATS = ("png", "svg")


def _figure(width: float, height: float) -> Figure:
    figure_module = require("matplotlib.figure", "plots", "plots")
    return figure_module.Figure(figsize=(width, height), layout="constrained")


def save(figure: Figure, path: str | pathlib.Path, dpi: int = 120) -> pathlib.Path:
    """Write `figure` as PNG or SVG, chosen by the suffix of `path`; returns the path."""
    target = pathlib.Path(path)
    kind = target.suffix.lstrip(".").lower()
    if kind not in FORMATS:
        raise InvalidArgumentError(f"{target}: a picture is .png or .svg, not {target.suffix or 'no suffix'}")
    figure.savefig(target, format=kind, dpi=dpi, facecolor="white")
    return target


def utilisation_colour(value: float, hot_above: float = HOT_ABOVE, idle_below: float = IDLE_BELOW) -> str:
    """The colour code: HOT above `hot_above`, IDLE below `idle_below`, BUSY between."""
    return HOT if value > hot_above else IDLE if value < idle_below else BUSY


def _percent_axis(axis: Any, hot_above: float, idle_below: float) -> None:
    ticker = require("matplotlib.ticker", "plots", "plots")
    axis.set_major_locator(ticker.FixedLocator([0.0, idle_below, 0.5, hot_above, 1.0]))
    axis.set_major_formatter(ticker.PercentFormatter(1.0, decimals=0))


def sorted_utilisation(
    panels: Mapping[str, Sequence[float]],
    *,
    busy_ns: Mapping[str, int] | None = None,
    hot_above: float = HOT_ABOVE,
    idle_below: float = IDLE_BELOW,
    title: str = "Link utilisation, sorted",
) -> Figure:
    """One panel per mode: every link's utilisation (0..1), highest first, on one shared scale.

    With `busy_ns` (each mode's completion time) the utilisations are put on one shared time scale:
    each link's use over the slowest mode's run, `u * busy / slowest`. The same bytes then cover the
    same area in every panel, pinned flows show as a few hot links and many idle ones, and a mode that
    spread the load evenly shows as a flat bar that is not hot. Without it each panel is over its own
    run. Hot links are marked above their bars (a marker never narrower than a few pixels, so one hot
    link of hundreds still shows), idle links are shaded grey, and the dashed lines are the thresholds.
    """
    if not panels:
        raise InvalidArgumentError("sorted_utilisation: no modes to draw")
    window = max(busy_ns.values()) if busy_ns else 0
    figure = _figure(max(6.0, 3.6 * len(panels)), 4.2)
    axes = figure.subplots(1, len(panels), sharey=True, squeeze=False)[0]
    for i, (ax, (label, values)) in enumerate(zip(axes, panels.items(), strict=True)):
        scale = busy_ns[label] / window if busy_ns and window else 1.0
        ordered = sorted((min(max(v * scale, 0.0), 1.0) for v in values), reverse=True)
        hot = sum(v > hot_above for v in ordered)
        idle = sum(v < idle_below for v in ordered)
        ranks = range(1, len(ordered) + 1)
        colours = [utilisation_colour(v, hot_above, idle_below) for v in ordered]
        ax.bar(ranks, ordered, width=1.0, color=colours, linewidth=0, label="_links")
        if idle:
            ax.axvspan(len(ordered) - idle + 0.5, len(ordered) + 0.5, color=IDLE, alpha=0.18, linewidth=0)
        if hot:
            ax.plot(range(1, hot + 1), [1.04] * hot, "v", color=HOT, markersize=6, clip_on=False)
            if hot < len(ordered) / 10:  # a few bars of hundreds: say where they are
                ax.annotate(
                    f"{hot} hot",
                    (hot, 1.04),
                    xytext=(8, -3),
                    textcoords="offset points",
                    color=HOT,
                    fontsize=9,
                    annotation_clip=False,
                )
        for level in (hot_above, idle_below):
            ax.axhline(level, color="#444444", linestyle="--", linewidth=0.8)
        ax.set_xlim(0.5, max(len(ordered), 1) + 0.5)
        ax.set_ylim(0.0, 1.08)
        _percent_axis(ax.yaxis, hot_above, idle_below)
        ax.set_xlabel("links, busiest first")
        ax.grid(axis="y", alpha=0.25)
        when = f" in {format_duration_ns(busy_ns[label])}" if busy_ns and label in busy_ns else ""
        ax.set_title(f"{label}{when}\n{hot} hot, {idle} idle of {len(ordered)} links", fontsize=10)
        if hot and idle:
            ax.text(
                0.97,
                0.62,
                "hot and idle at once:\npinned flows",
                transform=ax.transAxes,
                ha="right",
                color=HOT,
                fontsize=9,
                fontweight="bold",
            )
        if i == 0:
            ylabel = (
                f"utilisation over {format_duration_ns(window)} (the slowest run)"
                if busy_ns
                else "utilisation over the run"
            )
            ax.set_ylabel(ylabel)
    _threshold_legend(figure, hot_above, idle_below)
    figure.suptitle(title)
    return figure


def _threshold_legend(figure: Figure, hot_above: float, idle_below: float) -> None:
    patches = require("matplotlib.patches", "plots", "plots")
    handles = [
        patches.Patch(color=HOT, label=f"hot (above {hot_above:.0%})"),
        patches.Patch(color=BUSY, label="busy"),
        patches.Patch(color=IDLE, label=f"idle (below {idle_below:.0%})"),
    ]
    figure.legend(handles=handles, loc="outside lower center", ncols=3, frameon=False)


def _utilisation_colormap(hot_above: float, idle_below: float) -> Any:
    """Idle cells light grey, busy ones pale to dark blue, hot ones the warning colour: a step at the
    hot threshold rather than a smooth ramp, so that hot cells jump out whatever their neighbours."""
    colors = require("matplotlib.colors", "plots", "plots")

    def between(start: str, end: str, t: float) -> tuple[float, ...]:
        a, b = colors.to_rgb(start), colors.to_rgb(end)
        return tuple(x + (y - x) * t for x, y in zip(a, b, strict=True))

    table = []
    for i in range(256):
        v = i / 255
        if v > hot_above:
            table.append(between("#ef6a6a", "#a50f15", (v - hot_above) / max(1 - hot_above, 1e-9)))
        elif v >= idle_below:
            table.append(between("#c6d3e3", "#08306b", (v - idle_below) / max(hot_above - idle_below, 1e-9)))
        else:
            table.append(colors.to_rgb("#f2f2f2"))
    return colors.ListedColormap(table, name="fabrictwin-utilisation")


def _time_unit(span_ns: float) -> tuple[float, str]:
    for scale, unit in ((1e9, "s"), (1e6, "ms"), (1e3, "us")):
        if span_ns >= scale:
            return scale, unit
    return 1.0, "ns"


def link_heatmap(
    series: Iterable[simulation_pb2.LinkSeries | telemetry_pb2.Series],
    *,
    hot_above: float = HOT_ABOVE,
    idle_below: float = IDLE_BELOW,
    title: str = "Link utilisation over time",
) -> Figure:
    """Link x time: one row per link (busiest at the top), one column per interval, utilisation as
    colour (grey idle, blue busy, the warning colour hot). Takes a simulation's `LinkSeries` or the
    `Series` of a telemetry query of utilisation (live or simulated; rows on the union of times)."""
    np = require("numpy", "plots", "plots")
    items = list(series)
    if not items:
        raise InvalidArgumentError("link_heatmap: no series to draw")
    names, times, grid = _grid(items, np)
    order = np.argsort(-np.nanmean(np.where(np.isnan(grid), 0.0, grid), axis=1), kind="stable")
    grid, names = grid[order], [names[i] for i in order]
    span = float(times[-1] - times[0]) if len(times) > 1 else 1.0
    step = float(np.median(np.diff(times))) if len(times) > 1 else 1.0
    live = int(times[0]) >= 10**15  # a live clock (Unix ns); a simulated one starts at 0
    scale, unit = _time_unit(span + step)
    origin = float(times[0]) if live else 0.0
    left, right = (float(times[0]) - origin) / scale, (float(times[-1]) + step - origin) / scale
    figure = _figure(9.0, max(3.5, min(9.0, 1.5 + 0.12 * len(names))))
    ax = figure.subplots()
    image = ax.imshow(
        np.clip(grid, 0.0, 1.0),
        aspect="auto",
        interpolation="nearest",
        cmap=_utilisation_colormap(hot_above, idle_below),
        vmin=0.0,
        vmax=1.0,
        extent=(left, right, len(names) - 0.5, -0.5),
    )
    if len(names) <= 40:
        ax.set_yticks(range(len(names)), names, fontsize=7)
    else:
        ax.set_yticks([])
    ax.set_ylabel(f"{len(names)} links, busiest at the top")
    if live:
        start = _utc(int(times[0]))
        ax.set_xlabel(f"time since {start} ({unit})")
    else:
        ax.set_xlabel(f"simulated time ({unit})")
    bar = figure.colorbar(image, ax=ax, fraction=0.05, pad=0.02)
    _percent_axis(bar.ax.yaxis, hot_above, idle_below)
    bar.set_label(f"utilisation (hot above {hot_above:.0%}, idle below {idle_below:.0%})")
    hot_cells = int(np.sum(grid > hot_above))
    idle_cells = int(np.sum(grid < idle_below))
    ax.set_title(f"{title}\n{hot_cells} hot and {idle_cells} idle link-intervals of {grid.size}", fontsize=10)
    return figure


def _utc(time_ns: int) -> str:
    import datetime

    moment = datetime.datetime.fromtimestamp(time_ns / 1e9, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def _grid(items: Sequence[Any], np: Any) -> tuple[list[str], Any, Any]:
    """Names, the sorted union of sample times and a links x times array (NaN where not sampled)."""
    rows: list[tuple[str, list[int], list[float]]] = []
    for s in items:
        if isinstance(s, simulation_pb2.LinkSeries):
            n = len(s.utilisation)
            rows.append(
                (
                    s.display_name or f"{s.link}/{s.direction}",
                    [s.start_ns + i * s.interval_ns for i in range(n)],
                    list(s.utilisation),
                )
            )
        else:
            rows.append((s.port, list(s.time_ns), list(s.values)))
    times = np.array(sorted({t for _, ts, _ in rows for t in ts}), dtype=np.int64)
    if times.size == 0:
        raise InvalidArgumentError("link_heatmap: the series hold no samples")
    column = {int(t): i for i, t in enumerate(times)}
    grid = np.full((len(rows), times.size), np.nan)
    for r, (_, ts, values) in enumerate(rows):
        for t, v in zip(ts, values, strict=True):
            grid[r, column[t]] = v
    return [name for name, _, _ in rows], times, grid


def _mode_rows(
    results: scenario_pb2.Run | scenario_pb2.Comparison | Iterable[scenario_pb2.ModeResult],
) -> list[scenario_pb2.ModeResult]:
    if isinstance(results, scenario_pb2.Run):
        return list(results.results)
    if isinstance(results, scenario_pb2.Comparison):
        return [row.result for row in results.rows]
    return list(results)


def _completion_ns(result: scenario_pb2.ModeResult) -> int:
    return result.jobs[0].completion_ns if result.jobs else result.makespan_ns


def _ideal_busbw(result: scenario_pb2.ModeResult) -> float:
    """busbw is bytes over time, so at the ideal completion it is busbw x completion / ideal."""
    ideal = result.ideal_completion_ns
    return result.busbw_gbps * _completion_ns(result) / ideal if ideal else math.nan


def _row_label(result: scenario_pb2.ModeResult) -> str:
    if not result.sweep_point:
        return result.label
    return result.label + " [" + ",".join(f"{k}={v}" for k, v in sorted(result.sweep_point.items())) + "]"


def completion_and_busbw(
    results: scenario_pb2.Run | scenario_pb2.Comparison | Iterable[scenario_pb2.ModeResult],
    *,
    title: str = "Completion and bus bandwidth per mode",
) -> Figure:
    """Two bar charts side by side: completion time and busbw per mode (and sweep point), each with
    the closed-form ideal marked as a black tick and the slowdown against it written at the bar."""
    rows = [r for r in _mode_rows(results) if r.makespan_ns > 0]
    if not rows:
        raise InvalidArgumentError("completion_and_busbw: no finished mode results to draw")
    labels = [_row_label(r) for r in rows]
    colours = [MODE_COLOURS[i % len(MODE_COLOURS)] for i in range(len(rows))]
    completion = [_completion_ns(r) for r in rows]
    scale, unit = _time_unit(max(completion))
    figure = _figure(10.0, 1.8 + 0.45 * len(rows))
    left, right = figure.subplots(1, 2, sharey=True)
    positions = list(range(len(rows)))
    left.barh(positions, [c / scale for c in completion], color=colours, label="_modes")
    right.barh(positions, [r.busbw_gbps for r in rows], color=colours, label="_modes")
    ideal_time = [r.ideal_completion_ns / scale if r.ideal_completion_ns else math.nan for r in rows]
    ideal_bw = [_ideal_busbw(r) for r in rows]
    left.plot(ideal_time, positions, "|", color="black", markersize=22, markeredgewidth=2.5, label="ideal")
    right.plot(ideal_bw, positions, "|", color="black", markersize=22, markeredgewidth=2.5, label="ideal")
    for p, r, c in zip(positions, rows, completion, strict=True):
        if r.ideal_completion_ns:
            left.annotate(
                f" {c / r.ideal_completion_ns:.2f}x ideal",
                (c / scale, p),
                va="center",
                fontsize=8,
                annotation_clip=False,
            )
    left.set_yticks(positions, labels)
    left.invert_yaxis()
    left.set_xlabel(f"completion ({unit}); shorter is better")
    right.set_xlabel("busbw (Gb/s); longer is better")
    left.set_xlim(0, max(completion) / scale * 1.3)
    right.set_xlim(0, max([r.busbw_gbps for r in rows] + [b for b in ideal_bw if not math.isnan(b)]) * 1.1)
    for ax in (left, right):
        ax.grid(axis="x", alpha=0.25)
    figure.legend(
        handles=left.get_legend_handles_labels()[0],
        labels=["ideal (closed form)"],
        loc="outside lower center",
        frameon=False,
    )
    figure.suptitle(title)
    return figure


def _sweep_parameter(rows: Sequence[scenario_pb2.ModeResult], parameter: str | None) -> str:
    keys = sorted({k for r in rows for k in r.sweep_point})
    if parameter is not None:
        if parameter not in keys:
            raise InvalidArgumentError(
                f"busbw_sweep: {parameter!r} was not swept (swept: {keys or 'nothing'})"
            )
        return parameter
    if not keys:
        raise InvalidArgumentError("busbw_sweep: the results have no sweep points (Scenario.sweeps)")
    sizes = [k for k in keys if k.endswith("size_bytes")]
    if len(keys) == 1 or len(sizes) == 1:
        return keys[0] if len(keys) == 1 else sizes[0]
    raise InvalidArgumentError(f"busbw_sweep: several parameters were swept ({', '.join(keys)}): name one")


def busbw_sweep(
    results: scenario_pb2.Run | scenario_pb2.Comparison | Iterable[scenario_pb2.ModeResult],
    *,
    parameter: str | None = None,
    title: str = "Bus bandwidth against message size",
) -> Figure:
    """A sweep as curves, as nccl-tests' users plot it: busbw against the swept parameter (the message
    size, `jobs.0.size_bytes`, on a log axis) per mode, with the closed-form ideal dashed."""
    rows = [r for r in _mode_rows(results) if r.makespan_ns > 0]
    key = _sweep_parameter(rows, parameter)
    is_size = key.endswith("size_bytes")
    curves: dict[str, list[tuple[float, float, float]]] = {}
    for r in rows:
        if key in r.sweep_point:
            curves.setdefault(r.label.split(" [", 1)[0], []).append(
                (float(r.sweep_point[key]), r.busbw_gbps, _ideal_busbw(r))
            )
    figure = _figure(7.5, 4.5)
    ax = figure.subplots()
    ideal: dict[float, float] = {}
    for i, (label, points) in enumerate(curves.items()):
        points.sort()
        ax.plot(
            [p[0] for p in points],
            [p[1] for p in points],
            "o-",
            color=MODE_COLOURS[i % len(MODE_COLOURS)],
            label=label,
        )
        for x, _, best in points:
            if not math.isnan(best):
                ideal.setdefault(x, best)
    if ideal:
        xs = sorted(ideal)
        ax.plot(xs, [ideal[x] for x in xs], "--", color="black", linewidth=1, label="ideal")
    if is_size:
        ticker = require("matplotlib.ticker", "plots", "plots")
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda x, _pos: format_bytes(int(x))))
        ax.set_xlabel("message size (S)")
    else:
        ax.set_xlabel(key)
    ax.set_ylabel("busbw (Gb/s)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.25)
    ax.legend(fontsize=8)
    ax.set_title(title)
    return figure


def completion_cdf(
    flows: Mapping[str, Iterable[simulation_pb2.FlowResult]],
    *,
    title: str = "Flow completion times",
) -> Figure:
    """The empirical CDF of flow completion times (finish - start) per mode; a log time axis when
    they span more than a hundredfold."""
    times = {label: sorted(f.finish_ns - f.start_ns for f in items) for label, items in flows.items()}
    times = {label: t for label, t in times.items() if t}
    if not times:
        raise InvalidArgumentError("completion_cdf: no flows to draw")
    low = min(t[0] for t in times.values())
    high = max(t[-1] for t in times.values())
    scale, unit = _time_unit(high)
    figure = _figure(7.5, 4.5)
    ax = figure.subplots()
    for i, (label, values) in enumerate(times.items()):
        n = len(values)
        ax.step(
            [v / scale for v in values],
            [(k + 1) / n for k in range(n)],
            where="post",
            color=MODE_COLOURS[i % len(MODE_COLOURS)],
            label=f"{label} ({n} flows, p99 {format_duration_ns(values[math.ceil(0.99 * n) - 1])})",
        )
    if low > 0 and high / low > 100:
        ax.set_xscale("log")
    ax.set_xlabel(f"flow completion time ({unit})")
    ax.set_ylabel("fraction of flows done")
    ax.set_ylim(0, 1.02)
    _percent_axis(ax.yaxis, 0.8, 0.2)
    ax.grid(alpha=0.25)
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title(title)
    return figure
