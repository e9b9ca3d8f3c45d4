"""The four real services in the test process, each on its own port 0 server, wired to each other.

Service tests use this instead of test doubles: the orchestrator calls a real simulator, which
fetches snapshots from a real topology service and writes series to a real telemetry service.
"""

from __future__ import annotations

import contextlib
import dataclasses
import pathlib
from collections.abc import AsyncIterator

from services.common.config import ServiceConfig
from services.common.server import RunningServer, create_server
from services.orchestrator.__main__ import build as build_orchestrator
from services.simulator.__main__ import build as build_simulator
from services.telemetry.__main__ import build as build_telemetry
from services.topology.__main__ import build as build_topology

__all__ = ["InProcessStack", "in_process_stack"]


@dataclasses.dataclass
class InProcessStack:
    topology: RunningServer
    telemetry: RunningServer
    simulator: RunningServer
    orchestrator: RunningServer

    @property
    def addresses(self) -> dict[str, str]:
        return {
            "topology": self.topology.address,
            "simulator": self.simulator.address,
            "telemetry": self.telemetry.address,
            "orchestrator": self.orchestrator.address,
        }


@contextlib.asynccontextmanager
async def in_process_stack(
    data_dir: pathlib.Path, telemetry_database_url: str = ""
) -> AsyncIterator[InProcessStack]:
    """Start topology, telemetry, simulator and orchestrator (SQLite under data_dir unless given a URL)."""
    async with contextlib.AsyncExitStack() as stack:

        async def start(config: ServiceConfig, build) -> RunningServer:  # type: ignore[no-untyped-def]
            services, cleanup = await build(config)
            if cleanup is not None:
                stack.push_async_callback(cleanup)
            running = await create_server(config, services)
            stack.push_async_callback(running.stop, 0)
            return running

        base = {"port": 0, "data_dir": str(data_dir)}
        topology = await start(ServiceConfig(service="topology", **base), build_topology)
        telemetry = await start(
            ServiceConfig(service="telemetry", database_url=telemetry_database_url, **base), build_telemetry
        )
        peers = {"topology_address": topology.address, "telemetry_address": telemetry.address}
        simulator = await start(ServiceConfig(service="simulator", **base, **peers), build_simulator)
        orchestrator = await start(
            ServiceConfig(service="orchestrator", simulator_addresses=simulator.address, **base, **peers),
            build_orchestrator,
        )
        yield InProcessStack(topology, telemetry, simulator, orchestrator)
