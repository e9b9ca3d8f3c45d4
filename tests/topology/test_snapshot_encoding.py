import collections

import numpy as np
import pytest
from fabrictwin.v1 import topology_pb2

from services.common.snapshot import ROUTE_ENCODING_COMPACT, FabricSnapshot
from services.topology.cabling import assemble
from services.topology.fabric import LinkState, NodeKind
from services.topology.generators import fat_tree, leaf_spine
from services.topology.lfts_dump import write_lfts_dump
from services.topology.routing import engine_named
from services.topology.snapshots import build_snapshot, route_and_snapshot
from services.topology.superpod import superpod


def dual_homed():
    """Four hosts each cabled to both leaves (ports 1-4 of each), two spines, one cable doubled."""
    hosts, leaves, spines = [0, 1, 2, 3], [4, 5], [6, 7]
    a, pa, b, pb = [], [], [], []
    for h in hosts:
        for i, leaf in enumerate(leaves):
            a, pa, b, pb = [*a, leaf], [*pa, h + 1], [*b, h], [*pb, i + 1]
    for i, leaf in enumerate(leaves):
        for j, spine in enumerate(spines):
            a, pa, b, pb = [*a, spine], [*pa, i + 1], [*b, leaf], [*pb, 5 + j]
    a, pa, b, pb = [*a, 6], [*pa, 3], [*b, 4], [*pb, 7]  # a second cable leaf-0 <-> spine-0
    return assemble(
        tier=np.array([0, 0, 0, 0, 1, 1, 2, 2]),
        names=["h0", "h1", "h2", "h3", "leaf-0", "leaf-1", "spine-0", "spine-1"],
        radix=np.array([2, 2, 2, 2, 7, 7, 3, 3]),
        group=np.full(8, -1),
        host_ip=np.arange(1, 5),
        links=tuple(np.array(x) for x in (a, pa, b, pb)),
        link_rate_bps=np.full(len(a), 400_000_000_000),
        latency_ns=500,
    )


def shortest_next_channels(fabric):
    """{(node, host): set of channels one hop closer}, hosts never transit, by plain BFS per host."""
    usable = fabric.link_state != LinkState.DOWN
    out_channels = collections.defaultdict(list)
    for link in np.flatnonzero(usable).tolist():
        a, b = int(fabric.link_a[link]), int(fabric.link_b[link])
        out_channels[a].append((2 * link, b))
        out_channels[b].append((2 * link + 1, a))
    is_host = fabric.node_kind == NodeKind.HOST
    groups = {}
    for h, goal in enumerate(fabric.host_nodes.tolist()):
        distance, frontier = {goal: 0}, [goal]
        while frontier:
            nxt = []
            for node in frontier:
                for _, peer in out_channels[node]:
                    joins = peer not in distance and (not is_host[peer] or not is_host[node])
                    if joins and (not is_host[node] or node == goal):
                        distance[peer] = distance[node] + 1
                        nxt.append(peer)
            frontier = [n for n in nxt if not is_host[n]]
        for node in range(fabric.num_nodes):
            if node == goal or node not in distance:
                continue
            groups[node, h] = {
                channel
                for channel, peer in out_channels[node]
                if peer in distance
                and distance[peer] == distance[node] - 1
                and (not is_host[peer] or peer == goal)
            }
    return groups


def decoded(fabric, routes):
    message = build_snapshot(fabric, routes, "fabrics/x", 3).to_proto()
    return FabricSnapshot.from_proto(topology_pb2.FabricSnapshot.FromString(message.SerializeToString()))


@pytest.mark.parametrize(
    "fabric",
    [
        fat_tree(4),
        leaf_spine(3, 2, 2, parallel_links=2),
        dual_homed(),
        superpod(1, nodes_per_su=4, gpus_per_node=2),
    ],
)
def test_the_compact_snapshot_gives_every_node_its_shortest_next_channels_lft_first(fabric):
    routes = engine_named("minhop").compute(fabric)
    snapshot = decoded(fabric, routes)
    assert snapshot.route_encoding == ROUTE_ENCODING_COMPACT
    expected = shortest_next_channels(fabric)
    nodes = np.repeat(np.arange(fabric.num_nodes), fabric.num_hosts)
    hosts = np.tile(np.arange(fabric.num_hosts), fabric.num_nodes)
    start, size = snapshot.route_groups(nodes, hosts)
    lft = snapshot.lft_channels(nodes, hosts)
    for node, host, a, n, first in zip(
        nodes.tolist(), hosts.tolist(), start.tolist(), size.tolist(), lft.tolist(), strict=True
    ):
        group = snapshot.route_channels[a : a + n].tolist()
        assert set(group) == expected.get((node, host), set()), (fabric.node_names[node], host)
        assert len(group) == len(set(group))
        if group:
            assert first == group[0] == routes.group(fabric, node, host)[0]
            row = routes.table.node_row[node]
            if row >= 0:  # the first channel leaves by the LFT port
                assert fabric.channel_port()[first] == routes.table.lft_ports[row, host]
        else:
            assert first == -1


def test_a_multi_homed_host_has_a_row_and_uses_only_the_uplink_toward_its_destination():
    fabric = dual_homed()
    fabric.link_state[fabric.link_index("leaf-1/p3<->h2/p2")] = LinkState.DOWN
    routes = engine_named("minhop").compute(fabric)
    assert (routes.table.node_row[:4] >= 0).all()
    snapshot = decoded(fabric, routes)
    # h0 toward h2 (cabled now to leaf-0 only): straight through leaf-0.
    assert [fabric.node_names[fabric.link_a[c // 2]] for c in snapshot.next_channels(0, 2)] == ["leaf-0"]
    assert routes.unreachable_pairs == 0


def test_file_engine_snapshots_carry_lft_only_groups():
    fabric = fat_tree(4)
    text = write_lfts_dump(fabric, engine_named("minhop").compute(fabric).lft_ports)
    routes = engine_named("file", lfts_dump=text).compute(fabric)
    snapshot = decoded(fabric, routes)
    nodes = np.repeat(np.arange(fabric.num_nodes), fabric.num_hosts)
    hosts = np.tile(np.arange(fabric.num_hosts), fabric.num_nodes)
    _, size = snapshot.route_groups(nodes, hosts)
    assert set(size.tolist()) == {0, 1}
    assert (size[nodes != fabric.host_nodes[hosts]] == 1).all()


def test_a_k32_fat_tree_snapshot_fits_well_under_the_64_mb_message_limit():
    fabric = fat_tree(32)
    message = route_and_snapshot(fabric).to_proto()
    size = message.ByteSize()
    assert size < 24 * 1024 * 1024, f"{size / 2**20:.1f} MiB"
    table = message.route_lft_ports
    assert table.dtype == "|u1" and list(table.shape) == [1280, 8192]


def test_the_simulators_csr_snapshots_still_read_the_same_way():
    fabric = leaf_spine(2, 2, 2)
    compact = route_and_snapshot(fabric)
    nodes = np.repeat(np.arange(fabric.num_nodes), fabric.num_hosts)
    hosts = np.tile(np.arange(fabric.num_hosts), fabric.num_nodes)
    start, size = compact.route_groups(nodes, hosts)
    groups = [compact.route_channels[a : a + n] for a, n in zip(start.tolist(), size.tolist(), strict=True)]
    offsets = np.concatenate([[0], np.cumsum(size)])
    csr = FabricSnapshot(
        **{
            name: getattr(compact, name)
            for name in (
                "fabric",
                "routing_version",
                "node_kind",
                "node_tier",
                "node_names",
                "host_nodes",
                "host_ip",
            )
        },
        host_rail=compact.host_rail,
        link_a=compact.link_a,
        link_b=compact.link_b,
        link_rate_bps=compact.link_rate_bps,
        link_latency_ns=compact.link_latency_ns,
        link_state=compact.link_state,
        link_ber=compact.link_ber,
        link_names=compact.link_names,
        route_offsets=offsets,
        route_next_channels=np.concatenate(groups).astype(np.int32),
    )
    again = FabricSnapshot.from_proto(
        topology_pb2.FabricSnapshot.FromString(csr.to_proto().SerializeToString())
    )
    assert again.route_encoding == 1
    np.testing.assert_array_equal(again.lft_channels(nodes, hosts), compact.lft_channels(nodes, hosts))
    for node, host in [(0, 3), (4, 1), (5, 0)]:
        np.testing.assert_array_equal(again.next_channels(node, host), compact.next_channels(node, host))
