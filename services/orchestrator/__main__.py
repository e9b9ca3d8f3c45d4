"""`python -m services.orchestrator`: the ScenarioService server.

Its own flag (also FABRICTWIN_<NAME>):

- --max-simulations-per-run: sweep points x modes one run may start; a scenario above it is
  RESOURCE_EXHAUSTED at CreateScenario, UpdateScenario and RunScenario (default 10,000; 0: no limit).
"""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable, Sequence

from fabrictwin.v1 import scenario_pb2_grpc

from services.common.config import ServiceConfig
from services.common.db import make_engine
from services.common.peers import peer_auth
from services.common.server import ServiceDefinition, run_service
from services.orchestrator.peers import GrpcSimulatorPeer, GrpcSimulators, GrpcTelemetry, GrpcTopology
from services.orchestrator.scenarios import DEFAULT_MAX_SIMULATIONS_PER_RUN
from services.orchestrator.servicer import ScenarioServicer
from services.orchestrator.store import ScenarioStore

__all__ = ["SERVICE_NAME", "build", "extra_flags", "main"]

SERVICE_NAME = "fabrictwin.v1.ScenarioService"


def extra_flags(parser: argparse.ArgumentParser) -> None:
    """The orchestrator's own flags (see the module docstring)."""
    parser.add_argument("--max-simulations-per-run", type=int, default=DEFAULT_MAX_SIMULATIONS_PER_RUN)


async def build(config: ServiceConfig) -> tuple[list[ServiceDefinition], Callable[[], Awaitable[None]]]:
    """Servicer wired to SQL and to the other three services; cleanup closes the peers' channels."""
    auth = peer_auth(config)  # TLS and the token towards the three peers
    engine = make_engine(config.resolved_database_url())
    topology = GrpcTopology(config.topology_address, auth)
    addresses = [a.strip() for a in config.simulator_addresses.split(",") if a.strip()]
    simulators = GrpcSimulators(addresses, auth)
    telemetry = GrpcTelemetry(config.telemetry_address, auth)
    max_simulations = int(config.extra.get("max_simulations_per_run", DEFAULT_MAX_SIMULATIONS_PER_RUN))
    servicer = ScenarioServicer(
        ScenarioStore(engine), topology, GrpcSimulatorPeer(simulators), telemetry, max_simulations
    )
    await servicer.recover()

    async def cleanup() -> None:
        await servicer.close()
        await simulators.close()
        for channel in (topology.channel, telemetry.channel):
            await channel.close()
        engine.dispose()

    definition = ServiceDefinition(
        SERVICE_NAME, servicer, scenario_pb2_grpc.add_ScenarioServiceServicer_to_server
    )
    return [definition], cleanup


def main(argv: Sequence[str] | None = None) -> None:
    """Serve until SIGTERM or Ctrl-C."""
    run_service("orchestrator", build, argv, extra_flags)


if __name__ == "__main__":
    main()
