"""`fabrictwin whatif`: the next AllReduce on the fabric as it is now, and with chosen changes.

One request (RunWhatIf): the jobs run on the fabric as stored (`as-is`: its DEGRADED links lose
packets at their bit error rate in PACKET runs, DOWN links are routed around) and once per change
(`--repair LINK`, `--routing ENGINE`, `--mode MODE`, `--all-clean`), plus all changes together, all on
the routing version current at the request. With --wait it prints each variant and what it buys.
"""

from __future__ import annotations

import argparse

from fabrictwin.cli_common import choice, leaf
from fabrictwin.cli_scenario import follow_run
from fabrictwin.cli_simulation import (
    add_workload_options,
    job_from_args,
    modes_from_args,
    transport_and_faults,
)
from fabrictwin.cli_wait import add_wait_options
from fabrictwin.client import Client
from fabrictwin.names import resource_name
from fabrictwin.specs import load_balancing
from fabrictwin.v1 import common_pb2, scenario_pb2, simulation_pb2, topology_pb2

__all__ = ["register"]


def _scenario(client: Client, args: argparse.Namespace) -> scenario_pb2.Scenario:
    spec = simulation_pb2.SimulationSpec()
    transport_and_faults(spec, args)
    scenario = scenario_pb2.Scenario(
        fabric=resource_name("fabrics", args.fabric),
        jobs=[job_from_args(args, client)],
        modes=[load_balancing(args.baseline_mode, seed=args.hash_seed)],
        faults=list(spec.faults),
        seed=args.seed,
        mtu_bytes=args.mtu,
        buffer_bytes=args.buffer,
        header_bytes=args.header_bytes,
        switch_latency_ns=args.switch_latency_ns,
    )
    if spec.HasField("roce"):
        scenario.roce.CopyFrom(spec.roce)
    if spec.HasField("infiniband"):
        scenario.infiniband.CopyFrom(spec.infiniband)
    if args.fidelity is not None:
        scenario.fidelity = simulation_pb2.Fidelity.Value("FIDELITY_" + args.fidelity.upper())
    if args.transport is not None:
        scenario.transport = simulation_pb2.Transport.Value("TRANSPORT_" + args.transport.upper())
    return scenario


def _whatif(client: Client, args: argparse.Namespace) -> int:
    run = client.scenarios.what_if(
        _scenario(client, args),
        repair_links=args.repair,
        routing_engines=args.routing,
        modes=modes_from_args(args),  # --mode: the modes to try (none by default)
        all_clean=args.all_clean,
        scenario_id=args.id,
    )
    return follow_run(client, args, run)


def register(root: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `whatif` to the root parser's subcommands."""
    p = leaf(
        root,
        "whatif",
        _whatif,
        "the jobs on the fabric as it is now and with chosen repairs or changes, side by side",
        (__doc__ or "")
        + "\nexample: fabrictwin whatif --fabric pod1 --ranks 64 --size 1GiB --fidelity packet \\\n"
        "             --repair 'leaf-3/p17<->spine-1/p4' --mode adaptive --wait",
    )
    add_workload_options(p, [])
    p.set_defaults(default_modes=[])
    p.add_argument(
        "--baseline-mode",
        **choice(common_pb2.LoadBalancingMode),
        default="ecmp",
        help="load balancing of the fabric as it is now (default ecmp); --mode adds modes to try",
    )
    p.add_argument(
        "--repair", action="append", default=[], metavar="LINK", help="a link to repair (index or name)"
    )
    p.add_argument(
        "--routing",
        action="append",
        default=[],
        **{k: v for k, v in choice(topology_pb2.RoutingEngine).items() if k != "metavar"},
        metavar="ENGINE",
        help="a routing engine to try (minhop, updn, ftree)",
    )
    p.add_argument("--all-clean", action="store_true", help="also run on a clean fabric (every link UP)")
    p.add_argument("--id", default="", help="id of the what-if's scenario (generated if omitted)")
    add_wait_options(p, "what-if run")
