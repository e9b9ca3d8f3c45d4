"""`python -m services.orchestrator`: the ScenarioService server."""

from __future__ import annotations

from fabrictwin.v1 import scenario_pb2_grpc

from services.common.config import ServiceConfig
from services.common.db import make_engine
from services.common.peers import peer_auth
from services.common.server import ServiceDefinition, run_service
from services.orchestrator.peers import GrpcSimulators, GrpcTelemetry, GrpcTopology
from services.orchestrator.servicer import ScenarioServicer
from services.orchestrator.store import ScenarioStore

SERVICE_NAME = "fabrictwin.v1.ScenarioService"


async def build(config: ServiceConfig):
    """Servicer wired to SQL and to the other three services; cleanup closes the peers' channels."""
    auth = peer_auth(config)  # TLS and the token towards the three peers
    engine = make_engine(config.resolved_database_url())
    topology = GrpcTopology(config.topology_address, auth)
    addresses = [a.strip() for a in config.simulator_addresses.split(",") if a.strip()]
    simulators = GrpcSimulators(addresses, auth)
    telemetry = GrpcTelemetry(config.telemetry_address, auth)
    servicer = ScenarioServicer(ScenarioStore(engine), topology, simulators, telemetry)
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


if __name__ == "__main__":
    run_service("orchestrator", build)
