"""FLOWLET: a flow keeps its output at each switch until it pauses longer than `flowlet_gap_ns`,
then takes the least-loaded equal-cost output. Only the PACKET engine sees pauses: FLOW refuses it.
"""

from __future__ import annotations

from services.common.errors import InvalidArgument
from services.simulator.modes.base import PerPacketPaths
from services.simulator.spec import Fidelity, LoadBalancingMode, LoadBalancingSpec, SimulationSpec

__all__ = ["Flowlet"]


class Flowlet(PerPacketPaths):
    mode = LoadBalancingMode.FLOWLET
    fidelities = frozenset({Fidelity.PACKET})
    own_fields: tuple[str, ...] = ("flowlet_gap_ns",)

    def validate(self, spec: SimulationSpec) -> None:
        lb = spec.load_balancing
        assert lb is not None
        if lb.flowlet_gap_ns <= 0:
            raise InvalidArgument(
                "load_balancing.flowlet_gap_ns",
                f"FLOWLET needs a positive idle gap (e.g. 2000 ns), got {lb.flowlet_gap_ns}; "
                "a zero gap would be per-packet adaptive routing (use ADAPTIVE)",
            )

    def flow_notes(self, lb: LoadBalancingSpec) -> list[str]:
        return []  # refused at FLOW fidelity (fidelities)

    def packet_notes(self, lb: LoadBalancingSpec) -> list[str]:
        return [
            f"FLOWLET: a flow keeps its output at each switch until it pauses longer than "
            f"{lb.flowlet_gap_ns} ns, then takes the least-loaded equal-cost output."
        ]

    def packet_code(self, lb: LoadBalancingSpec) -> int:
        return 4
