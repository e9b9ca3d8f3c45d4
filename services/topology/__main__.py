"""`python -m services.topology`: the TopologyService server (fabrics in SQL, routes in memory)."""

from __future__ import annotations

import argparse

from fabrictwin.v1 import topology_pb2_grpc

from services.common.config import ServiceConfig
from services.common.db import make_engine
from services.common.server import Cleanup, ServiceDefinition, run_service
from services.topology import limits
from services.topology.registry import FabricRegistry
from services.topology.servicer import TopologyServicer
from services.topology.store import TopologyStore

__all__ = ["SERVICE_NAME", "build", "extra_flags"]

SERVICE_NAME = "fabrictwin.v1.TopologyService"


def extra_flags(parser: argparse.ArgumentParser) -> None:
    """The topology service's own flags: the fabric limits (`--max-fabric-nodes`, ...; limits.py)."""
    limits.flags(parser)


async def build(config: ServiceConfig) -> tuple[list[ServiceDefinition], Cleanup]:
    """Servicer over a store on `config.resolved_database_url()`; cleanup disposes the engine.

    ValueError naming the flag for fabric limits that cannot work (run_service reports it and exits 2).
    """
    fabric_limits = limits.FabricLimits.from_config(config.extra)
    engine = make_engine(config.resolved_database_url())
    store = TopologyStore(engine)
    store.create_tables()
    servicer = TopologyServicer(FabricRegistry(store, limits=fabric_limits), config.max_message_bytes)

    async def cleanup() -> None:
        engine.dispose()

    definition = ServiceDefinition(
        SERVICE_NAME, servicer, topology_pb2_grpc.add_TopologyServiceServicer_to_server
    )
    return [definition], cleanup


if __name__ == "__main__":
    run_service("topology", build, extra_flags=extra_flags)
