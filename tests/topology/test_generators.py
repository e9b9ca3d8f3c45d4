import numpy as np
import pytest

from services.common.errors import InvalidArgument
from services.topology.fabric import LinkState, NodeKind, format_ipv4
from services.topology.generators import fat_tree, leaf_spine
from services.topology.specs import from_spec, normalise_spec


@pytest.mark.parametrize("k", [2, 4, 8])
def test_fat_tree_has_the_textbook_counts(k):
    fabric = fat_tree(k)
    assert fabric.num_hosts == k**3 // 4
    assert fabric.num_switches == 5 * k * k // 4
    assert fabric.num_links == 3 * k**3 // 4
    assert np.bincount(fabric.node_tier, minlength=4).tolist() == [
        k**3 // 4,
        k * k // 2,
        k * k // 2,
        k * k // 4,
    ]
    fabric.validate()


def test_fat_tree_switches_use_every_one_of_their_k_ports():
    fabric = fat_tree(8)
    ends = np.concatenate([fabric.link_a, fabric.link_b])
    ports_used = np.bincount(ends, minlength=fabric.num_nodes)
    switches = fabric.node_kind == NodeKind.SWITCH
    assert (ports_used[switches] == 8).all()
    assert (ports_used[~switches] == 1).all()


def test_fat_tree_aggregation_j_reaches_cores_j_times_half_k_onwards():
    fabric = fat_tree(4)
    agg = fabric.node_index("pod3-agg1")
    cores = sorted(
        fabric.node_names[a] for a, b in zip(fabric.link_a, fabric.link_b, strict=True) if b == agg
    )
    assert cores == ["core-2", "core-3"]


def test_fat_tree_names_ports_and_addresses_are_readable():
    fabric = fat_tree(4)
    host = fabric.node_index("pod2-edge1-h0")
    assert format_ipv4(fabric.node_ip[host]) == "10.2.1.1"
    assert fabric.node_group[host] == 2
    assert fabric.node_lid.tolist() == list(range(1, fabric.num_nodes + 1))
    assert "pod0-agg0/p1<->pod0-edge0/p3" in fabric.link_names
    assert (fabric.link_state == LinkState.UP).all()


def test_leaf_spine_counts_with_parallel_links():
    fabric = leaf_spine(6, 3, 4, parallel_links=2)
    assert (fabric.num_hosts, fabric.num_switches, fabric.num_links) == (24, 9, 24 + 6 * 3 * 2)
    assert fabric.node_radix[fabric.node_index("leaf-0")] == 4 + 3 * 2
    assert "spine-2/p12<->leaf-5/p10" in fabric.link_names
    fabric.validate()


def test_host_links_can_be_slower_than_fabric_links():
    fabric = leaf_spine(2, 2, 2, link_speed_gbps=800, host_link_speed_gbps=400)
    host_links = fabric.node_kind[fabric.link_b] == NodeKind.HOST
    assert set(fabric.link_rate_bps[host_links].tolist()) == {400_000_000_000}
    assert set(fabric.link_rate_bps[~host_links].tolist()) == {800_000_000_000}


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: fat_tree(5), "k"),
        (lambda: fat_tree(0), "k"),
        (lambda: leaf_spine(2, 2, 0), "hosts_per_leaf"),
        (lambda: leaf_spine(-1, 2, 2), "leaves"),
        (lambda: leaf_spine(2, 2, 2, link_speed_gbps=0), "link_speed_gbps"),
        (lambda: fat_tree(128), "k"),
    ],
)
def test_bad_generator_arguments_name_the_parameter(call, field):
    with pytest.raises(InvalidArgument) as err:
        call()
    assert err.value.field == field


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"fat_tree": {"k": 3}}, "spec.fat_tree.k"),
        ({"fat_tree": {}}, "spec.fat_tree.k"),
        ({"leaf_spine": {"leaves": 2, "spines": 2}}, "spec.leaf_spine.hosts_per_leaf"),
        (
            {"leaf_spine": {"leaves": 2, "spines": 2, "hosts_per_leaf": 1}, "link_speed_gbps": -1},
            "spec.link_speed_gbps",
        ),
        ({}, "spec"),
        ({"fat_tree": {"k": 4}, "leaf_spine": {}}, "spec"),
        ({"superpod": {"scalable_units": 0}}, "spec.superpod.scalable_units"),
        ({"superpod": {"scalable_units": 2, "gpus_per_node": 300}}, "spec.superpod.gpus_per_node"),
        ({"leaf_spine": {"leaves": 2, "spines": 0, "hosts_per_leaf": 1}}, "spec.leaf_spine.spines"),
        ({"fat_tree": {"k": 0}}, "spec.fat_tree.k"),
        ({"fat_tree": {"k": 4, "m": 1}}, "spec.fat_tree.m"),
    ],
)
def test_bad_specs_name_the_field(spec, field):
    with pytest.raises(InvalidArgument) as err:
        from_spec(spec)
    assert err.value.field == field


def test_spec_defaults_fill_in_like_proto3_zero_values():
    spec = normalise_spec(
        {"leaf_spine": {"leaves": 2, "spines": 1, "hosts_per_leaf": 1}, "link_latency_ns": "0"}
    )
    assert spec["link_speed_gbps"] == 400.0
    assert spec["link_latency_ns"] == 500
    assert spec["host_link_speed_gbps"] == 400.0
    assert spec["leaf_spine"]["parallel_links"] == 1


def test_from_spec_builds_what_the_function_builds():
    made = from_spec({"fat_tree": {"k": 4}, "link_latency_ns": "700"})
    assert made.link_names == fat_tree(4).link_names
    assert set(made.link_latency_ns.tolist()) == {700}


def test_leaf_spine_spec_gives_parallel_links_and_oversubscribed_host_links():
    # 8 hosts of 400 Gb/s per leaf over 2 spines x 2 cables of 200 Gb/s: 4:1 oversubscribed.
    made = from_spec(
        {
            "leaf_spine": {"leaves": 3, "spines": 2, "hosts_per_leaf": 8, "parallel_links": 2},
            "link_speed_gbps": 200,
            "host_link_speed_gbps": 400,
            "link_latency_ns": "250",
        }
    )
    assert (made.num_hosts, made.num_switches, made.num_links) == (24, 5, 24 + 3 * 2 * 2)
    leaf = made.node_index("leaf-0")
    up = (made.link_b == leaf) & (made.node_kind[made.link_a] == NodeKind.SWITCH)
    down = made.link_a == leaf
    oversubscription = made.link_rate_bps[down].sum() / made.link_rate_bps[up].sum()
    assert oversubscription == 4.0
    assert set(made.link_latency_ns.tolist()) == {250}
