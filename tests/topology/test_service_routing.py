"""How the topology service routes, through its API: the engine OpenSM would use and why, updn's roots
(found or given), and link changes rerouted as a running subnet manager does, kept across a restart."""

from __future__ import annotations

import grpc
import pytest
from fabrictwin.v1 import topology_pb2 as pb

from services.common.snapshot import FabricSnapshot
from services.topology.formats import export_fabric
from tests.real_like import cluster_like

from .conftest import topology_server

K8_EDGE_UPLINK = "pod0-agg0/p1<->pod0-edge0/p5"


def fat_tree_spec(k):
    return pb.FabricSpec(fat_tree=pb.FatTreeSpec(k=k))


async def guid_of(topology, fabric, node):
    nodes = await topology.ListNodes(pb.ListNodesRequest(parent=f"fabrics/{fabric}", page_size=10_000))
    return next(n.guid for n in nodes.nodes if n.display_name == node)


async def test_a_fabric_opensm_refuses_as_a_fat_tree_is_routed_by_minhop_and_says_why(topology):
    fabric = await topology.ImportFabric(
        pb.ImportFabricRequest(
            fabric_id="grown",
            format=pb.TOPOLOGY_FORMAT_JSON,
            content=export_fabric(cluster_like(1), "json"),
            routing_engine=pb.ROUTING_ENGINE_FTREE,
        )
    )
    assert fabric.routing_engine == pb.ROUTING_ENGINE_FTREE and fabric.engine_used == pb.ROUTING_ENGINE_MINHOP
    assert "ERR AB26" in fabric.fallback_reason
    assert "while FatTree leaf rank is" in fabric.fallback_reason
    assert (await topology.GetFabric(pb.GetFabricRequest(name="fabrics/grown"))) == fabric  # kept
    summary = await topology.ComputeRoutes(pb.ComputeRoutesRequest(name="fabrics/grown"))
    assert (
        summary.engine_used == pb.ROUTING_ENGINE_MINHOP and summary.fallback_reason == fabric.fallback_reason
    )
    assert summary.reroute == pb.REROUTE_MODE_FULL


async def test_updn_roots_are_detected_or_given_by_guid_and_reported(topology):
    created = await topology.CreateFabric(
        pb.CreateFabricRequest(fabric_id="ft", spec=fat_tree_spec(4), routing_engine=pb.ROUTING_ENGINE_UPDN)
    )
    assert created.root_selection == pb.ROOT_SELECTION_DETECTED and len(created.roots_used) == 4
    core = await guid_of(topology, "ft", "core-0")
    assert f"{core:#018x}" in created.roots_used
    summary = await topology.ComputeRoutes(
        pb.ComputeRoutesRequest(name="fabrics/ft", routing_roots=[f"{core:#x}"])
    )
    assert summary.roots == ["fabrics/ft/nodes/core-0"] and summary.root_selection == pb.ROOT_SELECTION_GIVEN
    assert summary.changed_lft_entries > 0 and summary.routing_version == 2
    got = await topology.GetFabric(pb.GetFabricRequest(name="fabrics/ft"))
    assert list(got.routing_roots) == [f"{core:#018x}"] and list(got.roots_used) == [f"{core:#018x}"]
    back = await topology.ComputeRoutes(pb.ComputeRoutesRequest(name="fabrics/ft", detect_roots=True))
    assert back.root_selection == pb.ROOT_SELECTION_DETECTED and len(back.roots) == 4
    assert not (await topology.GetFabric(pb.GetFabricRequest(name="fabrics/ft"))).routing_roots


@pytest.mark.parametrize(
    ("roots", "engine", "field", "says"),
    [
        (["0x1234"], pb.ROUTING_ENGINE_UPDN, "routing_roots[0]", "no node of this fabric has GUID"),
        (["pod0-edge0"], pb.ROUTING_ENGINE_UPDN, "routing_roots[0]", "is no GUID"),
        (["HOST"], pb.ROUTING_ENGINE_UPDN, "routing_roots[0]", "a CA, not a switch"),
        (["CORE"], pb.ROUTING_ENGINE_MINHOP, "routing_roots", "only updn and ftree take root switches"),
        (["CORE", "CORE"], pb.ROUTING_ENGINE_UPDN, "routing_roots[1]", "given twice"),
    ],
)
async def test_bad_roots_are_refused_naming_the_field_and_nothing_is_stored(
    topology, roots, engine, field, says
):
    await topology.CreateFabric(pb.CreateFabricRequest(fabric_id="probe", spec=fat_tree_spec(4)))
    names = {
        "CORE": await guid_of(topology, "probe", "core-0"),
        "HOST": await guid_of(topology, "probe", "pod0-edge0-h0"),
    }
    given = [f"{names[r]:#x}" if r in names else r for r in roots]
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await topology.CreateFabric(
            pb.CreateFabricRequest(
                fabric_id="bad", spec=fat_tree_spec(4), routing_engine=engine, routing_roots=given
            )
        )
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in err.value.details() and says in err.value.details(), err.value.details()
    with pytest.raises(grpc.aio.AioRpcError) as missing:
        await topology.GetFabric(pb.GetFabricRequest(name="fabrics/bad"))
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND


async def test_a_link_down_moves_only_the_entries_a_running_opensm_moves_and_a_restart_keeps_them(tmp_path):
    tables = []
    for attempt in range(2):
        async with topology_server(tmp_path / "topology.db") as stub:
            if attempt == 0:
                await stub.CreateFabric(pb.CreateFabricRequest(fabric_id="k8", spec=fat_tree_spec(8)))
                reply = await stub.SetLinkState(
                    pb.SetLinkStateRequest(
                        name=f"fabrics/k8/links/{K8_EDGE_UPLINK}", state=pb.LINK_STATE_DOWN
                    )
                )
                routing = reply.routing
                assert routing.reroute == pb.REROUTE_MODE_INCREMENTAL
                assert routing.changed_lft_entries == 66  # OpenSM 3.3.23, running, on ibsim: 66
                assert sum(s.lft_entries for s in routing.changed_per_switch) == 66
                assert routing.changed_lft_switches == len(routing.changed_per_switch) == 33
                assert routing.changed_switches == 40  # 7 more changed their equal-cost sets alone
                counts = [s.lft_entries for s in routing.changed_per_switch]
                assert counts == sorted(counts, reverse=True)
            table = await stub.GetForwardingTable(
                pb.GetForwardingTableRequest(name="fabrics/k8/nodes/pod0-edge0")
            )
            snapshot = await stub.GetFabricSnapshot(pb.GetFabricSnapshotRequest(name="fabrics/k8"))
            tables.append((table, snapshot))
    assert tables[0] == tables[1]  # the kept entries came back from the database, not a fresh routing


async def test_in_fresh_mode_a_link_down_recomputes_every_table_as_a_new_subnet_manager_would(topology):
    await topology.CreateFabric(
        pb.CreateFabricRequest(fabric_id="k8", spec=fat_tree_spec(8), reroute=pb.REROUTE_MODE_FRESH)
    )
    assert (await topology.GetFabric(pb.GetFabricRequest(name="fabrics/k8"))).reroute == pb.REROUTE_MODE_FRESH
    reply = await topology.SetLinkState(
        pb.SetLinkStateRequest(name=f"fabrics/k8/links/{K8_EDGE_UPLINK}", state=pb.LINK_STATE_DOWN)
    )
    assert reply.routing.reroute == pb.REROUTE_MODE_FRESH and reply.routing.changed_lft_entries == 281
    await topology.ComputeRoutes(
        pb.ComputeRoutesRequest(name="fabrics/k8", reroute=pb.REROUTE_MODE_INCREMENTAL)
    )
    up = await topology.SetLinkState(
        pb.SetLinkStateRequest(name=f"fabrics/k8/links/{K8_EDGE_UPLINK}", state=pb.LINK_STATE_UP)
    )
    assert up.routing.reroute == pb.REROUTE_MODE_INCREMENTAL  # a cable coming up: OpenSM routes afresh


async def test_a_what_if_failure_reroutes_as_the_fabric_does(topology):
    await topology.CreateFabric(pb.CreateFabricRequest(fabric_id="k8", spec=fat_tree_spec(8)))
    link = (await topology.GetLink(pb.GetLinkRequest(name=f"fabrics/k8/links/{K8_EDGE_UPLINK}"))).index
    what_if = await topology.GetFabricSnapshot(
        pb.GetFabricSnapshotRequest(name="fabrics/k8", down_links=[link])
    )
    before = await topology.GetFabricSnapshot(pb.GetFabricSnapshotRequest(name="fabrics/k8"))
    lfts = [FabricSnapshot.from_proto(s).route_table.lft_ports for s in (what_if, before)]
    assert int((lfts[0] != lfts[1]).sum()) == 66
