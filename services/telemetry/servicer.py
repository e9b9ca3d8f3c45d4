"""fabrictwin.v1.TelemetryService over the telemetry store: proto <-> core, nothing clever.

Every store call runs in a thread so the event loop keeps serving while SQL works: queries on the
query threads, writes on the write threads (`threads.StoreThreads`), so a query never waits behind
a write held up by the database. IngestSamples decodes each batch's columns with one memcpy per
column (from_numeric_array) and hands the stream to `pipeline`, which keeps up to
`ingest_parallelism` batch transactions in flight. A malformed batch is rejected whole with a reason
naming the field (`batch.columns[2].values`) and the stream goes on with the next batch. Each batch
is committed on its own; IngestSamplesAcked says so batch by batch, with the client's sequence
number, so a client cut off mid-stream re-sends only what was not acknowledged (rows already stored
come back as duplicates). A column whose counter_kind is COUNTER_KIND_UNSPECIFIED is read as DELTA.

Queries with a port group (`group:uplinks`) first make sure the source is bound to its fabric's
links, fetched once from the topology service. While the database cannot be reached every call
fails with UNAVAILABLE, and `watch_health` lets the server report NOT_SERVING (`availability`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

from fabrictwin.v1 import common_pb2, telemetry_pb2, telemetry_pb2_grpc
from google.protobuf import timestamp_pb2
from google.protobuf.internal.containers import RepeatedCompositeFieldContainer

from services.common.arrays import from_numeric_array
from services.common.errors import InvalidArgument
from services.common.listing import MAX_FILTERED, Listing, filtered_page
from services.common.pinning import PinningRule
from services.common.resources import decode_page_token, encode_page_token, page_size, parse_name
from services.telemetry.aggregates import Aggregation
from services.telemetry.availability import DatabaseProbe, HealthSetter
from services.telemetry.batches import BatchRejected, Rejection, batch_rows
from services.telemetry.counters import CounterKind
from services.telemetry.groups import is_group
from services.telemetry.peers import TopologyLinks
from services.telemetry.pipeline import Decoded, acknowledged_stream, ingest_stream
from services.telemetry.queries import SeriesPage
from services.telemetry.schema import column_for_metric
from services.telemetry.store import IngestOutcome, SourceKind, SourceRecord, TelemetryStore
from services.telemetry.threads import StoreThreads

__all__ = ["TelemetryServicer"]

MAX_REASONS = 100  # IngestSamplesResponse.reasons holds at most this many
_UPDATABLE = {"display_name", "retention_ns"}

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
        name=record.name,
        kind=_KIND_TO_PROTO[record.kind],
        display_name=record.display_name,
        fabric=record.fabric,
        simulation=record.simulation,
        retention_ns=record.retention_ns,
        create_time=created,
        sample_count=record.sample_count,
        newest_sample_ns=record.newest_time_ns or 0,
        retained_from_ns=record.retained_from_ns,
        rolled_up_until_ns=record.rolled_up_until_ns,
        port_count=record.port_count,
    )


def _aggregation(value: telemetry_pb2.Aggregation.ValueType) -> Aggregation:
    """AGGREGATION_UNSPECIFIED means AVG, as the proto says."""
    if value == telemetry_pb2.AGGREGATION_UNSPECIFIED:
        return Aggregation.AVG
    try:
        return Aggregation[telemetry_pb2.Aggregation.Name(value).removeprefix("AGGREGATION_")]
    except (ValueError, KeyError):
        raise InvalidArgument("aggregation", f"unknown aggregation {value}") from None


def _decode_batch(batch: telemetry_pb2.SampleBatch) -> dict:
    """Arguments of TelemetryStore.prepare and the source id; field names are relative to the batch."""
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
        "port_rate_bps": (
            from_numeric_array(batch.port_rate_bps, "port_rate_bps")
            if batch.HasField("port_rate_bps")
            else None
        ),
    }


def _rows_sent(batch: telemetry_pb2.SampleBatch) -> int:
    try:
        return batch_rows(from_numeric_array(batch.time_ns))
    except InvalidArgument:
        return 0


def _add_reasons(
    reasons: RepeatedCompositeFieldContainer[telemetry_pb2.RejectReason],
    outcome: IngestOutcome,
    number: int,
    room: int,
) -> None:
    for reason in outcome.reasons[: max(0, room)]:
        reasons.add(
            batch=number, row=reason.row, reason=f"batch.{reason.reason}", field=f"batch.{reason.field}"
        )


def _series_reply(page: SeriesPage) -> telemetry_pb2.QuerySeriesResponse:
    return telemetry_pb2.QuerySeriesResponse(
        series=[
            telemetry_pb2.Series(port=s.port, time_ns=s.time_ns.tolist(), values=s.values.tolist())
            for s in page.series
        ],
        next_page_token=encode_page_token(page.next_offset) if page.next_offset is not None else "",
        rollup_ns=page.rollup_ns,
    )


class TelemetryServicer(telemetry_pb2_grpc.TelemetryServiceServicer):
    """Translates TelemetryService calls to a TelemetryStore."""

    def __init__(
        self,
        store: TelemetryStore,
        topology: TopologyLinks | None = None,
        ingest_parallelism: int = 1,
        threads: StoreThreads | None = None,
        probe: DatabaseProbe | None = None,
    ) -> None:
        self._store = store
        self._topology = topology
        self._parallelism = ingest_parallelism
        self._threads = threads or StoreThreads(write_threads=ingest_parallelism + 1)
        self._probe = probe

    def watch_health(self, set_serving: HealthSetter) -> None:
        """Report NOT_SERVING through `set_serving` while the database cannot be reached (server hook)."""
        if self._probe is not None:
            self._probe.watch(set_serving)

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
        return _source_to_proto(await self._threads.write(self._store.create_source, record))

    async def GetSource(self, request, context) -> telemetry_pb2.Source:
        source_id = _source_id(request.name, "name")
        return _source_to_proto(await self._threads.query(self._store.get_source, source_id))

    async def ListSources(self, request, context) -> telemetry_pb2.ListSourcesResponse:
        limit, offset = page_size(request.page_size), decode_page_token(request.page_token)
        listing = Listing.of(telemetry_pb2.Source.DESCRIPTOR, request.filter, request.order_by)
        if listing.active:
            everything, _ = await self._threads.query(self._store.list_sources, 0, MAX_FILTERED + 1)
            sources = map(_source_to_proto, everything)
            chosen, token = filtered_page(sources, listing, "sources", request.page_token, limit)
            return telemetry_pb2.ListSourcesResponse(sources=chosen, next_page_token=token)
        found, next_offset = await self._threads.query(self._store.list_sources, offset, limit)
        return telemetry_pb2.ListSourcesResponse(
            sources=[_source_to_proto(record) for record in found],
            next_page_token=encode_page_token(next_offset) if next_offset is not None else "",
        )

    async def UpdateSource(self, request, context) -> telemetry_pb2.Source:
        source_id = _source_id(request.source.name, "source.name")
        paths = list(request.update_mask.paths)
        if not paths:
            raise InvalidArgument(
                "update_mask", f"name the fields to update: {', '.join(sorted(_UPDATABLE))}"
            )
        changes = {}
        for i, path in enumerate(paths):
            if path not in _UPDATABLE:
                raise InvalidArgument(f"update_mask.paths[{i}]", f"{path!r} cannot be updated")
            changes[path] = getattr(request.source, path)
        return _source_to_proto(await self._threads.write(self._store.update_source, source_id, changes))

    async def DeleteSource(self, request, context) -> telemetry_pb2.DeleteSourceResponse:
        await self._threads.write(self._store.delete_source, _source_id(request.name, "name"))
        return telemetry_pb2.DeleteSourceResponse()

    def _decode(
        self, request: telemetry_pb2.IngestSamplesRequest | telemetry_pb2.IngestSamplesAckedRequest
    ) -> Decoded:
        batch = request.batch
        try:
            arguments = _decode_batch(batch)
            source_id = arguments.pop("source_id")
            return Decoded(source_id, self._store.prepare(**arguments))
        except InvalidArgument as exc:
            rejection = Rejection(exc.field, exc.problem)
        except BatchRejected as exc:
            rejection = exc.rejection
        return Decoded(refused=IngestOutcome(rejected=_rows_sent(batch), reasons=(rejection,)))

    async def IngestSamples(
        self, request_iterator: AsyncIterator[telemetry_pb2.IngestSamplesRequest], context
    ) -> telemetry_pb2.IngestSamplesResponse:
        outcomes = await ingest_stream(
            request_iterator, self._decode, self._store.write, self._parallelism, self._threads.write
        )
        reply = telemetry_pb2.IngestSamplesResponse(batches=len(outcomes))
        for number, outcome in enumerate(outcomes):
            reply.stored += outcome.stored
            reply.duplicates += outcome.duplicates
            reply.rejected += outcome.rejected
            _add_reasons(reply.reasons, outcome, number, MAX_REASONS - len(reply.reasons))
        return reply

    async def IngestSamplesAcked(
        self, request_iterator: AsyncIterator[telemetry_pb2.IngestSamplesAckedRequest], context
    ) -> AsyncIterator[telemetry_pb2.IngestSamplesAckedResponse]:
        settled = acknowledged_stream(
            request_iterator, self._decode, self._store.write, self._parallelism, self._threads.write
        )
        async for batch in settled:
            outcome: IngestOutcome = batch.outcome
            ack = telemetry_pb2.IngestSamplesAckedResponse(
                sequence=batch.request.sequence,
                stored=outcome.stored,
                duplicates=outcome.duplicates,
                rejected=outcome.rejected,
            )
            _add_reasons(ack.reasons, outcome, batch.number, MAX_REASONS)
            yield ack

    async def _bind_fabric(self, source_id: str, patterns: Sequence[str]) -> None:
        """Fetch the fabric's links once, before the first query that uses a port group."""
        if self._topology is None or not any(map(is_group, patterns)):
            return
        source = await self._threads.query(self._store.get_source, source_id)
        if source.fabric and not source.fabric_version:
            links = await self._topology.fetch(source.fabric, "ports.patterns")
            await self._threads.write(self._store.bind_fabric, source_id, links)

    async def QuerySeries(self, request, context) -> telemetry_pb2.QuerySeriesResponse:
        source_id = _source_id(request.source, "source")
        await self._bind_fabric(source_id, request.ports.patterns)
        return await self._threads.query(
            self._series_page,
            source_id,
            column_for_metric(request.metric, "metric"),
            start_ns=request.time_range.start_ns,
            end_ns=request.time_range.end_ns,
            port_patterns=list(request.ports.patterns),
            aggregation=_aggregation(request.aggregation),
            step_ns=request.step_ns,
            offset=decode_page_token(request.page_token),
            limit=page_size(request.page_size, default=100),
        )

    def _series_page(self, *args: Any, **kwargs: Any) -> telemetry_pb2.QuerySeriesResponse:
        # The response is built in the query thread too: thousands of points are not the loop's work.
        return _series_reply(self._store.query_series(*args, **kwargs))

    async def TopLinks(self, request, context) -> telemetry_pb2.TopLinksResponse:
        source_id = _source_id(request.source, "source")
        await self._bind_fabric(source_id, request.ports.patterns)
        top, rollup_ns = await self._threads.query(
            self._store.top_links,
            source_id,
            column_for_metric(request.metric, "metric"),
            start_ns=request.time_range.start_ns,
            end_ns=request.time_range.end_ns,
            port_patterns=list(request.ports.patterns),
            aggregation=_aggregation(request.aggregation),
            limit=request.limit or 10,
        )
        return telemetry_pb2.TopLinksResponse(
            ports=[telemetry_pb2.PortValue(port=p.port, value=p.value) for p in top], rollup_ns=rollup_ns
        )

    async def GetUtilisationSkew(self, request, context) -> telemetry_pb2.GetUtilisationSkewResponse:
        source_id = _source_id(request.source, "source")
        await self._bind_fabric(source_id, request.ports.patterns)
        skew = await self._threads.query(
            self._store.utilisation_skew,
            source_id,
            start_ns=request.time_range.start_ns,
            end_ns=request.time_range.end_ns,
            port_patterns=list(request.ports.patterns),
            step_ns=request.step_ns,
            rule=PinningRule.of(request.hot_above, request.idle_below, request.max_over_mean, request.spread),
        )
        points = [
            telemetry_pb2.SkewPoint(
                time_ns=t,
                max_over_mean=ratio,
                coefficient_of_variation=cv,
                share_hot=hot,
                share_idle=idle,
                ports=count,
                max_utilisation=top,
                mean_utilisation=mean,
                min_utilisation=low,
                pinned=pinned,
            )
            for t, ratio, cv, hot, idle, count, top, mean, low, pinned in zip(
                skew.time_ns.tolist(),
                skew.max_over_mean.tolist(),
                skew.coefficient_of_variation.tolist(),
                skew.share_hot.tolist(),
                skew.share_idle.tolist(),
                skew.ports.tolist(),
                skew.max_utilisation.tolist(),
                skew.mean_utilisation.tolist(),
                skew.min_utilisation.tolist(),
                skew.pinned.tolist(),
                strict=True,
            )
        ]
        return telemetry_pb2.GetUtilisationSkewResponse(points=points, rollup_ns=skew.rollup_ns)

    async def GetPortHealth(self, request, context) -> telemetry_pb2.GetPortHealthResponse:
        source_id = _source_id(request.source, "source")
        await self._bind_fabric(source_id, request.ports.patterns)
        found, start_ns, end_ns = await self._threads.query(
            self._store.port_health,
            source_id,
            start_ns=request.time_range.start_ns,
            end_ns=request.time_range.end_ns,
            window_ns=request.window_ns,
            port_patterns=list(request.ports.patterns),
        )
        return telemetry_pb2.GetPortHealthResponse(
            ports=[
                telemetry_pb2.PortHealth(
                    port=h.port,
                    rx_bytes=h.rx_bytes,
                    symbol_errors=h.symbol_errors,
                    rcv_errors=h.rcv_errors,
                    link_downed=h.link_downed,
                    estimated_ber=h.estimated_ber,
                )
                for h in found
            ],
            time_range=common_pb2.TimeRange(start_ns=start_ns, end_ns=end_ns),
        )

    async def GetLossHistory(self, request, context) -> telemetry_pb2.GetLossHistoryResponse:
        history = await self._threads.query(
            self._store.loss_history,
            _source_id(request.source, "source"),
            request.port,
            start_ns=request.time_range.start_ns,
            end_ns=request.time_range.end_ns,
            step_ns=request.step_ns,
        )
        sums = {name: values.tolist() for name, values in history.sums.items()}
        points = [
            telemetry_pb2.LossPoint(
                time_ns=t,
                drops=sums["drops"][i],
                rcv_errors=sums["rcv_errors"][i],
                symbol_errors=sums["symbol_errors"][i],
                rx_packets=sums["rx_packets"][i],
                rx_bytes=sums["rx_bytes"][i],
                xmit_discards=sums["xmit_discards"][i],
                estimated_ber=ber,
            )
            for i, (t, ber) in enumerate(
                zip(history.time_ns.tolist(), history.estimated_ber.tolist(), strict=True)
            )
        ]
        return telemetry_pb2.GetLossHistoryResponse(points=points)
