"""`fabrictwin plot ...`: pictures of runs, simulations and telemetry, as PNG or SVG files.

Each command writes the file named by `-o` (its suffix, .png or .svg, chooses the format) and prints
its path. The pictures are drawn by `fabrictwin.plots` (matplotlib: `pip install 'fabrictwin[plots]'`).
"""

from __future__ import annotations

import argparse
from typing import Any

from fabrictwin import plot_data, plots
from fabrictwin.cli_common import duration_arg, leaf, print_json, subcommands
from fabrictwin.client import Client
from fabrictwin.errors import InvalidArgumentError
from fabrictwin.extras import require
from fabrictwin.names import run_name

__all__ = ["register"]


def _written(args: argparse.Namespace, figure: Any) -> int:
    path = plots.save(figure, args.output)
    if args.json:
        print_json({"plot": str(path)})
    else:
        print(f"plot: {path}")
    return 0


def _drawn(handler: Any) -> Any:
    """`handler`, after checking that matplotlib is there (before any call to a service)."""

    def checked(client: Client, args: argparse.Namespace) -> int:
        require("matplotlib", "plots", "plots")
        return int(handler(client, args))

    return checked


def _thresholds(args: argparse.Namespace) -> dict[str, float]:
    return {"hot_above": args.hot_above, "idle_below": args.idle_below}


def _tier_text(tier: int | None) -> str:
    return "switch-to-switch links" if tier is None else f"tier-{tier} links"


def _utilisation(client: Client, args: argparse.Namespace) -> int:
    run = client.scenarios.get_run(run_name(args.run))
    panels, busy = plot_data.run_link_utilisation(client, run, tier=args.tier)
    figure = plots.sorted_utilisation(
        panels,
        busy_ns=None if args.own_window else busy,
        title=f"{run.scenario.display_name or run.name}: {_tier_text(args.tier)}, sorted",
        **_thresholds(args),
    )
    return _written(args, figure)


def _heatmap(client: Client, args: argparse.Namespace) -> int:
    chosen = [bool(args.simulation), bool(args.run), bool(args.source)]
    if sum(chosen) != 1:
        raise InvalidArgumentError("plot heatmap: give one of --simulation, --run or --source")
    if args.source:
        series: list[Any] = plot_data.telemetry_utilisation_series(
            client,
            args.source,
            ports=args.port or ["group:uplinks"],
            start_ns=args.start,
            end_ns=args.end,
            step_ns=args.step,
        )
        title = f"{args.source}: {', '.join(args.port or ['group:uplinks'])}"
    else:
        simulation = args.simulation
        title = simulation
        if args.run:
            run = client.scenarios.get_run(run_name(args.run))
            results = [r for r in run.results if not args.mode or r.label == args.mode]
            if not results:
                labels = ", ".join(r.label for r in run.results)
                raise InvalidArgumentError(f"plot heatmap: {run.name} has no mode {args.mode!r} ({labels})")
            simulation, title = results[0].simulation, f"{results[0].label} ({run.name})"
        series = plot_data.simulation_tier_series(client, simulation, tier=args.tier)
        title = f"{title}: {_tier_text(args.tier)}"
    return _written(args, plots.link_heatmap(series, title=title, **_thresholds(args)))


def _comparison(client: Client, args: argparse.Namespace) -> Any:
    return client.scenarios.compare([run_name(r) for r in args.runs])


def _completion(client: Client, args: argparse.Namespace) -> int:
    return _written(args, plots.completion_and_busbw(_comparison(client, args)))


def _sweep(client: Client, args: argparse.Namespace) -> int:
    return _written(args, plots.busbw_sweep(_comparison(client, args), parameter=args.parameter))


def _fct(client: Client, args: argparse.Namespace) -> int:
    run = client.scenarios.get_run(run_name(args.run))
    return _written(args, plots.completion_cdf(plot_data.run_flows(client, run)))


def _output(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-o", "--output", required=True, metavar="FILE", help="picture to write: .png or .svg"
    )


def _threshold_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--hot-above", type=float, default=plots.HOT_ABOVE, help="hot above (default 0.8)")
    parser.add_argument("--idle-below", type=float, default=plots.IDLE_BELOW, help="idle below (default 0.2)")


def _tier_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--tier",
        type=int,
        default=None,
        help="links of this tier only (1 host, 2 leaf-spine, 3 spine-core; "
        "default: every switch-to-switch link)",
    )


def register(root: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `plot` and its subcommands to the root parser's subcommands."""
    plot = root.add_parser("plot", help="draw runs, simulations and telemetry as PNG or SVG")
    plot.description = (
        "Pictures of runs and telemetry; hot links (above 80%) are red in every mode, idle ones grey."
    )
    group = subcommands(plot, "plot")

    p = leaf(
        group,
        "utilisation",
        _drawn(_utilisation),
        "every link's utilisation per mode, sorted, on one shared scale",
        "One panel per mode: each link's utilisation, busiest first. By default on one time scale, the\n"
        "slowest mode's run, so that the same bytes cover the same area and only pinned flows look hot.\n\n"
        "example: fabrictwin plot utilisation scenarios/demo/runs/r1 -o utilisation.png",
    )
    p.add_argument("run", help="run (scenarios/S/runs/R)")
    _tier_option(p)
    p.add_argument("--own-window", action="store_true", help="each mode over its own run instead")
    _threshold_options(p)
    _output(p)

    p = leaf(
        group,
        "heatmap",
        _drawn(_heatmap),
        "link x time utilisation of a tier, from a simulation, a run's mode or a telemetry source",
        "examples:\n"
        "  fabrictwin plot heatmap --run scenarios/demo/runs/r1 --mode ECMP --tier 2 -o ecmp.png\n"
        "  fabrictwin plot heatmap --source pod1-live --port group:uplinks --step 1m -o live.svg",
    )
    p.add_argument("--simulation", default="", help="simulation (ID or simulations/ID)")
    p.add_argument("--run", default="", help="run (scenarios/S/runs/R): one of its modes, --mode")
    p.add_argument("--mode", default="", help="label of the run's mode (default: the first)")
    p.add_argument("--source", default="", help="telemetry source (live or simulated)")
    p.add_argument("--port", action="append", default=[], help="with --source: ports (default group:uplinks)")
    p.add_argument("--start", type=duration_arg, default=0, help="with --source: window start")
    p.add_argument("--end", type=duration_arg, default=0, help="with --source: window end (default newest)")
    p.add_argument("--step", type=duration_arg, default=0, help="with --source: bucket width (0: raw)")
    _tier_option(p)
    _threshold_options(p)
    _output(p)

    p = leaf(group, "completion", _drawn(_completion), "completion time and busbw per mode, the ideal marked")
    p.add_argument("runs", nargs="+", metavar="RUN", help="run(s) (scenarios/S/runs/R)")
    _output(p)

    p = leaf(
        group,
        "sweep",
        _drawn(_sweep),
        "a sweep as curves: busbw against message size per mode (log x axis)",
        "example: fabrictwin plot sweep scenarios/sizes/runs/r1 -o busbw.png",
    )
    p.add_argument("runs", nargs="+", metavar="RUN", help="run(s) of a scenario with sweeps")
    p.add_argument("--parameter", default=None, help="swept parameter for x (default: the size)")
    _output(p)

    p = leaf(group, "fct", _drawn(_fct), "flow completion-time CDF per mode")
    p.add_argument("run", help="run (scenarios/S/runs/R)")
    _output(p)
