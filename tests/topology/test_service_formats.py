import json

import grpc
import pytest
from fabrictwin.v1 import topology_pb2 as pb

from tests.topology.formats.shared_data import read_shared


def fat_tree_spec(k):
    return pb.FabricSpec(fat_tree=pb.FatTreeSpec(k=k))


async def test_lfts_exported_by_one_fabric_route_another_identically_with_the_file_engine(topology):
    await topology.CreateFabric(pb.CreateFabricRequest(fabric_id="a", spec=fat_tree_spec(4)))
    await topology.CreateFabric(pb.CreateFabricRequest(fabric_id="b", spec=fat_tree_spec(4)))
    dump = (
        await topology.ExportFabric(
            pb.ExportFabricRequest(name="fabrics/a", format=pb.TOPOLOGY_FORMAT_OPENSM_LFTS)
        )
    ).content
    assert dump.startswith("Unicast lids [0-36] of switch Lid 17 guid 0xfab0000000001100 ('pod0-edge0'):")
    summary = await topology.ComputeRoutes(
        pb.ComputeRoutesRequest(name="fabrics/b", routing_engine=pb.ROUTING_ENGINE_FILE, lfts_dump=dump)
    )
    assert summary.routing_engine == pb.ROUTING_ENGINE_FILE and summary.routing_version == 2
    assert summary.changed_entries > 0  # the ECMP groups shrank to the LFT port alone
    for switch in ("pod0-edge0", "pod2-agg1", "core-3"):
        tables = [
            await topology.GetForwardingTable(
                pb.GetForwardingTableRequest(name=f"fabrics/{f}/nodes/{switch}")
            )
            for f in ("a", "b")
        ]
        assert [e.port for e in tables[0].entries] == [e.port for e in tables[1].entries]
        assert all(list(e.ecmp_ports) == [e.port] for e in tables[1].entries)
    again = (
        await topology.ExportFabric(
            pb.ExportFabricRequest(name="fabrics/b", format=pb.TOPOLOGY_FORMAT_OPENSM_LFTS)
        )
    ).content
    assert again == dump
    # A link failure under the file engine does not reroute; the routes through it are lost.
    reply = await topology.SetLinkState(
        pb.SetLinkStateRequest(name="fabrics/b/links/16", state=pb.LINK_STATE_DOWN)
    )
    assert reply.routing.unreachable_pairs > 0 and reply.routing.routing_engine == pb.ROUTING_ENGINE_FILE


@pytest.mark.parametrize(
    ("request_", "mentions"),
    [
        (pb.ComputeRoutesRequest(name="fabrics/ft4", routing_engine=pb.ROUTING_ENGINE_FILE), "lfts_dump"),
        (
            pb.ComputeRoutesRequest(
                name="fabrics/ft4", routing_engine=pb.ROUTING_ENGINE_FILE, lfts_dump="garbage\n"
            ),
            "lfts_dump line 1",
        ),
        (
            pb.ComputeRoutesRequest(
                name="fabrics/ft4", routing_engine=pb.ROUTING_ENGINE_MINHOP, lfts_dump="x"
            ),
            "lfts_dump",
        ),
    ],
)
async def test_the_file_engine_refuses_a_missing_or_broken_dump_and_keeps_the_old_routes(
    topology, request_, mentions
):
    await topology.CreateFabric(pb.CreateFabricRequest(fabric_id="ft4", spec=fat_tree_spec(4)))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await topology.ComputeRoutes(request_)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and mentions in err.value.details()
    got = await topology.GetFabric(pb.GetFabricRequest(name="fabrics/ft4"))
    assert (got.routing_engine, got.routing_version) == (pb.ROUTING_ENGINE_MINHOP, 1)


async def test_a_superpod_is_created_with_its_rails_and_routed(topology):
    created = await topology.CreateFabric(
        pb.CreateFabricRequest(
            fabric_id="pod", spec=pb.FabricSpec(superpod=pb.SuperPodSpec(scalable_units=4))
        )
    )
    assert (created.host_count, created.switch_count, created.link_count) == (1024, 48, 2048)
    assert created.spec.superpod.nodes_per_su == 32 and created.spec.superpod.gpus_per_node == 8
    hosts = await topology.ListNodes(
        pb.ListNodesRequest(parent="fabrics/pod", kind=pb.NODE_KIND_HOST, page_size=9)
    )
    assert [n.rail for n in hosts.nodes] == [0, 1, 2, 3, 4, 5, 6, 7, 0]
    summary = await topology.ComputeRoutes(pb.ComputeRoutesRequest(name="fabrics/pod"))
    assert summary.unreachable_pairs == 0


async def test_a_fabric_exported_as_json_imports_as_the_same_fabric(topology):
    await topology.CreateFabric(pb.CreateFabricRequest(fabric_id="src", spec=fat_tree_spec(4)))
    text = (
        await topology.ExportFabric(
            pb.ExportFabricRequest(name="fabrics/src", format=pb.TOPOLOGY_FORMAT_JSON)
        )
    ).content
    json.loads(text)
    imported = await topology.ImportFabric(
        pb.ImportFabricRequest(
            fabric_id="copy",
            format=pb.TOPOLOGY_FORMAT_JSON,
            content=text,
            routing_engine=pb.ROUTING_ENGINE_UPDN,
        )
    )
    assert (
        imported.imported_format == pb.TOPOLOGY_FORMAT_JSON
        and imported.routing_engine == pb.ROUTING_ENGINE_UPDN
    )
    assert (imported.host_count, imported.switch_count, imported.link_count) == (16, 20, 48)
    snapshots = [
        await topology.GetFabricSnapshot(pb.GetFabricSnapshotRequest(name=f"fabrics/{f}"))
        for f in ("src", "copy")
    ]
    assert snapshots[0].link_names == snapshots[1].link_names
    node_link = await topology.ExportFabric(
        pb.ExportFabricRequest(name="fabrics/copy", format=pb.TOPOLOGY_FORMAT_NODE_LINK_JSON)
    )
    assert len(json.loads(node_link.content)["nodes"]) == 36


async def test_a_real_ibnetdiscover_dump_with_two_port_hcas_imports_and_routes(topology):
    text = read_shared("ibsim/net.2sw2path4hca2port")
    imported = await topology.ImportFabric(
        pb.ImportFabricRequest(fabric_id="ib", format=pb.TOPOLOGY_FORMAT_IBNETDISCOVER, content=text)
    )
    assert (imported.host_count, imported.switch_count, imported.link_count) == (2, 2, 6)
    summary = await topology.ComputeRoutes(pb.ComputeRoutesRequest(name="fabrics/ib"))
    assert summary.unreachable_pairs == 0
    hosts = await topology.ListNodes(pb.ListNodesRequest(parent="fabrics/ib", kind=pb.NODE_KIND_HOST))
    paths = await topology.ListPaths(
        pb.ListPathsRequest(parent="fabrics/ib", source=hosts.nodes[0].name, destination=hosts.nodes[1].name)
    )
    assert paths.total_paths >= 1


@pytest.mark.parametrize(
    ("request_", "mentions"),
    [
        (pb.ImportFabricRequest(format=pb.TOPOLOGY_FORMAT_OPENSM_LFTS, content="x"), "format"),
        (pb.ImportFabricRequest(format=pb.TOPOLOGY_FORMAT_NODE_LINK_JSON, content="{}"), "format"),
        (pb.ImportFabricRequest(content="x"), "format"),
        (pb.ImportFabricRequest(format=pb.TOPOLOGY_FORMAT_NS3_HPCC, content="3 1 2\n2\n0 2 fast\n"), "line"),
        (
            pb.ImportFabricRequest(format=pb.TOPOLOGY_FORMAT_JSON, content="{}", routing_engine=77),
            "routing_engine",
        ),
    ],
)
async def test_bad_imports_are_invalid_argument_and_store_nothing(topology, request_, mentions):
    request_.fabric_id = "bad"
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await topology.ImportFabric(request_)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and mentions in err.value.details()
    assert not (await topology.ListFabrics(pb.ListFabricsRequest())).fabrics


async def test_exporting_needs_a_format(topology):
    await topology.CreateFabric(pb.CreateFabricRequest(fabric_id="ft2", spec=fat_tree_spec(2)))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await topology.ExportFabric(pb.ExportFabricRequest(name="fabrics/ft2"))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "format" in err.value.details()


async def test_the_man_page_dump_is_refused_naming_both_ends_unless_the_slower_end_is_asked_for(tmp_path):
    from fabrictwin.v1 import topology_pb2, topology_pb2_grpc

    from services.common.config import ServiceConfig
    from services.common.server import serving
    from services.topology.__main__ import build

    dump = read_shared("ibnetdiscover/ibtopotool-1.topo")
    config = ServiceConfig(service="topology", port=0, database_url=f"sqlite:///{tmp_path / 't.db'}")
    services, cleanup = await build(config)
    async with serving(config, services) as running, grpc.aio.insecure_channel(running.address) as channel:
        stub = topology_pb2_grpc.TopologyServiceStub(channel)
        request = topology_pb2.ImportFabricRequest(
            fabric_id="manpage", format=topology_pb2.TOPOLOGY_FORMAT_IBNETDISCOVER, content=dump
        )
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.ImportFabric(request)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "line 15" in refused.value.details() and "line 26" in refused.value.details()
        with pytest.raises(grpc.aio.AioRpcError):
            await stub.GetFabric(topology_pb2.GetFabricRequest(name="fabrics/manpage"))  # nothing stored
        request.take_slower_end_on_speed_mismatch = True
        fabric = await stub.ImportFabric(request)
        assert fabric.link_count > 0
    await cleanup()
