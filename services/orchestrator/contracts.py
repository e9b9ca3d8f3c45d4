"""What the orchestrator's core needs from the other three services, as narrow Protocols.

The run logic (`runner.py`) and the servicer depend only on these, in the domain's terms
(`model.py`); the gRPC adapters that meet them are `peers.GrpcTopology`, `peers.GrpcTelemetry` and
`replicas.GrpcSimulators`.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator, Sequence
from typing import Protocol

from services.common.errors import Unavailable
from services.orchestrator.diagnosis import PortValue, Window
from services.orchestrator.model import (
    FabricInfo,
    SimulatedSource,
    SimulationRequest,
    SimulationStatus,
)

__all__ = ["Measure", "SimulatorLost", "SimulatorPeer", "TelemetryPeer", "TopologyPeer"]


class SimulatorLost(Unavailable):
    """The replica running a simulation stopped answering, or answers without it: the work is lost."""


class Measure(enum.Enum):
    """Per-port aggregates a diagnosis reads from telemetry."""

    MEAN_UTILISATION = "MEAN_UTILISATION"
    TOTAL_DROPS = "TOTAL_DROPS"
    TOTAL_RECEIVE_ERRORS = "TOTAL_RECEIVE_ERRORS"
    TOTAL_XMIT_DISCARDS = "TOTAL_XMIT_DISCARDS"


class TopologyPeer(Protocol):
    async def get_fabric(self, name: str) -> FabricInfo:
        """The fabric and its current routing version; NotFound naming `scenario.fabric`."""
        ...

    async def has_link(self, fabric: str, link: str) -> bool:
        """Whether `link` (an index or a display name) is a link of `fabric`."""
        ...


class SimulatorPeer(Protocol):
    """Starts simulations on a replica that can take them and follows each on its replica."""

    async def start(self, request: SimulationRequest) -> SimulationStatus:
        """Start the simulation under `request.simulation_id`; it reports the routing version it runs on."""
        ...

    def watch(self, name: str) -> AsyncIterator[SimulationStatus]:
        """Updates until a terminal state; SimulatorLost when the replica running it went away."""
        ...

    async def cancel(self, name: str) -> None:
        """Stop a simulation the run will not use."""
        ...


class TelemetryPeer(Protocol):
    async def create_source(self, source: SimulatedSource) -> None:
        """Create the SIMULATED source; AlreadyExists if the id is taken."""
        ...

    async def check_source(self, name: str) -> None:
        """NotFound naming `source` unless `sources/{source}` exists."""
        ...

    async def top_ports(
        self, source: str, measure: Measure, ports: Sequence[str], window: Window | None
    ) -> list[PortValue]:
        """One value per selected port: its `measure` over the window."""
        ...
