"""The orchestrator's edge: API messages <-> the domain of `model.py`, and the checks of a request.

The one module of the orchestrator that reads protobuf fields (the peers' adapters call it for the
simulator's messages, the store for the bytes it keeps). `validate_scenario` judges a Scenario
message before it becomes a domain `Scenario`; `build_spec` turns one point of a run into the
SimulationSpec the simulator runs, applying the point's sweep values by their SimulationSpec paths.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from fabrictwin.v1 import common_pb2, scenario_pb2, simulation_pb2, telemetry_pb2, topology_pb2
from google.protobuf import descriptor, timestamp_pb2

from services.common.errors import InvalidArgument
from services.orchestrator.diagnosis import Finding, PortValue, Window
from services.orchestrator.model import (
    Comparison,
    Error,
    JobState,
    Mode,
    ModeResult,
    Opaque,
    Outcome,
    Run,
    Scenario,
    SimulationRequest,
    SimulationStatus,
    Skew,
    Sweep,
)

__all__ = [
    "build_spec",
    "comparison_to_proto",
    "finding_to_proto",
    "mode_label",
    "port_values",
    "result_from_proto",
    "result_to_proto",
    "run_from_proto",
    "run_to_proto",
    "scenario_from_proto",
    "scenario_to_proto",
    "simulation_status",
    "state_number",
    "validate_fabric_state",
    "validate_scenario",
    "what_if_scenario",
    "window_from_proto",
]

_STATE_NUMBERS: dict[JobState, common_pb2.JobState.ValueType] = {
    JobState.PENDING: common_pb2.JOB_STATE_PENDING,
    JobState.RUNNING: common_pb2.JOB_STATE_RUNNING,
    JobState.SUCCEEDED: common_pb2.JOB_STATE_SUCCEEDED,
    JobState.FAILED: common_pb2.JOB_STATE_FAILED,
    JobState.CANCELLED: common_pb2.JOB_STATE_CANCELLED,
}
_STATES: dict[int, JobState] = {number: state for state, number in _STATE_NUMBERS.items()}

_MODE_NAMES = {
    common_pb2.LOAD_BALANCING_MODE_ECMP: "ECMP",
    common_pb2.LOAD_BALANCING_MODE_ADAPTIVE: "ADAPTIVE",
    common_pb2.LOAD_BALANCING_MODE_SPRAY: "SPRAY",
    common_pb2.LOAD_BALANCING_MODE_FLOWLET: "FLOWLET",
}

# Scenario fields the domain model holds itself; every other field travels in `Scenario.simulation`.
_SCENARIO_OWN = (
    "name",
    "display_name",
    "fabric",
    "modes",
    "sweeps",
    "store_telemetry",
    "create_time",
    "variants",
)
_MAX_LABEL = 128  # characters of a mode or variant label, as the simulator's
_MAX_REPAIRS = 10_000  # links one variant repairs (FabricState.repaired_links)


def mode_label(lb: common_pb2.LoadBalancing) -> str:
    """The label of a mode: its own `label`, else its mode name (`ECMP`, `ADAPTIVE`, ...)."""
    return lb.label or _MODE_NAMES.get(lb.mode, "UNSPECIFIED")


def state_number(state: JobState) -> int:
    """The API's JobState number of a state (also what the store's `state` columns hold)."""
    return int(_STATE_NUMBERS[state])


def _state(number: int) -> JobState:
    return _STATES.get(number, JobState.PENDING)


def _time(stamp: timestamp_pb2.Timestamp, present: bool) -> dt.datetime | None:
    return stamp.ToDatetime(tzinfo=dt.UTC) if present else None


def _error(status: common_pb2.ErrorStatus) -> Error:
    return Error(status.code, status.message)


# Scenarios --------------------------------------------------------------------------------------


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
    labels: set[str] = set()
    for i, variant in enumerate(scenario.variants):
        where = f"{field}.variants[{i}]"
        if not variant.label:
            raise InvalidArgument(
                f"{where}.label", "required (what the variant changes, e.g. `repair leaf-3/p17`)"
            )
        if len(variant.label) > _MAX_LABEL:
            raise InvalidArgument(
                f"{where}.label", f"at most {_MAX_LABEL} characters, got {len(variant.label)}"
            )
        if variant.label in labels:
            raise InvalidArgument(f"{where}.label", f"{variant.label!r} is used twice")
        labels.add(variant.label)
        if variant.HasField("load_balancing") and variant.load_balancing.mode == (
            common_pb2.LOAD_BALANCING_MODE_UNSPECIFIED
        ):
            raise InvalidArgument(f"{where}.load_balancing.mode", "required when load_balancing is given")
        validate_fabric_state(variant.fabric_state, f"{where}.fabric_state")
    for i, sweep in enumerate(scenario.sweeps):
        if not sweep.values:
            raise InvalidArgument(f"{field}.sweeps[{i}].values", "at least one value is required")
        probe = simulation_pb2.SimulationSpec(jobs=list(scenario.jobs))
        for value in sweep.values:
            _set_path(probe, sweep.parameter, value, f"{field}.sweeps[{i}]")


def validate_fabric_state(state: simulation_pb2.FabricState, field: str) -> None:
    """What a FabricState can be judged on without the fabric (the simulator checks the links)."""
    policy = state.link_state
    if policy not in simulation_pb2.LinkStatePolicy.values():
        raise InvalidArgument(f"{field}.link_state", f"unknown link state policy {policy}")
    if state.repaired_links and policy != simulation_pb2.LINK_STATE_POLICY_REPAIRED:
        raise InvalidArgument(f"{field}.repaired_links", "only with link_state LINK_STATE_POLICY_REPAIRED")
    if policy == simulation_pb2.LINK_STATE_POLICY_REPAIRED and not state.repaired_links:
        raise InvalidArgument(f"{field}.repaired_links", "name at least one link to repair")
    if len(state.repaired_links) > _MAX_REPAIRS:
        raise InvalidArgument(f"{field}.repaired_links", f"at most {_MAX_REPAIRS:,} links")
    for i, link in enumerate(state.repaired_links):
        if not link or len(link) > 1024:
            raise InvalidArgument(f"{field}.repaired_links[{i}]", "a link index or display name")
    if state.routing_engine == topology_pb2.ROUTING_ENGINE_FILE:
        raise InvalidArgument(f"{field}.routing_engine", "a what-if cannot route by a dump (FILE)")
    if state.routing_engine not in topology_pb2.RoutingEngine.values():
        raise InvalidArgument(f"{field}.routing_engine", f"unknown routing engine {state.routing_engine}")


def _variant(variant: scenario_pb2.Variant) -> Mode:
    """A variant as given: no load balancing (empty) means the scenario's first mode's (model.py)."""
    lb = (
        variant.load_balancing.SerializeToString(deterministic=True)
        if variant.HasField("load_balancing")
        else b""
    )
    state = (
        variant.fabric_state.SerializeToString(deterministic=True)
        if variant.HasField("fabric_state")
        else b""
    )
    return Mode(variant.label, Opaque(lb), Opaque(state))


def scenario_from_proto(message: scenario_pb2.Scenario) -> Scenario:
    """The domain scenario of a (validated) Scenario message."""
    rest = scenario_pb2.Scenario()
    rest.CopyFrom(message)
    for name in _SCENARIO_OWN:
        rest.ClearField(name)  # type: ignore[arg-type]
    return Scenario(
        name=message.name,
        display_name=message.display_name,
        fabric=message.fabric,
        modes=tuple(
            Mode(mode_label(lb), Opaque(lb.SerializeToString(deterministic=True))) for lb in message.modes
        ),
        sweeps=tuple(Sweep(s.parameter, tuple(s.values)) for s in message.sweeps),
        store_telemetry=message.store_telemetry,
        variants=tuple(_variant(v) for v in message.variants),
        simulation=Opaque(rest.SerializeToString(deterministic=True)),
        create_time=_time(message.create_time, message.HasField("create_time")),
    )


def scenario_to_proto(scenario: Scenario) -> scenario_pb2.Scenario:
    message = scenario_pb2.Scenario.FromString(scenario.simulation.encoded)
    message.name = scenario.name
    message.display_name = scenario.display_name
    message.fabric = scenario.fabric
    message.modes.extend(
        common_pb2.LoadBalancing.FromString(m.load_balancing.encoded) for m in scenario.modes
    )
    message.sweeps.extend(scenario_pb2.Sweep(parameter=s.parameter, values=s.values) for s in scenario.sweeps)
    message.store_telemetry = scenario.store_telemetry
    for variant in scenario.variants:
        added = message.variants.add(label=variant.label)
        if variant.fabric_state.encoded:
            added.fabric_state.MergeFromString(variant.fabric_state.encoded)
        if variant.load_balancing.encoded:
            added.load_balancing.MergeFromString(variant.load_balancing.encoded)
    if scenario.create_time is not None:
        message.create_time.FromDatetime(scenario.create_time)
    return message


def build_spec(request: SimulationRequest) -> simulation_pb2.SimulationSpec:
    """The SimulationSpec of one point of a run: the scenario's workload, the point's mode and sweep
    values, and the telemetry source its series go to."""
    settings = scenario_pb2.Scenario.FromString(request.scenario.simulation.encoded)
    spec = simulation_pb2.SimulationSpec(
        fabric=request.scenario.fabric,
        fidelity=settings.fidelity,
        jobs=list(settings.jobs),
        transport=settings.transport,
        faults=list(settings.faults),
        seed=settings.seed,
        mtu_bytes=settings.mtu_bytes,
        buffer_bytes=settings.buffer_bytes,
        switch_latency_ns=settings.switch_latency_ns,
        header_bytes=settings.header_bytes,
        telemetry_source=request.telemetry_source,
        routing_version=request.routing_version,
    )
    spec.fabric_state.MergeFromString(request.point.mode.fabric_state.encoded)
    if settings.HasField("roce"):
        spec.roce.CopyFrom(settings.roce)
    if settings.HasField("infiniband"):
        spec.infiniband.CopyFrom(settings.infiniband)
    spec.load_balancing.MergeFromString(request.point.mode.load_balancing.encoded)
    for parameter, value in request.point.sweep_point.items():
        _set_path(spec, parameter, value, "scenario.sweeps")
    return spec


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
    message: object = spec
    parts = path.split(".")
    try:
        i = 0
        while True:
            fd = message.DESCRIPTOR.fields_by_name.get(parts[i])  # type: ignore[attr-defined]
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
        parsed: object
        if fd.type in _INTEGER_TYPES:
            parsed = int(float(value)) if "e" in value.lower() else int(value)
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


# Simulations ------------------------------------------------------------------------------------


def _jobs(jobs: Sequence[simulation_pb2.JobResult]) -> Opaque:
    return Opaque(scenario_pb2.ModeResult(jobs=jobs).SerializeToString(deterministic=True))


def _skew(skew: simulation_pb2.UtilisationSkew) -> Skew:
    return Skew(
        skew.group,
        skew.links,
        skew.max_over_mean,
        skew.coefficient_of_variation,
        skew.share_hot,
        skew.share_idle,
    )


def simulation_status(simulation: simulation_pb2.Simulation) -> SimulationStatus:
    """A Simulation message as the run sees it."""
    state = _state(simulation.state)
    outcome = None
    if state is JobState.SUCCEEDED:
        result = simulation.result
        first = result.jobs[0] if result.jobs else simulation_pb2.JobResult()
        outcome = Outcome(
            makespan_ns=result.makespan_ns,
            busbw_gbps=first.busbw_gbps,
            ideal_completion_ns=first.ideal_completion_ns,
            uplink_skew=_skew(result.uplink_skew),
            model_notes=tuple(result.model_notes),
            jobs=_jobs(result.jobs),
        )
    error = _error(simulation.error) if simulation.HasField("error") else None
    return SimulationStatus(simulation.name, state, simulation.routing_version, outcome, error)


# Runs and their results -------------------------------------------------------------------------


def result_to_proto(result: ModeResult) -> scenario_pb2.ModeResult:
    message = scenario_pb2.ModeResult(
        label=result.label,
        sweep_point=dict(result.sweep_point),
        simulation=result.simulation,
        state=_STATE_NUMBERS[result.state],
        telemetry_source=result.telemetry_source,
        routing_version=result.routing_version,
    )
    message.load_balancing.MergeFromString(result.load_balancing.encoded)
    message.fabric_state.MergeFromString(result.fabric_state.encoded)
    if result.outcome is not None:
        outcome = result.outcome
        message.makespan_ns = outcome.makespan_ns
        message.busbw_gbps = outcome.busbw_gbps
        message.ideal_completion_ns = outcome.ideal_completion_ns
        skew = outcome.uplink_skew
        message.uplink_skew.CopyFrom(
            simulation_pb2.UtilisationSkew(
                group=skew.group,
                links=skew.links,
                max_over_mean=skew.max_over_mean,
                coefficient_of_variation=skew.coefficient_of_variation,
                share_hot=skew.share_hot,
                share_idle=skew.share_idle,
            )
        )
        message.model_notes.extend(outcome.model_notes)
        message.MergeFromString(outcome.jobs.encoded)  # the per-job results
    if result.error is not None:
        message.error.CopyFrom(common_pb2.ErrorStatus(code=result.error.code, message=result.error.message))
    return message


def result_from_proto(message: scenario_pb2.ModeResult) -> ModeResult:
    state = _state(message.state)
    outcome = None
    if state is JobState.SUCCEEDED:
        outcome = Outcome(
            makespan_ns=message.makespan_ns,
            busbw_gbps=message.busbw_gbps,
            ideal_completion_ns=message.ideal_completion_ns,
            uplink_skew=_skew(message.uplink_skew),
            model_notes=tuple(message.model_notes),
            jobs=_jobs(message.jobs),
        )
    return ModeResult(
        label=message.label,
        load_balancing=Opaque(message.load_balancing.SerializeToString(deterministic=True)),
        sweep_point=dict(message.sweep_point),
        state=state,
        simulation=message.simulation,
        routing_version=message.routing_version,
        fabric_state=Opaque(
            message.fabric_state.SerializeToString(deterministic=True)
            if message.HasField("fabric_state")
            else b""
        ),
        telemetry_source=message.telemetry_source,
        outcome=outcome,
        error=_error(message.error) if message.HasField("error") else None,
    )


def run_to_proto(run: Run, with_results: bool = True) -> scenario_pb2.Run:
    """The Run message; `with_results=False` leaves the results out (the store keeps them apart)."""
    message = scenario_pb2.Run(
        name=run.name,
        state=_STATE_NUMBERS[run.state],
        progress=common_pb2.Progress(fraction=run.fraction, stage=run.stage),
        scenario=scenario_to_proto(run.scenario),
        routing_version=run.routing_version,
    )
    if with_results:
        message.results.extend(result_to_proto(r) for r in run.results)
    if run.error is not None:
        message.error.CopyFrom(common_pb2.ErrorStatus(code=run.error.code, message=run.error.message))
    if run.create_time is not None:
        message.create_time.FromDatetime(run.create_time)
    if run.end_time is not None:
        message.end_time.FromDatetime(run.end_time)
    return message


def run_from_proto(message: scenario_pb2.Run) -> Run:
    return Run(
        name=message.name,
        scenario=scenario_from_proto(message.scenario),
        state=_state(message.state),
        routing_version=message.routing_version,
        stage=message.progress.stage,
        fraction=message.progress.fraction,
        results=[result_from_proto(r) for r in message.results],
        error=_error(message.error) if message.HasField("error") else None,
        create_time=_time(message.create_time, message.HasField("create_time")),
        end_time=_time(message.end_time, message.HasField("end_time")),
    )


def comparison_to_proto(comparison: Comparison) -> scenario_pb2.Comparison:
    rows = [
        scenario_pb2.ComparisonRow(
            label=row.label,
            makespan_ns=row.makespan_ns,
            busbw_gbps=row.busbw_gbps,
            slowdown_vs_baseline=row.slowdown_vs_baseline,
            slowdown_vs_ideal=row.slowdown_vs_ideal,
            uplink_max_over_mean=row.result.outcome.uplink_skew.max_over_mean if row.result.outcome else 0.0,
            uplink_share_hot=row.result.outcome.uplink_skew.share_hot if row.result.outcome else 0.0,
            uplink_share_idle=row.result.outcome.uplink_skew.share_idle if row.result.outcome else 0.0,
            result=result_to_proto(row.result),
        )
        for row in comparison.rows
    ]
    return scenario_pb2.Comparison(rows=rows, baseline=comparison.baseline, summary=comparison.summary)


# Diagnosis --------------------------------------------------------------------------------------


def window_from_proto(message: common_pb2.TimeRange) -> Window:
    return Window(message.start_ns, message.end_ns)


def port_values(values: Sequence[telemetry_pb2.PortValue]) -> list[PortValue]:
    return [PortValue(v.port, v.value) for v in values]


def finding_to_proto(finding: Finding) -> scenario_pb2.Finding:
    message = scenario_pb2.Finding(
        kind=scenario_pb2.FindingKind.Value(f"FINDING_KIND_{finding.kind.value}"),
        severity=scenario_pb2.Severity.Value(f"SEVERITY_{finding.severity.name}"),
        ports=finding.ports,
        evidence=finding.evidence,
        suggestion=finding.suggestion,
    )
    if finding.window is not None:
        message.time_range.CopyFrom(
            common_pb2.TimeRange(start_ns=finding.window.start_ns, end_ns=finding.window.end_ns)
        )
    return message


# What-if ------------------------------------------------------------------------------------------

AS_IS = "as-is"


def what_if_scenario(request: scenario_pb2.RunWhatIfRequest) -> scenario_pb2.Scenario:
    """The scenario of a RunWhatIf request: `as-is`, one variant per change, and all the changes
    together when there are several (each change applied to the as-is fabric and mode)."""
    base = request.scenario
    if base.variants:
        raise InvalidArgument("scenario.variants", "leave empty: RunWhatIf builds them from the changes")
    if not base.modes:
        raise InvalidArgument(
            "scenario.modes", "give the load balancing of the fabric as it is now (modes[0])"
        )
    changes: list[tuple[str, common_pb2.LoadBalancing | None, simulation_pb2.FabricState]] = []
    repaired: list[str] = []
    for i, link in enumerate(request.repair_links):
        if not link or len(link) > 1024:
            raise InvalidArgument(f"repair_links[{i}]", "a link index or display name")
        if link in repaired:
            raise InvalidArgument(f"repair_links[{i}]", f"{link!r} is named twice")
        repaired.append(link)
        state = simulation_pb2.FabricState(
            link_state=simulation_pb2.LINK_STATE_POLICY_REPAIRED, repaired_links=[link]
        )
        changes.append((f"repair {link}"[:_MAX_LABEL], None, state))
    engines: list[int] = []
    for i, engine in enumerate(request.routing_engines):
        if engine == topology_pb2.ROUTING_ENGINE_UNSPECIFIED or engine in engines:
            raise InvalidArgument(f"routing_engines[{i}]", "a routing engine, each once")
        engines.append(engine)
        name = topology_pb2.RoutingEngine.Name(engine).removeprefix("ROUTING_ENGINE_").lower()
        changes.append((f"routing {name}", None, simulation_pb2.FabricState(routing_engine=engine)))
    for i, lb in enumerate(request.modes):
        if lb.mode == common_pb2.LOAD_BALANCING_MODE_UNSPECIFIED:
            raise InvalidArgument(f"modes[{i}].mode", "required")
        changes.append((mode_label(lb), lb, simulation_pb2.FabricState()))
    if request.all_clean:
        state = simulation_pb2.FabricState(link_state=simulation_pb2.LINK_STATE_POLICY_ALL_UP)
        changes.append(("all links clean", None, state))
    if not changes:
        raise InvalidArgument("repair_links", "name at least one change (a repair, a routing engine, a mode)")
    scenario = scenario_pb2.Scenario()
    scenario.CopyFrom(base)
    scenario.variants.add(label=AS_IS)
    for label, changed_lb, state in changes:
        variant = scenario.variants.add(label=label, fabric_state=state)
        if changed_lb is not None:
            variant.load_balancing.CopyFrom(changed_lb)
    if len(changes) > 1:
        together = scenario.variants.add(label="all changes")
        combined = simulation_pb2.FabricState()
        if request.all_clean:
            combined.link_state = simulation_pb2.LINK_STATE_POLICY_ALL_UP
        elif repaired:
            combined.link_state = simulation_pb2.LINK_STATE_POLICY_REPAIRED
            combined.repaired_links.extend(repaired)
        if engines:
            if len(engines) > 1:
                raise InvalidArgument("routing_engines", "all changes together take one routing engine")
            combined.routing_engine = engines[0]  # type: ignore[assignment]
        together.fabric_state.CopyFrom(combined)
        if request.modes:
            if len(request.modes) > 1:
                raise InvalidArgument("modes", "all changes together take one load-balancing mode")
            together.load_balancing.CopyFrom(request.modes[0])
    validate_scenario(scenario)
    return scenario
