"""`client.fabrics`: build, import, inspect and change fabrics through the TopologyService.

Names may be given short (`ft8`, `leaf-3`) or in full (`fabrics/ft8`, `fabrics/ft8/nodes/leaf-3`).
List methods iterate over every page; watch streams until the caller stops iterating.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence

import grpc
from google.protobuf import field_mask_pb2

from fabrictwin.connection import Connection
from fabrictwin.names import enum_value, resource_name
from fabrictwin.v1 import topology_pb2, topology_pb2_grpc

__all__ = ["FabricsApi"]

EnumLike = int | str


def _child_name(fabric: str, collection: str, value: str) -> str:
    """`fabrics/{fabric}/{collection}/{value}` unless `value` is already a full name."""
    if value.startswith("fabrics/"):
        return value
    return f"{resource_name('fabrics', fabric)}/{collection}/{value}"


def guid_strings(guids: Iterable[int | str]) -> list[str]:
    """GUIDs as the API takes them ("0x" and 16 hex digits); strings pass through for the server to
    check (it names the bad one)."""
    return [f"{guid:#018x}" if isinstance(guid, int) else str(guid) for guid in guids]


class FabricsApi:
    """Fabrics, their nodes, links, routes and paths (TopologyService)."""

    def __init__(self, connection: Connection) -> None:
        self._connection = connection
        self._stub = topology_pb2_grpc.TopologyServiceStub(connection.channel)

    # -- creating -------------------------------------------------------------------------------

    def create(
        self,
        spec: topology_pb2.FabricSpec,
        *,
        fabric_id: str = "",
        display_name: str = "",
        routing_engine: EnumLike | None = None,
        labels: Mapping[str, str] | None = None,
        routing_roots: Iterable[int | str] = (),
        reroute: EnumLike | None = None,
    ) -> topology_pb2.Fabric:
        """Build a fabric from any generator spec and route it; the server picks an id if none is given.

        `routing_roots`: updn/ftree root switch GUIDs (ints or "0x..."), as OpenSM's root GUID file;
        `reroute`: how link state changes reroute, `incremental` (a running subnet manager's sweep,
        the default) or `fresh`."""
        request = topology_pb2.CreateFabricRequest(
            fabric_id=fabric_id,
            display_name=display_name,
            spec=spec,
            labels=dict(labels or {}),
            routing_roots=guid_strings(routing_roots),
        )
        if routing_engine is not None:
            request.routing_engine = enum_value(topology_pb2.RoutingEngine, routing_engine, "routing_engine")
        if reroute is not None:
            request.reroute = enum_value(topology_pb2.RerouteMode, reroute, "reroute")
        return self._connection.unary(self._stub.CreateFabric, request)

    def create_fat_tree(
        self,
        k: int,
        *,
        fabric_id: str = "",
        display_name: str = "",
        link_speed_gbps: float = 0.0,
        link_latency_ns: int = 0,
        host_link_speed_gbps: float = 0.0,
        routing_engine: EnumLike | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> topology_pb2.Fabric:
        """A k-ary fat-tree (k even): k pods, (k/2)^2 core switches, k^3/4 hosts. 0 keeps server defaults.

        >>> client.fabrics.create_fat_tree(8, fabric_id="ft8")  # doctest: +SKIP
        """
        spec = topology_pb2.FabricSpec(
            fat_tree=topology_pb2.FatTreeSpec(k=k),
            link_speed_gbps=link_speed_gbps,
            link_latency_ns=link_latency_ns,
            host_link_speed_gbps=host_link_speed_gbps,
        )
        return self.create(
            spec, fabric_id=fabric_id, display_name=display_name, routing_engine=routing_engine, labels=labels
        )

    def create_leaf_spine(
        self,
        leaves: int,
        spines: int,
        hosts_per_leaf: int,
        *,
        parallel_links: int = 0,
        fabric_id: str = "",
        display_name: str = "",
        link_speed_gbps: float = 0.0,
        link_latency_ns: int = 0,
        host_link_speed_gbps: float = 0.0,
        routing_engine: EnumLike | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> topology_pb2.Fabric:
        """A two-tier leaf-spine fabric; `parallel_links` cables between each leaf and spine (default 1)."""
        spec = topology_pb2.FabricSpec(
            leaf_spine=topology_pb2.LeafSpineSpec(
                leaves=leaves, spines=spines, hosts_per_leaf=hosts_per_leaf, parallel_links=parallel_links
            ),
            link_speed_gbps=link_speed_gbps,
            link_latency_ns=link_latency_ns,
            host_link_speed_gbps=host_link_speed_gbps,
        )
        return self.create(
            spec, fabric_id=fabric_id, display_name=display_name, routing_engine=routing_engine, labels=labels
        )

    def create_superpod(
        self,
        scalable_units: int,
        *,
        nodes_per_su: int = 0,
        gpus_per_node: int = 0,
        fabric_id: str = "",
        display_name: str = "",
        link_speed_gbps: float = 0.0,
        link_latency_ns: int = 0,
        host_link_speed_gbps: float = 0.0,
        routing_engine: EnumLike | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> topology_pb2.Fabric:
        """A rail-optimised DGX SuperPOD: SUs of 32 nodes x 8 GPUs (0 keeps those defaults), one host per
        GPU NIC, one rail leaf per GPU index per SU, spines, and cores from 16 SUs.

        >>> client.fabrics.create_superpod(4, fabric_id="pod4")  # doctest: +SKIP
        """
        spec = topology_pb2.FabricSpec(
            superpod=topology_pb2.SuperPodSpec(
                scalable_units=scalable_units, nodes_per_su=nodes_per_su, gpus_per_node=gpus_per_node
            ),
            link_speed_gbps=link_speed_gbps,
            link_latency_ns=link_latency_ns,
            host_link_speed_gbps=host_link_speed_gbps,
        )
        return self.create(
            spec, fabric_id=fabric_id, display_name=display_name, routing_engine=routing_engine, labels=labels
        )

    def import_(
        self,
        format: EnumLike,
        content: str,
        *,
        fabric_id: str = "",
        display_name: str = "",
        routing_engine: EnumLike | None = None,
        default_link_speed_gbps: float = 0.0,
        default_link_latency_ns: int = 0,
        take_slower_end_on_speed_mismatch: bool = False,
        documents: Iterable[tuple[str, str]] | Mapping[str, str] | None = None,
        archive: bytes = b"",
        port_speeds_gbps: Mapping[str, float] | None = None,
        routing_roots: Iterable[int | str] = (),
        reroute: EnumLike | None = None,
    ) -> topology_pb2.Fabric:
        """Import a dump (`format`: `ibnetdiscover`, `json`, `ns3_hpcc`, `lldp`, a TopologyFormat), route it.

        Per-node formats (`lldp`) take `documents` ((node, text) pairs or a mapping) or a tar
        `archive` instead of `content` (pass ""); `port_speeds_gbps` maps `node/ifname` to Gb/s.
        `routing_roots` and `reroute` as for `create`. The Fabric says which engine routed it
        (`engine_used`; OpenSM's fallback, minhop, where it refuses the fabric, with `fallback_reason`)
        and from which roots (`roots_used`, `root_selection`).
        """
        request = topology_pb2.ImportFabricRequest(
            fabric_id=fabric_id,
            display_name=display_name,
            format=enum_value(topology_pb2.TopologyFormat, format, "format"),
            content=content,
            default_link_speed_gbps=default_link_speed_gbps,
            default_link_latency_ns=default_link_latency_ns,
            take_slower_end_on_speed_mismatch=take_slower_end_on_speed_mismatch,
            archive=archive,
            port_speeds_gbps=dict(port_speeds_gbps or {}),
            routing_roots=guid_strings(routing_roots),
        )
        if reroute is not None:
            request.reroute = enum_value(topology_pb2.RerouteMode, reroute, "reroute")
        items = documents.items() if isinstance(documents, Mapping) else (documents or ())
        request.documents.extend(topology_pb2.TopologyDocument(name=n, content=c) for n, c in items)
        if routing_engine is not None:
            request.routing_engine = enum_value(topology_pb2.RoutingEngine, routing_engine, "routing_engine")
        return self._connection.unary(self._stub.ImportFabric, request)

    def import_lldp(
        self,
        source: str | Iterable[tuple[str, str]] | Mapping[str, str],
        *,
        fabric_id: str = "",
        display_name: str = "",
        routing_engine: EnumLike | None = None,
        default_link_speed_gbps: float = 0.0,
        default_link_latency_ns: int = 0,
        port_speeds_gbps: Mapping[str, float] | None = None,
        routing_roots: Iterable[int | str] = (),
        reroute: EnumLike | None = None,
    ) -> topology_pb2.Fabric:
        """Import a fabric from LLDP neighbour tables: a directory of `NODE.json` files, a tar archive of
        them (a path), or (node, `lldpcli -f json show neighbors` text) pairs."""
        from fabrictwin.lldp import read_documents

        given = read_documents(source) if isinstance(source, str) else source
        return self.import_(
            "lldp",
            "",
            fabric_id=fabric_id,
            display_name=display_name,
            routing_engine=routing_engine,
            default_link_speed_gbps=default_link_speed_gbps,
            default_link_latency_ns=default_link_latency_ns,
            documents=None if isinstance(given, bytes) else given,
            archive=given if isinstance(given, bytes) else b"",
            port_speeds_gbps=port_speeds_gbps,
            routing_roots=routing_roots,
            reroute=reroute,
        )

    def export(self, name: str, format: EnumLike = "json") -> str:
        """The fabric written in `format` (`json`, `node_link_json`, `ibnetdiscover`, ...)."""
        request = topology_pb2.ExportFabricRequest(
            name=resource_name("fabrics", name),
            format=enum_value(topology_pb2.TopologyFormat, format, "format"),
        )
        return self._connection.unary(self._stub.ExportFabric, request).content

    # -- reading --------------------------------------------------------------------------------

    def get(self, name: str) -> topology_pb2.Fabric:
        """One fabric."""
        request = topology_pb2.GetFabricRequest(name=resource_name("fabrics", name))
        return self._connection.unary(self._stub.GetFabric, request)

    def list(
        self, *, page_size: int = 0, filter: str = "", order_by: str = ""
    ) -> Iterator[topology_pb2.Fabric]:
        """Every fabric (that `filter` keeps, AIP-160: `labels.site = "a"`), in `order_by` order
        (`create_time desc`), fetching pages of `page_size` (0: the server's default) as needed."""
        request = topology_pb2.ListFabricsRequest(page_size=page_size, filter=filter, order_by=order_by)
        return self._connection.pages(self._stub.ListFabrics, request, "fabrics")

    def delete(self, name: str) -> None:
        """Delete a fabric and its routes."""
        request = topology_pb2.DeleteFabricRequest(name=resource_name("fabrics", name))
        self._connection.unary(self._stub.DeleteFabric, request)

    def nodes(
        self, fabric: str, *, kind: EnumLike | None = None, page_size: int = 0
    ) -> Iterator[topology_pb2.Node]:
        """Every node of a fabric; `kind` (`host` or `switch`) filters."""
        request = topology_pb2.ListNodesRequest(parent=resource_name("fabrics", fabric), page_size=page_size)
        if kind is not None:
            request.kind = enum_value(topology_pb2.NodeKind, kind, "kind")
        return self._connection.pages(self._stub.ListNodes, request, "nodes")

    def links(
        self, fabric: str, *, state: EnumLike | None = None, page_size: int = 0
    ) -> Iterator[topology_pb2.Link]:
        """Every link of a fabric; `state` (`up`, `down`, `degraded`) filters."""
        request = topology_pb2.ListLinksRequest(parent=resource_name("fabrics", fabric), page_size=page_size)
        if state is not None:
            request.state = enum_value(topology_pb2.LinkState, state, "state")
        return self._connection.pages(self._stub.ListLinks, request, "links")

    def link(self, fabric: str, link: str | int) -> topology_pb2.Link:
        """One link, by index, display name or full name (`fabrics/f/links/12`)."""
        request = topology_pb2.GetLinkRequest(name=_child_name(fabric, "links", str(link)))
        return self._connection.unary(self._stub.GetLink, request)

    def paths(
        self, fabric: str, source: str, destination: str, *, max_paths: int = 0
    ) -> topology_pb2.ListPathsResponse:
        """The equal-cost paths the current routes give from host `source` to host `destination`."""
        request = topology_pb2.ListPathsRequest(
            parent=resource_name("fabrics", fabric),
            source=source,
            destination=destination,
            max_paths=max_paths,
        )
        return self._connection.unary(self._stub.ListPaths, request)

    def forwarding_table(self, fabric: str, switch: str) -> topology_pb2.ForwardingTable:
        """The forwarding table of one switch (`leaf-3` or `fabrics/f/nodes/leaf-3`)."""
        request = topology_pb2.GetForwardingTableRequest(name=_child_name(fabric, "nodes", switch))
        return self._connection.unary(self._stub.GetForwardingTable, request)

    def snapshot(
        self,
        name: str,
        *,
        routing_version: int = 0,
        down_links: Sequence[int] = (),
        up_links: Sequence[int] = (),
    ) -> topology_pb2.FabricSnapshot:
        """The compact snapshot of a fabric and its routes (arrays; see fabrictwin.arrays to read them),
        fetched as a stream of chunks so that snapshots of any size arrive. `routing_version` asks for
        the routes of an earlier version still held (0: the current ones); `down_links` / `up_links`
        (indices) make it a what-if: those links DOWN / repaired, rerouted, nothing stored."""
        request = topology_pb2.StreamFabricSnapshotRequest(
            name=resource_name("fabrics", name),
            routing_version=routing_version,
            down_links=list(down_links),
            up_links=list(up_links),
        )
        chunks = self._connection.server_stream(
            self._stub.StreamFabricSnapshot, request, timeout=self._connection.timeout
        )
        return topology_pb2.FabricSnapshot.FromString(b"".join(chunk.data for chunk in chunks))

    # -- changing -------------------------------------------------------------------------------

    def set_link_state(
        self, fabric: str, link: str | int, state: EnumLike, *, bit_error_rate: float = 0.0
    ) -> topology_pb2.SetLinkStateResponse:
        """Set a link `up`, `down` or `degraded` (with `bit_error_rate`) and reroute what must change.

        `link` is an index, a display name or a full name (then `fabric` may be "").
        """
        request = topology_pb2.SetLinkStateRequest(
            name=_child_name(fabric, "links", str(link)),
            state=enum_value(topology_pb2.LinkState, state, "state"),
            bit_error_rate=bit_error_rate,
        )
        return self._connection.unary(self._stub.SetLinkState, request)

    def set_link_states(
        self, fabric: str, changes: Iterable[tuple[str | int, EnumLike, float]]
    ) -> topology_pb2.SetLinkStatesResponse:
        """Set several links at once, `(link, state, bit_error_rate)` each: one routing version, or
        (INVALID_ARGUMENT naming the change) nothing changed at all."""
        request = topology_pb2.SetLinkStatesRequest(
            fabric=resource_name("fabrics", fabric),
            changes=[
                topology_pb2.SetLinkStateRequest(
                    name=_child_name(fabric, "links", str(link)),
                    state=enum_value(topology_pb2.LinkState, state, "state"),
                    bit_error_rate=ber,
                )
                for link, state, ber in changes
            ],
        )
        return self._connection.unary(self._stub.SetLinkStates, request)

    def update(
        self,
        name: str,
        *,
        display_name: str | None = None,
        labels: Mapping[str, str] | None = None,
        routing_engine: EnumLike | None = None,
    ) -> topology_pb2.Fabric:
        """Change what is given (and only that): display name, labels (replaced whole), routing engine
        (which reroutes every table)."""
        fabric = topology_pb2.Fabric(name=resource_name("fabrics", name))
        paths: list[str] = []
        if display_name is not None:
            fabric.display_name, paths = display_name, [*paths, "display_name"]
        if labels is not None:
            fabric.labels.update(labels)
            paths.append("labels")
        if routing_engine is not None:
            fabric.routing_engine = enum_value(topology_pb2.RoutingEngine, routing_engine, "routing_engine")
            paths.append("routing_engine")
        request = topology_pb2.UpdateFabricRequest(
            fabric=fabric, update_mask=field_mask_pb2.FieldMask(paths=paths)
        )
        return self._connection.unary(self._stub.UpdateFabric, request)

    def compute_routes(
        self,
        name: str,
        *,
        routing_engine: EnumLike | None = None,
        lfts_dump: str = "",
        routing_roots: Iterable[int | str] = (),
        detect_roots: bool = False,
        reroute: EnumLike | None = None,
    ) -> topology_pb2.RoutingSummary:
        """Recompute every forwarding table from scratch (with another engine if given; FILE needs
        `lfts_dump`). `routing_roots` (updn/ftree root GUIDs) replace the fabric's, `detect_roots`
        forgets them (roots found as OpenSM finds them); `reroute` sets how link changes reroute."""
        request = topology_pb2.ComputeRoutesRequest(
            name=resource_name("fabrics", name),
            lfts_dump=lfts_dump,
            routing_roots=guid_strings(routing_roots),
            detect_roots=detect_roots,
        )
        if routing_engine is not None:
            request.routing_engine = enum_value(topology_pb2.RoutingEngine, routing_engine, "routing_engine")
        if reroute is not None:
            request.reroute = enum_value(topology_pb2.RerouteMode, reroute, "reroute")
        return self._connection.unary(self._stub.ComputeRoutes, request)

    def watch(self, name: str) -> Iterator[topology_pb2.FabricEvent]:
        """Fabric events (link changes, reroutes, deletion) as they happen; stop iterating to stop.

        When this returns the server has subscribed the watcher: every change made after it is seen.
        """
        request = topology_pb2.WatchFabricRequest(name=resource_name("fabrics", name))
        call = self._stub.WatchFabric(request, timeout=None, metadata=self._connection.metadata)
        try:
            call.initial_metadata()  # the server sends its headers once the subscription is live
        except grpc.RpcError as exc:
            call.cancel()
            raise self._connection.error(exc) from None
        return self._events(call)

    def _events(self, call: grpc.Call) -> Iterator[topology_pb2.FabricEvent]:
        try:
            yield from call  # type: ignore[misc]
        except grpc.RpcError as exc:
            raise self._connection.error(exc) from None
        finally:
            call.cancel()  # leaving the loop early ends the stream on the server
