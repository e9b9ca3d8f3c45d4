"""fabrictwin.v1.TelemetryService over the telemetry store: proto <-> core, nothing clever.

Every store call runs in a thread (asyncio.to_thread) so the event loop keeps serving while SQL
works. IngestSamples decodes each batch's columns with one memcpy per column (from_numeric_array);
a malformed batch is rejected whole with a reason naming the field (`batch.columns[2].values`) and
the stream goes on with the next batch. Each batch is committed before the next is read, so if a
stream breaks the caller re-sends it: rows already stored come back as duplicates.
A column whose counter_kind is COUNTER_KIND_UNSPECIFIED is read as DELTA (stored as sent).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
from fabrictwin.v1 import telemetry_pb2, telemetry_pb2_grpc
from google.protobuf import timestamp_pb2

from services.common.arrays import from_numeric_array
from services.common.errors import InvalidArgument
from services.common.resources import decode_page_token, encode_page_token, page_size, parse_name
from services.telemetry.counters import CounterKind
from services.telemetry.ingest import Rejection, batch_rows
from services.telemetry.queries import Aggregation
from services.telemetry.schema import column_for_metric
from services.telemetry.store import IngestOutcome, SourceKind, SourceRecord, TelemetryStore

__all__ = ["TelemetryServicer"]

MAX_REASONS = 100  # IngestSamplesResponse.reasons holds at most this many

_KIND_FROM_PROTO = {
    telemetry_pb2.SOURCE_KIND_LIVE: SourceKind.LIVE,
    telemetry_pb2.SOURCE_KIND_SIMULATED: SourceKind.SIMULATED,
}
_KIND_TO_PROTO = {kind: number for number, kind in _KIND_FROM_PROTO.items()}


def _source_id(name: str, field: str) -> str:
    return parse_name(name, "sources/{source}", field)["source"]


def _source_to_proto(record: SourceRecord) -> telemetry_pb2.Source:
    created = timestamp_pb2.Timestamp()
    created.FromNanoseconds(record.create_time_ns)
    return telemetry_pb2.Source(
        name=f"sources/{record.id}",
        kind=_KIND_TO_PROTO[record.kind],
        display_name=record.display_name,
        fabric=record.fabric,
        simulation=record.simulation,
        retention_ns=record.retention_ns,
        create_time=created,
        sample_count=record.sample_count,
    )


def _aggregation(value: int) -> Aggregation:
    """AGGREGATION_UNSPECIFIED means AVG, as the proto says."""
    if value == telemetry_pb2.AGGREGATION_UNSPECIFIED:
        return Aggregation.AVG
    try:
        return Aggregation[telemetry_pb2.Aggregation.Name(value).removeprefix("AGGREGATION_")]
    except (ValueError, KeyError):
        raise InvalidArgument("aggregation", f"unknown aggregation {value}") from None


def _decode_batch(batch: telemetry_pb2.SampleBatch) -> dict:
    """Keyword arguments of TelemetryStore.ingest; field names are relative to the batch."""
    columns, kinds = {}, {}
    for i, column in enumerate(batch.columns):
        name = column_for_metric(column.metric, f"columns[{i}].metric")
        if name in columns:
            raise InvalidArgument(
                f"columns[{i}].metric", f"{telemetry_pb2.Metric.Name(column.metric)} is repeated"
            )
        try:
            kinds[name] = CounterKind(column.counter_kind)
        except ValueError:
            raise InvalidArgument(
                f"columns[{i}].counter_kind", f"unknown kind {column.counter_kind}"
            ) from None
        columns[name] = from_numeric_array(column.values, f"columns[{i}].values")
    return {
        "source_id": _source_id(batch.source, "source"),
        "ports": list(batch.ports),
        "port_index": from_numeric_array(batch.port_index, "port_index"),
        "time_ns": from_numeric_array(batch.time_ns, "time_ns"),
        "columns": columns,
        "counter_kinds": kinds,
    }


def _rows_sent(batch: telemetry_pb2.SampleBatch) -> int:
    try:
        return batch_rows(from_numeric_array(batch.time_ns))
    except InvalidArgument:
        return 0


class TelemetryServicer(telemetry_pb2_grpc.TelemetryServiceServicer):
    """Translates TelemetryService calls to a TelemetryStore."""

    def __init__(self, store: TelemetryStore) -> None:
        self._store = store

    async def CreateSource(self, request, context) -> telemetry_pb2.Source:
        source = request.source
        if source.kind not in _KIND_FROM_PROTO:
            raise InvalidArgument("source.kind", "must be SOURCE_KIND_LIVE or SOURCE_KIND_SIMULATED")
        record = SourceRecord(
            id=request.source_id,
            kind=_KIND_FROM_PROTO[source.kind],
            display_name=source.display_name,
            fabric=source.fabric,
            simulation=source.simulation,
            retention_ns=source.retention_ns,
        )
        return _source_to_proto(await asyncio.to_thread(self._store.create_source, record))

    async def GetSource(self, request, context) -> telemetry_pb2.Source:
        source_id = _source_id(request.name, "name")
        return _source_to_proto(await asyncio.to_thread(self._store.get_source, source_id))

    async def ListSources(self, request, context) -> telemetry_pb2.ListSourcesResponse:
        limit, offset = page_size(request.page_size), decode_page_token(request.page_token)
        found, next_offset = await asyncio.to_thread(self._store.list_sources, offset, limit)
        return telemetry_pb2.ListSourcesResponse(
            sources=[_source_to_proto(record) for record in found],
            next_page_token=encode_page_token(next_offset) if next_offset is not None else "",
        )

    async def DeleteSource(self, request, context) -> telemetry_pb2.DeleteSourceResponse:
        await asyncio.to_thread(self._store.delete_source, _source_id(request.name, "name"))
        return telemetry_pb2.DeleteSourceResponse()

    def _ingest_batch(self, batch: telemetry_pb2.SampleBatch) -> IngestOutcome:
        try:
            arguments = _decode_batch(batch)
        except InvalidArgument as exc:
            return IngestOutcome(rejected=_rows_sent(batch), reasons=(Rejection(-1, str(exc)),))
        return self._store.ingest(**arguments)

    async def IngestSamples(
        self, request_iterator: AsyncIterator[telemetry_pb2.IngestSamplesRequest], context
    ) -> telemetry_pb2.IngestSamplesResponse:
        reply = telemetry_pb2.IngestSamplesResponse()
        async for request in request_iterator:
            outcome = await asyncio.to_thread(self._ingest_batch, request.batch)
            reply.stored += outcome.stored
            reply.duplicates += outcome.duplicates
            reply.rejected += outcome.rejected
            for reason in outcome.reasons[: MAX_REASONS - len(reply.reasons)]:
                reply.reasons.add(batch=reply.batches, row=reason.row, reason=f"batch.{reason.reason}")
            reply.batches += 1
        return reply

    async def QuerySeries(self, request, context) -> telemetry_pb2.QuerySeriesResponse:
        page = await asyncio.to_thread(
            self._store.query_series,
            _source_id(request.source, "source"),
            column_for_metric(request.metric, "metric"),
            start_ns=request.time_range.start_ns,
            end_ns=request.time_range.end_ns,
            port_patterns=list(request.ports.patterns),
            aggregation=_aggregation(request.aggregation),
            step_ns=request.step_ns,
            offset=decode_page_token(request.page_token),
            limit=page_size(request.page_size, default=100),
        )
        return telemetry_pb2.QuerySeriesResponse(
            series=[
                telemetry_pb2.Series(port=s.port, time_ns=s.time_ns.tolist(), values=s.values.tolist())
                for s in page.series
            ],
            next_page_token=encode_page_token(page.next_offset) if page.next_offset is not None else "",
        )

    async def TopLinks(self, request, context) -> telemetry_pb2.TopLinksResponse:
        top = await asyncio.to_thread(
            self._store.top_links,
            _source_id(request.source, "source"),
            column_for_metric(request.metric, "metric"),
            start_ns=request.time_range.start_ns,
            end_ns=request.time_range.end_ns,
            port_patterns=list(request.ports.patterns),
            aggregation=_aggregation(request.aggregation),
            limit=request.limit or 10,
        )
        return telemetry_pb2.TopLinksResponse(
            ports=[telemetry_pb2.PortValue(port=port, value=value) for port, value in top]
        )

    async def GetUtilisationSkew(self, request, context):
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "GetUtilisationSkew arrives with issue #6")

    async def GetLossHistory(self, request, context):
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "GetLossHistory arrives with issue #6")
