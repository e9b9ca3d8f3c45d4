"""The orchestrator's domain: scenarios, their runs, the points a run simulates and what each gave.

Plain dataclasses, free of protobuf and gRPC; `messages.py` is the one place that converts them to
and from the API's messages. What a simulation is built from (jobs, transport, faults, packet
settings, a mode's load-balancing parameters) is the simulator's to interpret: the core carries it
as `Opaque` settings it never reads, so that a scenario gives back exactly what it was given.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
from collections.abc import Mapping

from services.common.errors import FabricTwinError, status_code_number

__all__ = [
    "Comparison",
    "ComparisonRow",
    "Error",
    "FabricInfo",
    "JobState",
    "Mode",
    "ModeResult",
    "Opaque",
    "Outcome",
    "PlannedSimulation",
    "Run",
    "Scenario",
    "SimulatedSource",
    "SimulationRequest",
    "SimulationStatus",
    "Skew",
    "Sweep",
]


class JobState(enum.Enum):
    """Where a run or one of its simulations is in its life."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def terminal(self) -> bool:
        return self in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)


@dataclasses.dataclass(frozen=True)
class Opaque:
    """Settings the core carries without reading them, in the edge's encoding (round-trips unchanged)."""

    encoded: bytes = b""


@dataclasses.dataclass(frozen=True)
class Error:
    """Why something failed: a google.rpc.Code number and a message naming what was wrong."""

    code: int
    message: str

    @classmethod
    def of(cls, exc: FabricTwinError) -> Error:
        return cls(status_code_number(exc.code), str(exc))


@dataclasses.dataclass(frozen=True)
class Sweep:
    """One parameter of SimulationSpec (a dotted path such as `jobs.0.size_bytes`) and its values."""

    parameter: str
    values: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Mode:
    """What one simulation of a point runs: a load-balancing mode to compare (its label, its own or
    the mode's name, and its settings), or a what-if variant (a label, a load balancing and the
    fabric it runs on: repaired links, another routing engine)."""

    label: str
    load_balancing: Opaque
    fabric_state: Opaque = Opaque()  # the simulator's FabricState; empty: the fabric as stored


@dataclasses.dataclass(frozen=True)
class Scenario:
    """A fabric, a workload and the modes to compare on it, with sweeps over parameters."""

    name: str
    fabric: str
    modes: tuple[Mode, ...]
    simulation: Opaque  # jobs, fidelity, transport, faults, seed, packet settings
    sweeps: tuple[Sweep, ...] = ()
    display_name: str = ""
    store_telemetry: bool = False
    create_time: dt.datetime | None = None
    variants: tuple[Mode, ...] = ()  # what-if variants: when given, a run simulates these, not `modes`

    @property
    def simulated(self) -> tuple[Mode, ...]:
        """What each sweep point of a run simulates: the variants if any (one without load balancing
        of its own takes the first mode's), else the modes."""
        if not self.variants:
            return self.modes
        first = self.modes[0].load_balancing if self.modes else Opaque()
        return tuple(
            v if v.load_balancing.encoded else dataclasses.replace(v, load_balancing=first)
            for v in self.variants
        )


@dataclasses.dataclass(frozen=True)
class PlannedSimulation:
    """One simulation a run starts: a mode at a sweep point, at `position` in the run's results."""

    position: int
    mode: Mode
    sweep_point: Mapping[str, str]

    @property
    def label(self) -> str:
        return self.mode.label


@dataclasses.dataclass(frozen=True)
class SimulationRequest:
    """What a simulator is asked to run: a point of a scenario, under a name the run chose."""

    simulation_id: str
    scenario: Scenario
    point: PlannedSimulation
    telemetry_source: str = ""  # a source id, created by the run before the simulation starts
    routing_version: int = 0  # the routes it must run on (the run's pinned version); 0: current


@dataclasses.dataclass(frozen=True)
class Skew:
    """Per-link mean utilisation of one link group: how unevenly the links were used."""

    group: str = ""
    links: int = 0
    max_over_mean: float = 0.0
    coefficient_of_variation: float = 0.0
    share_hot: float = 0.0
    share_idle: float = 0.0


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What a finished simulation measured, as far as a run reports it."""

    makespan_ns: int = 0
    busbw_gbps: float = 0.0  # of the first job
    ideal_completion_ns: int = 0  # of the first job
    uplink_skew: Skew = Skew()
    model_notes: tuple[str, ...] = ()
    jobs: Opaque = Opaque()  # the per-job results, for the API


@dataclasses.dataclass(frozen=True)
class SimulationStatus:
    """A simulation as its simulator reports it."""

    name: str
    state: JobState
    routing_version: int = 0
    outcome: Outcome | None = None
    error: Error | None = None


@dataclasses.dataclass(frozen=True)
class FabricInfo:
    """A fabric as a run needs it: its name and the version of its current routes."""

    name: str
    routing_version: int


@dataclasses.dataclass(frozen=True)
class SimulatedSource:
    """The telemetry source a run creates for one simulation's per-link series."""

    source_id: str
    display_name: str
    fabric: str
    simulation: str  # `simulations/{simulation}`


@dataclasses.dataclass(frozen=True)
class ModeResult:
    """The outcome of one mode at one sweep point of a run."""

    label: str
    load_balancing: Opaque
    sweep_point: Mapping[str, str]
    state: JobState = JobState.PENDING
    simulation: str = ""
    routing_version: int = 0  # the routes it ran on: the run's pinned version
    fabric_state: Opaque = Opaque()  # a variant's fabric (repairs, routing engine); empty: as stored
    telemetry_source: str = ""
    outcome: Outcome | None = None
    error: Error | None = None


@dataclasses.dataclass
class Run:
    """A run of a scenario; the runner changes it as its simulations progress."""

    name: str
    scenario: Scenario
    state: JobState = JobState.PENDING
    routing_version: int = 0  # pinned when the run starts; every simulation runs on it
    stage: str = ""
    fraction: float = 0.0
    results: list[ModeResult] = dataclasses.field(default_factory=list)
    error: Error | None = None
    create_time: dt.datetime | None = None
    end_time: dt.datetime | None = None


@dataclasses.dataclass(frozen=True)
class ComparisonRow:
    """One mode result beside the others: its times and its slowdowns."""

    label: str
    result: ModeResult
    makespan_ns: int
    busbw_gbps: float
    slowdown_vs_baseline: float
    slowdown_vs_ideal: float


@dataclasses.dataclass(frozen=True)
class Comparison:
    """Mode results side by side, with the baseline row's label and a one-line summary."""

    rows: tuple[ComparisonRow, ...]
    baseline: str
    summary: str
