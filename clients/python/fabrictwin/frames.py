"""DataFrames of FabricTwin's results and queries, and CSV or Parquet files of them.

`to_pandas(x)` takes what the SDK returns: a scenario `Run` or its `ModeResult`s (one row per mode,
variant and sweep point), a `Comparison`, a `Simulation` or `SimulationResult` (`table="jobs"`,
`"links"` or `"flows"`), a simulation's `LinkSeries` (one row per link direction and interval), and
every telemetry query (`Series`, `PortValue`, `SkewPoint`, `LossPoint`, `PortHealth`, or the
responses that hold them). Columns are built from the message fields themselves, not through
`MessageToDict`, so that zeros are kept (proto3 JSON drops them), 64-bit integers stay `int64`
(JSON makes them strings) and enums are their short names (`ECMP`, `SUCCEEDED`).

Times: every frame with times has `time_ns` (int64). Telemetry frames also have `time`: a UTC
datetime for live counters, or a timedelta since the run's start for simulated ones (a simulated
source's clock starts at 0; values under 1e15 ns, 11.6 days after 1970, cannot be a live cluster's).

pandas is an optional extra (`pip install 'fabrictwin[pandas]'`); Parquet also needs pyarrow
(`fabrictwin[parquet]`). Without them the SDK imports as before and these functions say what to install.

>>> frame = to_pandas(telemetry_pb2.TopLinksResponse(ports=[telemetry_pb2.PortValue(port="a", value=0.0)]))
>>> frame.to_dict("records")
[{'port': 'a', 'value': 0.0}]
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from fabrictwin.errors import InvalidArgumentError
from fabrictwin.extras import require
from fabrictwin.v1 import common_pb2, scenario_pb2, simulation_pb2, telemetry_pb2

__all__ = [
    "OUTPUT_FORMATS",
    "SIMULATION_TABLES",
    "link_series_frame",
    "message_frame",
    "mode_results_frame",
    "telemetry_series_frame",
    "to_pandas",
    "write_frame",
]

# pandas has no type information of its own (pandas-stubs is a separate package): frames are `Any`.
DataFrame = Any
OUTPUT_FORMATS = ("csv", "parquet")
SIMULATION_TABLES = ("jobs", "links", "flows")
_LIVE_CLOCK_FROM_NS = 10**15

_INTEGER_TYPES = {
    FieldDescriptor.TYPE_INT32: "int64",
    FieldDescriptor.TYPE_INT64: "int64",
    FieldDescriptor.TYPE_SINT32: "int64",
    FieldDescriptor.TYPE_SINT64: "int64",
    FieldDescriptor.TYPE_SFIXED32: "int64",
    FieldDescriptor.TYPE_SFIXED64: "int64",
    FieldDescriptor.TYPE_UINT32: "uint64",
    FieldDescriptor.TYPE_UINT64: "uint64",
    FieldDescriptor.TYPE_FIXED32: "uint64",
    FieldDescriptor.TYPE_FIXED64: "uint64",
}
_FLOAT_TYPES = {FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT}


def _pandas() -> Any:
    return require("pandas", "pandas", "DataFrames")


def _enum_name(field: FieldDescriptor, number: int) -> str:
    """`ECMP` for LOAD_BALANCING_MODE_ECMP: the value's name without its enum's common prefix."""
    enum = field.enum_type
    if enum is None:
        return str(number)
    value = enum.values_by_number.get(number)
    if value is None:
        return str(number)
    unspecified = next((v.name for v in enum.values if v.name.endswith("_UNSPECIFIED")), "")
    prefix = unspecified[: -len("UNSPECIFIED")] if unspecified else ""
    return value.name.removeprefix(prefix)


def _dtype(field: FieldDescriptor) -> str | None:
    if field.type in _INTEGER_TYPES:
        return _INTEGER_TYPES[field.type]
    if field.type in _FLOAT_TYPES:
        return "float64"
    if field.type == FieldDescriptor.TYPE_BOOL:
        return "bool"
    return None  # strings and enum names: pandas' string dtype


def _scalar_fields(descriptor: Descriptor) -> list[FieldDescriptor]:
    return [f for f in descriptor.fields if not f.is_repeated and f.type != FieldDescriptor.TYPE_MESSAGE]


def _column(values: Sequence[Any], dtype: str | None) -> Any:
    return _pandas().Series(list(values), dtype=dtype)


def _scalar_columns(messages: Sequence[Message], descriptor: Any, prefix: str = "") -> dict[str, Any]:
    """One column per scalar field of `descriptor`, in .proto order, zeros and empty strings kept."""
    columns: dict[str, Any] = {}
    for field in _scalar_fields(descriptor):
        values = [getattr(m, field.name) for m in messages]
        if field.type == FieldDescriptor.TYPE_ENUM:
            columns[prefix + field.name] = _column([_enum_name(field, v) for v in values], None)
        else:
            columns[prefix + field.name] = _column(values, _dtype(field))
    return columns


def message_frame(messages: Iterable[Message], descriptor: Descriptor | None = None) -> DataFrame:
    """One row per message, one column per scalar field (int64, float64, bool, str; enums by name).

    `descriptor` gives the columns of an empty list (`telemetry_pb2.PortValue.DESCRIPTOR`).
    """
    items = list(messages)
    if descriptor is not None:
        return _pandas().DataFrame(_scalar_columns(items, descriptor))
    if not items:
        return _pandas().DataFrame()
    # (a message's DESCRIPTOR is typed as a union of protobuf's two implementations)
    return _pandas().DataFrame(_scalar_columns(items, items[0].DESCRIPTOR))


def _sweep_value(text: str) -> int | float | str:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text


def _sweep_columns(results: Sequence[scenario_pb2.ModeResult]) -> dict[str, Any]:
    """One column per swept parameter, named as in the scenario (`jobs.0.size_bytes`), numbers as numbers."""
    keys = sorted({key for r in results for key in r.sweep_point})
    columns: dict[str, Any] = {}
    for key in keys:
        values = [_sweep_value(r.sweep_point[key]) if key in r.sweep_point else None for r in results]
        if all(isinstance(v, int) for v in values):
            columns[key] = _column(values, "int64")
        elif all(isinstance(v, (int, float)) for v in values):
            columns[key] = _column(values, "float64")
        else:
            columns[key] = _column([None if v is None else str(v) for v in values], None)
    return columns


def mode_results_frame(results: Iterable[scenario_pb2.ModeResult], run: str = "") -> DataFrame:
    """One row per mode result (mode, variant or sweep point): label, mode, swept parameters, state,
    makespan, busbw, ideal completion, the uplink skew and the fabric state it ran on."""
    items = list(results)
    descriptor = scenario_pb2.ModeResult.DESCRIPTOR
    columns: dict[str, Any] = {}
    if run:
        columns["run"] = _column([run] * len(items), None)
    scalars = _scalar_columns(items, descriptor)
    columns["label"] = scalars.pop("label")
    columns["mode"] = _column(
        [
            _enum_name(common_pb2.LoadBalancing.DESCRIPTOR.fields_by_name["mode"], r.load_balancing.mode)
            for r in items
        ],
        None,
    )
    columns.update(_sweep_columns(items))
    columns.update(scalars)
    columns["completion_ns"] = _column(
        [r.jobs[0].completion_ns if r.jobs else r.makespan_ns for r in items], "int64"
    )
    columns.update(
        _scalar_columns([r.uplink_skew for r in items], simulation_pb2.UtilisationSkew.DESCRIPTOR, "uplink_")
    )
    columns["link_state"] = _column(
        [
            _enum_name(
                simulation_pb2.FabricState.DESCRIPTOR.fields_by_name["link_state"], r.fabric_state.link_state
            )
            for r in items
        ],
        None,
    )
    columns["error"] = _column([r.error.message for r in items], None)
    return _pandas().DataFrame(columns)


def _comparison_frame(comparison: scenario_pb2.Comparison) -> DataFrame:
    rows = list(comparison.rows)
    columns = _scalar_columns(rows, scenario_pb2.ComparisonRow.DESCRIPTOR)
    columns["baseline"] = _column([r.label == comparison.baseline for r in rows], "bool")
    modes = mode_results_frame([r.result for r in rows])
    frame = _pandas().DataFrame(columns)
    extra = [c for c in modes.columns if c not in frame.columns]
    return _pandas().concat([frame, modes[extra]], axis=1)


def _simulation_frame(result: simulation_pb2.SimulationResult, table: str) -> DataFrame:
    if table == "jobs":
        return message_frame(result.jobs, simulation_pb2.JobResult.DESCRIPTOR)
    if table == "links":
        return message_frame(result.links, simulation_pb2.LinkTotal.DESCRIPTOR)
    if table == "flows":
        frame = message_frame(result.flows, simulation_pb2.FlowResult.DESCRIPTOR)
        frame["completion_ns"] = frame["finish_ns"] - frame["start_ns"]
        frame["links"] = _column([list(f.links) for f in result.flows], "object")
        return frame
    raise InvalidArgumentError(f"table: {table!r} is not one of {', '.join(SIMULATION_TABLES)}")


_SERIES_ARRAYS = [
    f
    for f in simulation_pb2.LinkSeries.DESCRIPTOR.fields
    if f.is_repeated and f.type != FieldDescriptor.TYPE_MESSAGE
]


def link_series_frame(series: Iterable[simulation_pb2.LinkSeries]) -> DataFrame:
    """One row per link direction and interval: link, direction, display_name, time_ns and every
    per-interval array the run reported (utilisation, bytes, drops, queues, ...).

    An array no series reported (queue depth at FLOW fidelity) is left out; one that only some
    series reported is a nullable column (pandas' Int64 / Float64) with <NA> where it was missing.
    """
    items = list(series)
    lengths = [max((len(getattr(s, f.name)) for f in _SERIES_ARRAYS), default=0) for s in items]
    columns: dict[str, Any] = {
        "link": _column([s.link for s, n in zip(items, lengths, strict=True) for _ in range(n)], "int64"),
        "direction": _column(
            [s.direction for s, n in zip(items, lengths, strict=True) for _ in range(n)], "int64"
        ),
        "display_name": _column(
            [s.display_name for s, n in zip(items, lengths, strict=True) for _ in range(n)], None
        ),
        "time_ns": _column(
            [s.start_ns + i * s.interval_ns for s, n in zip(items, lengths, strict=True) for i in range(n)],
            "int64",
        ),
    }
    for field in _SERIES_ARRAYS:
        reported = [len(getattr(s, field.name)) == n for s, n in zip(items, lengths, strict=True)]
        if not any(reported[i] and lengths[i] for i in range(len(items))):
            continue
        dtype = _dtype(field) or "object"
        values: list[Any] = []
        for s, n, ok in zip(items, lengths, reported, strict=True):
            values.extend(getattr(s, field.name) if ok else [None] * n)
        if not all(reported):
            dtype = "Float64" if dtype == "float64" else "Int64"
        columns[field.name] = _column(values, dtype)
    return _pandas().DataFrame(columns)


def _time_column(time_ns: Any) -> Any:
    pd = _pandas()
    if len(time_ns) and int(time_ns.min()) >= _LIVE_CLOCK_FROM_NS:
        return pd.to_datetime(time_ns, unit="ns", utc=True)
    return pd.to_timedelta(time_ns, unit="ns")


def _with_time(frame: DataFrame) -> DataFrame:
    position = list(frame.columns).index("time_ns") + 1
    frame.insert(position, "time", _time_column(frame["time_ns"]))
    return frame


def telemetry_series_frame(series: Iterable[telemetry_pb2.Series]) -> DataFrame:
    """One row per port and sample (or bucket): port, time_ns, time and value."""
    items = list(series)
    frame = _pandas().DataFrame(
        {
            "port": _column([s.port for s in items for _ in s.time_ns], None),
            "time_ns": _column([t for s in items for t in s.time_ns], "int64"),
            "value": _column([v for s in items for v in s.values], "float64"),
        }
    )
    return _with_time(frame)


def _points_frame(points: Iterable[Message], descriptor: Descriptor) -> DataFrame:
    return _with_time(message_frame(points, descriptor))


# Lists the SDK returns, by the type of their items.
_LISTS: Mapping[str, Any] = {
    scenario_pb2.ModeResult.DESCRIPTOR.full_name: mode_results_frame,
    simulation_pb2.LinkSeries.DESCRIPTOR.full_name: link_series_frame,
    telemetry_pb2.Series.DESCRIPTOR.full_name: telemetry_series_frame,
    telemetry_pb2.SkewPoint.DESCRIPTOR.full_name: lambda items: _points_frame(
        items, telemetry_pb2.SkewPoint.DESCRIPTOR
    ),
    telemetry_pb2.LossPoint.DESCRIPTOR.full_name: lambda items: _points_frame(
        items, telemetry_pb2.LossPoint.DESCRIPTOR
    ),
}


def to_pandas(data: Message | Iterable[Message], *, table: str = "jobs") -> DataFrame:
    """A DataFrame of a result or a query's answer (see the module's docstring for what each gives).

    `table` chooses the table of a Simulation or SimulationResult: "jobs", "links" or "flows".
    An empty list gives an empty DataFrame (the SDK cannot tell what it would have held).
    """
    if isinstance(data, scenario_pb2.Run):
        return mode_results_frame(data.results, run=data.name)
    if isinstance(data, scenario_pb2.Comparison):
        return _comparison_frame(data)
    if isinstance(data, simulation_pb2.Simulation):
        return _simulation_frame(data.result, table)
    if isinstance(data, simulation_pb2.SimulationResult):
        return _simulation_frame(data, table)
    if isinstance(data, simulation_pb2.ListLinkSeriesResponse):
        return link_series_frame(data.series)
    if isinstance(data, telemetry_pb2.QuerySeriesResponse):
        return telemetry_series_frame(data.series)
    if isinstance(data, telemetry_pb2.TopLinksResponse):
        return message_frame(data.ports, telemetry_pb2.PortValue.DESCRIPTOR)
    if isinstance(data, telemetry_pb2.GetUtilisationSkewResponse):
        return _points_frame(data.points, telemetry_pb2.SkewPoint.DESCRIPTOR)
    if isinstance(data, telemetry_pb2.GetLossHistoryResponse):
        return _points_frame(data.points, telemetry_pb2.LossPoint.DESCRIPTOR)
    if isinstance(data, telemetry_pb2.GetPortHealthResponse):
        return message_frame(data.ports, telemetry_pb2.PortHealth.DESCRIPTOR)
    items = [data] if isinstance(data, Message) else list(data)
    if not items:
        return _pandas().DataFrame()
    kinds = {m.DESCRIPTOR.full_name for m in items}
    if len(kinds) > 1:
        raise InvalidArgumentError(
            f"to_pandas: one kind of message at a time, got {', '.join(sorted(kinds))}"
        )
    build = _LISTS.get(kinds.pop())
    return build(items) if build is not None else message_frame(items)


def write_frame(frame: DataFrame, path: str | pathlib.Path, file_format: str | None = None) -> pathlib.Path:
    """Write `frame` as CSV or Parquet (`file_format`, else the file's suffix); returns the path.

    CSV keeps int64 columns as integers and writes times as ISO 8601; Parquet keeps every dtype
    and needs pyarrow (`pip install 'fabrictwin[parquet]'`).
    """
    target = pathlib.Path(path)
    chosen = (file_format or target.suffix.lstrip(".") or "csv").lower()
    if chosen not in OUTPUT_FORMATS:
        raise InvalidArgumentError(f"output format {chosen!r} is not one of {', '.join(OUTPUT_FORMATS)}")
    if chosen == "parquet":
        require("pyarrow", "parquet", "Parquet files")
        frame.to_parquet(target, index=False)
    else:
        frame.to_csv(target, index=False)
    return target
