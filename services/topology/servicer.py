"""TopologyService: proto <-> topology core (registry, routing, snapshots). Nothing clever lives here."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import numpy as np
from fabrictwin.v1 import topology_pb2, topology_pb2_grpc
from google.protobuf import json_format

from services.common.errors import InvalidArgument, NotFound
from services.common.resources import (
    decode_page_token,
    encode_page_token,
    new_id,
    page_size,
    parse_name,
    validate_id,
)
from services.topology.fabric import Fabric, NodeKind, format_ipv4
from services.topology.registry import FabricRegistry, RoutedFabric
from services.topology.routing import list_paths
from services.topology.routing.tables import forwarding_table
from services.topology.store import FabricRecord

__all__ = ["TopologyServicer"]

_DEFAULT_MAX_PATHS, _MAX_PATHS = 64, 4096


def _engine_name(value: int, field: str) -> str | None:
    """'minhop' for ROUTING_ENGINE_MINHOP; None for UNSPECIFIED."""
    if value == topology_pb2.ROUTING_ENGINE_UNSPECIFIED:
        return None
    if value not in topology_pb2.RoutingEngine.values():
        raise InvalidArgument(field, f"unknown routing engine {value}")
    return topology_pb2.RoutingEngine.Name(value).removeprefix("ROUTING_ENGINE_").lower()


def _engine_value(name: str) -> int:
    return topology_pb2.RoutingEngine.Value("ROUTING_ENGINE_" + name.upper())


def _fabric_id(name: str, field: str = "name") -> str:
    return parse_name(name, "fabrics/{fabric}", field)["fabric"]


def _child(name: str, collection: str, field: str = "name") -> tuple[str, str]:
    """(`fabric`, `child`) of `fabrics/{fabric}/{collection}/{child}`; the child may contain '/'."""
    parent, sep, child = name.partition(f"/{collection}/")
    if not sep or not child:
        raise InvalidArgument(
            field, f"{name!r} is not a resource name of the form 'fabrics/{{fabric}}/{collection}/{{id}}'"
        )
    return _fabric_id(parent, field), child


def _fabric_message(record: FabricRecord) -> topology_pb2.Fabric:
    message = topology_pb2.Fabric(
        name=f"fabrics/{record.id}",
        display_name=record.display_name,
        host_count=record.host_count,
        switch_count=record.switch_count,
        link_count=record.link_count,
        routing_engine=_engine_value(record.routing_engine),
        routing_version=record.routing_version,
        labels=record.labels,
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


def _node_name(fabric_id: str, fabric: Fabric, node: int) -> str:
    return f"fabrics/{fabric_id}/nodes/{fabric.node_names[node]}"


def _node_message(fabric_id: str, fabric: Fabric, i: int) -> topology_pb2.Node:
    return topology_pb2.Node(
        name=_node_name(fabric_id, fabric, i),
        index=i,
        kind=int(fabric.node_kind[i]),
        display_name=fabric.node_names[i],
        tier=int(fabric.node_tier[i]),
        radix=int(fabric.node_radix[i]),
        guid=int(fabric.node_guid[i]),
        lid=int(fabric.node_lid[i]),
        rail=int(fabric.node_rail[i]),
        group=int(fabric.node_group[i]),
        ip_address=format_ipv4(fabric.node_ip[i]),
    )


def _link_message(fabric_id: str, fabric: Fabric, i: int) -> topology_pb2.Link:
    return topology_pb2.Link(
        name=f"fabrics/{fabric_id}/links/{i}",
        index=i,
        node_a=_node_name(fabric_id, fabric, int(fabric.link_a[i])),
        port_a=int(fabric.link_port_a[i]),
        node_b=_node_name(fabric_id, fabric, int(fabric.link_b[i])),
        port_b=int(fabric.link_port_b[i]),
        speed_gbps=int(fabric.link_rate_bps[i]) / 1e9,
        latency_ns=int(fabric.link_latency_ns[i]),
        state=int(fabric.link_state[i]),
        bit_error_rate=float(fabric.link_ber[i]),
        display_name=fabric.link_names[i],
    )


def _page(
    indices: np.ndarray, requested: int, token: str, default: int, maximum: int
) -> tuple[np.ndarray, str]:
    size, offset = page_size(requested, default, maximum), decode_page_token(token)
    chosen = indices[offset : offset + size]
    return chosen, encode_page_token(offset + size) if offset + size < indices.shape[0] else ""


def _node_index(routed: RoutedFabric, reference: str, field: str) -> int:
    """A node given by resource name (under this fabric) or by readable name."""
    fabric_id = routed.record.id
    name = reference
    if reference.startswith("fabrics/"):
        owner, name = _child(reference, "nodes", field)
        if owner != fabric_id:
            raise InvalidArgument(field, f"{reference!r} is not a node of fabrics/{fabric_id}")
    index = routed.fabric.node_index(name)
    if index is None:
        raise NotFound(f"fabrics/{fabric_id}/nodes/{name} does not exist")
    return index


class TopologyServicer(topology_pb2_grpc.TopologyServiceServicer):
    """Translates TopologyService calls to the FabricRegistry."""

    def __init__(self, registry: FabricRegistry) -> None:
        self.registry = registry

    async def CreateFabric(self, request, context):
        fabric_id = validate_id(request.fabric_id, "fabric_id") if request.fabric_id else new_id("fab")
        if len(request.display_name) > 256:
            raise InvalidArgument("display_name", "at most 256 characters")
        spec = json_format.MessageToDict(request.spec, preserving_proto_field_name=True)
        engine = _engine_name(request.routing_engine, "routing_engine") or "minhop"
        routed = await self.registry.create(
            fabric_id, request.display_name, spec, engine, dict(request.labels)
        )
        return _fabric_message(routed.record)

    async def GetFabric(self, request, context):
        return _fabric_message(await self.registry.get(_fabric_id(request.name)))

    async def ListFabrics(self, request, context):
        size, offset = page_size(request.page_size), decode_page_token(request.page_token)
        records, more = await self.registry.list(offset, size)
        return topology_pb2.ListFabricsResponse(
            fabrics=[_fabric_message(r) for r in records],
            next_page_token=encode_page_token(offset + size) if more else "",
        )

    async def DeleteFabric(self, request, context):
        await self.registry.delete(_fabric_id(request.name))
        return topology_pb2.DeleteFabricResponse()

    async def ListNodes(self, request, context):
        fabric_id = _fabric_id(request.parent, "parent")
        fabric = (await self.registry.routed(fabric_id)).fabric
        if request.kind == topology_pb2.NODE_KIND_UNSPECIFIED:
            indices = np.arange(fabric.num_nodes)
        else:
            indices = np.flatnonzero(fabric.node_kind == request.kind)
        chosen, token = _page(indices, request.page_size, request.page_token, 500, 10_000)
        nodes = [_node_message(fabric_id, fabric, i) for i in chosen.tolist()]
        return topology_pb2.ListNodesResponse(nodes=nodes, next_page_token=token)

    async def ListLinks(self, request, context):
        fabric_id = _fabric_id(request.parent, "parent")
        fabric = (await self.registry.routed(fabric_id)).fabric
        if request.state == topology_pb2.LINK_STATE_UNSPECIFIED:
            indices = np.arange(fabric.num_links)
        else:
            indices = np.flatnonzero(fabric.link_state == request.state)
        chosen, token = _page(indices, request.page_size, request.page_token, 500, 10_000)
        links = [_link_message(fabric_id, fabric, i) for i in chosen.tolist()]
        return topology_pb2.ListLinksResponse(links=links, next_page_token=token)

    async def GetLink(self, request, context):
        fabric_id, link = _child(request.name, "links")
        fabric = (await self.registry.routed(fabric_id)).fabric
        index = int(link) if link.isdigit() else fabric.link_index(link)
        if index is None or index >= fabric.num_links:
            raise NotFound(f"{request.name} does not exist")
        return _link_message(fabric_id, fabric, index)

    async def GetFabricSnapshot(self, request, context):
        routed = await self.registry.routed(_fabric_id(request.name))
        return routed.snapshot().to_proto()

    async def ListPaths(self, request, context):
        routed = await self.registry.routed(_fabric_id(request.parent, "parent"))
        fabric_id, fabric = routed.record.id, routed.fabric
        ends = {}
        for field in ("source", "destination"):
            node = _node_index(routed, getattr(request, field), field)
            if fabric.node_kind[node] != NodeKind.HOST:
                raise InvalidArgument(
                    field, f"{fabric.node_names[node]} is a switch; paths run between hosts"
                )
            ends[field] = node
        if request.max_paths < 0:
            raise InvalidArgument("max_paths", f"must not be negative, got {request.max_paths}")
        limit = min(request.max_paths or _DEFAULT_MAX_PATHS, _MAX_PATHS)
        listing = list_paths(fabric, routed.routes, ends["source"], ends["destination"], limit)
        return topology_pb2.ListPathsResponse(
            paths=[
                topology_pb2.Path(
                    nodes=[_node_name(fabric_id, fabric, n) for n in path.nodes],
                    links=path.links,
                    lft_path=path.lft,
                )
                for path in listing.paths
            ],
            total_paths=listing.total_paths,
        )

    async def GetForwardingTable(self, request, context):
        fabric_id, _ = _child(request.name, "nodes")
        routed = await self.registry.routed(fabric_id)
        fabric = routed.fabric
        node = _node_index(routed, request.name, "name")
        if fabric.node_kind[node] != NodeKind.SWITCH:
            raise InvalidArgument(
                "name", f"{fabric.node_names[node]} is a host; forwarding tables belong to switches"
            )
        table = forwarding_table(fabric, routed.routes, node)
        host_nodes = fabric.host_nodes
        entries = [
            topology_pb2.ForwardingEntry(
                destination=_node_name(fabric_id, fabric, int(host_nodes[h])),
                destination_lid=int(fabric.node_lid[host_nodes[h]]),
                port=int(table.lft_ports[e]),
                ecmp_ports=table.ecmp_ports(e).tolist(),
            )
            for e, h in enumerate(table.hosts.tolist())
        ]
        return topology_pb2.ForwardingTable(
            name=request.name, routing_version=routed.record.routing_version, entries=entries
        )

    async def ComputeRoutes(self, request, context):
        fabric_id = _fabric_id(request.name)
        change = await self.registry.compute_routes(
            fabric_id, _engine_name(request.routing_engine, "routing_engine")
        )
        record, routes = change.routed.record, change.routed.routes
        return topology_pb2.RoutingSummary(
            fabric=f"fabrics/{fabric_id}",
            routing_engine=_engine_value(record.routing_engine),
            routing_version=record.routing_version,
            compute_ns=routes.compute_ns,
            changed_entries=change.changed_entries,
            changed_switches=change.changed_switches,
            unreachable_pairs=routes.unreachable_pairs,
            incremental=False,
        )

    # Issue #3: importers, exporters, updates, link state and events. Not domain errors: UNIMPLEMENTED.

    async def ImportFabric(self, request, context):
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "ImportFabric: arrives with issue #3")

    async def ExportFabric(self, request, context):
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "ExportFabric: arrives with issue #3")

    async def UpdateFabric(self, request, context):
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "UpdateFabric: arrives with issue #3")

    async def SetLinkState(self, request, context):
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "SetLinkState: arrives with issue #3")

    async def WatchFabric(self, request, context) -> AsyncIterator[topology_pb2.FabricEvent]:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "WatchFabric: arrives with issue #3")
        yield topology_pb2.FabricEvent()  # unreachable; makes this a response stream
