"""Heavy topology work (building, routing, storing, importing, snapshots, forwarding tables) runs off the
server's event loop, so health checks, other calls and a stop are answered while it runs."""

from __future__ import annotations

import asyncio
import contextlib
import json
import pathlib
import signal
import subprocess
import sys
import threading
import time

import grpc
import pytest
from fabrictwin.v1 import topology_pb2 as pb
from fabrictwin.v1 import topology_pb2_grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.common.config import ServiceConfig
from services.common.server import create_server
from services.topology.__main__ import build
from services.topology.formats import export_fabric
from services.topology.generators import leaf_spine

ROOT = pathlib.Path(__file__).resolve().parents[2]
# About 125,000 links: within the default limits, and a few seconds of building, routing and storing.
BIG = pb.LeafSpineSpec(leaves=100, spines=50, hosts_per_leaf=1, parallel_links=25)


@pytest.fixture
async def server(tmp_path):
    config = ServiceConfig(service="topology", port=0, database_url=f"sqlite:///{tmp_path / 'topology.db'}")
    services, cleanup = await build(config)
    running = await create_server(config, services)
    try:
        async with grpc.aio.insecure_channel(running.address) as channel:
            yield running, channel
    finally:
        await running.stop(0)
        await cleanup()


async def _health_latencies(channel: grpc.aio.Channel, busy: asyncio.Future) -> list[float]:
    """Seconds each health check took, checking every 50 ms until `busy` is done."""
    health = health_pb2_grpc.HealthStub(channel)
    latencies = []
    while not busy.done():
        started = time.perf_counter()
        reply = await health.Check(
            health_pb2.HealthCheckRequest(service="fabrictwin.v1.TopologyService"), timeout=10
        )
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        latencies.append(time.perf_counter() - started)
        await asyncio.sleep(0.05)
    return latencies


async def test_health_answers_within_a_second_while_a_big_fabric_is_built_routed_and_stored(server):
    _, channel = server
    topology = topology_pb2_grpc.TopologyServiceStub(channel)
    create = asyncio.ensure_future(
        topology.CreateFabric(
            pb.CreateFabricRequest(fabric_id="big", spec=pb.FabricSpec(leaf_spine=BIG)), timeout=120
        )
    )
    latencies = await _health_latencies(channel, create)
    created = await create
    assert created.link_count == 125_100
    assert len(latencies) >= 5 and max(latencies) < 1.0, latencies


async def test_health_answers_within_a_second_while_a_big_dump_is_imported(server):
    _, channel = server
    topology = topology_pb2_grpc.TopologyServiceStub(channel)
    text = export_fabric(leaf_spine(100, 50, 1, parallel_links=25), "ns3_hpcc")  # 125,100 link lines
    request = pb.ImportFabricRequest(fabric_id="dump", format=pb.TOPOLOGY_FORMAT_NS3_HPCC, content=text)
    imported = asyncio.ensure_future(topology.ImportFabric(request, timeout=120))
    latencies = await _health_latencies(channel, imported)
    assert (await imported).link_count == 125_100
    assert len(latencies) >= 5 and max(latencies) < 1.0, latencies


async def test_health_answers_while_a_big_fabric_is_snapshotted_and_its_tables_are_read(server):
    _, channel = server
    topology = topology_pb2_grpc.TopologyServiceStub(channel)
    await topology.CreateFabric(
        pb.CreateFabricRequest(fabric_id="big", spec=pb.FabricSpec(leaf_spine=BIG)), timeout=120
    )

    # A second fabric evicts nothing (the cache holds four), but a what-if snapshot and a forwarding
    # table of every switch are fresh work each.
    async def read_everything():
        parts = [
            p
            async for p in topology.StreamFabricSnapshot(
                pb.StreamFabricSnapshotRequest(name="fabrics/big", down_links=[100])
            )
        ]
        assert parts and sum(len(p.data) for p in parts) == parts[0].total_bytes
        for switch in ("leaf-0", "spine-0"):
            await topology.GetForwardingTable(
                pb.GetForwardingTableRequest(name=f"fabrics/big/nodes/{switch}")
            )

    busy = asyncio.ensure_future(read_everything())
    latencies = await _health_latencies(channel, busy)
    await busy
    assert max(latencies) < 1.0, latencies


async def test_a_stop_while_a_big_fabric_builds_returns_within_its_grace(server):
    running, channel = server
    topology = topology_pb2_grpc.TopologyServiceStub(channel)
    create = asyncio.ensure_future(
        topology.CreateFabric(
            pb.CreateFabricRequest(fabric_id="big", spec=pb.FabricSpec(leaf_spine=BIG)), timeout=120
        )
    )
    await asyncio.sleep(0.5)
    started = time.perf_counter()
    await running.stop(0.5)
    assert time.perf_counter() - started < 1.5
    with contextlib.suppress(grpc.aio.AioRpcError):
        await create


def _start_topology(tmp_path, *flags: str) -> tuple[subprocess.Popen, str, list[str]]:
    """`python -m services.topology` on a free port; (process, address, its stderr lines so far)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "services.topology", "--port", "0", "--log-format", "json",
         "--data-dir", str(tmp_path), *flags],
        cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    lines: list[str] = []
    threading.Thread(
        target=lambda: lines.extend(line.rstrip("\n") for line in process.stderr), daemon=True
    ).start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for line in list(lines):
            if line.startswith("{") and json.loads(line)["msg"] == "serving":
                return process, json.loads(line)["address"], lines
        if process.poll() is not None:
            break
        time.sleep(0.05)
    process.kill()
    raise AssertionError("the topology service did not start:\n" + "\n".join(lines))


async def test_sigterm_stops_the_service_promptly_after_a_huge_fabric_was_asked_for_and_a_big_one_builds(
    tmp_path,
):
    # Measured before: `--parallel-links 1000000` kept the service building (6 GB) 50 s after SIGTERM.
    process, address, lines = _start_topology(tmp_path, "--grace-seconds", "1")
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            topology = topology_pb2_grpc.TopologyServiceStub(channel)
            huge = pb.LeafSpineSpec(leaves=2, spines=2, hosts_per_leaf=1, parallel_links=1_000_000)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await topology.CreateFabric(
                    pb.CreateFabricRequest(spec=pb.FabricSpec(leaf_spine=huge)), timeout=10
                )
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            building = asyncio.ensure_future(
                topology.CreateFabric(pb.CreateFabricRequest(spec=pb.FabricSpec(leaf_spine=BIG)), timeout=60)
            )
            await asyncio.sleep(0.5)
            signalled = time.monotonic()
            process.send_signal(signal.SIGTERM)
            code = await asyncio.to_thread(process.wait, 20)
            with contextlib.suppress(grpc.aio.AioRpcError):
                await building
        assert code == 0, "\n".join(lines)
        # The grace (1 s), then at most the one build step already running in its thread.
        assert time.monotonic() - signalled < 6, "\n".join(lines)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(5)
