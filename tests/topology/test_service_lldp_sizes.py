"""A huge LLDP document sent to a real topology service (`python -m services.topology`, its own process):
refused INVALID_ARGUMENT naming the document, at once, without parsing it.

Reported: a 61 MB document took 26 s to refuse and left the service at 1.3 GB (measured here before
the fix, on a compact 61.6 MB table: 6.8 s, peak 778 MiB, 719 MiB after from 143 MiB; after it,
0.6-1.3 s, peak ~+200 MiB, +117 to +176 MiB after).
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
from collections.abc import AsyncIterator

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


@contextlib.asynccontextmanager
async def _warm_topology(
    tmp_path,
) -> AsyncIterator[tuple[subprocess.Popen, topology_pb2_grpc.TopologyServiceStub]]:
    """A topology service process and a stub that sends 64 MiB messages, the LLDP importer and the
    routing engine loaded and a fabric stored (`fabrics/small`)."""
    process, address, _ = _start_topology(tmp_path)
    try:
        options = [("grpc.max_send_message_length", 64 * 1024 * 1024)]
        async with grpc.aio.insecure_channel(address, options=options) as channel:
            topology = topology_pb2_grpc.TopologyServiceStub(channel)
            await topology.ImportFabric(_lldp_request("small", neighbour_documents(leaf_spine(2, 2, 2))))
            yield process, topology
    finally:
        process.kill()
        process.wait(5)


async def test_a_61_mb_document_is_refused_at_once_without_its_parse_staying_in_memory(tmp_path):
    text = big_document(61_000_000)
    async with _warm_topology(tmp_path) as (process, topology):
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
        # No parse of it stays (+117 to +176 MiB measured: what malloc keeps of the request's
        # buffers); the request itself is collected once the call has unwound (next test).
        assert memory["VmRSS"] - before < 256, f"RSS {before:.0f} MiB before, {memory['VmRSS']:.0f} after"
        assert memory["VmHWM"] - before < 320, f"peak {memory['VmHWM']:.0f} MiB from {before:.0f}"
        # And it still serves.
        await topology.GetFabric(pb.GetFabricRequest(name="fabrics/small"))


async def test_large_refused_requests_do_not_pile_up_in_memory(tmp_path):
    """Any large request refused (here a bad fabric_id, then a document too large) is let go of: the
    refused call's frames held it in a cycle only a full collection breaks, and each 61 MB refusal
    added ~100 MiB for good (257 -> 768 MiB from the first to the sixth); now it stays within about
    one request of where the first left it (265 -> 265-391 MiB: what malloc keeps)."""
    text = big_document(61_000_000)
    async with _warm_topology(tmp_path) as (process, topology):
        after = []
        for i in range(6):
            fabric_id = "Not An Id!" if i % 2 == 0 else "big"
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await topology.ImportFabric(_lldp_request(fabric_id, [("lldp.leaf0.json", text)]), timeout=60)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            await asyncio.sleep(0.5)
            after.append(_memory_mib(process.pid)["VmRSS"])
        assert max(after[1:]) - after[0] < 250, f"RSS after each refusal: {[round(m) for m in after]} MiB"
