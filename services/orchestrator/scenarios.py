"""Scenarios: validation, and expansion into one SimulationSpec per mode and sweep point.

A scenario is kept as its protobuf message (plain data; no gRPC here). Expansion takes the cartesian
product of the sweeps and, for each point, one simulation per load-balancing mode, so that every
mode of a point sees exactly the same workload, faults and seed.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

from fabrictwin.v1 import common_pb2, scenario_pb2, simulation_pb2
from google.protobuf import descriptor

from services.common.errors import InvalidArgument, ResourceExhausted

__all__ = [
    "DEFAULT_MAX_SIMULATIONS_PER_RUN",
    "PlannedSimulation",
    "check_run_size",
    "expand",
    "mode_label",
    "simulation_count",
    "validate_scenario",
]

# Simulations one run may start (--max-simulations-per-run; 0: no limit). A run keeps one result per
# simulation in memory and in its record, and every simulation is a call to a simulator replica:
# 10,000 is hours of simulator time and a record of a few megabytes.
DEFAULT_MAX_SIMULATIONS_PER_RUN = 10_000

_MODE_NAMES = {
    common_pb2.LOAD_BALANCING_MODE_ECMP: "ECMP",
    common_pb2.LOAD_BALANCING_MODE_ADAPTIVE: "ADAPTIVE",
    common_pb2.LOAD_BALANCING_MODE_SPRAY: "SPRAY",
    common_pb2.LOAD_BALANCING_MODE_FLOWLET: "FLOWLET",
}


def mode_label(lb: common_pb2.LoadBalancing) -> str:
    """The label of a mode: its own `label`, else its mode name (`ECMP`, `ADAPTIVE`, ...)."""
    return lb.label or _MODE_NAMES.get(lb.mode, "UNSPECIFIED")


@dataclasses.dataclass(frozen=True)
class PlannedSimulation:
    """One simulation a run will start."""

    label: str
    sweep_point: dict[str, str]
    spec: simulation_pb2.SimulationSpec


def simulation_count(scenario: scenario_pb2.Scenario) -> int:
    """Simulations a run of the scenario starts: sweep points (the product of the sweeps' lengths)
    times modes, computed from the lengths alone.

    >>> seeds = scenario_pb2.Sweep(parameter="seed", values=["1", "2", "3"])
    >>> simulation_count(scenario_pb2.Scenario(modes=[common_pb2.LoadBalancing()] * 2, sweeps=[seeds]))
    6
    """
    return math.prod(len(sweep.values) for sweep in scenario.sweeps) * len(scenario.modes)


def check_run_size(scenario: scenario_pb2.Scenario, max_simulations: int, field: str = "scenario") -> None:
    """ResourceExhausted when a run would start more than `max_simulations` simulations (0: no limit)."""
    if max_simulations <= 0:
        return
    count = simulation_count(scenario)
    if count <= max_simulations:
        return
    points = " x ".join(f"{len(sweep.values):,}" for sweep in scenario.sweeps) or "1"
    modes = len(scenario.modes)
    raise ResourceExhausted(
        f"{field}.sweeps: a run would start {count:,} simulations ({points} sweep point"
        f"{'s' if count != modes else ''} x {modes} "
        f"mode{'s' if modes != 1 else ''}), above this orchestrator's limit of {max_simulations:,} "
        "simulations per run (--max-simulations-per-run); sweep fewer values or split the scenario"
    )


def validate_scenario(scenario: scenario_pb2.Scenario, field: str = "scenario") -> None:
    """Reject what can be judged without the other services; names the offending field."""
    if not scenario.fabric:
        raise InvalidArgument(f"{field}.fabric", "required (a fabric name such as `fabrics/ft8`)")
    if not scenario.fabric.startswith("fabrics/") or scenario.fabric.count("/") != 1:
        raise InvalidArgument(
            f"{field}.fabric", f"{scenario.fabric!r} is not of the form `fabrics/{{fabric}}`"
        )
    if not scenario.jobs:
        raise InvalidArgument(f"{field}.jobs", "at least one job is required")
    for i, job in enumerate(scenario.jobs):
        if job.collective == simulation_pb2.COLLECTIVE_UNSPECIFIED:
            raise InvalidArgument(f"{field}.jobs[{i}].collective", "required")
        if job.collective != simulation_pb2.COLLECTIVE_POINT_TO_POINT and job.size_bytes <= 0:
            raise InvalidArgument(f"{field}.jobs[{i}].size_bytes", f"must be positive, got {job.size_bytes}")
    if not scenario.modes:
        raise InvalidArgument(f"{field}.modes", "at least one load-balancing mode is required")
    seen: set[str] = set()
    for i, lb in enumerate(scenario.modes):
        if lb.mode == common_pb2.LOAD_BALANCING_MODE_UNSPECIFIED:
            raise InvalidArgument(f"{field}.modes[{i}].mode", "required")
        label = mode_label(lb)
        if label in seen:
            raise InvalidArgument(
                f"{field}.modes[{i}].label", f"{label!r} is used twice; give each mode a distinct label"
            )
        seen.add(label)
    for i, sweep in enumerate(scenario.sweeps):
        if not sweep.values:
            raise InvalidArgument(f"{field}.sweeps[{i}].values", "at least one value is required")
        probe = simulation_pb2.SimulationSpec(jobs=list(scenario.jobs))
        for value in sweep.values:
            _set_path(probe, sweep.parameter, value, f"{field}.sweeps[{i}]")


def _base_spec(scenario: scenario_pb2.Scenario) -> simulation_pb2.SimulationSpec:
    spec = simulation_pb2.SimulationSpec(
        fabric=scenario.fabric,
        fidelity=scenario.fidelity,
        jobs=list(scenario.jobs),
        transport=scenario.transport,
        faults=list(scenario.faults),
        seed=scenario.seed,
        mtu_bytes=scenario.mtu_bytes,
        buffer_bytes=scenario.buffer_bytes,
        switch_latency_ns=scenario.switch_latency_ns,
        header_bytes=scenario.header_bytes,
    )
    if scenario.HasField("roce"):
        spec.roce.CopyFrom(scenario.roce)
    if scenario.HasField("infiniband"):
        spec.infiniband.CopyFrom(scenario.infiniband)
    return spec


def expand(
    scenario: scenario_pb2.Scenario, max_simulations: int = DEFAULT_MAX_SIMULATIONS_PER_RUN
) -> list[PlannedSimulation]:
    """Every (sweep point, mode) pair as a SimulationSpec, sweep points outermost.

    A run above `max_simulations` (0: no limit) is refused before any spec is built.
    """
    check_run_size(scenario, max_simulations)
    validate_scenario(scenario)
    axes = [[(s.parameter, v) for v in s.values] for s in scenario.sweeps]
    planned: list[PlannedSimulation] = []
    for point in itertools.product(*axes):
        for lb in scenario.modes:
            spec = _base_spec(scenario)
            spec.load_balancing.CopyFrom(lb)
            for parameter, value in point:
                _set_path(spec, parameter, value, "scenario.sweeps")
            planned.append(PlannedSimulation(mode_label(lb), dict(point), spec))
    return planned


_INTEGER_TYPES = {
    descriptor.FieldDescriptor.TYPE_INT32,
    descriptor.FieldDescriptor.TYPE_INT64,
    descriptor.FieldDescriptor.TYPE_UINT32,
    descriptor.FieldDescriptor.TYPE_UINT64,
    descriptor.FieldDescriptor.TYPE_SINT32,
    descriptor.FieldDescriptor.TYPE_SINT64,
}


def _set_path(spec: simulation_pb2.SimulationSpec, path: str, value: str, field: str) -> None:
    """Set a dotted path such as `jobs.0.size_bytes` or `load_balancing.seed` from its text value."""
    if not path:
        raise InvalidArgument(f"{field}.parameter", "required (e.g. `jobs.0.size_bytes`)")
    message = spec
    parts = path.split(".")
    try:
        i = 0
        while True:
            fd = message.DESCRIPTOR.fields_by_name.get(parts[i])
            if fd is None:
                raise KeyError(parts[i])
            if i == len(parts) - 1:
                break
            if fd.type != descriptor.FieldDescriptor.TYPE_MESSAGE:
                raise KeyError(parts[i])
            container = getattr(message, fd.name)
            if fd.is_repeated:
                message = container[int(parts[i + 1])]
                i += 2
            else:
                message = container
                i += 1
            if i >= len(parts):
                raise KeyError(path)
        if fd.is_repeated or fd.type == descriptor.FieldDescriptor.TYPE_MESSAGE:
            raise KeyError(parts[i])
    except (KeyError, ValueError, IndexError) as exc:
        raise InvalidArgument(
            f"{field}.parameter", f"{path!r} is not a scalar field of SimulationSpec"
        ) from exc
    try:
        if fd.type in _INTEGER_TYPES:
            parsed: object = int(float(value)) if "e" in value.lower() else int(value)
        elif fd.type in (descriptor.FieldDescriptor.TYPE_DOUBLE, descriptor.FieldDescriptor.TYPE_FLOAT):
            parsed = float(value)
        elif fd.type == descriptor.FieldDescriptor.TYPE_BOOL:
            if value.lower() not in ("true", "false", "1", "0"):
                raise ValueError(value)
            parsed = value.lower() in ("true", "1")
        elif fd.type == descriptor.FieldDescriptor.TYPE_ENUM:
            enum_value = fd.enum_type.values_by_name.get(value)
            if enum_value is None:
                raise ValueError(value)
            parsed = enum_value.number
        else:
            parsed = value
        setattr(message, fd.name, parsed)
    except (ValueError, TypeError) as exc:
        raise InvalidArgument(f"{field}.values", f"{value!r} is not a valid value for {path}") from exc
