"""`fabrictwin simulate` and `fabrictwin simulation ...`: run collectives on a fabric and read results.

The workload options (`--ranks`, `--placement`, `--size`, `--mode`, ...) are shared with
`fabrictwin scenario create`, which imports them from here.
"""

from __future__ import annotations

import argparse
import json
import sys

from fabrictwin.cli_common import (
    InputError,
    add_list_options,
    choice,
    emit,
    emit_list,
    leaf,
    limited,
    message_dict,
    print_json,
    size_arg,
    subcommands,
    warn,
)
from fabrictwin.cli_output import add_output_option, write_output
from fabrictwin.cli_wait import ProgressView, Stopped, add_wait_options, wait_simulations
from fabrictwin.client import Client
from fabrictwin.errors import InvalidArgumentError
from fabrictwin.format import simulation_report, simulations_table
from fabrictwin.jobs import TERMINAL_STATES
from fabrictwin.names import enum_label
from fabrictwin.specs import (
    bit_errors,
    collective_job,
    link_down,
    load_balancing,
    marginal_transceiver,
    simulation_spec,
)
from fabrictwin.tables import link_series_table
from fabrictwin.v1 import common_pb2, simulation_pb2

__all__ = ["add_workload_options", "job_from_args", "modes_from_args", "register"]


def add_workload_options(parser: argparse.ArgumentParser, default_modes: list[str]) -> None:
    """The job and load-balancing options of `simulate` and `scenario create`."""
    parser.add_argument("--fabric", required=True, help="fabric to run on (ID or fabrics/ID)")
    parser.add_argument("--ranks", type=int, default=0, help="number of ranks, placed by --placement")
    parser.add_argument(
        "--hosts", default="", help="comma-separated host names, one per rank (instead of --ranks)"
    )
    parser.add_argument(
        "--placement", **choice(simulation_pb2.PlacementPolicy), default="packed", help="rank placement"
    )
    parser.add_argument(
        "--size", type=size_arg, required=True, help="message size S: 256MiB, 1GiB, 1e6, 4096"
    )
    parser.add_argument(
        "--collective", **choice(simulation_pb2.Collective), default="all_reduce", help="collective operation"
    )
    parser.add_argument(
        "--algorithm",
        **choice(simulation_pb2.CollectiveAlgorithm),
        default="ring",
        help="collective algorithm",
    )
    parser.add_argument(
        "--pattern",
        default="",
        help="point_to_point only: 'shift:N' sends --size from host i to host i+N (mod the hosts), "
        "over the --ranks first hosts of the fabric (all hosts if --ranks is 0) or --hosts",
    )
    parser.add_argument("--qps", type=int, default=0, help="queue pairs per connection (default 1)")
    parser.add_argument("--iterations", type=int, default=0, help="back-to-back repetitions (default 1)")
    parser.add_argument(
        "--mode",
        **choice(common_pb2.LoadBalancingMode),
        action="append",
        default=None,
        help=f"load-balancing mode; repeat to compare several (default: {' '.join(default_modes)})",
    )
    parser.add_argument("--hash-seed", type=int, default=0, help="base seed of the ECMP hash")
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of every random choice (runs are deterministic)"
    )
    parser.add_argument(
        "--fidelity",
        **choice(simulation_pb2.Fidelity),
        default=None,
        help="flow (default): fluid max-min sharing, event by event; flow_steady: ring jobs' steady "
        "state at those rates, seconds at 8,192 ranks; packet: packet by packet, with queues and loss",
    )
    parser.add_argument(
        "--transport", **choice(simulation_pb2.Transport), default=None, help="default rocev2"
    )
    packet = parser.add_argument_group("packet fidelity")
    packet.add_argument("--mtu", type=int, default=0, help="payload bytes per packet (default 4096)")
    packet.add_argument("--buffer", type=size_arg, default=0, help="buffer per switch port (default 1MiB)")
    packet.add_argument(
        "--header-bytes", type=int, default=0, help="wire overhead per packet (default: RoCEv2 82, IB 26)"
    )
    packet.add_argument("--switch-latency-ns", type=int, default=0, help="forwarding latency per switch")
    packet.add_argument(
        "--spray-random", action="store_true", help="spray by a seeded random draw, not round-robin"
    )
    packet.add_argument(
        "--flowlet-gap-ns", type=int, default=0, help="FLOWLET: idle gap that starts a new flowlet"
    )
    packet.add_argument(
        "--window",
        type=size_arg,
        default=0,
        help="RoCEv2 Go-Back-N window in bytes (e.g. 256KiB); unset: no resends",
    )
    packet.add_argument(
        "--rto-ns", type=int, default=0, help="Go-Back-N retransmission timeout (default 100000)"
    )
    packet.add_argument(
        "--pfc",
        action="store_true",
        help="priority flow control (XOFF 64KiB, XON 32KiB, headroom from the links)",
    )
    packet.add_argument(
        "--ber",
        action="append",
        default=[],
        metavar="LINK=RATE",
        help="bit errors on a link (name or index), e.g. 0=1e-6; repeatable",
    )
    packet.add_argument(
        "--marginal",
        action="append",
        default=[],
        metavar="LINK=GOOD,BAD,P_GB,P_BG",
        help="a marginal transceiver (Gilbert-Elliott): loss in the good and bad state and the per-packet "
        "transition probabilities, e.g. 0=0,0.5,0.001,0.1; repeatable",
    )
    packet.add_argument(
        "--dcqcn",
        action="store_true",
        help="ECN marking and DCQCN rate control (Kmin 5KB, Kmax 200KB, Pmax 0.01, the DCQCN paper's timers)",
    )
    packet.add_argument(
        "--vl-buffer",
        type=size_arg,
        default=0,
        help="InfiniBand: receive buffer per port and VL, advertised as credits (default 64KiB)",
    )
    packet.add_argument(
        "--link-down",
        action="append",
        default=[],
        metavar="LINK@START[-END]:REACTION[:DELAY_NS]",
        help="a link down from START ns (back at END ns) with the routing reaction subnet_manager, "
        "routing_protocol or fast_recovery (delay: the reaction's default), e.g. 12@50000:fast_recovery; "
        "repeatable",
    )
    parser.set_defaults(default_modes=default_modes)


def _pattern_job(args: argparse.Namespace, hosts: list[str], client: Client | None) -> simulation_pb2.Job:
    kind, _, amount = args.pattern.partition(":")
    if kind != "shift" or not amount.lstrip("-").isdigit():
        raise InputError(f"--pattern {args.pattern!r}: expected shift:N")
    if not hosts:
        if client is None:
            raise InputError("--pattern needs --hosts here")
        hosts = [n.display_name for n in client.fabrics.nodes(args.fabric, kind="host")]
        if args.ranks:
            hosts = hosts[: args.ranks]
    shift = int(amount)
    flows = [
        simulation_pb2.FlowSpec(source=h, destination=hosts[(i + shift) % len(hosts)], size_bytes=args.size)
        for i, h in enumerate(hosts)
        if hosts[(i + shift) % len(hosts)] != h
    ]
    return simulation_pb2.Job(collective=simulation_pb2.COLLECTIVE_POINT_TO_POINT, flows=flows)


def job_from_args(args: argparse.Namespace, client: Client | None = None) -> simulation_pb2.Job:
    """The collective job the workload options describe (`client` resolves --pattern's hosts)."""
    hosts = [h.strip() for h in args.hosts.split(",") if h.strip()]
    if args.pattern:
        return _pattern_job(args, hosts, client)
    if not hosts and args.ranks <= 0:
        raise InputError("give --ranks N (placed by --placement) or --hosts H1,H2,...")
    return collective_job(
        ranks=0 if hosts else args.ranks,
        hosts=hosts,
        size=args.size,
        collective=args.collective,
        algorithm=args.algorithm,
        placement=args.placement,
        qps_per_connection=args.qps,
        iterations=args.iterations,
    )


def modes_from_args(args: argparse.Namespace) -> list[common_pb2.LoadBalancing]:
    """One LoadBalancing per --mode (duplicates dropped, order kept)."""
    modes = list(dict.fromkeys(args.mode or args.default_modes))
    return [
        load_balancing(
            mode,
            seed=args.hash_seed,
            # Each option goes to the mode it belongs to (the server refuses it on any other).
            spray_random=args.spray_random and mode == "spray",
            flowlet_gap_ns=args.flowlet_gap_ns if mode == "flowlet" else 0,
        )
        for mode in modes
    ]


def _link_down(text: str) -> simulation_pb2.Fault:
    try:
        link, _, rest = text.partition("@")
        when, _, reaction = rest.partition(":")
        reaction, _, delay = reaction.partition(":")
        start, _, end = when.partition("-")
        return link_down(link, int(start), reaction, end_ns=int(end or 0), reroute_delay_ns=int(delay or 0))
    except (ValueError, InvalidArgumentError) as exc:
        raise InputError(
            f"--link-down {text!r}: expected LINK@START[-END]:REACTION[:DELAY_NS], REACTION one of "
            "subnet_manager, routing_protocol, fast_recovery"
        ) from exc


def transport_and_faults(spec: simulation_pb2.SimulationSpec, args: argparse.Namespace) -> None:
    """Put the transport and fault options of `add_workload_options` into `spec`."""
    if args.pfc:
        spec.roce.pfc = True
    if args.dcqcn:
        spec.roce.dcqcn = True
    if args.vl_buffer:
        spec.infiniband.vl_buffer_bytes = args.vl_buffer
    for text in args.link_down:
        spec.faults.append(_link_down(text))
    if args.window:
        spec.roce.window_bytes = args.window
        spec.roce.retransmit_timeout_ns = args.rto_ns
    for text in args.ber:
        link, _, rate = text.partition("=")
        try:
            spec.faults.append(bit_errors(link, float(rate)))
        except ValueError as exc:
            raise InputError(f"--ber {text!r}: expected LINK=RATE") from exc
    for text in args.marginal:
        link, _, values = text.partition("=")
        try:
            good, bad, p_gb, p_bg = (float(v) for v in values.split(","))
        except ValueError as exc:
            raise InputError(f"--marginal {text!r}: expected LINK=GOOD,BAD,P_GB,P_BG") from exc
        spec.faults.append(
            marginal_transceiver(link, good_loss=good, bad_loss=bad, p_good_to_bad=p_gb, p_bad_to_good=p_bg)
        )


def _simulate(client: Client, args: argparse.Namespace) -> int:
    job = job_from_args(args, client)
    modes = modes_from_args(args)
    started = []
    for lb in modes:
        label = enum_label(common_pb2.LoadBalancingMode, lb.mode).lower()
        simulation_id = (
            args.id if (args.id and len(modes) == 1) else (f"{args.id}-{label}" if args.id else "")
        )
        spec = simulation_spec(
            args.fabric, [job], lb, fidelity=args.fidelity, transport=args.transport, seed=args.seed
        )
        transport_and_faults(spec, args)
        spec.mtu_bytes = args.mtu
        spec.buffer_bytes = args.buffer
        spec.header_bytes = args.header_bytes
        spec.switch_latency_ns = args.switch_latency_ns
        started.append(client.simulations.start(spec, simulation_id=simulation_id))
    if not args.wait:
        emit_list(args, started, simulations_table)
        return 0
    try:
        finished = wait_simulations(client, [s.name for s in started], args)
    except Stopped as stopped:
        return stopped.exit_code
    if args.json:
        print_json([message_dict(s) for s in finished])
    else:
        print("\n\n".join(simulation_report(s) for s in finished))
    failed = [s for s in finished if s.state != common_pb2.JOB_STATE_SUCCEEDED]
    for s in failed:
        reason = f": {s.error.message}" if s.error.message else ""
        warn(f"error: {s.name} {enum_label(common_pb2.JobState, s.state)}{reason}")
    return 1 if failed else 0


def _get(client: Client, args: argparse.Namespace) -> int:
    simulation = client.simulations.get(args.name)
    if not write_output(args, simulation):
        emit(args, simulation, simulation_report)
    return 0


def _list(client: Client, args: argparse.Namespace) -> int:
    simulations = client.simulations.list(filter=args.filter, order_by=args.order_by)
    emit_list(args, limited(args, simulations), simulations_table)
    return 0


def _cancel(client: Client, args: argparse.Namespace) -> int:
    emit(args, client.simulations.cancel(args.name), simulation_report)
    return 0


def _series(client: Client, args: argparse.Namespace) -> int:
    series = list(client.simulations.link_series(args.name))
    if not write_output(args, simulation_pb2.ListLinkSeriesResponse(series=series)):
        emit_list(args, series, link_series_table)
    return 0


def _watch(client: Client, args: argparse.Namespace) -> int:
    last = None
    view = ProgressView(enabled=not args.json, stream=sys.stdout)  # in place on a terminal
    for simulation in client.simulations.watch(args.name):
        last = simulation
        if args.json:
            print(json.dumps(message_dict(simulation)), flush=True)
        else:
            state = enum_label(common_pb2.JobState, simulation.state)
            progress = simulation.progress
            fraction = 1.0 if simulation.state in TERMINAL_STATES else progress.fraction
            view.show(simulation.name, fraction, f"{state}  {progress.stage}".rstrip())
    view.close()
    if last is not None and last.state != common_pb2.JOB_STATE_SUCCEEDED:
        warn(
            f"error: {last.name} {enum_label(common_pb2.JobState, last.state)} {last.error.message}".rstrip()
        )
        return 1
    return 0


def register(root: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `simulate` and `simulation ...` to the root parser's subcommands."""
    p = leaf(
        root,
        "simulate",
        _simulate,
        "simulate a collective on a fabric, one simulation per --mode",
        "Start one simulation per load-balancing mode. With --wait, wait for them and print each job's\n"
        "completion time, busbw and the leaf-spine uplink skew; exit 1 if any did not succeed.\n\n"
        "example: fabrictwin simulate --fabric ft8 --ranks 16 --placement scattered --size 256MiB \\\n"
        "             --mode ecmp --mode adaptive --wait",
    )
    add_workload_options(p, ["ecmp"])
    p.add_argument(
        "--id", default="", help="simulation id (with several modes: ID-<mode>); generated if omitted"
    )
    add_wait_options(p, "simulations")

    simulation = root.add_parser("simulation", help="inspect simulations (simulator service)")
    simulation.description = "Simulations: state, results, per-link series; cancel or watch one."
    group = subcommands(simulation, "simulation")
    p = leaf(group, "get", _get, "show one simulation and its results")
    p.add_argument("name", help="simulation (ID or simulations/ID)")
    add_output_option(p, ("jobs", "links", "flows"))
    add_list_options(leaf(group, "list", _list, "list simulations, newest first"))
    leaf(group, "cancel", _cancel, "cancel a pending or running simulation").add_argument(
        "name", help="simulation"
    )
    p = leaf(group, "series", _series, "per-link time series of a finished simulation (summary per link)")
    p.add_argument("name", help="simulation")
    add_output_option(p)
    leaf(group, "watch", _watch, "follow a simulation's progress until it is done").add_argument(
        "name", help="simulation"
    )
