"""The engine of each fidelity, behind the `Engine` seam (engine.py): the one place that names them."""

from __future__ import annotations

from services.simulator.engine import Engine
from services.simulator.flow import FlowEngine, SteadyFlowEngine
from services.simulator.packet import PacketEngine
from services.simulator.spec import Fidelity

__all__ = ["ENGINES", "engine_for"]

ENGINES: dict[Fidelity, Engine] = {
    Fidelity.FLOW: FlowEngine(),
    Fidelity.FLOW_STEADY: SteadyFlowEngine(),
    Fidelity.PACKET: PacketEngine(),
}


def engine_for(fidelity: Fidelity) -> Engine:
    """The engine that runs specs of `fidelity`."""
    return ENGINES[fidelity]
