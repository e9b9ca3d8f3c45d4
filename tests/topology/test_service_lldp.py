"""ImportFabric with LLDP documents through a real topology server: stored, named, refused whole."""

from __future__ import annotations

import json

import grpc
import pytest
from fabrictwin.v1 import topology_pb2 as pb

from services.topology.formats.lldp import neighbour_documents
from services.topology.generators import leaf_spine


def lldp_request(fabric_id, documents, **kwargs):
    request = pb.ImportFabricRequest(fabric_id=fabric_id, format=pb.TOPOLOGY_FORMAT_LLDP, **kwargs)
    request.documents.extend(pb.TopologyDocument(name=n, content=c) for n, c in documents)
    return request


async def test_lldp_import_keeps_interface_names_and_notes_and_routes_ecmp_over_both_spines(topology):
    documents = neighbour_documents(leaf_spine(2, 2, 2))
    documents = [(n, json.dumps({"lldp": {}}) if n == "host-3.json" else c) for n, c in documents]
    fabric = await topology.ImportFabric(
        lldp_request("lab", documents, port_speeds_gbps={"leaf-0/swp3": 0.1}, default_link_speed_gbps=10)
    )
    assert fabric.imported_format == pb.TOPOLOGY_FORMAT_LLDP
    assert (fabric.host_count, fabric.switch_count, fabric.link_count) == (4, 4, 8)
    assert list(fabric.import_notes) == [
        "one-sided link leaf-1:swp2 <-> host-3:eth0: only document 'leaf-1.json' lists it"
    ]
    again = await topology.GetFabric(pb.GetFabricRequest(name="fabrics/lab"))
    assert list(again.import_notes) == list(fabric.import_notes)
    links = (await topology.ListLinks(pb.ListLinksRequest(parent="fabrics/lab"))).links
    by_name = {link.display_name: link for link in links}
    uplink = by_name["spine-0/p1<->leaf-0/p3"]
    assert (uplink.port_name_a, uplink.port_name_b, uplink.speed_gbps) == ("swp1", "swp3", 0.1)
    assert by_name["leaf-0/p1<->host-0/p1"].port_name_b == "eth0"
    paths = await topology.ListPaths(
        pb.ListPathsRequest(parent="fabrics/lab", source="host-0", destination="host-2")
    )
    spines = {node.rsplit("/", 1)[-1] for path in paths.paths for node in path.nodes if "spine" in node}
    assert spines == {"spine-0", "spine-1"}


async def test_bad_lldp_documents_are_refused_and_nothing_is_stored(topology):
    documents = neighbour_documents(leaf_spine(1, 1, 1))
    documents.append(("leaf-0.json", documents[0][1]))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await topology.ImportFabric(lldp_request("bad", documents))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "describes node 'leaf-0', as does document 'leaf-0.json'" in caught.value.details()
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await topology.GetFabric(pb.GetFabricRequest(name="fabrics/bad"))
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await topology.ImportFabric(pb.ImportFabricRequest(fabric_id="x", format=pb.TOPOLOGY_FORMAT_LLDP))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "lldp takes one of documents or archive, got neither" in caught.value.details()
