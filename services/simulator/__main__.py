"""`python -m services.simulator`: the SimulationService server (simulations kept in memory).

Snapshots come from the topology service at --topology-address; series go to the telemetry
service at --telemetry-address when a spec sets `telemetry_source`; --workers worker processes
run the simulations.

Its own flags (each also a FABRICTWIN_* variable), the limits of admission control (admission.py;
0 turns one off): --max-flows, --max-transfers, --max-packets, --max-events, --max-memory-bytes
(a run's estimated peak in its worker), --max-listed-flows (POINT_TO_POINT flows in one spec); and
--worker-memory-bytes, the address-space limit of each worker process (0: three quarters of the
machine's memory shared by the workers; -1: none), so that a run the estimate let through fails
with RESOURCE_EXHAUSTED instead of meeting the kernel's OOM killer.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from collections.abc import Sequence

from fabrictwin.v1 import simulation_pb2_grpc

from services.common.config import ServiceConfig
from services.common.peers import peer_auth
from services.common.server import Cleanup, ServiceDefinition, run_service
from services.common.workers import WorkerPool
from services.simulator.admission import DEFAULT_LIMITS, SimulationLimits
from services.simulator.peers import SnapshotSource
from services.simulator.progress import ProgressBoard
from services.simulator.registry import SimulationRegistry
from services.simulator.servicer import SimulationServicer

__all__ = [
    "SERVICE_NAME",
    "build",
    "extra_flags",
    "limits_of",
    "main",
    "worker_memory_bytes",
]

SERVICE_NAME = "fabrictwin.v1.SimulationService"
_LIMIT_FLAGS = {
    "max_flows": "QP flows of one simulation",
    "max_transfers": "transfers of one simulation",
    "max_packets": "packets of one PACKET-fidelity simulation",
    "max_events": "events of one PACKET-fidelity simulation",
    "max_memory_bytes": "estimated peak memory of one simulation's worker",
    "max_listed_flows": "POINT_TO_POINT flows listed in one spec",
}


def extra_flags(parser: argparse.ArgumentParser) -> None:
    """The simulator's own flags (see the module docstring)."""
    for name, what in _LIMIT_FLAGS.items():
        default = getattr(DEFAULT_LIMITS, name)
        parser.add_argument(
            "--" + name.replace("_", "-"), type=int, default=default, help=f"most {what} (0: no limit)"
        )
    parser.add_argument(
        "--worker-memory-bytes",
        type=int,
        default=0,
        help="address-space limit per worker (0: 3/4 of the machine's memory over --workers; -1: none)",
    )


def limits_of(config: ServiceConfig) -> SimulationLimits:
    """Admission limits from the configuration (defaults where a flag was not given)."""
    values = {name: int(config.extra.get(name, getattr(DEFAULT_LIMITS, name))) for name in _LIMIT_FLAGS}
    try:
        return SimulationLimits(**values)
    except ValueError as exc:
        raise ValueError(f"--{str(exc).replace('_', '-')}") from exc


def worker_memory_bytes(config: ServiceConfig) -> int:
    """The address-space limit of each worker: the flag, or three quarters of the machine's memory."""
    configured = int(config.extra.get("worker_memory_bytes", 0))
    if configured < 0:
        return 0
    if configured > 0:
        return configured
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 0
    return max(1 << 30, 3 * total // 4 // max(1, config.workers))


async def build(config: ServiceConfig) -> tuple[list[ServiceDefinition], Cleanup]:
    """The servicer with its worker pool, progress board and topology client; cleanup closes them."""
    limits = limits_of(config)
    auth = peer_auth(config)  # TLS and the token towards topology and telemetry
    pool = WorkerPool(config.workers, memory_limit_bytes=worker_memory_bytes(config))
    await pool.start()  # a worker from the start: health reports what the service can do
    progress = ProgressBoard()
    snapshots = SnapshotSource(config.topology_address, auth)
    servicer = SimulationServicer(
        SimulationRegistry(), snapshots, pool, progress, config.telemetry_address, auth, limits
    )

    async def cleanup() -> None:
        await servicer.close()  # cancels every run: their workers are killed
        await snapshots.close()
        await pool.close(grace=min(2.0, config.grace_seconds))
        await asyncio.to_thread(progress.close)

    definition = ServiceDefinition(
        SERVICE_NAME, servicer, simulation_pb2_grpc.add_SimulationServiceServicer_to_server
    )
    return [definition], cleanup


def main(argv: Sequence[str] | None = None) -> None:
    """Serve until SIGTERM or Ctrl-C."""
    run_service("simulator", build, argv, extra_flags)


if __name__ == "__main__":
    main()
