"""The four real services in the test process, each on its own port 0 server, wired to each other.

Service tests use this instead of test doubles: the orchestrator calls a real simulator, which
fetches snapshots from a real topology service and writes series to a real telemetry service.
`simulator_replicas=2` starts two simulator servers behind the orchestrator (failover tests);
`settings` adds the same ServiceConfig fields (TLS, tokens) to all of them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import pathlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

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
    # Every simulator replica, `simulator` first; `start_simulator` adds one (a replica that came back).
    simulators: list[RunningServer] = dataclasses.field(default_factory=list)
    simulator_config: ServiceConfig | None = None
    _start: Any = None

    @property
    def addresses(self) -> dict[str, str]:
        return {
            "topology": self.topology.address,
            "simulator": self.simulator.address,
            "telemetry": self.telemetry.address,
            "orchestrator": self.orchestrator.address,
        }

    async def start_simulator(self, port: int = 0) -> RunningServer:
        """Start another simulator replica (on `port`, e.g. the one of a replica that was stopped)."""
        assert self.simulator_config is not None
        config = dataclasses.replace(self.simulator_config, port=port)
        replica = await self._start(config, build_simulator)
        self.simulators.append(replica)
        return replica


@contextlib.asynccontextmanager
async def in_process_stack(
    data_dir: pathlib.Path,
    telemetry_database_url: str = "",
    *,
    simulator_replicas: int = 1,
    settings: Mapping[str, Any] | None = None,
) -> AsyncIterator[InProcessStack]:
    """Start topology, telemetry, simulator(s) and orchestrator (SQLite under data_dir unless given a URL)."""
    async with contextlib.AsyncExitStack() as stack:

        async def start(config: ServiceConfig, build) -> RunningServer:  # type: ignore[no-untyped-def]
            services, cleanup = await build(config)
            if cleanup is not None:
                stack.push_async_callback(cleanup)
            running = await create_server(config, services)
            stack.push_async_callback(running.stop, 0)
            return running

        base = {"port": 0, "data_dir": str(data_dir), **(settings or {})}
        topology = await start(ServiceConfig(service="topology", **base), build_topology)
        telemetry = await start(
            ServiceConfig(service="telemetry", database_url=telemetry_database_url, **base), build_telemetry
        )
        peers = {"topology_address": topology.address, "telemetry_address": telemetry.address}
        simulator_config = ServiceConfig(service="simulator", **base, **peers)
        simulators = [await start(simulator_config, build_simulator) for _ in range(simulator_replicas)]
        addresses = ",".join(s.address for s in simulators)
        orchestrator = await start(
            ServiceConfig(service="orchestrator", simulator_addresses=addresses, **base, **peers),
            build_orchestrator,
        )
        yield InProcessStack(
            topology, telemetry, simulators[0], orchestrator, simulators, simulator_config, start
        )
