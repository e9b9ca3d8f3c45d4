"""SPRAY: per packet, round-robin over each (switch, destination) group of equal-cost outputs, or
with `spray_random` a seeded uniform choice (ns-3's RandomEcmpRouting); the receiving NIC reorders.

At FLOW fidelity: the fluid limit, an even split over each equal-cost group, with no reorder
buffer (its peak is reported as 0), as its notes say.
"""

from __future__ import annotations

from services.simulator.modes.adaptive import even_split_note
from services.simulator.modes.base import PerPacketPaths
from services.simulator.spec import Fidelity, LoadBalancingMode, LoadBalancingSpec, SimulationSpec

__all__ = ["Spray"]


class Spray(PerPacketPaths):
    mode = LoadBalancingMode.SPRAY
    fidelities = frozenset({Fidelity.FLOW, Fidelity.FLOW_STEADY, Fidelity.PACKET})
    own_fields: tuple[str, ...] = ("spray_random",)

    def validate(self, spec: SimulationSpec) -> None:
        """Nothing beyond the shared checks."""

    def flow_notes(self, lb: LoadBalancingSpec) -> list[str]:
        return [
            even_split_note(self.mode),
            "SPRAY at FLOW fidelity: the NIC reorder buffer is not modelled (peak reported as 0).",
        ]

    def packet_notes(self, lb: LoadBalancingSpec) -> list[str]:
        how = (
            "a seeded uniform choice among equal-cost outputs"
            if lb.spray_random
            else "round-robin over each (switch, destination) group of equal-cost outputs"
        )
        return [f"SPRAY: per packet, {how}; the receiving NIC reorders."]

    def packet_code(self, lb: LoadBalancingSpec) -> int:
        return 5 if lb.spray_random else 3
