"""A huge LLDP document sent to a real topology service (`python -m services.topology`, its own process):
refused INVALID_ARGUMENT naming the document, at once, without parsing it.

Reported: a 61 MB document took 26 s to refuse and left the service at 1.3 GB (measured here before
the fix, on a compact 61.6 MB table: 6.8 s, peak 778 MiB, 719 MiB after from 143 MiB; after it,
0.6-1.3 s, peak ~+200 MiB, +117 to +176 MiB after).
"""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest
from fabrictwin.v1 import topology_pb2 as pb
from fabrictwin.v1 import topology_pb2_grpc

from services.topology.formats.lldp import neighbour_documents
from services.topology.generators import leaf_spine

from .formats.test_lldp_sizes import big_document
from .test_heavy_work_off_the_event_loop import _start_topology


def _memory_mib(pid: int) -> dict[str, float]:
    """VmRSS (now) and VmHWM (peak) of a process, in MiB."""
    fields = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = int(value.split()[0]) / 1024
    return fields


def _lldp_request(fabric_id: str, documents) -> pb.ImportFabricRequest:
    request = pb.ImportFabricRequest(fabric_id=fabric_id, format=pb.TOPOLOGY_FORMAT_LLDP)
    request.documents.extend(pb.TopologyDocument(name=n, content=c) for n, c in documents)
    return request


async def test_a_61_mb_document_is_refused_at_once_without_its_parse_staying_in_memory(tmp_path):
    text = big_document(61_000_000)
    process, address, _ = _start_topology(tmp_path)
    try:
        options = [("grpc.max_send_message_length", 64 * 1024 * 1024)]
        async with grpc.aio.insecure_channel(address, options=options) as channel:
            topology = topology_pb2_grpc.TopologyServiceStub(channel)
            # Warm up: the LLDP importer and the routing engine loaded, a fabric stored.
            await topology.ImportFabric(_lldp_request("small", neighbour_documents(leaf_spine(2, 2, 2))))
            before = _memory_mib(process.pid)["VmRSS"]
            started = time.monotonic()
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await topology.ImportFabric(_lldp_request("big", [("lldp.leaf0.json", text)]), timeout=60)
            took = time.monotonic() - started
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert refused.value.details().startswith(
                f"documents['lldp.leaf0.json']: {len(text):,} characters; one node's document may have"
            )
            await asyncio.sleep(0.5)
            memory = _memory_mib(process.pid)
            assert took < 3, f"refused in {took:.2f} s"
            # What stays is the request itself, not a parse of it: the 61 MB message and its text
            # (+117 to +176 MiB measured). Any 61 MB request refused for any reason (a bad fabric_id)
            # keeps ~70 MiB the same way until Python's next full collection: the refused call's frames
            # hold the request in a cycle through its servicer context and the AbortError.
            assert memory["VmRSS"] - before < 256, f"RSS {before:.0f} MiB before, {memory['VmRSS']:.0f} after"
            assert memory["VmHWM"] - before < 320, f"peak {memory['VmHWM']:.0f} MiB from {before:.0f}"
            # And it still serves.
            await topology.GetFabric(pb.GetFabricRequest(name="fabrics/small"))
    finally:
        process.kill()
        process.wait(5)
