"""`client.telemetry`: sources, columnar ingest, importers, mirroring and queries (TelemetryService).

Samples travel as columnar batches (`SampleBatch`): a dictionary of port names, then one array per
column (port index, time, one per metric), packed little-endian with the standard library so that the
SDK needs no numpy. `ingest_columns` does the packing and splits the rows into batches;
`import_text`/`import_file` read perfquery, Prometheus or CSV text (`fabrictwin.importers`), and
`mirror` streams a live source in poll by poll (`fabrictwin.mirror`). Every ingest is acknowledged
batch by batch and resumes after a cut (`fabrictwin.resumable_ingest`): a service restarted
mid-stream costs a few re-sent batches, and no row is stored twice.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TypeVar

from google.protobuf import field_mask_pb2

from fabrictwin.arrays import pack_numeric_array
from fabrictwin.connection import Connection
from fabrictwin.errors import InvalidArgumentError
from fabrictwin.importers import SampleColumns
from fabrictwin.mirror import MirrorReport, Poll, run_mirror, text_parser
from fabrictwin.names import enum_value, resource_name
from fabrictwin.port_names import prometheus_parser
from fabrictwin.resumable_ingest import DEFAULT_RESUME_S, resumable_ingest
from fabrictwin.v1 import common_pb2, telemetry_pb2, telemetry_pb2_grpc, topology_pb2

__all__ = ["DEFAULT_BATCH_ROWS", "TelemetryApi", "column_batches", "sample_batches"]

EnumLike = int | str
# A metric named or numbered: the key of `columns` and `counter_kinds`. Type variables rather than
# EnumLike, since a Mapping is invariant in its key (a dict[str, ...] is no Mapping[int | str, ...]).
ColumnKey = TypeVar("ColumnKey", bound=EnumLike)
KindKey = TypeVar("KindKey", bound=EnumLike)

# Rows per SampleBatch: about 1.6 MB per batch with three metric columns, well under message limits.
DEFAULT_BATCH_ROWS = 50_000

log = logging.getLogger("fabrictwin.telemetry")

_CUMULATIVE_KINDS = frozenset(
    {
        telemetry_pb2.COUNTER_KIND_CUMULATIVE_64,
        telemetry_pb2.COUNTER_KIND_CUMULATIVE_32,
        telemetry_pb2.COUNTER_KIND_CUMULATIVE_16,
        telemetry_pb2.COUNTER_KIND_IB_DATA_32,
        telemetry_pb2.COUNTER_KIND_IB_DATA_64,
    }
)


def _column_values(values: Sequence[float], kind: int) -> common_pb2.NumericArray:
    """Cumulative counters that are all integers go as exact "<u8"; everything else as "<f8"."""
    if kind in _CUMULATIVE_KINDS:
        try:
            return pack_numeric_array(values, "<u8")
        except InvalidArgumentError:
            pass  # a float or a negative value among them: send float64 as the contract allows
    return pack_numeric_array(values, "<f8")


def sample_batches(
    source: str,
    ports: Sequence[str],
    port_index: Sequence[int],
    time_ns: Sequence[int],
    columns: Mapping[ColumnKey, Sequence[float]],
    *,
    counter_kinds: Mapping[KindKey, EnumLike] | None = None,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    port_rates: Sequence[float] | None = None,
) -> Iterator[telemetry_pb2.SampleBatch]:
    """Row-aligned columns cut into SampleBatches of at most `batch_rows` rows.

    Row i is (ports[port_index[i]], time_ns[i], columns[m][i] for every metric m). Metric keys are
    Metric names without the prefix (`tx_bytes`, `utilisation`) or numbers; `counter_kinds` maps a
    metric to how its values are read (`delta` by default, `cumulative_64`, `ib_data_32`, ...).
    `port_rates` (bits/s per port, 0 unknown) let the service derive utilisation from cumulative
    tx_bytes.
    """
    rows = len(time_ns)
    if len(port_index) != rows:
        raise InvalidArgumentError(f"port_index: {len(port_index)} rows, but time_ns has {rows}")
    if batch_rows <= 0:
        raise InvalidArgumentError(f"batch_rows: must be positive, got {batch_rows}")
    kinds = {
        enum_value(telemetry_pb2.Metric, metric, "counter_kinds"): enum_value(
            telemetry_pb2.CounterKind, kind, f"counter_kinds[{metric}]"
        )
        for metric, kind in (counter_kinds or {}).items()
    }
    metrics: list[tuple[telemetry_pb2.Metric.ValueType, Sequence[float]]] = []
    for metric, values in columns.items():
        if len(values) != rows:
            raise InvalidArgumentError(f"columns[{metric}]: {len(values)} rows, but time_ns has {rows}")
        metrics.append((enum_value(telemetry_pb2.Metric, metric, "columns"), values))
    if not metrics:
        raise InvalidArgumentError("columns: at least one metric column is required")
    if port_rates is not None and len(port_rates) != len(ports):
        raise InvalidArgumentError(f"port_rates: {len(port_rates)} rates for {len(ports)} ports")
    rates = pack_numeric_array(port_rates, "<f8") if port_rates is not None else None
    # Validated above, before the first batch is asked for: gRPC consumes the request iterator in
    # its own thread and would turn an exception raised there into an anonymous CANCELLED.
    return _cut(
        resource_name("sources", source), list(ports), port_index, time_ns, metrics, kinds, batch_rows, rates
    )


def _cut(
    source: str,
    ports: list[str],
    port_index: Sequence[int],
    time_ns: Sequence[int],
    metrics: list[tuple[telemetry_pb2.Metric.ValueType, Sequence[float]]],
    kinds: dict[telemetry_pb2.Metric.ValueType, telemetry_pb2.CounterKind.ValueType],
    batch_rows: int,
    rates: common_pb2.NumericArray | None,
) -> Iterator[telemetry_pb2.SampleBatch]:
    for start in range(0, len(time_ns), batch_rows):
        stop = min(start + batch_rows, len(time_ns))
        columns = []
        for metric, values in metrics:
            kind = kinds.get(metric, telemetry_pb2.COUNTER_KIND_DELTA)
            columns.append(
                telemetry_pb2.SampleColumn(
                    metric=metric, counter_kind=kind, values=_column_values(values[start:stop], kind)
                )
            )
        yield telemetry_pb2.SampleBatch(
            source=source,
            ports=ports,
            port_index=pack_numeric_array(port_index[start:stop], "<i4"),
            time_ns=pack_numeric_array(time_ns[start:stop], "<i8"),
            columns=columns,
            port_rate_bps=rates,
        )


def column_batches(
    source: str, chunk: SampleColumns, batch_rows: int = DEFAULT_BATCH_ROWS
) -> Iterator[telemetry_pb2.SampleBatch]:
    """The SampleBatches of an importer's columns."""
    return sample_batches(
        source,
        chunk.ports,
        chunk.port_index,
        chunk.time_ns,
        chunk.columns,
        counter_kinds=chunk.counter_kinds,
        batch_rows=batch_rows,
        port_rates=chunk.port_rates,
    )


def _time_range(start_ns: int, end_ns: int) -> common_pb2.TimeRange:
    return common_pb2.TimeRange(start_ns=start_ns, end_ns=end_ns)


class TelemetryApi:
    """Telemetry sources, ingest and queries (TelemetryService)."""

    def __init__(self, connection: Connection) -> None:
        self._connection = connection
        self._stub = telemetry_pb2_grpc.TelemetryServiceStub(connection.channel)

    def create_source(
        self,
        source_id: str,
        *,
        kind: EnumLike = "live",
        display_name: str = "",
        fabric: str = "",
        simulation: str = "",
        retention_ns: int = 0,
    ) -> telemetry_pb2.Source:
        """Create a source (`kind` is `live` or `simulated`) whose ports belong to `fabric`."""
        source = telemetry_pb2.Source(
            kind=enum_value(telemetry_pb2.SourceKind, kind, "kind"),
            display_name=display_name,
            fabric=resource_name("fabrics", fabric) if fabric else "",
            simulation=resource_name("simulations", simulation) if simulation else "",
            retention_ns=retention_ns,
        )
        request = telemetry_pb2.CreateSourceRequest(source_id=source_id, source=source)
        return self._connection.unary(self._stub.CreateSource, request)

    def get_source(self, name: str) -> telemetry_pb2.Source:
        """One source."""
        request = telemetry_pb2.GetSourceRequest(name=resource_name("sources", name))
        return self._connection.unary(self._stub.GetSource, request)

    def list_sources(
        self, *, page_size: int = 0, filter: str = "", order_by: str = ""
    ) -> Iterator[telemetry_pb2.Source]:
        """Every source; `filter` (AIP-160: `kind = LIVE`) and `order_by` (`sample_count desc`)."""
        request = telemetry_pb2.ListSourcesRequest(page_size=page_size, filter=filter, order_by=order_by)
        return self._connection.pages(self._stub.ListSources, request, "sources")

    def update_source(
        self, name: str, *, display_name: str | None = None, retention_ns: int | None = None
    ) -> telemetry_pb2.Source:
        """Change a source's display name and/or retention (raw samples older than the newest minus it)."""
        source = telemetry_pb2.Source(name=resource_name("sources", name))
        mask = field_mask_pb2.FieldMask()
        if display_name is not None:
            source.display_name = display_name
            mask.paths.append("display_name")
        if retention_ns is not None:
            source.retention_ns = retention_ns
            mask.paths.append("retention_ns")
        request = telemetry_pb2.UpdateSourceRequest(source=source, update_mask=mask)
        return self._connection.unary(self._stub.UpdateSource, request)

    def delete_source(self, name: str) -> None:
        """Delete a source and all its samples."""
        request = telemetry_pb2.DeleteSourceRequest(name=resource_name("sources", name))
        self._connection.unary(self._stub.DeleteSource, request)

    def ingest(
        self,
        batches: Iterable[telemetry_pb2.SampleBatch | telemetry_pb2.IngestSamplesRequest],
        *,
        resume_s: float = DEFAULT_RESUME_S,
    ) -> telemetry_pb2.IngestSamplesResponse:
        """Stream batches to the server (each stored whole or not at all); returns what was stored.

        `batches` is consumed lazily, so a generator can read a large file while it is sent. Each
        batch is acknowledged once stored; if the stream is cut (UNAVAILABLE: the service restarted,
        the connection was reset), the batches not yet acknowledged are sent again on a new stream
        once the service is back, within `resume_s` of the cut, and the rest follow. A batch stored
        whose acknowledgement was lost comes back as duplicates: no row is stored twice.
        """
        plain = (b.batch if isinstance(b, telemetry_pb2.IngestSamplesRequest) else b for b in batches)
        return resumable_ingest(self._connection, plain, resume_s=resume_s)

    def ingest_columns(
        self,
        source: str,
        ports: Sequence[str],
        port_index: Sequence[int],
        time_ns: Sequence[int],
        columns: Mapping[ColumnKey, Sequence[float]],
        *,
        counter_kinds: Mapping[KindKey, EnumLike] | None = None,
        batch_rows: int = DEFAULT_BATCH_ROWS,
    ) -> telemetry_pb2.IngestSamplesResponse:
        """Ingest row-aligned columns (see `sample_batches`), `batch_rows` rows per batch.

        >>> client.telemetry.ingest_columns(  # doctest: +SKIP
        ...     "pod1", ports=["leaf-0/p1", "leaf-0/p2"], port_index=[0, 1], time_ns=[0, 0],
        ...     columns={"utilisation": [0.9, 0.1]})
        """
        batches = sample_batches(
            source, ports, port_index, time_ns, columns, counter_kinds=counter_kinds, batch_rows=batch_rows
        )
        return self.ingest(batches)

    def query_series(
        self,
        source: str,
        metric: EnumLike,
        *,
        ports: Sequence[str] = (),
        start_ns: int = 0,
        end_ns: int = 0,
        aggregation: EnumLike | None = None,
        step_ns: int = 0,
        page_size: int = 0,
    ) -> Iterator[telemetry_pb2.Series]:
        """One Series per port matching `ports` (names or globs; empty: all), bucketed by `step_ns`."""
        request = telemetry_pb2.QuerySeriesRequest(
            source=resource_name("sources", source),
            time_range=_time_range(start_ns, end_ns),
            ports=telemetry_pb2.PortSelector(patterns=list(ports)),
            metric=enum_value(telemetry_pb2.Metric, metric, "metric"),
            step_ns=step_ns,
            page_size=page_size,
        )
        if aggregation is not None:
            request.aggregation = enum_value(telemetry_pb2.Aggregation, aggregation, "aggregation")
        return self._connection.pages(self._stub.QuerySeries, request, "series")

    def top_links(
        self,
        source: str,
        metric: EnumLike,
        *,
        ports: Sequence[str] = (),
        start_ns: int = 0,
        end_ns: int = 0,
        aggregation: EnumLike | None = None,
        limit: int = 0,
    ) -> list[telemetry_pb2.PortValue]:
        """The `limit` ports (default 10) with the highest `metric` over the window, highest first."""
        request = telemetry_pb2.TopLinksRequest(
            source=resource_name("sources", source),
            time_range=_time_range(start_ns, end_ns),
            ports=telemetry_pb2.PortSelector(patterns=list(ports)),
            metric=enum_value(telemetry_pb2.Metric, metric, "metric"),
            limit=limit,
        )
        if aggregation is not None:
            request.aggregation = enum_value(telemetry_pb2.Aggregation, aggregation, "aggregation")
        return list(self._connection.unary(self._stub.TopLinks, request).ports)

    def utilisation_skew(
        self,
        source: str,
        *,
        ports: Sequence[str] = (),
        start_ns: int = 0,
        end_ns: int = 0,
        step_ns: int = 0,
        hot_above: float = 0.0,
        idle_below: float = 0.0,
        max_over_mean: float = 0.0,
        spread: float = 0.0,
    ) -> list[telemetry_pb2.SkewPoint]:
        """Utilisation skew of a port group per interval, and whether the ports are pinned (`pinned`).

        `ports` may name a fabric group (`group:uplinks`); step 0 makes the window one interval. The
        pinning rule is the diagnosis' (`client.scenarios.diagnose`): max/mean at least
        `max_over_mean` (default 1.5) and max - min at least `spread` (default 0.3), or some ports
        above `hot_above` (default 0.8) while others are below `idle_below` (default 0.2).
        """
        request = telemetry_pb2.GetUtilisationSkewRequest(
            source=resource_name("sources", source),
            time_range=_time_range(start_ns, end_ns),
            ports=telemetry_pb2.PortSelector(patterns=list(ports)),
            step_ns=step_ns,
            hot_above=hot_above,
            idle_below=idle_below,
            max_over_mean=max_over_mean,
            spread=spread,
        )
        return list(self._connection.unary(self._stub.GetUtilisationSkew, request).points)

    def loss_history(
        self, source: str, port: str, *, start_ns: int = 0, end_ns: int = 0, step_ns: int = 0
    ) -> list[telemetry_pb2.LossPoint]:
        """Drops, errors and an estimated bit error rate of one port per interval."""
        request = telemetry_pb2.GetLossHistoryRequest(
            source=resource_name("sources", source),
            port=port,
            time_range=_time_range(start_ns, end_ns),
            step_ns=step_ns,
        )
        return list(self._connection.unary(self._stub.GetLossHistory, request).points)

    def port_health(
        self,
        source: str,
        *,
        window_ns: int = 0,
        start_ns: int = 0,
        end_ns: int = 0,
        ports: Sequence[str] = (),
    ) -> telemetry_pb2.GetPortHealthResponse:
        """Every port's received bytes, symbol and receive errors, LinkDownedCounter and estimated
        bit error rate over the last `window_ns` (or [start_ns, end_ns)); see `fabrictwin.link_health`
        for what they mean for the links."""
        request = telemetry_pb2.GetPortHealthRequest(
            source=resource_name("sources", source),
            time_range=_time_range(start_ns, end_ns),
            window_ns=window_ns,
            ports=telemetry_pb2.PortSelector(patterns=list(ports)),
        )
        return self._connection.unary(self._stub.GetPortHealth, request)

    def import_text(
        self,
        source: str,
        text: str,
        format: str,
        *,
        time_ns: int | None = None,
        where: str = "",
        node: str = "",
        nodes: Mapping[int, str] | None = None,
        port_name: str = "",
        counter_kinds: Mapping[str, str] | None = None,
        link_gbps: float = 0.0,
        batch_rows: int = DEFAULT_BATCH_ROWS,
        fabric_links: Iterable[topology_pb2.Link] | None = None,
    ) -> telemetry_pb2.IngestSamplesResponse:
        """Ingest one text in `format` (`perfquery`, `prometheus`, `csv`): see `mirror.text_parser`.

        Readings without a time of their own are stamped `time_ns` (default: now). A Prometheus text
        with `node`, no `port_name` and the links of the source's fabric (`fabric_links`, from
        `client.fabrics.links(fabric)`) has its ports named as the mirror and `fabrictwin telemetry
        import` name them (`fabrictwin.port_names`): `swp3` is `leaf0/p3` where a link says so, and an
        interface the fabric does not name is left out (logged).
        """
        if format == "prometheus" and node and not port_name and fabric_links is not None:
            fabric = self.get_source(source).fabric
            parse, names = prometheus_parser(node, port_name, where, fabric, fabric_links)
            chunks = parse(text, time.time_ns() if time_ns is None else time_ns)
            for note in names.notes:
                log.info("%s", note)
            name = resource_name("sources", source)
            return self.ingest(b for chunk in chunks for b in column_batches(name, chunk, batch_rows))
        parse = text_parser(
            format,
            source,
            where=where,
            node=node,
            nodes=nodes,
            port_name=port_name,
            counter_kinds=counter_kinds,
            link_gbps=link_gbps,
        )
        chunks = parse(text, time.time_ns() if time_ns is None else time_ns)
        name = resource_name("sources", source)
        return self.ingest(batch for chunk in chunks for batch in column_batches(name, chunk, batch_rows))

    def mirror(
        self,
        source: str,
        polls: Iterable[Poll],
        *,
        count: int | None = None,
        on_poll: Callable[[Poll, telemetry_pb2.IngestSamplesResponse | None], None] | None = None,
        batch_rows: int = DEFAULT_BATCH_ROWS,
    ) -> MirrorReport:
        """Stream a live source in, one IngestSamples call per poll, until `polls` ends or `count` polls.

        >>> from fabrictwin.mirror import poll_url, text_parser  # doctest: +SKIP
        >>> parse = text_parser("prometheus", "pod1", node="gpu-7")  # doctest: +SKIP
        >>> polls = poll_url("http://gpu-7:9100/metrics", parse, 10)  # doctest: +SKIP
        >>> client.telemetry.mirror("pod1", polls, count=6)  # doctest: +SKIP
        """
        name = resource_name("sources", source)
        return run_mirror(
            self.ingest,
            lambda chunk: column_batches(name, chunk, batch_rows),
            polls,
            count=count,
            on_poll=on_poll,
        )
