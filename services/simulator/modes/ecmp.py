"""ECMP: each switch hashes a flow's 5-tuple (and, optionally, its destination QP) with its own
seed and takes `group[hash % len(group)]`, so every packet of a QP flow follows one path.

FLOW and PACKET fidelity model it alike: the path is pinned per flow (routes.pin_flows_by_hash).
"""

from __future__ import annotations

import numpy as np

from services.common.snapshot import FabricSnapshot
from services.simulator.routes import FlowRoutes, pin_flows_by_hash
from services.simulator.spec import Fidelity, LoadBalancingMode, LoadBalancingSpec, SimulationSpec
from services.simulator.workload import Workload

__all__ = ["Ecmp"]


class Ecmp:
    mode = LoadBalancingMode.ECMP
    fidelities = frozenset({Fidelity.FLOW, Fidelity.FLOW_STEADY, Fidelity.PACKET})
    # Its hash settings (ecmp_hash, seed, same_seed_everywhere, hash_destination_qp) are accepted, and
    # ignored, with every mode: a scenario sweeping modes sets them once for all of them.
    own_fields: tuple[str, ...] = ()
    pins_flows = True

    def validate(self, spec: SimulationSpec) -> None:
        """Nothing beyond the shared checks: every hash setting is valid."""

    def route_key_columns(self, lb: LoadBalancingSpec, workload: Workload) -> list[np.ndarray]:
        columns = [workload.flow_source, workload.flow_destination, workload.flow_source_port]
        if lb.hash_destination_qp:
            columns.append(workload.flow_destination_qp)
        return columns

    def flow_routes(
        self, lb: LoadBalancingSpec, snapshot: FabricSnapshot, keys: np.ndarray, switch_latency_ns: int
    ) -> FlowRoutes:
        return pin_flows_by_hash(
            snapshot,
            keys[:, 0],
            keys[:, 1],
            keys[:, 2],
            keys[:, 3] if lb.hash_destination_qp else None,
            lb.ecmp_hash.value,
            lb.seed,
            lb.same_seed_everywhere,
            switch_latency_ns,
        )

    def _seeds(self, lb: LoadBalancingSpec) -> str:
        return "the same seed on every switch" if lb.same_seed_everywhere else "a seed per switch"

    def flow_notes(self, lb: LoadBalancingSpec) -> list[str]:
        qp = " and destination QP" if lb.hash_destination_qp else ""
        return [
            f"ECMP at FLOW fidelity: each QP flow pinned to one path by {lb.ecmp_hash.value} of its "
            f"5-tuple{qp} with {self._seeds(lb)}."
        ]

    def packet_notes(self, lb: LoadBalancingSpec) -> list[str]:
        return [
            f"ECMP: every packet of a QP flow follows the path {lb.ecmp_hash.value} of its 5-tuple "
            f"picks ({self._seeds(lb)})."
        ]

    def packet_code(self, lb: LoadBalancingSpec) -> int:
        return 1
