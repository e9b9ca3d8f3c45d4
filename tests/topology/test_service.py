import grpc
import numpy as np
import pytest
from fabrictwin.v1 import topology_pb2 as pb
from fabrictwin.v1 import topology_pb2_grpc

from services.common.config import ServiceConfig
from services.common.server import serving
from services.common.snapshot import FabricSnapshot
from services.topology.__main__ import build
from services.topology.generators import fat_tree
from services.topology.snapshots import route_and_snapshot

from .conftest import topology_server


def fat_tree_spec(k):
    return pb.FabricSpec(fat_tree=pb.FatTreeSpec(k=k))


async def test_create_then_get_returns_the_counts_and_the_spec(topology):
    created = await topology.CreateFabric(
        pb.CreateFabricRequest(fabric_id="ft4", display_name="k=4", spec=fat_tree_spec(4), labels={"a": "b"})
    )
    assert created.name == "fabrics/ft4"
    assert (created.host_count, created.switch_count, created.link_count) == (16, 20, 48)
    assert created.routing_engine == pb.ROUTING_ENGINE_MINHOP
    assert created.routing_version == 1
    got = await topology.GetFabric(pb.GetFabricRequest(name="fabrics/ft4"))
    assert got.spec.fat_tree.k == 4
    assert got.spec.link_speed_gbps == 400
    assert got.labels == {"a": "b"}
    assert got.create_time.seconds > 0


async def test_an_empty_id_gets_a_generated_one(topology):
    created = await topology.CreateFabric(pb.CreateFabricRequest(spec=fat_tree_spec(2)))
    assert created.name.startswith("fabrics/fab-")


async def test_creating_the_same_id_twice_is_already_exists(topology):
    await topology.CreateFabric(pb.CreateFabricRequest(fabric_id="twice", spec=fat_tree_spec(2)))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await topology.CreateFabric(pb.CreateFabricRequest(fabric_id="twice", spec=fat_tree_spec(2)))
    assert err.value.code() == grpc.StatusCode.ALREADY_EXISTS


@pytest.mark.parametrize(
    ("request_", "mentions"),
    [
        (pb.CreateFabricRequest(spec=fat_tree_spec(5)), "spec.fat_tree.k"),
        (
            pb.CreateFabricRequest(spec=pb.FabricSpec(leaf_spine=pb.LeafSpineSpec(leaves=2, spines=2))),
            "spec.leaf_spine.hosts_per_leaf",
        ),
        (pb.CreateFabricRequest(), "spec"),
        (
            pb.CreateFabricRequest(spec=pb.FabricSpec(superpod=pb.SuperPodSpec(scalable_units=0))),
            "spec.superpod.scalable_units",
        ),
        (pb.CreateFabricRequest(fabric_id="Bad_Id", spec=fat_tree_spec(2)), "fabric_id"),
        (pb.CreateFabricRequest(spec=fat_tree_spec(2), routing_engine=42), "routing_engine"),
        (
            pb.CreateFabricRequest(spec=fat_tree_spec(2), routing_engine=pb.ROUTING_ENGINE_FILE),
            "routing_engine",
        ),
    ],
)
async def test_bad_create_requests_are_invalid_argument_naming_the_field(topology, request_, mentions):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await topology.CreateFabric(request_)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert mentions in err.value.details()


async def test_unknown_fabrics_are_not_found(topology):
    for call in (
        topology.GetFabric(pb.GetFabricRequest(name="fabrics/nope")),
        topology.DeleteFabric(pb.DeleteFabricRequest(name="fabrics/nope")),
        topology.GetFabricSnapshot(pb.GetFabricSnapshotRequest(name="fabrics/nope")),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await call
        assert err.value.code() == grpc.StatusCode.NOT_FOUND


async def test_list_fabrics_pages_through_everything_once(topology):
    for i in range(5):
        await topology.CreateFabric(pb.CreateFabricRequest(fabric_id=f"f{i}", spec=fat_tree_spec(2)))
    seen, token = [], ""
    while True:
        page = await topology.ListFabrics(pb.ListFabricsRequest(page_size=2, page_token=token))
        assert len(page.fabrics) <= 2
        seen += [f.name for f in page.fabrics]
        token = page.next_page_token
        if not token:
            break
    assert seen == [f"fabrics/f{i}" for i in range(5)]


async def test_delete_removes_the_fabric(topology):
    await topology.CreateFabric(pb.CreateFabricRequest(fabric_id="gone", spec=fat_tree_spec(2)))
    await topology.DeleteFabric(pb.DeleteFabricRequest(name="fabrics/gone"))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await topology.GetFabric(pb.GetFabricRequest(name="fabrics/gone"))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


async def test_nodes_and_links_list_with_filters_and_get_link_by_index_or_name(topology):
    await topology.CreateFabric(pb.CreateFabricRequest(fabric_id="ft4", spec=fat_tree_spec(4)))
    hosts = await topology.ListNodes(
        pb.ListNodesRequest(parent="fabrics/ft4", kind=pb.NODE_KIND_HOST, page_size=100)
    )
    assert len(hosts.nodes) == 16 and not hosts.next_page_token
    first = hosts.nodes[0]
    assert (first.name, first.ip_address, first.lid, first.tier) == (
        "fabrics/ft4/nodes/pod0-edge0-h0",
        "10.0.0.1",
        1,
        0,
    )
    links = await topology.ListLinks(pb.ListLinksRequest(parent="fabrics/ft4", page_size=10))
    assert len(links.links) == 10 and links.next_page_token
    link = links.links[3]
    assert link.speed_gbps == 400 and link.state == pb.LINK_STATE_UP
    by_index = await topology.GetLink(pb.GetLinkRequest(name="fabrics/ft4/links/3"))
    by_name = await topology.GetLink(pb.GetLinkRequest(name=f"fabrics/ft4/links/{link.display_name}"))
    assert by_index == by_name == link


async def test_the_snapshot_decodes_to_the_arrays_routing_computed(topology):
    await topology.CreateFabric(pb.CreateFabricRequest(fabric_id="ft4", spec=fat_tree_spec(4)))
    message = await topology.GetFabricSnapshot(pb.GetFabricSnapshotRequest(name="fabrics/ft4"))
    got = FabricSnapshot.from_proto(message)
    want = route_and_snapshot(fat_tree(4), name="fabrics/ft4")
    assert got.routing_version == 1 and got.route_encoding == 2
    assert got.node_names == want.node_names and got.link_names == want.link_names
    for name in (
        "node_kind",
        "host_nodes",
        "host_ip",
        "link_a",
        "link_rate_bps",
        "link_port_a",
        "route_channels",
    ):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)
    for name in ("node_row", "dest_class", "group_ids", "group_offsets", "group_channels", "lft_ports"):
        np.testing.assert_array_equal(
            getattr(got.route_table, name), getattr(want.route_table, name), err_msg=name
        )


async def test_the_streamed_snapshot_is_the_same_snapshot_in_chunks(topology):
    await topology.CreateFabric(pb.CreateFabricRequest(fabric_id="ft8", spec=fat_tree_spec(8)))
    whole = await topology.GetFabricSnapshot(pb.GetFabricSnapshotRequest(name="fabrics/ft8"))
    parts = [
        part
        async for part in topology.StreamFabricSnapshot(pb.StreamFabricSnapshotRequest(name="fabrics/ft8"))
    ]
    data = b"".join(part.data for part in parts)
    assert len(data) == parts[0].total_bytes and parts[0].routing_version == 1
    assert pb.FabricSnapshot.FromString(data) == whole


async def test_a_snapshot_over_the_message_limit_is_refused_with_a_pointer_to_the_stream(tmp_path):
    url = f"sqlite:///{tmp_path / 'topology.db'}"
    config = ServiceConfig(service="topology", port=0, database_url=url, max_message_bytes=256 * 1024)
    services, cleanup = await build(config)
    async with serving(config, services) as running, grpc.aio.insecure_channel(running.address) as channel:
        stub = topology_pb2_grpc.TopologyServiceStub(channel)
        await stub.CreateFabric(pb.CreateFabricRequest(fabric_id="ft16", spec=fat_tree_spec(16)))
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.GetFabricSnapshot(pb.GetFabricSnapshotRequest(name="fabrics/ft16"))
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "StreamFabricSnapshot" in err.value.details()
        parts = [
            p async for p in stub.StreamFabricSnapshot(pb.StreamFabricSnapshotRequest(name="fabrics/ft16"))
        ]
        assert len(parts) > 2 and sum(len(p.data) for p in parts) == parts[0].total_bytes > 256 * 1024
    await cleanup()


async def test_paths_between_pods_number_half_k_squared_with_the_lft_path_first(topology):
    await topology.CreateFabric(pb.CreateFabricRequest(fabric_id="ft4", spec=fat_tree_spec(4)))
    reply = await topology.ListPaths(
        pb.ListPathsRequest(
            parent="fabrics/ft4", source="pod0-edge0-h0", destination="fabrics/ft4/nodes/pod3-edge1-h1"
        )
    )
    assert reply.total_paths == 4 and len(reply.paths) == 4
    assert reply.paths[0].lft_path and not any(p.lft_path for p in reply.paths[1:])
    assert reply.paths[0].nodes[0] == "fabrics/ft4/nodes/pod0-edge0-h0"
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await topology.ListPaths(
            pb.ListPathsRequest(parent="fabrics/ft4", source="core-0", destination="pod0-edge0-h0")
        )
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "source" in err.value.details()


async def test_forwarding_table_gives_lft_port_and_ecmp_ports(topology):
    await topology.CreateFabric(pb.CreateFabricRequest(fabric_id="ft4", spec=fat_tree_spec(4)))
    table = await topology.GetForwardingTable(
        pb.GetForwardingTableRequest(name="fabrics/ft4/nodes/pod0-edge0")
    )
    assert len(table.entries) == 16
    local = table.entries[0]
    assert (local.destination, local.port, list(local.ecmp_ports)) == (
        "fabrics/ft4/nodes/pod0-edge0-h0",
        1,
        [1],
    )
    remote = table.entries[15]
    assert sorted(remote.ecmp_ports) == [3, 4] and remote.port == remote.ecmp_ports[0]


async def test_recomputing_unchanged_routes_keeps_the_version_and_another_engine_bumps_it(topology):
    await topology.CreateFabric(pb.CreateFabricRequest(fabric_id="ft4", spec=fat_tree_spec(4)))
    summary = await topology.ComputeRoutes(pb.ComputeRoutesRequest(name="fabrics/ft4"))
    assert (summary.routing_version, summary.changed_entries, summary.unreachable_pairs) == (1, 0, 0)
    summary = await topology.ComputeRoutes(
        pb.ComputeRoutesRequest(name="fabrics/ft4", routing_engine=pb.ROUTING_ENGINE_FTREE)
    )
    assert summary.routing_engine == pb.ROUTING_ENGINE_FTREE and summary.routing_version == 2
    assert summary.compute_ns > 0 and not summary.incremental
    got = await topology.GetFabric(pb.GetFabricRequest(name="fabrics/ft4"))
    assert got.routing_engine == pb.ROUTING_ENGINE_FTREE and got.routing_version == 2
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await topology.ComputeRoutes(pb.ComputeRoutesRequest(name="fabrics/ft4", routing_engine=17))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "routing_engine" in err.value.details()


async def test_a_restarted_service_serves_the_same_fabric_and_routes(tmp_path):
    snapshots = []
    for attempt in range(2):
        async with topology_server(tmp_path / "topology.db") as stub:
            if attempt == 0:
                await stub.CreateFabric(pb.CreateFabricRequest(fabric_id="kept", spec=fat_tree_spec(4)))
            snapshots.append(await stub.GetFabricSnapshot(pb.GetFabricSnapshotRequest(name="fabrics/kept")))
    assert snapshots[0] == snapshots[1]
