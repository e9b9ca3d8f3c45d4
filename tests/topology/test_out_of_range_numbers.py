"""Every number a fabric request carries is checked against its documented bounds (topology.proto) before
any arithmetic: out of range is INVALID_ARGUMENT naming the field or line, never INTERNAL (overflow,
recursion) and never a silently different value (port 70000 once became port 4464)."""

from __future__ import annotations

import asyncio
import json

import grpc
import numpy as np
import pytest
from fabrictwin.v1 import topology_pb2 as pb

from services.common.config import ServiceConfig
from services.common.server import serving
from services.common.snapshot import FabricSnapshot
from services.topology.__main__ import build
from services.topology.limits import MAX_PORT

IB = pb.TOPOLOGY_FORMAT_IBNETDISCOVER
JSON = pb.TOPOLOGY_FORMAT_JSON
NS3 = pb.TOPOLOGY_FORMAT_NS3_HPCC


def _spec(**fields) -> pb.CreateFabricRequest:
    leaf_spine = pb.LeafSpineSpec(leaves=2, spines=1, hosts_per_leaf=1)
    return pb.CreateFabricRequest(spec=pb.FabricSpec(leaf_spine=leaf_spine, **fields))


def _ib(switch_header="Switch 8", switch_port="[1]", host_port='"S-0000000000000001"[1]', lid="1") -> str:
    return (
        f'{switch_header} "S-0000000000000001" # "leaf" enhanced port 0 lid {lid} lmc 0\n'
        f'{switch_port} "H-0000000000000002"[1](3) # "a" lid 2 4xNDR\n\n'
        'Ca 1 "H-0000000000000002" # "a"\n'
        f'[1](3) {host_port} # lid 2 lmc 0 "leaf" lid 1 4xNDR\n'
    )


def _json(node: dict | None = None, link: dict | None = None) -> str:
    nodes = [{"name": "s", "kind": "SWITCH", **(node or {})}, {"name": "h", "kind": "HOST"}]
    links = [{"a": "s", "a_port": 1, "b": "h", "b_port": 1, **(link or {})}]
    return json.dumps({"nodes": nodes, "links": links})


def _ns3(link: str = "0 1 100Gbps 1us 0", header: str = "2 1 1", switches: str = "0") -> str:
    return f"{header}\n{switches}\n{link}\n"


def _import(format, content, **options) -> pb.ImportFabricRequest:
    return pb.ImportFabricRequest(format=format, content=content, **options)


CASES = {
    # Generator specs (CreateFabric).
    "speed 1e300": (_spec(link_speed_gbps=1e300), "spec.link_speed_gbps"),
    "speed 1e308": (_spec(link_speed_gbps=1e308), "spec.link_speed_gbps"),
    "speed inf": (_spec(link_speed_gbps=float("inf")), "spec.link_speed_gbps"),
    "speed nan": (_spec(link_speed_gbps=float("nan")), "spec.link_speed_gbps"),
    "host speed 1e300": (_spec(host_link_speed_gbps=1e300), "spec.host_link_speed_gbps"),
    "speed below a bit per second": (_spec(link_speed_gbps=1e-12), "spec.link_speed_gbps"),
    "latency 2^62": (_spec(link_latency_ns=2**62), "spec.link_latency_ns"),
    "latency negative": (_spec(link_latency_ns=-5), "spec.link_latency_ns"),
    # JSON.
    "json port 70000": (_import(JSON, _json(link={"a_port": 70000})), "links[0].a_port"),
    "json radix 70000": (_import(JSON, _json(node={"radix": 70000})), "nodes[0].radix"),
    "json radix 2^32": (_import(JSON, _json(node={"radix": 2**32})), "nodes[0].radix"),
    "json speed 1e300": (_import(JSON, _json(link={"speed_gbps": 1e300})), "links[0].speed_gbps"),
    "json latency past int64": (_import(JSON, _json(link={"latency_ns": 2**63})), "links[0].latency_ns"),
    "json rail 2^40": (_import(JSON, _json(node={"rail": 2**40})), "nodes[0].rail"),
    "json group 2^40": (_import(JSON, _json(node={"group": 2**40})), "nodes[0].group"),
    "json nested 100,000 deep": (_import(JSON, "[" * 100_000 + "]" * 100_000), "nested"),
    "json number of 5,000 digits": (
        _import(JSON, _json(node={"radix": 1}).replace("1}", "9" * 5000 + "}", 1)),
        "digits",
    ),
    "json default speed 1e300": (
        _import(JSON, _json(), default_link_speed_gbps=1e300),
        "default_link_speed_gbps",
    ),
    "json default latency 2^62": (
        _import(JSON, _json(), default_link_latency_ns=2**62),
        "default_link_latency_ns",
    ),
    # ibnetdiscover.
    "ib radix 2^32": (_import(IB, _ib(switch_header="Switch 4294967296")), "line 1"),
    "ib radix 70000": (_import(IB, _ib(switch_header="Switch 70000", switch_port="[70000]")), "line 1"),
    "ib peer port past int64": (
        _import(IB, _ib(host_port='"S-0000000000000001"[99999999999999999999]')),
        "line 5",
    ),
    "ib switch lid 99999999999": (_import(IB, _ib(lid="99999999999")), "line 1"),
    "ib guid past 64 bits": (
        _import(IB, "switchguid=0x1ffffffffffffffffff\n" + _ib().replace('"S-0000000000000001"', '"sw"')),
        "line 1",
    ),
    # ns-3 HPCC.
    "ns3 rate 1e300Gbps": (_import(NS3, _ns3("0 1 1e300Gbps 1us 0")), "line 3"),
    "ns3 rate 1e400Gbps": (_import(NS3, _ns3("0 1 1e400Gbps 1us 0")), "line 3"),
    "ns3 delay 1e300s": (_import(NS3, _ns3("0 1 100Gbps 1e300s 0")), "line 3"),
    "ns3 switch id 10^30": (_import(NS3, _ns3(switches="1" + "0" * 30)), "line 2"),
    "ns3 node count past int64": (_import(NS3, _ns3(header="99999999999999999999 1 1")), "line 1"),
}


@pytest.mark.parametrize(("request_", "mentions"), CASES.values(), ids=CASES.keys())
async def test_an_out_of_range_number_is_invalid_argument_naming_where_it_is(topology, request_, mentions):
    call = topology.CreateFabric if isinstance(request_, pb.CreateFabricRequest) else topology.ImportFabric
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await call(request_)
    assert failed.value.code() == grpc.StatusCode.INVALID_ARGUMENT, failed.value.details()
    assert mentions in failed.value.details()
    assert len(failed.value.details()) < 600


async def test_an_lldp_document_with_a_number_of_5000_digits_is_invalid_argument(topology):
    document = '{"lldp": {"interface": {"swp1": {"chassis": {"h0": {"id": {"type": "mac", "value": %s}}}}}}}'
    documents = [pb.TopologyDocument(name="leaf0.json", content=document % ("9" * 5000))]
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await topology.ImportFabric(
            pb.ImportFabricRequest(format=pb.TOPOLOGY_FORMAT_LLDP, documents=documents)
        )
    assert failed.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "digits" in failed.value.details() and len(failed.value.details()) < 600


async def test_no_port_above_65535_reaches_the_snapshot_or_the_lft_export(topology):
    # LLDP numbers a port by its name's trailing number (swp70000); past 65,535 the ports of that node
    # are numbered 1, 2, ... instead, as for names without numbers, and the names are kept.
    def document(*neighbours):
        entries = [
            {port: {"chassis": {peer: {"id": {"type": "mac", "value": peer},
                                       "capability": {"type": "Router", "enabled": peer.startswith("leaf")}}},
                    "port": {"id": {"type": "ifname", "value": peer_port}}}}
            for port, peer, peer_port in neighbours
        ]  # fmt: skip
        return json.dumps({"lldp": {"interface": entries if len(entries) > 1 else entries[0]}})

    documents = [
        pb.TopologyDocument(
            name="leaf0.json", content=document(("swp70000", "h0", "eth0"), ("swp3", "h1", "eth0"))
        ),
        pb.TopologyDocument(name="h0.json", content=document(("eth0", "leaf0", "swp70000"))),
        pb.TopologyDocument(name="h1.json", content=document(("eth0", "leaf0", "swp3"))),
    ]
    created = await topology.ImportFabric(
        pb.ImportFabricRequest(fabric_id="big-port", format=pb.TOPOLOGY_FORMAT_LLDP, documents=documents)
    )
    assert created.link_count == 2
    links = (await topology.ListLinks(pb.ListLinksRequest(parent="fabrics/big-port"))).links
    assert {(link.port_name_a, link.port_a) for link in links} == {("swp3", 1), ("swp70000", 2)}
    snapshot = FabricSnapshot.from_proto(
        await topology.GetFabricSnapshot(pb.GetFabricSnapshotRequest(name="fabrics/big-port"))
    )
    assert int(np.max(snapshot.link_port_a)) <= MAX_PORT
    dump = await topology.ExportFabric(
        pb.ExportFabricRequest(name="fabrics/big-port", format=pb.TOPOLOGY_FORMAT_OPENSM_LFTS)
    )
    assert " 070000" not in dump.content and " 4464" not in dump.content


async def test_ports_up_to_65535_are_kept_as_they_are(topology):
    text = _ib(switch_header=f"Switch {MAX_PORT}", switch_port=f"[{MAX_PORT}]")
    text = text.replace('"S-0000000000000001"[1]', f'"S-0000000000000001"[{MAX_PORT}]')
    await topology.ImportFabric(_import(IB, text, fabric_id="wide"))
    links = (await topology.ListLinks(pb.ListLinksRequest(parent="fabrics/wide"))).links
    assert [link.port_a for link in links] == [MAX_PORT]
    table = await topology.GetForwardingTable(pb.GetForwardingTableRequest(name="fabrics/wide/nodes/leaf"))
    assert [entry.port for entry in table.entries] == [MAX_PORT]


async def test_a_request_that_does_not_decode_is_invalid_argument_on_the_real_service(tmp_path):
    config = ServiceConfig(service="topology", port=0, database_url=f"sqlite:///{tmp_path / 'topology.db'}")
    services, cleanup = await build(config)
    async with serving(config, services) as running, grpc.aio.insecure_channel(running.address) as channel:
        for method, payload in (
            ("GetFabric", b"\x0a\x02\xff\xfe"),  # `name` is not UTF-8
            ("ImportFabric", b"\x22\x10ab"),  # `content` cut short
            ("WatchFabric", b"\x0a\x02\xff\xfe"),  # server streaming
        ):
            path = f"/fabrictwin.v1.TopologyService/{method}"
            if method == "WatchFabric":
                call = channel.unary_stream(path)(payload, timeout=10)
                outcome = asyncio.ensure_future(_drain(call))
            else:
                outcome = asyncio.ensure_future(channel.unary_unary(path)(payload, timeout=10))
            with pytest.raises(grpc.aio.AioRpcError) as failed:
                await outcome
            assert failed.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (method, failed.value.details())
            assert f"fabrictwin.v1.{method}Request" in failed.value.details()
    await cleanup()


async def _drain(call) -> list:
    return [reply async for reply in call]
