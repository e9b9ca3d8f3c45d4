"""ADAPTIVE: per packet, the equal-cost output with the fewest queued bytes.

At FLOW fidelity there are no queues: the fluid limit, an even split over each equal-cost group
(routes.split_flows_evenly), stands for it and its notes say so.
"""

from __future__ import annotations

from services.simulator.modes.base import PerPacketPaths
from services.simulator.spec import Fidelity, LoadBalancingMode, LoadBalancingSpec, SimulationSpec

__all__ = ["Adaptive", "even_split_note"]


def even_split_note(mode: LoadBalancingMode) -> str:
    return (
        f"{mode.value} at FLOW fidelity: modelled as an even split over equal-cost paths "
        "(fluid limit; per hop, evenly over the equal-cost group)."
    )


class Adaptive(PerPacketPaths):
    mode = LoadBalancingMode.ADAPTIVE
    fidelities = frozenset({Fidelity.FLOW, Fidelity.FLOW_STEADY, Fidelity.PACKET})
    own_fields: tuple[str, ...] = ()

    def validate(self, spec: SimulationSpec) -> None:
        """Nothing beyond the shared checks."""

    def flow_notes(self, lb: LoadBalancingSpec) -> list[str]:
        return [even_split_note(self.mode)]

    def packet_notes(self, lb: LoadBalancingSpec) -> list[str]:
        return [
            "ADAPTIVE: per packet, the equal-cost output with the fewest queued bytes "
            "(seeded random tie-break)."
        ]

    def packet_code(self, lb: LoadBalancingSpec) -> int:
        return 2
