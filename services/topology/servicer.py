"""TopologyService: proto <-> topology core (registry, routing, snapshots). Nothing clever lives here.

Conversions whose cost grows with the fabric (a snapshot's 100 MB, a forwarding table of 27,000
entries, thousands of paths) run in threads like the core's work, so the event loop stays free.
"""

from __future__ import annotations

import asyncio

import numpy as np
from fabrictwin.v1 import topology_pb2, topology_pb2_grpc
from google.protobuf import json_format

from services.common.errors import InvalidArgument, NotFound, ResourceExhausted, excerpt, quote
from services.common.listing import MAX_FILTERED, Listing, filtered_page
from services.common.resources import (
    decode_page_token,
    encode_page_token,
    new_id,
    page_size,
    parse_name,
    validate_id,
)
from services.topology.fabric import LinkState, NodeKind
from services.topology.messages import (
    IMPORT_FORMATS,
    LFTS_FORMAT,
    engine_name,
    event_message,
    fabric_message,
    format_name,
    link_message,
    node_message,
    node_name,
    reroute_name,
    root_guids,
    routing_summary,
)
from services.topology.registry import FabricRegistry, RoutedFabric
from services.topology.routing import list_paths
from services.topology.routing.tables import forwarding_table
from services.topology.what_if import WhatIfSnapshot

__all__ = ["TopologyServicer"]

_DEFAULT_MAX_PATHS, _MAX_PATHS = 64, 4096
_SNAPSHOT_CHUNK_BYTES = 1 << 20
_UPDATABLE = ("display_name", "labels", "routing_engine")


_MAX_NAME_CHARS = 1024  # far beyond any fabrics/{id}/... name a fabric can have (ids are <= 63)


def _fabric_id(name: str, field: str = "name") -> str:
    if len(name) > _MAX_NAME_CHARS:  # refused before it is split, looked up or quoted
        raise InvalidArgument(
            field,
            f"a resource name has at most {_MAX_NAME_CHARS} characters, got {len(name):,}: {quote(name, 60)}",
        )
    return parse_name(name, "fabrics/{fabric}", field)["fabric"]


def _child(name: str, collection: str, field: str = "name") -> tuple[str, str]:
    """(`fabric`, `child`) of `fabrics/{fabric}/{collection}/{child}`; the child may contain '/'."""
    if len(name) > _MAX_NAME_CHARS:
        _fabric_id(name, field)  # refuses it, naming the field
    parent, sep, child = name.partition(f"/{collection}/")
    if not sep or not child:
        raise InvalidArgument(
            field,
            f"{quote(name)} is not a resource name of the form 'fabrics/{{fabric}}/{collection}/{{id}}'",
        )
    return _fabric_id(parent, field), child


def _routing_version(version: int) -> int:
    if version < 0:
        raise InvalidArgument(
            "routing_version", f"must be 0 (the current routes) or a version, got {version}"
        )
    return version


_MAX_LINK_CHANGES = 100_000  # SetLinkStates: changes in one request


def _checked_state(request: topology_pb2.SetLinkStateRequest, prefix: str = "") -> float:
    """The bit error rate of a valid state change; INVALID_ARGUMENT naming the field otherwise."""
    if request.state not in (
        topology_pb2.LINK_STATE_UP,
        topology_pb2.LINK_STATE_DOWN,
        topology_pb2.LINK_STATE_DEGRADED,
    ):
        raise InvalidArgument(
            prefix + "state", "must be LINK_STATE_UP, LINK_STATE_DOWN or LINK_STATE_DEGRADED"
        )
    ber = request.bit_error_rate
    if request.state == topology_pb2.LINK_STATE_DEGRADED:
        if not 0.0 < ber < 1.0:
            raise InvalidArgument(
                prefix + "bit_error_rate", f"a DEGRADED link needs a bit error rate in (0, 1), got {ber}"
            )
    elif ber:
        raise InvalidArgument(prefix + "bit_error_rate", "only a DEGRADED link has a bit error rate")
    return ber


def _link_index(routed: RoutedFabric, name: str, link: str) -> int:
    """A link given by index or display name; NotFound naming it otherwise (AIP-131, as GetLink)."""
    fabric = routed.fabric
    index = int(link) if link.isdigit() else fabric.link_index(link)
    if index is None or index >= fabric.num_links:
        raise NotFound(
            f"{excerpt(name)} does not exist (no link {quote(link)} in fabrics/{routed.record.id})"
        )
    return index


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
            raise InvalidArgument(field, f"{quote(reference)} is not a node of fabrics/{fabric_id}")
    index = routed.fabric.node_index(name)
    if index is None:
        raise NotFound(f"fabrics/{fabric_id}/nodes/{excerpt(name)} does not exist")
    return index


class TopologyServicer(topology_pb2_grpc.TopologyServiceServicer):
    """Translates TopologyService calls to the FabricRegistry."""

    def __init__(self, registry: FabricRegistry, max_message_bytes: int = 64 * 1024 * 1024) -> None:
        self.registry = registry
        self.max_message_bytes = max_message_bytes

    async def CreateFabric(self, request, context):
        fabric_id = validate_id(request.fabric_id, "fabric_id") if request.fabric_id else new_id("fab")
        if len(request.display_name) > 256:
            raise InvalidArgument("display_name", "at most 256 characters")
        spec = json_format.MessageToDict(request.spec, preserving_proto_field_name=True)
        engine = engine_name(request.routing_engine, "routing_engine") or "minhop"
        routed = await self.registry.create(
            fabric_id,
            request.display_name,
            spec,
            engine,
            dict(request.labels),
            roots=root_guids(request.routing_roots),
            reroute_mode=reroute_name(request.reroute) or "incremental",
        )
        return fabric_message(routed.record)

    async def ImportFabric(self, request, context):
        fabric_id = validate_id(request.fabric_id, "fabric_id") if request.fabric_id else new_id("fab")
        if len(request.display_name) > 256:
            raise InvalidArgument("display_name", "at most 256 characters")
        format = format_name(request.format)
        if format not in IMPORT_FORMATS:
            hint = " (forwarding tables: ComputeRoutes with the FILE engine)" if format == LFTS_FORMAT else ""
            raise InvalidArgument(
                "format", f"{format} cannot be imported; import one of {', '.join(IMPORT_FORMATS)}{hint}"
            )
        engine = engine_name(request.routing_engine, "routing_engine") or "minhop"
        routed = await self.registry.import_(
            fabric_id,
            request.display_name,
            format,
            request.content,
            engine,
            default_link_speed_gbps=request.default_link_speed_gbps or 400.0,
            default_link_latency_ns=request.default_link_latency_ns or 500,
            take_slower_end_on_speed_mismatch=request.take_slower_end_on_speed_mismatch,
            documents=[(document.name, document.content) for document in request.documents],
            archive=request.archive,
            port_speeds_gbps=dict(request.port_speeds_gbps),
            roots=root_guids(request.routing_roots),
            reroute_mode=reroute_name(request.reroute) or "incremental",
        )
        return fabric_message(routed.record)

    async def ExportFabric(self, request, context):
        content = await self.registry.export(_fabric_id(request.name), format_name(request.format))
        size = len(content.encode())
        if size > self.max_message_bytes - 1024:
            raise ResourceExhausted(f"the export is {size} bytes, over the limit of {self.max_message_bytes}")
        return topology_pb2.ExportFabricResponse(content=content)

    async def UpdateFabric(self, request, context):
        fabric_id = _fabric_id(request.fabric.name, "fabric.name")
        paths = list(request.update_mask.paths)
        if not paths:
            raise InvalidArgument("update_mask", "name the fields to update (AIP-134)")
        changes = {}
        for path in paths:
            if path not in _UPDATABLE:
                raise InvalidArgument(
                    "update_mask", f"{quote(path)} cannot be updated; updatable: {list(_UPDATABLE)}"
                )
            if path == "display_name":
                if len(request.fabric.display_name) > 256:
                    raise InvalidArgument("fabric.display_name", "at most 256 characters")
                changes[path] = request.fabric.display_name
            elif path == "labels":
                changes[path] = dict(request.fabric.labels)
            else:
                engine = engine_name(request.fabric.routing_engine, "fabric.routing_engine")
                if engine is None:
                    raise InvalidArgument("fabric.routing_engine", "choose an engine to update to")
                changes[path] = engine
        return fabric_message(await self.registry.update(fabric_id, changes))

    async def GetFabric(self, request, context):
        return fabric_message(await self.registry.get(_fabric_id(request.name)))

    async def ListFabrics(self, request, context):
        size, offset = page_size(request.page_size), decode_page_token(request.page_token)
        listing = Listing.of(topology_pb2.Fabric.DESCRIPTOR, request.filter, request.order_by)
        if listing.active:
            records, _ = await self.registry.list(0, MAX_FILTERED + 1)
            chosen, token = filtered_page(
                map(fabric_message, records), listing, "fabrics", request.page_token, size
            )
            return topology_pb2.ListFabricsResponse(fabrics=chosen, next_page_token=token)
        records, more = await self.registry.list(offset, size)
        return topology_pb2.ListFabricsResponse(
            fabrics=[fabric_message(r) for r in records],
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
        nodes = [node_message(fabric_id, fabric, i) for i in chosen.tolist()]
        return topology_pb2.ListNodesResponse(nodes=nodes, next_page_token=token)

    async def ListLinks(self, request, context):
        fabric_id = _fabric_id(request.parent, "parent")
        fabric = (await self.registry.routed(fabric_id)).fabric
        if request.state == topology_pb2.LINK_STATE_UNSPECIFIED:
            indices = np.arange(fabric.num_links)
        else:
            indices = np.flatnonzero(fabric.link_state == request.state)
        chosen, token = _page(indices, request.page_size, request.page_token, 500, 10_000)
        links = [link_message(fabric_id, fabric, i) for i in chosen.tolist()]
        return topology_pb2.ListLinksResponse(links=links, next_page_token=token)

    async def GetLink(self, request, context):
        fabric_id, link = _child(request.name, "links")
        routed = await self.registry.routed(fabric_id)
        return link_message(fabric_id, routed.fabric, _link_index(routed, request.name, link))

    async def _snapshot(
        self, request: topology_pb2.GetFabricSnapshotRequest | topology_pb2.StreamFabricSnapshotRequest
    ) -> WhatIfSnapshot:
        """The snapshot both snapshot calls ask for: a routing version, links down or repaired, an engine."""
        return await self.registry.snapshot(
            _fabric_id(request.name),
            request.down_links,
            routing_version=_routing_version(request.routing_version),
            up_links=request.up_links,
            routing_engine=engine_name(request.routing_engine, "routing_engine") or "",
        )

    async def GetFabricSnapshot(self, request, context):
        snapshot = await self._snapshot(request)
        data = snapshot.snapshot_bytes
        if len(data) > self.max_message_bytes - 1024:
            raise ResourceExhausted(
                f"the snapshot of {request.name} is {len(data)} bytes, over the "
                f"{self.max_message_bytes}-byte message limit; use StreamFabricSnapshot"
            )
        return await asyncio.to_thread(topology_pb2.FabricSnapshot.FromString, data)

    async def StreamFabricSnapshot(self, request, context):
        snapshot = await self._snapshot(request)
        data = snapshot.snapshot_bytes
        chunk = min(_SNAPSHOT_CHUNK_BYTES, self.max_message_bytes // 2)  # well within any client's limit
        for start in range(0, max(len(data), 1), chunk):
            yield topology_pb2.StreamFabricSnapshotResponse(
                data=data[start : start + chunk],
                total_bytes=len(data),
                routing_version=snapshot.routing_version,
                reroute_seconds=snapshot.reroute_seconds,
            )

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

        def paths() -> topology_pb2.ListPathsResponse:
            listing = list_paths(fabric, routed.routes, ends["source"], ends["destination"], limit)
            return topology_pb2.ListPathsResponse(
                paths=[
                    topology_pb2.Path(
                        nodes=[node_name(fabric_id, fabric, n) for n in path.nodes],
                        links=path.links,
                        lft_path=path.lft,
                    )
                    for path in listing.paths
                ],
                total_paths=listing.total_paths,
            )

        return await asyncio.to_thread(paths)

    async def GetForwardingTable(self, request, context):
        fabric_id, _ = _child(request.name, "nodes")
        routed = await self.registry.routed(fabric_id)
        fabric = routed.fabric
        node = _node_index(routed, request.name, "name")
        if fabric.node_kind[node] != NodeKind.SWITCH:
            raise InvalidArgument(
                "name", f"{fabric.node_names[node]} is a host; forwarding tables belong to switches"
            )

        def entries() -> list[topology_pb2.ForwardingEntry]:
            table = forwarding_table(fabric, routed.routes, node)
            host_nodes = fabric.host_nodes
            return [
                topology_pb2.ForwardingEntry(
                    destination=node_name(fabric_id, fabric, int(host_nodes[h])),
                    destination_lid=int(fabric.node_lid[host_nodes[h]]),
                    port=int(table.lft_ports[e]),
                    ecmp_ports=table.ecmp_ports(e).tolist(),
                )
                for e, h in enumerate(table.hosts.tolist())
            ]

        return topology_pb2.ForwardingTable(
            name=request.name,
            routing_version=routed.record.routing_version,
            entries=await asyncio.to_thread(entries),
        )

    async def ComputeRoutes(self, request, context):
        fabric_id = _fabric_id(request.name)
        roots = root_guids(request.routing_roots)
        if request.detect_roots and roots:
            raise InvalidArgument("detect_roots", "give routing_roots or detect_roots, not both")
        change = await self.registry.compute_routes(
            fabric_id,
            engine_name(request.routing_engine, "routing_engine"),
            request.lfts_dump,
            roots=[] if request.detect_roots else (roots or None),
            reroute_mode=reroute_name(request.reroute),
        )
        return routing_summary(change)

    async def SetLinkState(self, request, context):
        fabric_id, link = _child(request.name, "links")
        ber = _checked_state(request)
        routed = await self.registry.routed(fabric_id)
        index = _link_index(routed, request.name, link)
        change = await self.registry.set_link_state(fabric_id, index, LinkState(request.state), ber)
        return topology_pb2.SetLinkStateResponse(
            link=link_message(fabric_id, change.routing.routed.fabric, index),
            routing=routing_summary(change.routing),
        )

    async def SetLinkStates(self, request, context):
        fabric_id = _fabric_id(request.fabric, "fabric")
        if len(request.changes) > _MAX_LINK_CHANGES:
            raise InvalidArgument("changes", f"{len(request.changes)} changes; at most {_MAX_LINK_CHANGES}")
        routed = await self.registry.routed(fabric_id)
        changes = []
        for i, change in enumerate(request.changes):
            field = f"changes[{i}]"
            owner, link = _child(change.name, "links", f"{field}.name")
            if owner != fabric_id:
                raise InvalidArgument(
                    f"{field}.name", f"{excerpt(change.name)} is not a link of {request.fabric}"
                )
            ber = _checked_state(change, field + ".")
            try:
                index = _link_index(routed, change.name, link)
            except NotFound as exc:
                raise InvalidArgument(f"{field}.name", str(exc)) from None
            changes.append((index, LinkState(change.state), ber))
        routing = await self.registry.set_link_states(fabric_id, changes)
        return topology_pb2.SetLinkStatesResponse(
            links=[link_message(fabric_id, routing.routed.fabric, index) for index, _, _ in changes],
            routing=routing_summary(routing),
        )

    async def WatchFabric(self, request, context):
        fabric_id = _fabric_id(request.name)
        await self.registry.get(fabric_id)  # NotFound before subscribing
        subscription = self.registry.events.subscribe(fabric_id)
        try:
            # Headers go out once the subscription is live: a client that waits for them misses nothing.
            await context.send_initial_metadata(())
            async for event in subscription:
                yield event_message(event)
        finally:
            subscription.close()
