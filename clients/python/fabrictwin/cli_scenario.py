"""`fabrictwin scenario ...`: create scenarios, run them, compare runs, diagnose telemetry."""

from __future__ import annotations

import argparse

from fabrictwin.cli_common import (
    InputError,
    add_list_options,
    duration_arg,
    emit,
    emit_list,
    leaf,
    limited,
    message_dict,
    pinning_options,
    print_json,
    subcommands,
    warn,
)
from fabrictwin.cli_output import add_output_option, write_output
from fabrictwin.cli_simulation import add_workload_options, job_from_args, modes_from_args
from fabrictwin.cli_wait import Stopped, add_wait_options, wait_run
from fabrictwin.client import Client
from fabrictwin.format import comparison_table
from fabrictwin.names import enum_label
from fabrictwin.tables import findings_table, run_report, runs_table, scenarios_table
from fabrictwin.units import parse_size
from fabrictwin.v1 import common_pb2, scenario_pb2

__all__ = ["register"]


def _is_run(name: str) -> bool:
    return "/runs/" in name


# --sweep NAME=...: short names for the parameters people sweep (any SimulationSpec path works too).
SWEEP_ALIASES = {
    "size": "jobs.0.size_bytes",
    "ranks": "jobs.0.rank_count",
    "iterations": "jobs.0.iterations",
    "qps": "jobs.0.qps_per_connection",
    "seed": "seed",
    "hash-seed": "load_balancing.seed",
    "mtu": "mtu_bytes",
    "buffer": "buffer_bytes",
    "switch-latency-ns": "switch_latency_ns",
}


def sweep_arg(text: str) -> scenario_pb2.Sweep:
    """`size=1MiB,16MiB,256MiB` (or `jobs.0.size_bytes=...`, any scalar SimulationSpec path): a Sweep;
    values of `..._bytes` parameters may carry units."""
    name, sep, values = text.partition("=")
    if not sep or not name.strip() or not values.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=V1,V2,... (e.g. size=1MiB,16MiB,256MiB)")
    parameter = SWEEP_ALIASES.get(name.strip(), name.strip())
    parsed = []
    for value in (v.strip() for v in values.split(",")):
        if not value:
            raise argparse.ArgumentTypeError(f"{text!r}: an empty value")
        if parameter.endswith("_bytes"):
            try:
                value = str(parse_size(value))
            except ValueError as exc:
                raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None
        parsed.append(value)
    return scenario_pb2.Sweep(parameter=parameter, values=parsed)


def _create(client: Client, args: argparse.Namespace) -> int:
    scenario = client.scenarios.create(
        args.fabric,
        [job_from_args(args, client)],
        modes_from_args(args),
        scenario_id=args.id,
        display_name=args.display_name,
        fidelity=args.fidelity,
        transport=args.transport,
        seed=args.seed,
        mtu_bytes=args.mtu,
        buffer_bytes=args.buffer,
        header_bytes=args.header_bytes,
        switch_latency_ns=args.switch_latency_ns,
        store_telemetry=args.store_telemetry,
        sweeps=args.sweep,
    )
    emit(args, scenario, lambda s: scenarios_table([s]))
    return 0


def _run(client: Client, args: argparse.Namespace) -> int:
    return follow_run(client, args, client.scenarios.run(args.name, run_id=args.id))


def follow_run(client: Client, args: argparse.Namespace, run: scenario_pb2.Run) -> int:
    """A started run: printed as it is, or with --wait followed to its end (progress, Ctrl-C) and
    printed with its comparison (or written with --output); exit 1 unless it succeeded."""
    if not args.wait:
        emit(args, run, run_report)
        return 0
    try:
        run = wait_run(client, run.name, args)
    except Stopped as stopped:
        return stopped.exit_code
    succeeded = run.state == common_pb2.JOB_STATE_SUCCEEDED
    comparison = client.scenarios.compare([run.name]) if succeeded else None
    if write_output(args, run):
        pass
    elif args.json:
        print_json({"run": message_dict(run), "comparison": message_dict(comparison) if comparison else None})
    else:
        print(run_report(run))
        if comparison is not None:
            print()
            print(comparison_table(comparison))
    if not succeeded:
        reason = f": {run.error.message}" if run.error.message else ""
        warn(f"error: {run.name} {enum_label(common_pb2.JobState, run.state)}{reason}")
        return 1
    return 0


def _get(client: Client, args: argparse.Namespace) -> int:
    if _is_run(args.name):
        run = client.scenarios.get_run(args.name)
        if not write_output(args, run):
            emit(args, run, run_report)
    elif getattr(args, "output", None):
        raise InputError(f"--output: {args.name} is a scenario; a run (scenarios/S/runs/R) has results")
    else:
        emit(args, client.scenarios.get(args.name), lambda s: scenarios_table([s]))
    return 0


def _list(client: Client, args: argparse.Namespace) -> int:
    scenarios = client.scenarios.list(filter=args.filter, order_by=args.order_by)
    emit_list(args, limited(args, scenarios), scenarios_table)
    return 0


def _runs(client: Client, args: argparse.Namespace) -> int:
    runs = client.scenarios.list_runs(args.name, filter=args.filter, order_by=args.order_by)
    emit_list(args, limited(args, runs), runs_table)
    return 0


def _cancel(client: Client, args: argparse.Namespace) -> int:
    emit(args, client.scenarios.cancel_run(args.name), run_report)
    return 0


def _delete(client: Client, args: argparse.Namespace) -> int:
    client.scenarios.delete(args.name)
    emit(args, scenario_pb2.DeleteScenarioResponse(), lambda _: f"deleted {args.name}")
    return 0


def _compare(client: Client, args: argparse.Namespace) -> int:
    comparison = client.scenarios.compare(args.runs, baseline=args.baseline)
    if not write_output(args, comparison):
        emit(args, comparison, comparison_table)
    return 0


def _diagnose(client: Client, args: argparse.Namespace) -> int:
    diagnosis = client.scenarios.diagnose(
        args.source,
        ports=args.port,
        start_ns=args.start,
        end_ns=args.end,
        hot_above=args.hot_above,
        idle_below=args.idle_below,
        max_over_mean=args.max_over_mean,
        spread=args.spread,
    )
    emit(args, diagnosis, findings_table)
    return 0


def register(root: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `scenario` and its subcommands to the root parser's subcommands."""
    scenario = root.add_parser("scenario", help="scenarios, runs, comparisons, diagnosis (orchestrator)")
    scenario.description = "Scenarios compare load-balancing modes on one workload; runs simulate every mode."
    group = subcommands(scenario, "scenario")

    p = leaf(
        group,
        "create",
        _create,
        "create a scenario: a workload on a fabric under several load-balancing modes",
        "Create a scenario.\n\n"
        "example: fabrictwin scenario create --fabric ft8 --ranks 16 --placement scattered --size 256MiB \\\n"
        "             --mode ecmp --mode adaptive --id ecmp-vs-ar",
    )
    add_workload_options(p, ["ecmp", "adaptive"])
    p.add_argument("--id", default="", help="scenario id (scenarios/ID); generated if omitted")
    p.add_argument("--display-name", default="", help="human-readable name")
    p.add_argument(
        "--store-telemetry", action="store_true", help="write each simulation's series to telemetry"
    )
    p.add_argument(
        "--sweep",
        type=sweep_arg,
        action="append",
        default=[],
        metavar="NAME=V1,V2,...",
        help="run every mode at each value: size=1MiB,16MiB,256MiB (a size sweep prints like "
        f"nccl-tests), {', '.join(a for a in SWEEP_ALIASES if a != 'size')}, or any SimulationSpec "
        "path; repeat for a grid",
    )

    p = leaf(
        group,
        "run",
        _run,
        "run a scenario (one simulation per mode)",
        "Start a run. With --wait, wait for it and print every mode's result and the comparison;\n"
        'exit 1 if the run did not succeed. With --wait --json: {"run": Run, "comparison": Comparison}.',
    )
    p.add_argument("name", help="scenario (ID or scenarios/ID)")
    p.add_argument("--id", default="", help="run id; generated if omitted")
    add_wait_options(p, "run")
    add_output_option(p)

    p = leaf(group, "get", _get, "show a scenario, or a run (scenarios/S/runs/R) with its results")
    p.add_argument("name", help="scenario (ID or scenarios/ID) or run (scenarios/S/runs/R)")
    add_output_option(p)
    add_list_options(leaf(group, "list", _list, "list scenarios"))
    p = leaf(group, "runs", _runs, "list the runs of a scenario (default: of every scenario)")
    p.add_argument("name", nargs="?", default="-", help="scenario (default '-': all)")
    add_list_options(p)
    leaf(group, "delete", _delete, "delete a scenario and its runs").add_argument("name", help="scenario")
    leaf(group, "cancel", _cancel, "cancel a run (its unfinished simulations)").add_argument(
        "name", help="run (scenarios/S/runs/R)"
    )
    p = leaf(group, "compare", _compare, "compare the mode results of one or more runs side by side")
    p.add_argument("runs", nargs="+", metavar="RUN", help="run (scenarios/S/runs/R); several allowed")
    p.add_argument("--baseline", default="", help="label of the baseline row (default: the first)")
    add_output_option(p)
    p = leaf(
        group, "diagnose", _diagnose, "diagnose a telemetry source (ECMP pinning, lossy links, PFC, ...)"
    )
    p.add_argument("source", help="telemetry source (ID or sources/ID)")
    p.add_argument("--port", action="append", default=[], help="port group to examine for skew; repeat")
    p.add_argument("--start", type=duration_arg, default=0, help="window start (ns, or 10ms/2s)")
    p.add_argument("--end", type=duration_arg, default=0, help="window end, exclusive (default: newest)")
    pinning_options(p)
