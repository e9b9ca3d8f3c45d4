"""A SimulationService on a real grpc.aio server (port 0) with its health wired to its worker pool,
and /proc helpers to find and watch the processes a service started (no psutil)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator

import grpc
from fabrictwin.v1 import common_pb2, simulation_pb2, simulation_pb2_grpc
from grpc_health.v1 import health_pb2_grpc

from services.common.config import ServiceConfig
from services.common.procfs import children_of, cpu_ticks, is_running
from services.common.server import RunningServer, serving
from services.simulator.__main__ import build as build_simulator

__all__ = [
    "Simulator",
    "busiest_child",
    "children_of",
    "is_running",
    "simulator_server",
    "wait_done",
]

TERMINAL = {common_pb2.JOB_STATE_SUCCEEDED, common_pb2.JOB_STATE_FAILED, common_pb2.JOB_STATE_CANCELLED}


@dataclasses.dataclass
class Simulator:
    stub: simulation_pb2_grpc.SimulationServiceStub
    health: health_pb2_grpc.HealthStub
    servicer: object
    running: RunningServer


@contextlib.asynccontextmanager
async def simulator_server(
    topology_address: str, telemetry_address: str = "127.0.0.1:1", **extra: object
) -> AsyncIterator[Simulator]:
    """A simulator (its own flags in `extra`), built as `python -m services.simulator` builds it, whose
    health follows its worker pool (the servicer's `watch_health`, which `create_server` calls)."""
    config = ServiceConfig(
        service="simulator",
        port=0,
        topology_address=topology_address,
        telemetry_address=telemetry_address,
        extra=extra,
    )
    services, cleanup = await build_simulator(config)
    servicer = services[0].servicer
    try:
        async with (
            serving(config, services) as running,
            grpc.aio.insecure_channel(running.address) as channel,
        ):
            yield Simulator(
                simulation_pb2_grpc.SimulationServiceStub(channel),
                health_pb2_grpc.HealthStub(channel),
                servicer,
                running,
            )
    finally:
        await cleanup()


async def wait_done(stub: simulation_pb2_grpc.SimulationServiceStub, name: str, timeout: float = 120.0):
    """The simulation once it is finished (WatchSimulation), within `timeout` seconds."""

    async def last() -> simulation_pb2.Simulation:
        seen = None
        async for simulation in stub.WatchSimulation(simulation_pb2.WatchSimulationRequest(name=name)):
            seen = simulation
        return seen

    return await asyncio.wait_for(last(), timeout)


def busiest_child(pid: int) -> int | None:
    """The child of `pid` that has used the most CPU: the worker running a simulation."""
    children = children_of(pid)
    return max(children, key=cpu_ticks) if children else None
