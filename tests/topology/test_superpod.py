import numpy as np
import pytest

from services.common.errors import InvalidArgument
from services.topology.fabric import NodeKind, format_ipv4
from services.topology.routing import engine_named
from services.topology.specs import from_spec
from services.topology.superpod import superpod

# The B200 SuperPOD table (NVIDIA DGX SuperPOD B200 reference architecture, domain.md):
# SU -> nodes, GPUs, leaf, spine, core switches; every tier has as many cables as GPUs.
B200_TABLE = [
    (2, 64, 512, 16, 8, 0),
    (4, 128, 1024, 32, 16, 0),
    (8, 256, 2048, 64, 32, 0),
    (16, 512, 4096, 128, 128, 64),
    (32, 1024, 8192, 256, 256, 128),
    (64, 2048, 16384, 512, 512, 256),
]


@pytest.mark.parametrize(("units", "nodes", "gpus", "leaves", "spines", "cores"), B200_TABLE)
def test_superpod_matches_the_b200_table(units, nodes, gpus, leaves, spines, cores):
    fabric = superpod(units)
    fabric.validate()
    tiers = np.bincount(fabric.node_tier, minlength=4).tolist()
    assert tiers == [gpus, leaves, spines, cores]
    assert fabric.num_hosts == gpus == nodes * 8
    tier_of_cable = fabric.node_tier[fabric.link_a]  # the upper end is on the a side
    assert np.bincount(tier_of_cable, minlength=4)[1:].tolist() == [gpus, gpus, gpus if cores else 0]
    assert set(fabric.link_rate_bps.tolist()) == {400_000_000_000}


def test_every_switch_uses_all_64_ports_half_down_half_up():
    fabric = superpod(16)
    ends = np.concatenate([fabric.link_a, fabric.link_b])
    used = np.bincount(ends, minlength=fabric.num_nodes)
    switches = fabric.node_kind == NodeKind.SWITCH
    assert (used[switches] == 64).all() and (fabric.node_radix[switches] == 64).all()
    leaf = fabric.node_index("su3-rail5")
    up = fabric.link_b == leaf
    assert (fabric.link_port_b[up] > 32).all() and up.sum() == 32


def test_each_gpu_nic_is_a_host_on_its_rail_leaf():
    fabric = superpod(4)
    host = fabric.node_index("su2-dgx07-gpu3")
    assert fabric.node_kind[host] == NodeKind.HOST
    assert fabric.node_rail[host] == 3 and fabric.node_group[host] == 2
    assert format_ipv4(fabric.node_ip[host]) == "10.2.7.4"
    (link,) = np.flatnonzero(fabric.link_b == host)
    assert fabric.node_names[fabric.link_a[link]] == "su2-rail3"
    assert fabric.link_port_a[link] == 8  # node 7 of the SU on port 8
    rails = fabric.node_rail[fabric.host_nodes]
    leaves = fabric.link_a[: fabric.num_hosts]
    assert all(len(set(rails[leaves == leaf].tolist())) == 1 for leaf in np.unique(leaves).tolist())


def test_same_rail_traffic_between_scalable_units_turns_at_a_spine_from_16_su():
    fabric = superpod(16)
    routes = engine_named("minhop").compute(fabric)
    src, dst = fabric.node_index("su0-dgx00-gpu2"), fabric.node_index("su9-dgx31-gpu2")
    from services.topology.routing import list_paths

    listing = list_paths(fabric, routes, src, dst, max_paths=1)
    names = [fabric.node_names[n] for n in listing.paths[0].nodes]
    assert names[2].startswith("rail2-spine") and len(names) == 5
    other = list_paths(fabric, routes, src, fabric.node_index("su9-dgx31-gpu5"), max_paths=1)
    assert any(fabric.node_names[n].startswith("core-") for n in other.paths[0].nodes)


@pytest.mark.parametrize("units", [1, 3, 16])
def test_every_host_pair_of_a_superpod_is_routed(units):
    fabric = superpod(units, nodes_per_su=8, gpus_per_node=4)
    for engine in ("minhop", "updn", "ftree"):
        assert engine_named(engine).compute(fabric).unreachable_pairs == 0, engine


def test_superpod_spec_uses_the_defaults_and_the_link_parameters():
    fabric = from_spec({"superpod": {"scalable_units": 2}, "link_speed_gbps": 800, "link_latency_ns": "300"})
    assert fabric.num_hosts == 2 * 32 * 8
    assert set(fabric.link_rate_bps.tolist()) == {800_000_000_000}
    assert set(fabric.link_latency_ns.tolist()) == {300}


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: superpod(0), "scalable_units"),
        (lambda: superpod(2, nodes_per_su=0), "nodes_per_su"),
        (lambda: superpod(2, gpus_per_node=-1), "gpus_per_node"),
        (lambda: superpod(2, link_speed_gbps=0), "link_speed_gbps"),
        (lambda: superpod(300), "scalable_units"),
    ],
)
def test_bad_superpod_parameters_name_the_parameter(call, field):
    with pytest.raises(InvalidArgument) as err:
        call()
    assert err.value.field == field
