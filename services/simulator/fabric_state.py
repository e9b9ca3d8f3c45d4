"""A simulation on the fabric as it is now, or as it would be repaired.

The topology service stores each link's state: UP, DOWN (its routes go around it) or DEGRADED with a
bit error rate (what the twin's link-health estimate found in the counters). A spec says what to make
of them (`FabricStateSpec`):

- AS_STORED (default): DOWN links are routed around (the stored routes already do), and at PACKET
  fidelity a DEGRADED link loses packets at its bit error rate, by the loss model of an explicit
  BIT_ERRORS fault on it (a packet of W wire bytes is lost with probability 1 - (1 - BER)^(8W)). An
  explicit BIT_ERRORS or GILBERT_ELLIOTT fault on the link still overrides it. FLOW fidelity models
  no loss: its DEGRADED links run clean, and the notes say so.
- ALL_UP: every link UP and clean; the routes as the fabric's engine computes them with no failure.
- REPAIRED: as stored, except `repaired_links`, UP and clean, rerouted as when they come back.
- `routing_engine`: the routes another engine computes for the fabric, for this run only.

`view_of` turns the request into the snapshot to fetch (a what-if of the pinned routing version);
`with_stored_state` adds the implied faults and the notes naming the links whose state shaped the run.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from services.common.snapshot import FabricSnapshot
from services.simulator.faults import FaultKind, FaultSpec, resolve_link
from services.simulator.spec import Fidelity, LinkStatePolicy, SimulationSpec

__all__ = ["SnapshotView", "view_of", "with_stored_state"]


@dataclasses.dataclass(frozen=True)
class SnapshotView:
    """Which routes a simulation runs on: a routing version (0: the current one), links repaired
    (UP and clean, rerouted) and another routing engine ("" : the fabric's own), as the topology
    service computes them; nothing stored changes."""

    routing_version: int = 0
    up_links: tuple[int, ...] = ()
    routing_engine: str = ""

    @property
    def what_if(self) -> bool:
        return bool(self.up_links or self.routing_engine)


_UP, _DOWN, _DEGRADED = 1, 2, 3  # topology.proto LinkState
_NAMED = 8  # links a note names before it says "and N more"


def _names(snapshot: FabricSnapshot, links: np.ndarray, with_ber: bool = False) -> str:
    shown = []
    for link in links[:_NAMED].tolist():
        name = snapshot.link_names[link] if link < len(snapshot.link_names) else str(link)
        shown.append(f"{name} (BER {snapshot.link_ber[link]:.2g})" if with_ber else name)
    more = len(links) - len(shown)
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


def view_of(spec: SimulationSpec, stored: FabricSnapshot) -> SnapshotView:
    """The snapshot a spec runs on, given the stored routes of its routing version: the links to
    repair (REPAIRED's list; every link not UP-and-clean for ALL_UP) and the routing engine."""
    state = spec.fabric_state
    up: list[int] = []
    if state.link_state == LinkStatePolicy.REPAIRED:
        for i, name in enumerate(state.repaired_links):
            up.append(resolve_link(stored, name, f"fabric_state.repaired_links[{i}]"))
    elif state.link_state == LinkStatePolicy.ALL_UP:
        not_clean = (np.asarray(stored.link_state) != _UP) | (np.asarray(stored.link_ber) > 0)
        up = np.flatnonzero(not_clean).tolist()
    return SnapshotView(stored.routing_version, tuple(sorted(set(up))), state.routing_engine)


def with_stored_state(spec: SimulationSpec, snapshot: FabricSnapshot, view: SnapshotView) -> SimulationSpec:
    """`spec` with the faults the snapshot's DEGRADED links imply (PACKET) and notes on what shaped
    the run; `snapshot` is the one it runs on (repairs applied)."""
    states = np.asarray(snapshot.link_state)
    bers = np.asarray(snapshot.link_ber, dtype=np.float64)
    degraded = np.flatnonzero((states == _DEGRADED) & (bers > 0))
    down = np.flatnonzero(states == _DOWN)
    notes: list[str] = []
    state = spec.fabric_state
    if state.link_state == LinkStatePolicy.ALL_UP:
        notes.append(
            f"fabric state ALL_UP: {len(view.up_links)} links DOWN or DEGRADED in the fabric run UP and clean"
        )
    elif state.link_state == LinkStatePolicy.REPAIRED:
        notes.append(f"fabric state REPAIRED: {_names(snapshot, np.asarray(view.up_links))} run UP and clean")
    if state.routing_engine:
        notes.append(f"routed by {state.routing_engine} for this run (the fabric's own routes are not used)")
    faults = list(spec.faults)
    if degraded.size:
        if spec.fidelity == Fidelity.PACKET:
            overridden = set()
            for i, fault in enumerate(spec.faults):
                if fault.kind in (FaultKind.BIT_ERRORS, FaultKind.GILBERT_ELLIOTT):
                    overridden.add(resolve_link(snapshot, fault.link, f"faults[{i}].link"))
            implied = [link for link in degraded.tolist() if link not in overridden]
            faults += [
                FaultSpec(link=str(link), kind=FaultKind.BIT_ERRORS, bit_error_rate=float(bers[link]))
                for link in implied
            ]
            if implied:
                notes.append(
                    f"DEGRADED links lose packets at their stored bit error rate: "
                    f"{_names(snapshot, np.asarray(implied), with_ber=True)}"
                )
            if len(implied) < degraded.size:
                notes.append("an explicit fault overrides the stored bit error rate of its link")
        else:
            names = _names(snapshot, degraded)
            notes.append(f"DEGRADED links run clean at FLOW fidelity (bit errors need PACKET): {names}")
    if down.size:
        notes.append(f"DOWN links routed around: {_names(snapshot, down)}")
    return dataclasses.replace(
        spec, faults=tuple(faults), fabric_notes=tuple(notes), routing_version=snapshot.routing_version
    )
