"""`python -m services.simulator`: the SimulationService server (simulations kept in memory).

Snapshots come from the topology service at --topology-address; series go to the telemetry
service at --telemetry-address when a spec sets `telemetry_source`; --workers worker processes
run the simulations.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from fabrictwin.v1 import simulation_pb2_grpc

from services.common.config import ServiceConfig
from services.common.server import Cleanup, ServiceDefinition, run_service
from services.common.workers import WorkerPool
from services.simulator.peers import SnapshotSource
from services.simulator.progress import ProgressBoard
from services.simulator.registry import SimulationRegistry
from services.simulator.servicer import SimulationServicer

__all__ = ["SERVICE_NAME", "build", "main"]

SERVICE_NAME = "fabrictwin.v1.SimulationService"


async def build(config: ServiceConfig) -> tuple[list[ServiceDefinition], Cleanup]:
    """The servicer with its worker pool, progress board and topology client; cleanup closes them."""
    pool = WorkerPool(config.workers)
    progress = ProgressBoard()
    snapshots = SnapshotSource(config.topology_address, config.auth_token)
    servicer = SimulationServicer(
        SimulationRegistry(), snapshots, pool, progress, config.telemetry_address, config.auth_token
    )

    async def cleanup() -> None:
        await servicer.close()
        await snapshots.close()
        await pool.close()
        await asyncio.to_thread(progress.close)

    definition = ServiceDefinition(
        SERVICE_NAME, servicer, simulation_pb2_grpc.add_SimulationServiceServicer_to_server
    )
    return [definition], cleanup


def main(argv: Sequence[str] | None = None) -> None:
    """Serve until SIGTERM or Ctrl-C."""
    run_service("simulator", build, argv)


if __name__ == "__main__":
    main()
