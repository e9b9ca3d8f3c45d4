import itertools

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.topology.fabric import Fabric, LinkState, NodeKind
from services.topology.generators import fat_tree, leaf_spine
from services.topology.routing import engine_named, list_paths
from services.topology.routing.minhop import MinHop
from services.topology.routing.tables import forwarding_table
from tests.topology.opensm_order import opensm_greedy_lft


def channel_target(fabric: Fabric, channel: int) -> int:
    link, back = divmod(int(channel), 2)
    return int(fabric.link_a[link] if back else fabric.link_b[link])


def assert_every_pair_reaches_without_loops(fabric, routes):
    """Follow every ECMP choice from every node toward every host; each walk must end at the host."""
    for h, dest in enumerate(fabric.host_nodes.tolist()):
        for node in range(fabric.num_nodes):
            stack, seen = [(node, 0)], set()
            while stack:
                current, depth = stack.pop()
                assert depth <= fabric.num_nodes, f"loop toward {fabric.node_names[dest]}"
                if current == dest:
                    continue
                group = routes.group(fabric, current, h).tolist()
                assert group, f"{fabric.node_names[current]} has no route to {fabric.node_names[dest]}"
                for channel in group:
                    nxt = channel_target(fabric, channel)
                    assert fabric.node_kind[nxt] == NodeKind.SWITCH or nxt == dest, (
                        "a host was used as transit"
                    )
                    if (nxt, depth + 1) not in seen:
                        seen.add((nxt, depth + 1))
                        stack.append((nxt, depth + 1))


def test_every_host_pair_of_a_k4_fat_tree_has_a_loop_free_path():
    fabric = fat_tree(4)
    routes = MinHop().compute(fabric)
    assert routes.unreachable_pairs == 0
    assert_every_pair_reaches_without_loops(fabric, routes)


@pytest.mark.parametrize("k", [4, 8])
def test_hosts_in_different_pods_have_half_k_squared_equal_cost_paths(k):
    fabric = fat_tree(k)
    routes = MinHop().compute(fabric)
    src, dst = fabric.node_index("pod0-edge0-h0"), fabric.node_index(f"pod{k - 1}-edge0-h0")
    listing = list_paths(fabric, routes, src, dst, max_paths=10_000)
    assert listing.total_paths == (k // 2) ** 2
    assert len(listing.paths) == (k // 2) ** 2
    assert all(len(path.links) == 6 for path in listing.paths)
    assert len({tuple(path.links) for path in listing.paths}) == (k // 2) ** 2


def test_hosts_on_one_edge_switch_have_a_single_two_hop_path():
    fabric = fat_tree(4)
    routes = MinHop().compute(fabric)
    listing = list_paths(
        fabric, routes, fabric.node_index("pod1-edge0-h0"), fabric.node_index("pod1-edge0-h1")
    )
    assert listing.total_paths == 1
    assert [fabric.node_names[n] for n in listing.paths[0].nodes] == [
        "pod1-edge0-h0",
        "pod1-edge0",
        "pod1-edge0-h1",
    ]


def test_the_first_path_listed_follows_the_lft_choice():
    fabric = fat_tree(4)
    routes = MinHop().compute(fabric)
    src, dst = 0, fabric.num_hosts - 1
    first = list_paths(fabric, routes, src, dst).paths[0]
    assert first.lft
    node, h = src, int(fabric.node_host[dst])
    for link in first.links:
        channel = int(routes.group(fabric, node, h)[0])
        assert channel // 2 == link
        node = channel_target(fabric, channel)
    assert node == dst


def test_lft_spreads_destinations_evenly_over_edge_uplinks_of_a_k8_fat_tree():
    fabric = fat_tree(8)
    routes = MinHop().compute(fabric)
    for name in ("pod0-edge0", "pod5-edge3", "pod2-agg1"):
        table = forwarding_table(fabric, routes, fabric.node_index(name))
        up_ports = table.lft_ports[table.lft_ports > 4]
        counts = np.bincount(up_ports)[5:]
        assert counts.size == 4
        assert counts.max() - counts.min() <= 1, (name, counts)


def test_ecmp_groups_list_every_uplink_with_the_lft_choice_first():
    fabric = fat_tree(4)
    routes = MinHop().compute(fabric)
    table = forwarding_table(fabric, routes, fabric.node_index("pod0-edge0"))
    remote = table.hosts >= 4
    for e in np.flatnonzero(remote).tolist():
        ports = table.ecmp_ports(e).tolist()
        assert sorted(ports) == [3, 4]
        assert ports[0] == table.lft_ports[e]


def test_down_links_are_routed_around_and_overlapping_groups_still_balance():
    fabric = fat_tree(4)
    fabric.link_state[fabric.link_index("pod0-agg0/p1<->pod0-edge0/p3")] = LinkState.DOWN
    fabric.link_state[fabric.link_index("core-0/p2<->pod1-agg0/p3")] = LinkState.DOWN
    routes = MinHop().compute(fabric)
    assert routes.unreachable_pairs == 0
    assert_every_pair_reaches_without_loops(fabric, routes)
    table = forwarding_table(fabric, routes, fabric.node_index("pod0-edge0"))
    assert set(table.lft_ports[table.hosts >= 2].tolist()) == {4}


def test_a_host_with_its_only_link_down_is_unreachable():
    fabric = leaf_spine(2, 2, 2)
    fabric.link_state[0] = LinkState.DOWN  # leaf-0 <-> host-0
    routes = MinHop().compute(fabric)
    assert routes.unreachable_pairs == 2 * (fabric.num_hosts - 1)
    assert routes.group(fabric, fabric.node_index("host-3"), 0).size == 0


@pytest.mark.parametrize(
    "down",
    [[], ["pod0-agg0/p1<->pod0-edge0/p3"], ["core-0/p2<->pod1-agg0/p3", "pod2-agg1/p2<->pod2-edge1/p4"]],
)
def test_the_lft_is_opensm_greedy_balancing_with_or_without_failures(down):
    fabric = fat_tree(6)
    for name in down:
        fabric.link_state[fabric.link_index(name)] = LinkState.DOWN
    routes = MinHop().compute(fabric)
    for node in np.flatnonzero(fabric.node_kind == NodeKind.SWITCH).tolist():
        np.testing.assert_array_equal(routes.lft_ports(node), opensm_greedy_lft(fabric, routes, node))


@settings(max_examples=200, deadline=None)
@given(counts=st.lists(st.integers(0, 6), min_size=1, max_size=6), m=st.integers(0, 30))
def test_water_filling_gives_what_the_greedy_gives_destination_by_destination(counts, m):
    from services.topology.routing.balance import water_fill

    state, expected = list(counts), []
    for _ in range(m):
        pick = min(range(len(state)), key=lambda p: (state[p], p))
        expected.append(pick)
        state[pick] += 1
    assert water_fill(np.array(counts), m).tolist() == expected


def test_unknown_engines_are_refused_naming_the_field():
    from services.common.errors import InvalidArgument

    with pytest.raises(InvalidArgument) as err:
        engine_named("lash")
    assert err.value.field == "routing_engine" and "lash" in str(err.value)
    with pytest.raises(InvalidArgument) as err:
        engine_named("file")
    assert err.value.field == "lfts_dump"


small_fabrics = st.one_of(
    st.builds(lambda k: fat_tree(k), st.sampled_from([2, 4, 6])),
    st.builds(
        lambda leaves, spines, hosts, par: leaf_spine(leaves, spines, hosts, parallel_links=par),
        st.integers(1, 4),
        st.integers(1, 3),
        st.integers(1, 3),
        st.integers(1, 2),
    ),
)


@settings(max_examples=30, deadline=None)
@given(fabric=small_fabrics, data=st.data())
def test_routes_are_loop_free_and_minimal_even_with_links_down(fabric, data):
    down = data.draw(st.sets(st.integers(0, fabric.num_links - 1), max_size=3))
    fabric.link_state[list(down)] = LinkState.DOWN
    routes = MinHop().compute(fabric)
    graph = nx.MultiGraph()
    graph.add_nodes_from(range(fabric.num_nodes))
    up = fabric.link_state != LinkState.DOWN
    graph.add_edges_from(zip(fabric.link_a[up].tolist(), fabric.link_b[up].tolist(), strict=True))
    hosts = fabric.host_nodes.tolist()
    reachable = 0
    for src, dst in itertools.permutations(hosts, 2):
        listing = list_paths(fabric, routes, src, dst, max_paths=50)
        if listing.total_paths == 0:
            assert not nx.has_path(graph, src, dst)
            continue
        reachable += 1
        lengths = {len(p.nodes) for p in listing.paths}
        assert lengths == {nx.shortest_path_length(graph, src, dst) + 1}, "paths must be shortest"
        for path in listing.paths:
            assert len(set(path.nodes)) == len(path.nodes), "a path visits a node twice"
            assert all(fabric.link_state[link] != LinkState.DOWN for link in path.links)
    assert reachable + routes.unreachable_pairs == len(hosts) * (len(hosts) - 1)


def test_taking_a_link_down_changes_only_the_tables_that_used_it():
    from services.topology.routing import diff_routes

    healthy = fat_tree(4)
    before = MinHop().compute(healthy)
    broken = fat_tree(4)
    broken.link_state[broken.link_index("core-0/p1<->pod0-agg0/p3")] = LinkState.DOWN
    after = MinHop().compute(broken)
    switches = np.flatnonzero(healthy.node_kind == NodeKind.SWITCH)
    assert diff_routes(healthy, before, healthy, before) == (0, 0)
    entries, changed_switches = diff_routes(healthy, before, broken, after)
    assert 0 < changed_switches < switches.size
    assert 0 < entries < switches.size * healthy.num_hosts


def group_sizes(fabric, routes):
    """[N, H] number of equal-cost channels per (node, destination host)."""
    nodes = np.repeat(np.arange(fabric.num_nodes), fabric.num_hosts)
    hosts = np.tile(np.arange(fabric.num_hosts), fabric.num_nodes)
    _, size = routes.lookup(fabric).groups(nodes, hosts)
    return size.reshape(fabric.num_nodes, fabric.num_hosts)


def test_a_k16_fat_tree_has_the_textbook_group_sizes_and_no_more_groups_than_it_needs():
    fabric = fat_tree(16)
    routes = MinHop().compute(fabric)
    sizes = group_sizes(fabric, routes)
    # Distinct groups: one up-group per edge, one up-group plus one per edge below per aggregation,
    # one per pod per core; classes are the 128 edge switches, not the 1,024 hosts.
    assert routes.table.group_ids.shape == (320, 128)
    assert routes.table.compacted().group_offsets.shape[0] - 1 == 128 + 128 * 9 + 64 * 16
    pod_of_host = fabric.node_group[fabric.host_nodes]
    edge_of_host = np.arange(fabric.num_hosts) // 8
    hosts = fabric.host_nodes
    assert (sizes[hosts, np.arange(hosts.size)] == 0).all()
    assert (sizes[hosts].sum(axis=1) == hosts.size - 1).all()
    edge = fabric.node_index("pod9-edge5")
    assert (sizes[edge] == np.where(edge_of_host == 9 * 8 + 5, 1, 8)).all()
    agg = fabric.node_index("pod15-agg7")
    assert (sizes[agg] == np.where(pod_of_host == 15, 1, 8)).all()
    assert (sizes[fabric.node_index("core-63")] == 1).all()
