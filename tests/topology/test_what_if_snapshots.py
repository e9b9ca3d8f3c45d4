"""What-if snapshots: routes with links DOWN as the fabric's engine recomputes them, nothing stored."""

import asyncio

import grpc
import numpy as np
import pytest
from fabrictwin.v1 import topology_pb2 as pb
from fabrictwin.v1 import topology_pb2_grpc

from services.common.config import ServiceConfig
from services.common.errors import InvalidArgument
from services.common.server import serving
from services.common.snapshot import FabricSnapshot
from services.simulator.peers import SnapshotSource
from services.topology.__main__ import build

EDGE_UPLINK = "pod0-agg0/p1<->pod0-edge0/p3"  # a leaf-spine (edge-aggregation) link of pod 0
POD1_DOWNLINK = "pod1-agg1/p2<->pod1-edge1/p4"  # the link pod1-agg1 uses to reach pod1-edge1


def fat_tree_spec(k):
    return pb.FabricSpec(fat_tree=pb.FatTreeSpec(k=k))


async def create_fat_tree(topology, fabric_id="ft4", k=4, engine=pb.ROUTING_ENGINE_MINHOP):
    await topology.CreateFabric(
        pb.CreateFabricRequest(fabric_id=fabric_id, spec=fat_tree_spec(k), routing_engine=engine)
    )


async def link_index(topology, fabric, display_name):
    return (await topology.GetLink(pb.GetLinkRequest(name=f"{fabric}/links/{display_name}"))).index


async def streamed(topology, name, down_links):
    """(decoded snapshot, chunks) of StreamFabricSnapshot."""
    request = pb.StreamFabricSnapshotRequest(name=name, down_links=down_links)
    parts = [part async for part in topology.StreamFabricSnapshot(request)]
    message = pb.FabricSnapshot.FromString(b"".join(part.data for part in parts))
    return FabricSnapshot.from_proto(message), parts


def every_group(snapshot):
    """{(node, host): channels} of every (node, destination host) pair."""
    nodes = np.repeat(np.arange(snapshot.num_nodes), snapshot.num_hosts)
    hosts = np.tile(np.arange(snapshot.num_hosts), snapshot.num_nodes)
    start, size = snapshot.route_groups(nodes, hosts)
    channels = snapshot.route_channels.tolist()
    return {
        (n, h): channels[a : a + b]
        for n, h, a, b in zip(nodes.tolist(), hosts.tolist(), start.tolist(), size.tolist(), strict=True)
    }


def node(snapshot, name):
    return snapshot.node_names.index(name)


def host(snapshot, name):
    return int(np.flatnonzero(snapshot.host_nodes == node(snapshot, name))[0])


def ecmp_node_paths(snapshot, source_host, destination_host):
    """Every node sequence the equal-cost groups allow between two host indices."""
    target, goal = snapshot.channel_target(), int(snapshot.host_nodes[destination_host])
    paths = []

    def walk(at, sofar):
        assert len(sofar) <= snapshot.num_nodes, "the routes loop"
        if at == goal:
            paths.append([snapshot.node_names[n] for n in sofar])
            return
        for channel in snapshot.next_channels(at, destination_host).tolist():
            walk(int(target[channel]), [*sofar, int(target[channel])])

    start = int(snapshot.host_nodes[source_host])
    walk(start, [start])
    return paths


async def test_a_leaf_spine_link_down_is_routed_around_and_the_stored_fabric_is_unchanged(topology):
    await create_fat_tree(topology)
    link = await link_index(topology, "fabrics/ft4", EDGE_UPLINK)
    before = await topology.GetFabricSnapshot(pb.GetFabricSnapshotRequest(name="fabrics/ft4"))
    what_if, parts = await streamed(topology, "fabrics/ft4", [link])
    assert before.reroute_seconds == 0.0
    assert what_if.reroute_seconds > 0 and {p.reroute_seconds for p in parts} == {what_if.reroute_seconds}
    assert what_if.routing_version == parts[0].routing_version == 1
    assert what_if.link_state[link] == pb.LINK_STATE_DOWN
    groups = every_group(what_if)
    assert not {2 * link, 2 * link + 1} & {c for group in groups.values() for c in group}
    stored_groups = every_group(FabricSnapshot.from_proto(before))
    assert {2 * link, 2 * link + 1} & {c for group in stored_groups.values() for c in group}
    for source in range(what_if.num_hosts):
        for destination in range(what_if.num_hosts):
            if source != destination:
                assert ecmp_node_paths(what_if, source, destination), (source, destination)
    after = await topology.GetFabricSnapshot(pb.GetFabricSnapshotRequest(name="fabrics/ft4"))
    assert after == before
    assert (await topology.GetFabric(pb.GetFabricRequest(name="fabrics/ft4"))).routing_version == 1
    stored_link = await topology.GetLink(pb.GetLinkRequest(name=f"fabrics/ft4/links/{link}"))
    assert stored_link.state == pb.LINK_STATE_UP


@pytest.mark.parametrize(
    "engine", [pb.ROUTING_ENGINE_MINHOP, pb.ROUTING_ENGINE_UPDN, pb.ROUTING_ENGINE_FTREE]
)
async def test_the_what_if_routes_are_the_routes_set_link_state_then_stores(topology, engine):
    await create_fat_tree(topology, engine=engine)
    link = await link_index(topology, "fabrics/ft4", POD1_DOWNLINK)
    what_if = await topology.GetFabricSnapshot(
        pb.GetFabricSnapshotRequest(name="fabrics/ft4", down_links=[link])
    )
    await topology.SetLinkState(
        pb.SetLinkStateRequest(name=f"fabrics/ft4/links/{link}", state=pb.LINK_STATE_DOWN)
    )
    stored = await topology.GetFabricSnapshot(pb.GetFabricSnapshotRequest(name="fabrics/ft4"))
    assert (what_if.routing_version, stored.routing_version) == (1, 2)
    assert what_if.reroute_seconds > 0 and stored.reroute_seconds == 0
    for field in ("link_state", "route_group_ids", "route_group_offsets", "route_group_channels"):
        assert getattr(what_if, field) == getattr(stored, field), field
    assert what_if.route_lft_ports == stored.route_lft_ports


@pytest.mark.parametrize(
    "engine", [pb.ROUTING_ENGINE_MINHOP, pb.ROUTING_ENGINE_UPDN, pb.ROUTING_ENGINE_FTREE]
)
async def test_a_spine_to_leaf_link_down_sends_traffic_down_through_the_other_spine(topology, engine):
    await create_fat_tree(topology, engine=engine)
    link = await link_index(topology, "fabrics/ft4", POD1_DOWNLINK)
    stored, _ = await streamed(topology, "fabrics/ft4", [])
    what_if, _ = await streamed(topology, "fabrics/ft4", [link])
    remote_edge, destination = node(what_if, "pod3-edge0"), host(what_if, "pod1-edge1-h0")
    uplinks = {
        "before": sorted(stored.channel_name(c) for c in stored.next_channels(remote_edge, destination)),
        "after": sorted(what_if.channel_name(c) for c in what_if.next_channels(remote_edge, destination)),
    }
    assert uplinks == {
        "before": ["pod3-edge0->pod3-agg0", "pod3-edge0->pod3-agg1"],
        "after": ["pod3-edge0->pod3-agg0"],  # whose cores reach pod1-agg0, the spine still wired down
    }
    paths = ecmp_node_paths(what_if, host(what_if, "pod3-edge0-h0"), destination)
    assert paths and all(path[-3:] == ["pod1-agg0", "pod1-edge1", "pod1-edge1-h0"] for path in paths)
    neighbour = node(what_if, "pod1-edge0")
    assert [what_if.channel_name(c) for c in what_if.next_channels(neighbour, destination)] == [
        "pod1-edge0->pod1-agg0"
    ]


@pytest.mark.parametrize(
    ("down_links", "field"),
    [([48], "down_links[0]"), ([-1], "down_links[0]"), ([16, 999], "down_links[1]")],
)
async def test_an_unknown_link_is_refused_naming_its_place_in_down_links(topology, down_links, field):
    await create_fat_tree(topology)
    calls = [
        topology.GetFabricSnapshot(pb.GetFabricSnapshotRequest(name="fabrics/ft4", down_links=down_links)),
        streamed(topology, "fabrics/ft4", down_links),
    ]
    for call in calls:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await call
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert err.value.details().startswith(f"{field}: no link {down_links[-1]}")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await streamed(topology, "fabrics/nope", [0])
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


async def test_a_repeated_what_if_is_computed_once_whatever_the_order_of_its_links(topology):
    await create_fat_tree(topology, fabric_id="ft8", k=8)
    first, second, reordered = await asyncio.gather(
        topology.GetFabricSnapshot(pb.GetFabricSnapshotRequest(name="fabrics/ft8", down_links=[130, 140])),
        topology.GetFabricSnapshot(pb.GetFabricSnapshotRequest(name="fabrics/ft8", down_links=[130, 140])),
        topology.GetFabricSnapshot(
            pb.GetFabricSnapshotRequest(name="fabrics/ft8", down_links=[140, 130, 140])
        ),
    )
    later, _ = await streamed(topology, "fabrics/ft8", [140, 130])
    assert first == second == reordered and first.reroute_seconds > 0
    assert later.reroute_seconds == first.reroute_seconds  # measured once, then served from the cache
    other = await topology.GetFabricSnapshot(
        pb.GetFabricSnapshotRequest(name="fabrics/ft8", down_links=[130])
    )
    assert other.reroute_seconds != first.reroute_seconds and other.link_state != first.link_state


async def test_a_fabric_created_again_under_a_deleted_ones_id_gets_its_own_what_if(topology):
    await create_fat_tree(topology, fabric_id="again", k=4)
    old = await topology.GetFabricSnapshot(pb.GetFabricSnapshotRequest(name="fabrics/again", down_links=[20]))
    await topology.DeleteFabric(pb.DeleteFabricRequest(name="fabrics/again"))
    await create_fat_tree(topology, fabric_id="again", k=6)
    new = await topology.GetFabricSnapshot(pb.GetFabricSnapshotRequest(name="fabrics/again", down_links=[20]))
    assert (len(old.node_names), len(new.node_names)) == (36, 99)
    assert new.routing_version == old.routing_version == 1


@pytest.fixture
async def topology_address(tmp_path):
    """The address of a real topology server (as `python -m services.topology` builds it)."""
    config = ServiceConfig(service="topology", port=0, database_url=f"sqlite:///{tmp_path / 'topology.db'}")
    services, cleanup = await build(config)
    async with serving(config, services) as running:
        yield running.address
    await cleanup()


async def test_the_simulators_snapshot_source_fetches_a_what_if_and_its_reroute_time(topology_address):
    async with grpc.aio.insecure_channel(topology_address) as channel:
        await create_fat_tree(topology_pb2_grpc.TopologyServiceStub(channel))
    source = SnapshotSource(topology_address)
    try:
        what_if, seconds = await source.what_if("fabrics/ft4", (17, 16))
        stored = await source.get("fabrics/ft4")
        again, seconds_again = await source.what_if("fabrics/ft4", (16, 17, 16))
        with pytest.raises(InvalidArgument) as err:
            await source.what_if("fabrics/ft4", (16, 4000), field="spec.link_down")
    finally:
        await source.close()
    assert seconds > 0 and seconds == what_if.reroute_seconds and stored.reroute_seconds == 0.0
    assert again is what_if and seconds_again == seconds  # cached by (fabric, routing_version, links)
    assert what_if.routing_version == stored.routing_version == 1
    assert list(what_if.link_state[[16, 17]]) == [pb.LINK_STATE_DOWN] * 2
    assert list(stored.link_state[[16, 17]]) == [pb.LINK_STATE_UP] * 2
    channels = {c for group in every_group(what_if).values() for c in group}
    assert not channels & {32, 33, 34, 35}
    assert err.value.field == "spec.link_down" and "down_links[1]: no link 4000" in err.value.problem


ROUTE_FIELDS = ("link_state", "link_ber", "route_group_ids", "route_group_offsets", "route_group_channels")


@pytest.mark.parametrize(
    "engine", [pb.ROUTING_ENGINE_MINHOP, pb.ROUTING_ENGINE_UPDN, pb.ROUTING_ENGINE_FTREE]
)
async def test_a_repaired_link_is_routed_as_when_it_comes_back_up(topology, engine):
    await create_fat_tree(topology, engine=engine)
    link = await link_index(topology, "fabrics/ft4", POD1_DOWNLINK)
    clean = await topology.GetFabricSnapshot(pb.GetFabricSnapshotRequest(name="fabrics/ft4"))
    await topology.SetLinkState(
        pb.SetLinkStateRequest(name=f"fabrics/ft4/links/{link}", state=pb.LINK_STATE_DOWN)
    )
    repaired = await topology.GetFabricSnapshot(
        pb.GetFabricSnapshotRequest(name="fabrics/ft4", up_links=[link])
    )
    assert repaired.routing_version == 2 and repaired.reroute_seconds > 0
    await topology.SetLinkState(
        pb.SetLinkStateRequest(name=f"fabrics/ft4/links/{link}", state=pb.LINK_STATE_UP)
    )
    back = await topology.GetFabricSnapshot(pb.GetFabricSnapshotRequest(name="fabrics/ft4"))
    for field in ROUTE_FIELDS:
        assert getattr(repaired, field) == getattr(back, field) == getattr(clean, field), field


async def test_a_repaired_degraded_link_loses_its_bit_error_rate(topology):
    await create_fat_tree(topology)
    link = await link_index(topology, "fabrics/ft4", POD1_DOWNLINK)
    await topology.SetLinkState(
        pb.SetLinkStateRequest(
            name=f"fabrics/ft4/links/{link}", state=pb.LINK_STATE_DEGRADED, bit_error_rate=1e-6
        )
    )
    repaired = FabricSnapshot.from_proto(
        await topology.GetFabricSnapshot(pb.GetFabricSnapshotRequest(name="fabrics/ft4", up_links=[link]))
    )
    assert repaired.link_state[link] == pb.LINK_STATE_UP and repaired.link_ber[link] == 0.0


async def test_a_link_both_down_and_repaired_is_refused(topology):
    await create_fat_tree(topology)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await topology.GetFabricSnapshot(
            pb.GetFabricSnapshotRequest(name="fabrics/ft4", down_links=[3, 5], up_links=[5])
        )
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "up_links" in caught.value.details()
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await topology.GetFabricSnapshot(pb.GetFabricSnapshotRequest(name="fabrics/ft4", up_links=[0, 9999]))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "up_links[1]" in caught.value.details()


async def test_a_pinned_routing_version_is_served_after_the_routes_change(topology):
    await create_fat_tree(topology)
    first = await topology.GetFabricSnapshot(pb.GetFabricSnapshotRequest(name="fabrics/ft4"))
    link = await link_index(topology, "fabrics/ft4", POD1_DOWNLINK)
    await topology.SetLinkState(
        pb.SetLinkStateRequest(name=f"fabrics/ft4/links/{link}", state=pb.LINK_STATE_DOWN)
    )
    pinned = await topology.GetFabricSnapshot(
        pb.GetFabricSnapshotRequest(name="fabrics/ft4", routing_version=1)
    )
    current = await topology.GetFabricSnapshot(pb.GetFabricSnapshotRequest(name="fabrics/ft4"))
    assert (pinned.routing_version, current.routing_version) == (1, 2)
    assert pinned == first and current.link_state != first.link_state
    # A what-if on the pinned version starts from its routes: link DOWN there equals version 2.
    what_if = await topology.GetFabricSnapshot(
        pb.GetFabricSnapshotRequest(name="fabrics/ft4", routing_version=1, down_links=[link])
    )
    for field in ("link_state", "route_group_ids", "route_group_offsets", "route_group_channels"):
        assert getattr(what_if, field) == getattr(current, field), field


async def test_a_version_no_longer_held_is_a_failed_precondition_naming_what_is(topology):
    await create_fat_tree(topology)
    link = await link_index(topology, "fabrics/ft4", POD1_DOWNLINK)
    for state in (pb.LINK_STATE_DOWN, pb.LINK_STATE_UP) * 3:  # versions 2..7
        await topology.SetLinkState(pb.SetLinkStateRequest(name=f"fabrics/ft4/links/{link}", state=state))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await topology.GetFabricSnapshot(pb.GetFabricSnapshotRequest(name="fabrics/ft4", routing_version=1))
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "routing version 1" in caught.value.details() and "the current one is 7" in caught.value.details()
    held = await topology.GetFabricSnapshot(
        pb.GetFabricSnapshotRequest(name="fabrics/ft4", routing_version=4)
    )
    assert held.routing_version == 4
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await topology.GetFabricSnapshot(pb.GetFabricSnapshotRequest(name="fabrics/ft4", routing_version=-1))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_another_engines_what_if_is_that_engine_routing_the_fabric_nothing_stored(topology):
    await create_fat_tree(topology, engine=pb.ROUTING_ENGINE_MINHOP)
    link = await link_index(topology, "fabrics/ft4", POD1_DOWNLINK)
    what_if = await topology.GetFabricSnapshot(
        pb.GetFabricSnapshotRequest(
            name="fabrics/ft4", routing_engine=pb.ROUTING_ENGINE_FTREE, down_links=[link]
        )
    )
    assert (await topology.GetFabric(pb.GetFabricRequest(name="fabrics/ft4"))).routing_engine == (
        pb.ROUTING_ENGINE_MINHOP
    )
    await create_fat_tree(topology, fabric_id="ft4-ftree", engine=pb.ROUTING_ENGINE_FTREE)
    await topology.SetLinkState(
        pb.SetLinkStateRequest(name=f"fabrics/ft4-ftree/links/{link}", state=pb.LINK_STATE_DOWN)
    )
    # ftree's tables computed from scratch with the link down: what a fabric routed by ftree and
    # rerouted incrementally does not have to equal, so compare with ftree computing anew.
    await topology.ComputeRoutes(pb.ComputeRoutesRequest(name="fabrics/ft4-ftree"))
    ftree = await topology.GetFabricSnapshot(pb.GetFabricSnapshotRequest(name="fabrics/ft4-ftree"))
    for field in ("link_state", "route_group_ids", "route_group_offsets", "route_group_channels"):
        assert getattr(what_if, field) == getattr(ftree, field), field
    same = await topology.GetFabricSnapshot(
        pb.GetFabricSnapshotRequest(name="fabrics/ft4", routing_engine=pb.ROUTING_ENGINE_MINHOP)
    )
    assert same.reroute_seconds == 0.0  # its own engine: the stored routes
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await topology.GetFabricSnapshot(
            pb.GetFabricSnapshotRequest(name="fabrics/ft4", routing_engine=pb.ROUTING_ENGINE_FILE)
        )
    assert (
        caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "routing_engine" in caught.value.details()
    )
