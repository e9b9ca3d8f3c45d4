"""The engine of each fidelity, behind the `Engine` seam (engine.py).

`PacketEngine` adapts the packet package's entry point (packet/outcome.py) to the seam from
outside the package, until the packet package exports an engine of its own (then it registers
that instead, and this adapter goes).
"""

from __future__ import annotations

from services.simulator.engine import Engine, Progress, RunFabric
from services.simulator.flow import FlowEngine
from services.simulator.packet.link_faults import link_fault_plan
from services.simulator.packet.outcome import run_packet_simulation
from services.simulator.results import SimulationOutcome
from services.simulator.spec import Fidelity, SimulationSpec
from services.simulator.workload import Workload

__all__ = ["ENGINES", "PacketEngine", "engine_for"]


class PacketEngine:
    """Packets through output-queued switch ports (services.simulator.packet)."""

    def check(self, spec: SimulationSpec, fabric: RunFabric, workload: Workload) -> None:
        """LINK_DOWN faults: the routes of every link-down set must carry the workload, or the run
        could never finish (a link down for good that leaves no route is InvalidArgument naming the
        fault; a routing missing from `fabric.what_if` is FailedPrecondition)."""
        if spec.faults:
            link_fault_plan(spec, fabric.snapshot, workload, fabric.what_if)

    def simulate(
        self, spec: SimulationSpec, fabric: RunFabric, workload: Workload, progress: Progress | None
    ) -> SimulationOutcome:
        return run_packet_simulation(spec, fabric, workload, progress)


ENGINES: dict[Fidelity, Engine] = {Fidelity.FLOW: FlowEngine(), Fidelity.PACKET: PacketEngine()}


def engine_for(fidelity: Fidelity) -> Engine:
    """The engine that runs specs of `fidelity`."""
    return ENGINES[fidelity]
