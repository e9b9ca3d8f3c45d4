"""An error about a dump quotes at most ~200 characters of it: a 10 MB line gives a short INVALID_ARGUMENT
naming the line (measured before: a 10 MB status message the client could not receive, so it saw
RESOURCE_EXHAUSTED about metadata size, and a 10 MB server log line)."""

from __future__ import annotations

import json
import logging

import grpc
import pytest
from fabrictwin.v1 import topology_pb2 as pb

MEGA = 10_000_000
LONG = "x" * MEGA

GOOD_IB = (
    'Switch 8 "S-0000000000000001" # "leaf" enhanced port 0 lid 1 lmc 0\n'
    '[1] "H-0000000000000002"[1](3) # "a" lid 2 4xNDR\n\n'
    'Ca 1 "H-0000000000000002" # "a"\n'
    '[1](3) "S-0000000000000001"[1] # lid 2 lmc 0 "leaf" lid 1 4xNDR\n'
)


def _document(port: str = "swp1") -> str:
    neighbour = {
        "chassis": {"h0": {"id": {"type": "mac", "value": "x"}}},
        "port": {"id": {"type": "ifname", "value": port}},
    }
    return json.dumps({"lldp": {"interface": {"swp1": neighbour}}})


CASES = {
    "ibnetdiscover garbage line": (pb.TOPOLOGY_FORMAT_IBNETDISCOVER, GOOD_IB + LONG + "\n", "line 6"),
    "ibnetdiscover port line tail": (
        pb.TOPOLOGY_FORMAT_IBNETDISCOVER,
        GOOD_IB.replace("# lid 2 lmc 0", "# " + LONG),
        "line 5",
    ),
    "ibnetdiscover long description": (
        pb.TOPOLOGY_FORMAT_IBNETDISCOVER,
        GOOD_IB.replace('# "a"\n[1](3)', f'# "{LONG}"\n[1](3)'),
        "line 4",
    ),
    "ibnetdiscover unknown long peer": (
        pb.TOPOLOGY_FORMAT_IBNETDISCOVER,
        GOOD_IB.replace('"H-0000000000000002"[1](3) #', f'"{LONG}"[1](3) #'),
        "line 2",
    ),
    "ns3 long rate": (pb.TOPOLOGY_FORMAT_NS3_HPCC, f"2 1 1\n0\n0 1 {'9' * MEGA}Gbps 1us 0\n", "line 3"),
    "ns3 long header": (pb.TOPOLOGY_FORMAT_NS3_HPCC, f"2 1 {LONG}\n0\n", "line 1"),
    "ns3 long link line": (pb.TOPOLOGY_FORMAT_NS3_HPCC, f"2 1 1\n0\n0 1 {LONG}\n", "line 3"),
    "json long kind": (
        pb.TOPOLOGY_FORMAT_JSON,
        json.dumps({"nodes": [{"name": "s", "kind": LONG}]}),
        "nodes[0].kind",
    ),
    "json long node name": (
        pb.TOPOLOGY_FORMAT_JSON,
        json.dumps({"nodes": [{"name": LONG, "kind": "SWITCH"}]}),
        "nodes[0].name",
    ),
    "json long unknown key": (
        pb.TOPOLOGY_FORMAT_JSON,
        json.dumps({"nodes": [{"name": "s", "kind": "SWITCH", LONG: 1}]}),
        "nodes[0]",
    ),
    "json long link end": (
        pb.TOPOLOGY_FORMAT_JSON,
        json.dumps(
            {
                "nodes": [{"name": "s", "kind": "SWITCH"}],
                "links": [{"a": LONG, "a_port": 1, "b": "s", "b_port": 2}],
            }
        ),
        "links[0].a",
    ),
}


@pytest.mark.parametrize(("format", "content", "where"), CASES.values(), ids=CASES.keys())
async def test_an_import_with_a_ten_megabyte_line_answers_a_short_invalid_argument_naming_the_line(
    topology, caplog, format, content, where
):
    with caplog.at_level(logging.INFO), pytest.raises(grpc.aio.AioRpcError) as failed:
        await topology.ImportFabric(pb.ImportFabricRequest(format=format, content=content))
    details = failed.value.details()
    assert failed.value.code() == grpc.StatusCode.INVALID_ARGUMENT, details[:300]
    assert details.startswith(where), details[:300]
    assert len(details) < 700, details[:300]
    assert all(len(record.getMessage()) + len(str(record.__dict__)) < 20_000 for record in caplog.records)


async def test_an_lldp_document_with_a_ten_megabyte_port_name_answers_a_short_error(topology):
    documents = [pb.TopologyDocument(name="leaf0.json", content=_document(LONG))]
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await topology.ImportFabric(
            pb.ImportFabricRequest(format=pb.TOPOLOGY_FORMAT_LLDP, documents=documents)
        )
    assert failed.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert len(failed.value.details()) < 700


async def test_a_ten_megabyte_resource_name_answers_a_short_error(topology):
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await topology.GetFabric(pb.GetFabricRequest(name="fabrics/" + LONG))
    assert failed.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert len(failed.value.details().encode()) <= 4096


async def test_a_ten_megabyte_tool_diagnostic_in_a_dump_is_skipped_and_logged_cut_short(topology, caplog):
    content = "ibwarn: " + LONG + "\n" + GOOD_IB
    with caplog.at_level(logging.WARNING, logger="services.topology.formats.ibnetdiscover"):
        created = await topology.ImportFabric(
            pb.ImportFabricRequest(format=pb.TOPOLOGY_FORMAT_IBNETDISCOVER, content=content)
        )
    assert created.link_count == 1
    (record,) = [r for r in caplog.records if "skipped tool diagnostic" in r.getMessage()]
    assert "line 1: ibwarn: xxx" in record.getMessage() and len(record.getMessage()) < 1000
