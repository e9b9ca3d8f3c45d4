"""What a load-balancing mode is: the `Mode` Protocol every module of this package implements.

A mode holds everything that differs between modes, so adding one is adding a module here and
registering it (registry.py), plus its enum value in spec.py and the proto:

- `fidelities`: the engines that can model it (a mode is refused at any other, never replaced);
- `own_fields`: the `LoadBalancingSpec` fields only it takes (any other mode refuses them set);
- `validate`: its own checks of those fields, raising InvalidArgument naming `load_balancing.*`;
- `route_key_columns` + `flow_routes`: its FLOW path split (flows with equal keys share a route);
- `flow_notes` / `packet_notes`: what each engine models of it, in words a reader can check;
- `packet_code`: the number the PACKET loop's forwarding switches on (packet/layout.py MODE_*);
- `pins_flows`: every packet of a flow follows the one path `flow_routes` gives the flow, so the
  PACKET engine binds the flow's QP to that path's first channel (otherwise to the LFT's choice).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from services.common.snapshot import FabricSnapshot
from services.simulator.routes import FlowRoutes, split_flows_evenly
from services.simulator.spec import Fidelity, LoadBalancingMode, LoadBalancingSpec, SimulationSpec
from services.simulator.workload import Workload

__all__ = ["Mode", "PerPacketPaths", "endpoint_columns"]


class Mode(Protocol):
    """One load-balancing mode (module doc)."""

    mode: LoadBalancingMode
    fidelities: frozenset[Fidelity]
    own_fields: tuple[str, ...]
    pins_flows: bool

    def validate(self, spec: SimulationSpec) -> None: ...

    def route_key_columns(self, lb: LoadBalancingSpec, workload: Workload) -> list[np.ndarray]: ...

    def flow_routes(
        self, lb: LoadBalancingSpec, snapshot: FabricSnapshot, keys: np.ndarray, switch_latency_ns: int
    ) -> FlowRoutes: ...

    def flow_notes(self, lb: LoadBalancingSpec) -> list[str]: ...

    def packet_notes(self, lb: LoadBalancingSpec) -> list[str]: ...

    def packet_code(self, lb: LoadBalancingSpec) -> int: ...


def endpoint_columns(workload: Workload) -> list[np.ndarray]:
    """Route keys of a mode that treats every flow between two hosts alike: (source, destination)."""
    return [workload.flow_source, workload.flow_destination]


class PerPacketPaths:
    """The FLOW path split of the modes that choose per packet (ADAPTIVE, SPRAY, FLOWLET): flows
    between the same two hosts share one route set, an even split over every equal-cost group (the
    PACKET engine installs the groups from these rows and chooses among them itself)."""

    pins_flows = False

    def route_key_columns(self, lb: LoadBalancingSpec, workload: Workload) -> list[np.ndarray]:
        return endpoint_columns(workload)

    def flow_routes(
        self, lb: LoadBalancingSpec, snapshot: FabricSnapshot, keys: np.ndarray, switch_latency_ns: int
    ) -> FlowRoutes:
        return split_flows_evenly(snapshot, keys[:, 0], keys[:, 1], switch_latency_ns)
