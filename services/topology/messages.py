"""Domain -> fabrictwin.v1 messages for the topology servicer, and the enum <-> name mappings.

Plain translation: records, fabric arrays, routing changes and events in, proto messages out.
"""

from __future__ import annotations

from collections.abc import Sequence

from fabrictwin.v1 import topology_pb2
from google.protobuf import json_format

from services.common.errors import InvalidArgument, quote
from services.topology.events import FabricEvent
from services.topology.fabric import Fabric, format_ipv4
from services.topology.formats import IMPORT_FORMATS as FORMAT_IMPORTS
from services.topology.formats.ibnetdiscover_export import synthetic_guid
from services.topology.lfts_dump import FORMAT_NAME as LFTS_FORMAT
from services.topology.registry import RoutingChange
from services.topology.store import FabricRecord

__all__ = [
    "IMPORT_FORMATS",
    "LFTS_FORMAT",
    "engine_name",
    "engine_value",
    "event_message",
    "fabric_message",
    "format_name",
    "link_message",
    "node_message",
    "node_name",
    "reroute_name",
    "root_guids",
    "routing_summary",
]

_MAX_ROOTS = 65_536  # OpenSM's root GUID file has no limit; a fabric has at most this many switches
_SELECTION = {"detected": topology_pb2.ROOT_SELECTION_DETECTED, "given": topology_pb2.ROOT_SELECTION_GIVEN}
_REROUTE = {
    "incremental": topology_pb2.REROUTE_MODE_INCREMENTAL,
    "fresh": topology_pb2.REROUTE_MODE_FRESH,
    "full": topology_pb2.REROUTE_MODE_FULL,
}

# What ImportFabric takes is what the formats package imports (one list; `opensm_lfts` is not among them).
IMPORT_FORMATS = FORMAT_IMPORTS


def engine_name(value: topology_pb2.RoutingEngine.ValueType, field: str) -> str | None:
    """'minhop' for ROUTING_ENGINE_MINHOP; None for UNSPECIFIED; InvalidArgument for unknown numbers."""
    if value == topology_pb2.ROUTING_ENGINE_UNSPECIFIED:
        return None
    if value not in topology_pb2.RoutingEngine.values():
        raise InvalidArgument(field, f"unknown routing engine {value}")
    return topology_pb2.RoutingEngine.Name(value).removeprefix("ROUTING_ENGINE_").lower()


def engine_value(name: str) -> topology_pb2.RoutingEngine.ValueType:
    return topology_pb2.RoutingEngine.Value("ROUTING_ENGINE_" + name.upper())


def reroute_name(value: topology_pb2.RerouteMode.ValueType, field: str = "reroute") -> str | None:
    """'incremental' / 'fresh'; None for UNSPECIFIED; InvalidArgument for FULL or unknown numbers."""
    if value == topology_pb2.REROUTE_MODE_UNSPECIFIED:
        return None
    names = {number: name for name, number in _REROUTE.items() if name != "full"}
    if value not in names:
        raise InvalidArgument(field, f"unknown reroute mode {value}; INCREMENTAL or FRESH")
    return names[value]


def root_guids(values: Sequence[str], field: str = "routing_roots") -> list[int]:
    """Root switch GUIDs from strings (`0x` + hex, or bare hex, as OpenSM's root GUID file);
    InvalidArgument naming `field[i]` for one that is no 64-bit GUID."""
    if len(values) > _MAX_ROOTS:
        raise InvalidArgument(field, f"{len(values)} GUIDs; at most {_MAX_ROOTS}")
    out = []
    for i, text in enumerate(values):
        digits = text.strip().lower().removeprefix("0x")
        try:
            guid = int(digits, 16) if 0 < len(digits) <= 16 else -1
        except ValueError:
            guid = -1
        if guid <= 0:
            raise InvalidArgument(f"{field}[{i}]", f"{quote(text)} is no GUID (0x and up to 16 hex digits)")
        out.append(guid)
    return out


def format_name(value: topology_pb2.TopologyFormat.ValueType, field: str = "format") -> str:
    """'ibnetdiscover' for TOPOLOGY_FORMAT_IBNETDISCOVER; InvalidArgument for UNSPECIFIED or unknown."""
    if value == topology_pb2.TOPOLOGY_FORMAT_UNSPECIFIED:
        raise InvalidArgument(field, "choose a format")
    if value not in topology_pb2.TopologyFormat.values():
        raise InvalidArgument(field, f"unknown topology format {value}")
    return topology_pb2.TopologyFormat.Name(value).removeprefix("TOPOLOGY_FORMAT_").lower()


def fabric_message(record: FabricRecord) -> topology_pb2.Fabric:
    message = topology_pb2.Fabric(
        name=f"fabrics/{record.id}",
        display_name=record.display_name,
        host_count=record.host_count,
        switch_count=record.switch_count,
        link_count=record.link_count,
        routing_engine=engine_value(record.routing_engine),
        routing_version=record.routing_version,
        labels=record.labels,
        import_notes=record.import_notes,
        routing_roots=[f"{guid:#018x}" for guid in record.routing_roots],
        reroute=_REROUTE[record.reroute],
    )
    outcome = record.outcome
    if outcome is not None and outcome.engine_used:
        message.engine_used = engine_value(outcome.engine_used)
        message.fallback_reason = outcome.fallback_reason
        message.roots_used.extend(f"{guid:#018x}" for guid in outcome.roots)
        message.root_selection = _SELECTION.get(
            outcome.root_selection, topology_pb2.ROOT_SELECTION_UNSPECIFIED
        )
    if record.spec is not None:
        json_format.ParseDict(record.spec, message.spec)
    elif record.imported_format:
        message.imported_format = topology_pb2.TopologyFormat.Value(
            "TOPOLOGY_FORMAT_" + record.imported_format.upper()
        )
    message.create_time.FromDatetime(record.create_time)
    message.update_time.FromDatetime(record.update_time)
    return message


def node_name(fabric_id: str, fabric: Fabric, node: int) -> str:
    return f"fabrics/{fabric_id}/nodes/{fabric.node_names[node]}"


def node_message(fabric_id: str, fabric: Fabric, i: int) -> topology_pb2.Node:
    return topology_pb2.Node(
        name=node_name(fabric_id, fabric, i),
        index=i,
        kind=topology_pb2.NodeKind.ValueType(fabric.node_kind[i]),
        display_name=fabric.node_names[i],
        tier=int(fabric.node_tier[i]),
        radix=int(fabric.node_radix[i]),
        guid=int(fabric.node_guid[i]) or synthetic_guid(i),
        lid=int(fabric.node_lid[i]),
        rail=int(fabric.node_rail[i]),
        group=int(fabric.node_group[i]),
        ip_address=format_ipv4(fabric.node_ip[i]),
    )


def link_message(fabric_id: str, fabric: Fabric, i: int) -> topology_pb2.Link:
    port_names = fabric.link_port_names
    return topology_pb2.Link(
        name=f"fabrics/{fabric_id}/links/{i}",
        index=i,
        node_a=node_name(fabric_id, fabric, int(fabric.link_a[i])),
        port_a=int(fabric.link_port_a[i]),
        node_b=node_name(fabric_id, fabric, int(fabric.link_b[i])),
        port_b=int(fabric.link_port_b[i]),
        speed_gbps=int(fabric.link_rate_bps[i]) / 1e9,
        latency_ns=int(fabric.link_latency_ns[i]),
        state=topology_pb2.LinkState.ValueType(fabric.link_state[i]),
        bit_error_rate=float(fabric.link_ber[i]),
        display_name=fabric.link_names[i],
        port_name_a=port_names[0][i] if port_names is not None else "",
        port_name_b=port_names[1][i] if port_names is not None else "",
    )


_MAX_SWITCHES_LISTED = 1000


def routing_summary(change: RoutingChange) -> topology_pb2.RoutingSummary:
    record, routes, fabric = change.routed.record, change.routed.routes, change.routed.fabric
    roots = [] if routes.roots is None else routes.roots.tolist()
    return topology_pb2.RoutingSummary(
        fabric=f"fabrics/{record.id}",
        routing_engine=engine_value(record.routing_engine),
        routing_version=record.routing_version,
        compute_ns=routes.compute_ns,
        changed_entries=change.changed_entries,
        changed_switches=max(change.changed_switches, int(change.lft_switches.shape[0])),
        changed_lft_switches=int(change.lft_switches.shape[0]),
        unreachable_pairs=routes.unreachable_pairs,
        incremental=routes.incremental,
        engine_used=engine_value(routes.engine_used),
        fallback_reason=routes.fallback_reason,
        roots=[node_name(record.id, fabric, node) for node in roots],
        root_selection=_SELECTION.get(routes.roots_source, topology_pb2.ROOT_SELECTION_UNSPECIFIED),
        reroute=_REROUTE[change.mode],
        changed_lft_entries=change.changed_lft_entries,
        changed_per_switch=[
            topology_pb2.SwitchChanges(switch=node_name(record.id, fabric, int(node)), lft_entries=int(count))
            for node, count in zip(
                change.lft_switches[:_MAX_SWITCHES_LISTED].tolist(),
                change.lft_counts[:_MAX_SWITCHES_LISTED].tolist(),
                strict=True,
            )
        ],
    )


def event_message(event: FabricEvent) -> topology_pb2.FabricEvent:
    message = topology_pb2.FabricEvent(
        kind=topology_pb2.FabricEventKind.ValueType(event.kind), fabric=f"fabrics/{event.fabric_id}"
    )
    message.time.FromDatetime(event.time)
    if event.link is not None and event.routing is not None:
        message.link.CopyFrom(link_message(event.fabric_id, event.routing.routed.fabric, event.link))
    elif event.routing is not None:
        message.routing.CopyFrom(routing_summary(event.routing))
    return message
