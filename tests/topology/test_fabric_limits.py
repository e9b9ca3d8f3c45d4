"""Admission control of fabrics: a fabric beyond the service's limits (nodes, links, ports per switch,
labels' total size) is refused with RESOURCE_EXHAUSTED naming the estimate and the limit, before
anything is built, allocated or stored."""

from __future__ import annotations

import json
import time

import grpc
import pytest
from fabrictwin.v1 import topology_pb2 as pb

from services.common.config import load_config
from services.topology.__main__ import extra_flags
from services.topology.limits import DEFAULT_LIMITS, MAX_PORT, FabricLimits

from .conftest import SMALL_LIMITS


def leaf_spine(leaves=2, spines=1, hosts_per_leaf=1, parallel_links=1):
    spec = pb.LeafSpineSpec(
        leaves=leaves, spines=spines, hosts_per_leaf=hosts_per_leaf, parallel_links=parallel_links
    )
    return pb.CreateFabricRequest(spec=pb.FabricSpec(leaf_spine=spec))


async def _refused(call) -> str:
    started = time.perf_counter()
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await call
    assert failed.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, failed.value.details()
    assert time.perf_counter() - started < 2, "refused only after trying to build it"
    return failed.value.details()


async def _nothing_stored(topology) -> bool:
    return not (await topology.ListFabrics(pb.ListFabricsRequest())).fabrics


async def test_a_leaf_spine_with_a_million_parallel_links_is_refused_before_it_is_built(topology):
    # Measured before: the client timed out at 60 s while the server went to 6 GB and stored 4 M links.
    details = await _refused(topology.CreateFabric(leaf_spine(parallel_links=1_000_000)))
    assert "2,000,002 links" in details and f"{DEFAULT_LIMITS.max_links:,}" in details
    assert await _nothing_stored(topology)


async def test_parameters_whose_product_overflows_are_refused_as_too_large_not_internal(topology):
    # 2^31-1 parallel links once asked numpy for 32 GiB (INTERNAL after 47 s).
    details = await _refused(topology.CreateFabric(leaf_spine(parallel_links=2**31 - 1)))
    assert "4,294,967,296 links" in details


async def test_a_switch_with_more_ports_than_a_forwarding_table_can_name_is_refused(topology):
    # Spines of a 2-leaf fabric with 40,000 cables to each leaf would need 80,000 ports; LFT ports are 16-bit.
    details = await _refused(topology.CreateFabric(leaf_spine(parallel_links=40_000)))
    assert "80,000 ports" in details and f"{MAX_PORT:,}" in details


async def test_a_fabric_with_more_nodes_than_the_configured_limit_is_refused(small_topology):
    details = await _refused(small_topology.CreateFabric(leaf_spine(leaves=10, spines=2, hosts_per_leaf=4)))
    assert "52 nodes" in details and "at most 40 nodes" in details
    assert await _nothing_stored(small_topology)


async def test_a_fabric_within_the_configured_limits_is_built(small_topology):
    created = await small_topology.CreateFabric(leaf_spine(leaves=4, spines=2, hosts_per_leaf=4))
    assert (created.host_count, created.switch_count, created.link_count) == (16, 6, 24)


async def test_an_ns3_header_asking_for_a_billion_nodes_is_refused_before_anything_is_allocated(topology):
    # Measured before: a 7.45 GiB allocation, then INTERNAL.
    text = "1000000000 1 1\n0\n0 1 100Gbps 1us 0\n"
    details = await _refused(
        topology.ImportFabric(pb.ImportFabricRequest(format=pb.TOPOLOGY_FORMAT_NS3_HPCC, content=text))
    )
    assert details.startswith("line 1:") and "1,000,000,000 nodes" in details
    assert f"{DEFAULT_LIMITS.max_nodes:,}" in details


async def test_an_ns3_header_declaring_more_links_than_the_limit_is_refused_before_the_links_are_read(
    small_topology,
):
    text = "3 1 100\n2\n" + "0 2 100Gbps 1us 0\n" * 100
    details = await _refused(
        small_topology.ImportFabric(pb.ImportFabricRequest(format=pb.TOPOLOGY_FORMAT_NS3_HPCC, content=text))
    )
    assert details.startswith("line 1:") and "100 links" in details and "at most 60 links" in details


async def test_an_ns3_node_with_more_links_than_a_switch_has_ports_is_refused(topology):
    links = MAX_PORT + 5
    text = f"{links + 1} 1 {links}\n0\n" + "".join(f"0 {i} 1Gbps 1us 0\n" for i in range(1, links + 1))
    details = await _refused(
        topology.ImportFabric(pb.ImportFabricRequest(format=pb.TOPOLOGY_FORMAT_NS3_HPCC, content=text))
    )
    assert f"{links:,} ports" in details and "switch-0" in details


async def test_a_json_document_with_more_nodes_or_links_than_the_limit_is_refused(small_topology):
    nodes = [{"name": "s", "kind": "SWITCH"}] + [{"name": f"h{i}", "kind": "HOST"} for i in range(50)]
    document = {"nodes": nodes, "links": []}
    details = await _refused(
        small_topology.ImportFabric(
            pb.ImportFabricRequest(format=pb.TOPOLOGY_FORMAT_JSON, content=json.dumps(document))
        )
    )
    assert "51 nodes" in details and "at most 40 nodes" in details
    links = [{"a": "s", "a_port": i + 1, "b": f"h{i % 30}", "b_port": 1 + i // 30} for i in range(90)]
    document = {"nodes": nodes[:31], "links": links}
    details = await _refused(
        small_topology.ImportFabric(
            pb.ImportFabricRequest(format=pb.TOPOLOGY_FORMAT_JSON, content=json.dumps(document))
        )
    )
    assert "90 links" in details and "at most 60 links" in details


async def test_an_ibnetdiscover_dump_with_more_nodes_than_the_limit_is_refused(small_topology):
    dump = "".join(f'Ca 1 "H-{i:016x}" # "h{i}"\n' for i in range(1, 60))
    details = await _refused(
        small_topology.ImportFabric(
            pb.ImportFabricRequest(format=pb.TOPOLOGY_FORMAT_IBNETDISCOVER, content=dump)
        )
    )
    assert "at most 40 nodes" in details


async def test_labels_beyond_the_size_limit_are_refused_on_create_and_on_update(topology, small_topology):
    huge = {"owner": "x" * 10_000_000}
    request = leaf_spine()
    request.labels.update(huge)
    details = await _refused(topology.CreateFabric(request))
    assert "10,000,005 bytes" in details and f"{DEFAULT_LIMITS.max_label_bytes:,}" in details
    assert await _nothing_stored(topology)

    await small_topology.CreateFabric(pb.CreateFabricRequest(fabric_id="ls", spec=leaf_spine().spec))
    update = pb.UpdateFabricRequest(
        fabric=pb.Fabric(name="fabrics/ls", labels={f"k{i}": "v" * 10 for i in range(10)})
    )
    update.update_mask.paths.append("labels")
    details = await _refused(small_topology.UpdateFabric(update))
    assert "at most 100 bytes" in details
    assert not (await small_topology.GetFabric(pb.GetFabricRequest(name="fabrics/ls"))).labels


def test_limits_come_from_flags_and_environment_variables():
    config = load_config(
        "topology",
        ["--max-fabric-links", "1000"],
        env={"FABRICTWIN_MAX_FABRIC_NODES": "500"},
        extra_flags=extra_flags,
    )
    limits = FabricLimits.from_config(config.extra)
    assert (limits.max_nodes, limits.max_links, limits.max_label_bytes) == (
        500,
        1000,
        DEFAULT_LIMITS.max_label_bytes,
    )
    assert FabricLimits.from_config(SMALL_LIMITS).max_nodes == 40


@pytest.mark.parametrize(
    ("argv", "problem"),
    [(["--max-fabric-links", "0"], "must be positive"), (["--max-fabric-ports", "70000"], "65535")],
)
def test_limits_that_cannot_work_are_refused_at_start_up_naming_the_flag(argv, problem):
    config = load_config("topology", argv, env={}, extra_flags=extra_flags)
    with pytest.raises(ValueError, match=problem) as failed:
        FabricLimits.from_config(config.extra)
    assert argv[0] in str(failed.value)
