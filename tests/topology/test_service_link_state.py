import asyncio

import grpc
import pytest
from fabrictwin.v1 import topology_pb2 as pb
from google.protobuf import field_mask_pb2

from .conftest import topology_server

EDGE_UPLINK = "pod0-agg0/p1<->pod0-edge0/p3"


def fat_tree_spec(k):
    return pb.FabricSpec(fat_tree=pb.FatTreeSpec(k=k))


async def start_watching(topology, name):
    """A WatchFabric call whose subscription is live (the server sends headers once it is)."""
    call = topology.WatchFabric(pb.WatchFabricRequest(name=name))
    await call.initial_metadata()
    return call


async def test_a_failed_link_is_routed_around_and_watchers_see_it_then_the_reroute(topology):
    await topology.CreateFabric(pb.CreateFabricRequest(fabric_id="ft4", spec=fat_tree_spec(4)))
    watch = await start_watching(topology, "fabrics/ft4")
    reply = await topology.SetLinkState(
        pb.SetLinkStateRequest(name=f"fabrics/ft4/links/{EDGE_UPLINK}", state=pb.LINK_STATE_DOWN)
    )
    assert reply.link.state == pb.LINK_STATE_DOWN and reply.link.display_name == EDGE_UPLINK
    routing = reply.routing
    assert routing.incremental and routing.routing_version == 2 and routing.compute_ns > 0
    assert routing.changed_entries > 0 and routing.changed_switches > 0 and routing.unreachable_pairs == 0
    first, second = await watch.read(), await watch.read()
    assert first.kind == pb.FABRIC_EVENT_KIND_LINK_STATE_CHANGED and first.link.state == pb.LINK_STATE_DOWN
    assert second.kind == pb.FABRIC_EVENT_KIND_ROUTES_CHANGED and second.routing == routing
    assert first.fabric == second.fabric == "fabrics/ft4" and first.time.seconds > 0
    watch.cancel()
    paths = await topology.ListPaths(
        pb.ListPathsRequest(parent="fabrics/ft4", source="pod0-edge0-h0", destination="pod3-edge1-h1")
    )
    assert paths.total_paths == 2  # half of the four equal-cost paths went through the failed uplink
    assert all(reply.link.index not in p.links for p in paths.paths)
    table = await topology.GetForwardingTable(
        pb.GetForwardingTableRequest(name="fabrics/ft4/nodes/pod0-edge0")
    )
    assert all(3 not in entry.ecmp_ports for entry in table.entries)
    got = await topology.GetFabric(pb.GetFabricRequest(name="fabrics/ft4"))
    assert got.routing_version == 2


async def test_up_restores_the_tables_and_degraded_keeps_routing_but_changes_the_snapshot(topology):
    await topology.CreateFabric(pb.CreateFabricRequest(fabric_id="ft4", spec=fat_tree_spec(4)))
    name = f"fabrics/ft4/links/{EDGE_UPLINK}"
    before = await topology.GetFabricSnapshot(pb.GetFabricSnapshotRequest(name="fabrics/ft4"))
    down = await topology.SetLinkState(pb.SetLinkStateRequest(name=name, state=pb.LINK_STATE_DOWN))
    up = await topology.SetLinkState(pb.SetLinkStateRequest(name=name, state=pb.LINK_STATE_UP))
    assert up.routing.changed_entries == down.routing.changed_entries and up.routing.routing_version == 3
    after = await topology.GetFabricSnapshot(pb.GetFabricSnapshotRequest(name="fabrics/ft4"))
    assert after.route_lft_ports == before.route_lft_ports
    degraded = await topology.SetLinkState(
        pb.SetLinkStateRequest(name=name, state=pb.LINK_STATE_DEGRADED, bit_error_rate=1e-6)
    )
    assert degraded.link.bit_error_rate == 1e-6 and degraded.routing.changed_entries == 0
    assert degraded.routing.routing_version == 4  # the snapshot's link states changed
    again = await topology.SetLinkState(
        pb.SetLinkStateRequest(name=name, state=pb.LINK_STATE_DEGRADED, bit_error_rate=1e-6)
    )
    assert again.routing.routing_version == 4  # nothing changed, nothing bumped


@pytest.mark.parametrize(
    ("request_", "code", "mentions"),
    [
        (pb.SetLinkStateRequest(name="fabrics/ft4/links/spine-9/p99", state=1), "NOT_FOUND", "spine-9/p99"),
        (pb.SetLinkStateRequest(name="fabrics/ft4/links/4000", state=2), "NOT_FOUND", "4000"),
        (pb.SetLinkStateRequest(name="fabrics/ft4/links/3"), "INVALID_ARGUMENT", "state"),
        (pb.SetLinkStateRequest(name="fabrics/ft4/links/3", state=3), "INVALID_ARGUMENT", "bit_error_rate"),
        (
            pb.SetLinkStateRequest(name="fabrics/ft4/links/3", state=2, bit_error_rate=0.1),
            "INVALID_ARGUMENT",
            "bit_error_rate",
        ),
        (pb.SetLinkStateRequest(name="fabrics/nope/links/3", state=2), "NOT_FOUND", "nope"),
        (pb.SetLinkStateRequest(name="fabrics/ft4", state=2), "INVALID_ARGUMENT", "name"),
    ],
)
async def test_bad_link_state_requests_name_what_is_wrong_and_change_nothing(
    topology, request_, code, mentions
):
    await topology.CreateFabric(pb.CreateFabricRequest(fabric_id="ft4", spec=fat_tree_spec(4)))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await topology.SetLinkState(request_)
    assert err.value.code().name == code and mentions in err.value.details()
    assert (await topology.GetFabric(pb.GetFabricRequest(name="fabrics/ft4"))).routing_version == 1


async def test_deleting_a_fabric_ends_its_watch_streams_and_unknown_fabrics_cannot_be_watched(topology):
    await topology.CreateFabric(pb.CreateFabricRequest(fabric_id="gone", spec=fat_tree_spec(2)))
    watch = await start_watching(topology, "fabrics/gone")
    await topology.DeleteFabric(pb.DeleteFabricRequest(name="fabrics/gone"))
    events = [event async for event in watch]
    assert [e.kind for e in events] == [pb.FABRIC_EVENT_KIND_FABRIC_DELETED]
    with pytest.raises(grpc.aio.AioRpcError) as err:
        async for _ in topology.WatchFabric(pb.WatchFabricRequest(name="fabrics/gone")):
            pass
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


async def test_every_watcher_gets_every_event(topology):
    await topology.CreateFabric(
        pb.CreateFabricRequest(
            fabric_id="ls",
            spec=pb.FabricSpec(leaf_spine=pb.LeafSpineSpec(leaves=2, spines=2, hosts_per_leaf=2)),
        )
    )
    watches = [await start_watching(topology, "fabrics/ls") for _ in range(3)]
    await topology.SetLinkState(pb.SetLinkStateRequest(name="fabrics/ls/links/5", state=pb.LINK_STATE_DOWN))
    for watch in watches:
        kinds = [(await asyncio.wait_for(watch.read(), 10)).kind for _ in range(2)]
        assert kinds == [pb.FABRIC_EVENT_KIND_LINK_STATE_CHANGED, pb.FABRIC_EVENT_KIND_ROUTES_CHANGED]
        watch.cancel()


async def test_update_changes_only_the_masked_fields_and_a_new_engine_reroutes(topology):
    await topology.CreateFabric(
        pb.CreateFabricRequest(fabric_id="ft4", display_name="old", spec=fat_tree_spec(4), labels={"a": "1"})
    )
    watch = await start_watching(topology, "fabrics/ft4")
    updated = await topology.UpdateFabric(
        pb.UpdateFabricRequest(
            fabric=pb.Fabric(
                name="fabrics/ft4",
                display_name="new",
                labels={"b": "2"},
                routing_engine=pb.ROUTING_ENGINE_UPDN,
            ),
            update_mask=field_mask_pb2.FieldMask(paths=["display_name", "routing_engine"]),
        )
    )
    assert (updated.display_name, dict(updated.labels)) == ("new", {"a": "1"})
    assert updated.routing_engine == pb.ROUTING_ENGINE_UPDN and updated.routing_version == 2
    assert (await watch.read()).kind == pb.FABRIC_EVENT_KIND_ROUTES_CHANGED
    watch.cancel()
    labelled = await topology.UpdateFabric(
        pb.UpdateFabricRequest(
            fabric=pb.Fabric(name="fabrics/ft4", labels={"b": "2"}),
            update_mask=field_mask_pb2.FieldMask(paths=["labels"]),
        )
    )
    assert (
        dict(labelled.labels) == {"b": "2"}
        and labelled.display_name == "new"
        and labelled.routing_version == 2
    )


@pytest.mark.parametrize(
    ("fabric", "paths", "mentions"),
    [
        (pb.Fabric(name="fabrics/ft4"), [], "update_mask"),
        (pb.Fabric(name="fabrics/ft4"), ["host_count"], "update_mask"),
        (pb.Fabric(name="fabrics/ft4"), ["routing_engine"], "fabric.routing_engine"),
        (
            pb.Fabric(name="fabrics/ft4", routing_engine=pb.ROUTING_ENGINE_FILE),
            ["routing_engine"],
            "fabric.routing_engine",
        ),
        (pb.Fabric(name="fabrics/ft4", display_name="x" * 300), ["display_name"], "fabric.display_name"),
        (pb.Fabric(name="ft4"), ["labels"], "fabric.name"),
    ],
)
async def test_bad_updates_are_invalid_argument_naming_the_field(topology, fabric, paths, mentions):
    await topology.CreateFabric(pb.CreateFabricRequest(fabric_id="ft4", spec=fat_tree_spec(4)))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await topology.UpdateFabric(
            pb.UpdateFabricRequest(fabric=fabric, update_mask=field_mask_pb2.FieldMask(paths=paths))
        )
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and mentions in err.value.details()


async def test_a_new_registry_on_the_same_database_has_the_link_states_versions_and_routes(tmp_path):
    seen = []
    for attempt in range(2):
        async with topology_server(tmp_path / "topology.db") as stub:
            if attempt == 0:
                await stub.CreateFabric(pb.CreateFabricRequest(fabric_id="kept", spec=fat_tree_spec(4)))
                await stub.SetLinkState(
                    pb.SetLinkStateRequest(name=f"fabrics/kept/links/{EDGE_UPLINK}", state=2)
                )
                await stub.SetLinkState(
                    pb.SetLinkStateRequest(name="fabrics/kept/links/40", state=3, bit_error_rate=1e-7)
                )
            snapshot = await stub.GetFabricSnapshot(pb.GetFabricSnapshotRequest(name="fabrics/kept"))
            link = await stub.GetLink(pb.GetLinkRequest(name="fabrics/kept/links/40"))
            seen.append((snapshot, link))
    (before, link_before), (after, link_after) = seen
    assert after.routing_version == 3 and link_after == link_before
    assert link_after.state == pb.LINK_STATE_DEGRADED and link_after.bit_error_rate == 1e-7
    assert after == before  # the incremental reroute's tables equal the restarted service's full routing
