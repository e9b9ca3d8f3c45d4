"""`fabrictwin fabric ...`: create, import, export, inspect, change and watch fabrics."""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any

from fabrictwin.cli_common import (
    InputError,
    add_list_options,
    choice,
    duration_arg,
    emit,
    emit_list,
    key_value_arg,
    leaf,
    limited,
    message_dict,
    read_text,
    subcommands,
    warn,
)
from fabrictwin.cli_wait import ProgressView, working
from fabrictwin.client import Client
from fabrictwin.format import fabric_routing_notes, fabrics_table, routing_summary_text
from fabrictwin.names import enum_label
from fabrictwin.tables import forwarding_table, links_table, nodes_table, paths_table
from fabrictwin.v1 import topology_pb2

__all__ = ["register"]


# Formats the topology service writes but does not read: ImportFabric refuses them, so `import` does
# not offer them (an opensm-lfts.dump routes a fabric: `fabric compute-routes --routing file --lfts-dump`).
EXPORT_ONLY_FORMATS = ("node_link_json", "opensm_lfts")


def _import_format_choice() -> dict[str, Any]:
    keywords = choice(topology_pb2.TopologyFormat)
    keywords["choices"] = [name for name in keywords["choices"] if name not in EXPORT_ONLY_FORMATS]
    keywords["metavar"] = "{" + ",".join(keywords["choices"]) + "}"
    return keywords


def _read_input(path: str) -> str:
    """The text of FILE, or of stdin for `-` (InputError naming it if unreadable or not UTF-8)."""
    return read_text(path)


def _fabric_row(fabric: topology_pb2.Fabric) -> str:
    return fabrics_table([fabric])


def _create_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--id", default="", help="id of the fabric (fabrics/ID); generated if omitted")
    parser.add_argument("--display-name", default="", help="human-readable name")
    parser.add_argument(
        "--speed-gbps", type=float, default=0.0, help="speed of every link, Gb/s (default 400)"
    )
    parser.add_argument(
        "--host-speed-gbps", type=float, default=0.0, help="host-to-leaf speed if different, Gb/s"
    )
    parser.add_argument(
        "--latency-ns", type=duration_arg, default=0, help="propagation latency per link: 500, 500ns, 1us"
    )
    parser.add_argument(
        "--routing",
        **choice(topology_pb2.RoutingEngine),
        default=None,
        help="routing engine (default minhop)",
    )
    _routing_options(parser)
    parser.add_argument(
        "--label",
        type=key_value_arg,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a label (repeat)",
    )


def _routing_options(parser: argparse.ArgumentParser) -> None:
    """--roots and --reroute: the routing settings create, import and compute-routes take."""
    parser.add_argument(
        "--roots",
        type=guid_list_arg,
        default=[],
        metavar="GUID,...",
        help="updn/ftree root switches by GUID (or @FILE, one a line, as OpenSM's root GUID file; "
        "compute-routes also takes switch names); default: found as OpenSM finds them",
    )
    parser.add_argument(
        "--reroute",
        choices=["incremental", "fresh"],
        default=None,
        help="how link changes reroute: incremental keeps every still-valid entry, as a running OpenSM "
        "(default); fresh recomputes every table",
    )


def guid_list_arg(value: str) -> list[str]:
    """`0x2c903000a1b2c,0x...` (or a file of one GUID a line, as OpenSM's root GUID file, with @FILE);
    switch names are taken too where the fabric exists (compute-routes)."""
    if value.startswith("@"):
        try:
            with open(value[1:], encoding="utf-8") as f:
                text = f.read()
        except OSError as exc:
            raise argparse.ArgumentTypeError(f"cannot read {value[1:]}: {exc.strerror}") from None
        items = [line.split("#", 1)[0].strip() for line in text.splitlines()]
    else:
        items = [item.strip() for item in value.split(",")]
    return [item for item in items if item]


def _is_guid(text: str) -> bool:
    return re.fullmatch(r"(0x)?[0-9a-fA-F]{1,16}", text) is not None


def _root_guids(client: Client, fabric: str | None, roots: list[str]) -> list[str]:
    """--roots as GUIDs: switch names resolved through the fabric's nodes (when it exists)."""
    names = [root for root in roots if not _is_guid(root)]
    if not names:
        return roots
    if fabric is None:
        raise InputError(f"--roots {names[0]!r}: give GUIDs here (switch names work once the fabric exists)")
    guids = {node.display_name: f"{node.guid:#018x}" for node in client.fabrics.nodes(fabric)}
    for name in names:
        if name not in guids:
            raise InputError(f"--roots {name!r}: no node of {fabric} has that name or GUID")
    return [root if _is_guid(root) else guids[root] for root in roots]


def _routing_notes(fabric: topology_pb2.Fabric) -> None:
    for note in fabric_routing_notes(fabric):
        warn(f"note: {note}")


def _create(client: Client, args: argparse.Namespace, spec: topology_pb2.FabricSpec) -> int:
    spec.link_speed_gbps = args.speed_gbps
    spec.link_latency_ns = args.latency_ns
    spec.host_link_speed_gbps = args.host_speed_gbps
    fabric = client.fabrics.create(
        spec,
        fabric_id=args.id,
        display_name=args.display_name,
        routing_engine=args.routing,
        labels=dict(args.label),
        routing_roots=_root_guids(client, None, args.roots),
        reroute=args.reroute,
    )
    emit(args, fabric, _fabric_row)
    _routing_notes(fabric)
    return 0


def _create_fat_tree(client: Client, args: argparse.Namespace) -> int:
    return _create(client, args, topology_pb2.FabricSpec(fat_tree=topology_pb2.FatTreeSpec(k=args.k)))


def _create_leaf_spine(client: Client, args: argparse.Namespace) -> int:
    spec = topology_pb2.LeafSpineSpec(
        leaves=args.leaves,
        spines=args.spines,
        hosts_per_leaf=args.hosts_per_leaf,
        parallel_links=args.parallel_links,
    )
    return _create(client, args, topology_pb2.FabricSpec(leaf_spine=spec))


def _create_superpod(client: Client, args: argparse.Namespace) -> int:
    spec = topology_pb2.SuperPodSpec(
        scalable_units=args.scalable_units, nodes_per_su=args.nodes_per_su, gpus_per_node=args.gpus_per_node
    )
    return _create(client, args, topology_pb2.FabricSpec(superpod=spec))


def _list(client: Client, args: argparse.Namespace) -> int:
    emit_list(
        args, limited(args, client.fabrics.list(filter=args.filter, order_by=args.order_by)), fabrics_table
    )
    return 0


def _get(client: Client, args: argparse.Namespace) -> int:
    fabric = client.fabrics.get(args.name)
    emit(args, fabric, _fabric_row)
    _routing_notes(fabric)
    return 0


def _update(client: Client, args: argparse.Namespace) -> int:
    labels = dict(args.label) if args.label or args.clear_labels else None
    if args.display_name is None and labels is None and args.routing is None:
        raise InputError("nothing to update: give --display-name, --label/--clear-labels or --routing")
    fabric = client.fabrics.update(
        args.name, display_name=args.display_name, labels=labels, routing_engine=args.routing
    )
    emit(args, fabric, _fabric_row)
    return 0


def _delete(client: Client, args: argparse.Namespace) -> int:
    client.fabrics.delete(args.name)
    emit(args, topology_pb2.DeleteFabricResponse(), lambda _: f"deleted {args.name}")
    return 0


def _nodes(client: Client, args: argparse.Namespace) -> int:
    emit_list(args, client.fabrics.nodes(args.name, kind=args.kind), nodes_table)
    return 0


def _links(client: Client, args: argparse.Namespace) -> int:
    emit_list(args, client.fabrics.links(args.name, state=args.state), links_table)
    return 0


def _paths(client: Client, args: argparse.Namespace) -> int:
    emit(
        args,
        client.fabrics.paths(args.name, args.source, args.destination, max_paths=args.max_paths),
        paths_table,
    )
    return 0


def _route(client: Client, args: argparse.Namespace) -> int:
    emit(args, client.fabrics.forwarding_table(args.name, args.switch), forwarding_table)
    return 0


def _port_speeds(values: list[str]) -> dict[str, float]:
    speeds = {}
    for value in values:
        port, _, gbps = value.rpartition("=")
        try:
            speeds[port] = float(gbps)
        except ValueError:
            raise InputError(f"--port-speed {value!r}: expected NODE/IFNAME=GBPS") from None
        if not port:
            raise InputError(f"--port-speed {value!r}: expected NODE/IFNAME=GBPS")
    return speeds


def _import(client: Client, args: argparse.Namespace) -> int:
    common = {
        "fabric_id": args.id,
        "display_name": args.display_name,
        "routing_engine": args.routing,
        "routing_roots": _root_guids(client, None, args.roots),
        "reroute": args.reroute,
        "default_link_speed_gbps": args.default_speed_gbps,
        "default_link_latency_ns": args.default_latency_ns,
    }
    view = ProgressView(enabled=not args.json)
    if args.format == "lldp":  # one document per node: a directory or a tar archive
        with working(view, "fabric import", f"importing the LLDP tables of {args.file}"):
            fabric = client.fabrics.import_lldp(
                args.file, port_speeds_gbps=_port_speeds(args.port_speed), **common
            )
    elif args.port_speed:
        raise InputError("--port-speed applies to --format lldp only")
    else:
        text = _read_input(args.file)
        size = len(text.encode("utf-8", "surrogateescape"))
        with working(view, "fabric import", f"importing {args.file} ({size / 1e6:.1f} MB, {args.format})"):
            fabric = client.fabrics.import_(
                args.format, text, take_slower_end_on_speed_mismatch=args.take_slower_end, **common
            )
    emit(args, fabric, _fabric_row)
    for note in fabric.import_notes:
        warn(f"note: {note}")
    _routing_notes(fabric)
    return 0


def _export(client: Client, args: argparse.Namespace) -> int:
    content = client.fabrics.export(args.name, args.format)
    if args.output:
        try:
            with open(args.output, "w", encoding="utf-8") as f:
                f.write(content)
        except OSError as exc:
            raise InputError(f"cannot write {args.output}: {exc.strerror}") from None
        emit(args, topology_pb2.ExportFabricResponse(), lambda _: f"wrote {args.output}")
    elif args.json:
        print(json.dumps({"content": content}))
    else:
        sys.stdout.write(content if content.endswith("\n") else content + "\n")
    return 0


def _link_set(client: Client, args: argparse.Namespace) -> int:
    if args.state == "degraded" and not args.ber:
        raise InputError("--state degraded needs --ber (bit error rate, in (0, 1))")
    response = client.fabrics.set_link_state(args.fabric, args.link, args.state, bit_error_rate=args.ber)

    def human(r: topology_pb2.SetLinkStateResponse) -> str:
        return f"{links_table([r.link])}\nrerouted {routing_summary_text(r.routing)}"

    emit(args, response, human)
    return 0


def _reroute(client: Client, args: argparse.Namespace) -> int:
    dump = _read_input(args.lfts_dump) if args.lfts_dump else ""
    if args.detect_roots and args.roots:
        raise InputError("give --roots or --detect-roots, not both")
    summary = client.fabrics.compute_routes(
        args.name,
        routing_engine=args.routing,
        lfts_dump=dump,
        routing_roots=_root_guids(client, args.name, args.roots),
        detect_roots=args.detect_roots,
        reroute=args.reroute,
    )
    emit(args, summary, routing_summary_text)
    return 0


def _watch(client: Client, args: argparse.Namespace) -> int:
    for event in client.fabrics.watch(args.name):
        if args.json:  # one compact JSON object per line (JSON Lines), flushed as it arrives
            print(json.dumps(message_dict(event)), flush=True)
            continue
        kind = enum_label(topology_pb2.FabricEventKind, event.kind)
        detail = ""
        if event.kind == topology_pb2.FABRIC_EVENT_KIND_LINK_STATE_CHANGED:
            state = enum_label(topology_pb2.LinkState, event.link.state)
            detail = f"{event.link.display_name or event.link.name} -> {state}"
        elif event.kind == topology_pb2.FABRIC_EVENT_KIND_ROUTES_CHANGED:
            r = event.routing
            detail = (
                f"routing version {r.routing_version}, {r.changed_entries} entries on {r.changed_switches} "
                f"switches, {r.unreachable_pairs} unreachable pairs, {r.compute_ns / 1e6:.1f} ms"
                + (" (incremental)" if r.incremental else "")
            )
        print(
            f"{event.time.ToJsonString() if event.time.seconds else '-'}  {kind}  {detail}".rstrip(),
            flush=True,
        )
    return 0


def register(root: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `fabric` and its subcommands to the root parser's subcommands."""
    fabric = root.add_parser("fabric", help="build, import, inspect and change fabrics (topology service)")
    fabric.description = (
        "Fabrics: build or import them, inspect nodes, links, routes and paths, change links."
    )
    group = subcommands(fabric, "fabric")

    create = group.add_parser("create", help="build a fabric from a generator", description="Build a fabric.")
    create_group = subcommands(create, "generator")
    p = leaf(
        create_group,
        "fat-tree",
        _create_fat_tree,
        "k-ary fat-tree: k pods, (k/2)^2 core switches, k^3/4 hosts",
    )
    p.add_argument("--k", type=int, required=True, help="switch radix, even (8 gives 128 hosts)")
    _create_options(p)
    p = leaf(create_group, "leaf-spine", _create_leaf_spine, "two-tier leaf-spine (Clos) fabric")
    p.add_argument("--leaves", type=int, required=True, help="leaf switches")
    p.add_argument("--spines", type=int, required=True, help="spine switches")
    p.add_argument("--hosts-per-leaf", type=int, required=True, help="hosts attached to each leaf")
    p.add_argument(
        "--parallel-links", type=int, default=0, help="cables between each leaf and spine (default 1)"
    )
    _create_options(p)
    p = leaf(create_group, "superpod", _create_superpod, "rail-optimised DGX SuperPOD of scalable units")
    p.add_argument("--scalable-units", type=int, required=True, help="scalable units (SU)")
    p.add_argument("--nodes-per-su", type=int, default=0, help="nodes per SU (default 32)")
    p.add_argument("--gpus-per-node", type=int, default=0, help="GPUs (rails) per node (default 8)")
    _create_options(p)

    add_list_options(leaf(group, "list", _list, "list fabrics"))
    p = leaf(group, "update", _update, "change a fabric's display name, labels or routing engine")
    p.add_argument("name", help="fabric (ID or fabrics/ID)")
    p.add_argument("--display-name", default=None, help="new human-readable name")
    p.add_argument(
        "--label",
        type=key_value_arg,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="the labels become exactly these (repeat)",
    )
    p.add_argument("--clear-labels", action="store_true", help="remove every label")
    p.add_argument(
        "--routing",
        **choice(topology_pb2.RoutingEngine),
        default=None,
        help="route with this engine from now on (reroutes every table)",
    )
    leaf(group, "get", _get, "show one fabric").add_argument("name", help="fabric (ID or fabrics/ID)")
    leaf(group, "delete", _delete, "delete a fabric and its routes").add_argument("name", help="fabric")
    p = leaf(group, "nodes", _nodes, "list the nodes of a fabric")
    p.add_argument("name", help="fabric")
    p.add_argument(
        "--kind", **choice(topology_pb2.NodeKind), default=None, help="only hosts or only switches"
    )
    p = leaf(group, "links", _links, "list the links of a fabric")
    p.add_argument("name", help="fabric")
    p.add_argument("--state", **choice(topology_pb2.LinkState), default=None, help="only links in this state")
    p = leaf(group, "paths", _paths, "equal-cost paths between two hosts under the current routes")
    p.add_argument("name", help="fabric")
    p.add_argument("source", metavar="SRC", help="source host (name)")
    p.add_argument("destination", metavar="DST", help="destination host (name)")
    p.add_argument("--max-paths", type=int, default=0, help="at most this many paths (default 64)")
    p = leaf(group, "route", _route, "forwarding table of one switch (LFT port and ECMP ports)")
    p.add_argument("name", help="fabric")
    p.add_argument("switch", help="switch (name, e.g. leaf-3)")
    p = leaf(
        group,
        "import",
        _import,
        "import a fabric from a topology dump",
        "Import a fabric from a dump and route it. FILE may be '-' for stdin.\n"
        "Formats: ibnetdiscover (rdma-core text, also ibsim's short form), ibsim, json, ns3_hpcc,\n"
        "lldp (FILE: a directory of NODE.json files, each `lldpcli -f json show neighbors`\n"
        "of that node, or a tar archive of them).",
    )
    p.add_argument("file", metavar="FILE", help="the dump ('-' reads stdin); for lldp a directory or tar")
    p.add_argument("--format", **_import_format_choice(), required=True, help="format of FILE")
    p.add_argument("--id", default="", help="id of the fabric; generated if omitted")
    p.add_argument("--display-name", default="", help="human-readable name")
    p.add_argument("--routing", **choice(topology_pb2.RoutingEngine), default=None, help="routing engine")
    _routing_options(p)
    p.add_argument(
        "--take-slower-end",
        action="store_true",
        help="ibnetdiscover: import links whose two ends report different speeds at the slower one",
    )
    p.add_argument(
        "--default-speed-gbps", type=float, default=0.0, help="link speed where the dump gives none"
    )
    p.add_argument(
        "--port-speed",
        action="append",
        default=[],
        metavar="NODE/IF=GBPS",
        help="lldp: a port's speed (node_network_speed_bytes x 8 / 1e9, or ifHighSpeed / 1000); repeatable",
    )
    p.add_argument(
        "--default-latency-ns", type=duration_arg, default=0, help="link latency where none is given"
    )
    p = leaf(group, "export", _export, "write a fabric in a topology format (to stdout or --output)")
    p.add_argument("name", help="fabric")
    p.add_argument("--format", **choice(topology_pb2.TopologyFormat), default="json", help="output format")
    p.add_argument("--output", "-o", default="", help="write to this file instead of stdout")
    p = leaf(
        group,
        "link-set",
        _link_set,
        "set a link up, down or degraded and reroute",
        "Set a link's state. LINK is fabrics/F/links/L, or L (index or display name) with --fabric F.",
    )
    p.add_argument("link", metavar="LINK", help="link (fabrics/F/links/L, or L with --fabric)")
    p.add_argument("--fabric", default="", help="fabric of LINK when LINK is not a full name")
    p.add_argument("--state", **choice(topology_pb2.LinkState), required=True, help="new state")
    p.add_argument("--ber", type=float, default=0.0, help="bit error rate for degraded, in (0, 1)")
    for name in ("compute-routes", "reroute"):
        p = leaf(
            group,
            name,
            _reroute,
            "recompute every forwarding table (optionally with another engine)",
            "Recompute every forwarding table; --routing file loads OpenSM LFTs from --lfts-dump."
            + (" Same as compute-routes." if name == "reroute" else ""),
        )
        p.add_argument("name", help="fabric")
        p.add_argument("--routing", **choice(topology_pb2.RoutingEngine), default=None, help="routing engine")
        p.add_argument(
            "--lfts-dump", default="", help="opensm-lfts.dump file for the file engine ('-': stdin)"
        )
        _routing_options(p)
        p.add_argument(
            "--detect-roots",
            action="store_true",
            help="forget the fabric's --roots: find roots as OpenSM does",
        )
    p = leaf(
        group,
        "watch",
        _watch,
        "stream fabric events until Ctrl-C",
        "Print fabric events (link changes, reroutes) as they happen; with --json one JSON object per line.",
    )
    p.add_argument("name", help="fabric")
