"""TelemetryService on a real grpc.aio server (port 0): streamed ingest, queries, errors naming fields."""

from __future__ import annotations

import asyncio

import grpc
import numpy as np
import pytest
from fabrictwin.v1 import common_pb2, telemetry_pb2, telemetry_pb2_grpc
from google.protobuf import field_mask_pb2

from services.common.config import ServiceConfig, load_config
from services.common.resources import new_id
from services.common.server import ServiceDefinition, serving
from services.telemetry.__main__ import build, extra_flags
from services.telemetry.peers import TopologyLinks
from services.telemetry.servicer import TelemetryServicer
from services.telemetry.store import TelemetryStore
from services.topology.__main__ import build as build_topology
from tests.telemetry.batches import sample_batch

M = telemetry_pb2  # enum values: M.METRIC_TX_BYTES, M.AGGREGATION_MAX, ...


@pytest.fixture
async def telemetry(store: TelemetryStore):
    definition = ServiceDefinition(
        "fabrictwin.v1.TelemetryService",
        TelemetryServicer(store),
        telemetry_pb2_grpc.add_TelemetryServiceServicer_to_server,
    )
    async with (
        serving(ServiceConfig(service="telemetry", port=0), [definition]) as running,
        grpc.aio.insecure_channel(running.address) as channel,
    ):
        yield telemetry_pb2_grpc.TelemetryServiceStub(channel)


@pytest.fixture
async def source(telemetry) -> str:
    created = await telemetry.CreateSource(
        telemetry_pb2.CreateSourceRequest(
            source_id=new_id("cluster"),
            source=telemetry_pb2.Source(kind=M.SOURCE_KIND_LIVE, fabric="fabrics/f1"),
        )
    )
    yield created.name
    await telemetry.DeleteSource(telemetry_pb2.DeleteSourceRequest(name=created.name))


def _utilisation_batch(source: str, start_ns: int, rows: int) -> telemetry_pb2.SampleBatch:
    ports = ["spine-1/p1", "spine-1/p2", "leaf-1/p1"]
    port_index = np.arange(rows) % 3
    time_ns = start_ns + (np.arange(rows) // 3) * 1_000
    level = np.array([0.9, 0.1, 0.5])[port_index]
    return sample_batch(
        source, ports, port_index, time_ns, {M.METRIC_UTILISATION: level, M.METRIC_TX_BYTES: level * 1e6}
    )


async def test_a_stream_of_batches_is_stored_batch_by_batch_and_queried_back(telemetry, source):
    good = [_utilisation_batch(source, start, 300) for start in (0, 100_000, 200_000)]
    short = sample_batch(
        source,
        ["a"],
        np.zeros(4),
        np.arange(4),
        {M.METRIC_DROPS: np.ones(4), M.METRIC_RCV_ERRORS: np.ones(4), M.METRIC_PAUSE_TX: np.ones(3)},
    )
    stranger = _utilisation_batch("sources/no-such-source", 0, 30)
    requests = [good[0], short, good[1], stranger, good[2], good[0]]
    reply = await telemetry.IngestSamples(telemetry_pb2.IngestSamplesRequest(batch=b) for b in requests)

    assert (reply.batches, reply.stored, reply.duplicates, reply.rejected) == (6, 900, 300, 34)
    assert [(r.batch, r.row) for r in reply.reasons] == [(1, -1), (3, -1)]
    assert reply.reasons[0].reason.startswith("batch.columns[2].values:")
    assert reply.reasons[1].reason == "batch.source: sources/no-such-source does not exist"

    got = await telemetry.GetSource(telemetry_pb2.GetSourceRequest(name=source))
    assert got.sample_count == 900 and got.fabric == "fabrics/f1" and got.create_time.seconds > 0

    series = await telemetry.QuerySeries(
        telemetry_pb2.QuerySeriesRequest(
            source=source,
            time_range=common_pb2.TimeRange(start_ns=0, end_ns=300_000),
            ports=telemetry_pb2.PortSelector(patterns=["spine-*"]),
            metric=M.METRIC_TX_BYTES,
            aggregation=M.AGGREGATION_MAX,
            step_ns=100_000,
        )
    )
    assert [s.port for s in series.series] == ["spine-1/p1", "spine-1/p2"]
    assert list(series.series[0].time_ns) == [0, 100_000, 200_000]
    assert list(series.series[1].values) == pytest.approx([1e5, 1e5, 1e5])

    top = await telemetry.TopLinks(
        telemetry_pb2.TopLinksRequest(source=source, metric=M.METRIC_UTILISATION, limit=2)
    )
    assert [(p.port, round(p.value, 6)) for p in top.ports] == [("spine-1/p1", 0.9), ("leaf-1/p1", 0.5)]


async def test_a_batch_is_committed_while_its_stream_is_still_open(telemetry, source):
    stream = telemetry.IngestSamples()
    await stream.write(telemetry_pb2.IngestSamplesRequest(batch=_utilisation_batch(source, 0, 90)))
    for _ in range(100):  # the server keeps answering other calls while the stream is open
        got = await telemetry.GetSource(telemetry_pb2.GetSourceRequest(name=source))
        if got.sample_count == 90:
            break
        await asyncio.sleep(0.02)
    assert got.sample_count == 90
    await stream.done_writing()
    assert (await stream).stored == 90


async def test_cumulative_infiniband_counters_arrive_as_byte_deltas(telemetry, source):
    readings = np.array([2**32 - 2, 3, 13], dtype=np.uint64)
    batch = sample_batch(
        source,
        ["hca-1/p1"],
        np.zeros(3),
        np.array([0, 10, 20]),
        {M.METRIC_RX_BYTES: readings},
        {M.METRIC_RX_BYTES: M.COUNTER_KIND_IB_DATA_32},
    )
    reply = await telemetry.IngestSamples(iter([telemetry_pb2.IngestSamplesRequest(batch=batch)]))
    assert reply.stored == 3
    series = await telemetry.QuerySeries(
        telemetry_pb2.QuerySeriesRequest(source=source, metric=M.METRIC_RX_BYTES)
    )
    assert list(series.series[0].time_ns) == [10, 20]
    assert list(series.series[0].values) == [20.0, 40.0]


async def test_malformed_columns_are_rejected_naming_the_column(telemetry, source):
    repeated = sample_batch(source, ["a"], [0], [0], {M.METRIC_DROPS: np.ones(1)})
    repeated.columns.append(repeated.columns[0])
    bad_dtype = sample_batch(source, ["a"], [0], [0], {M.METRIC_DROPS: np.ones(1)})
    bad_dtype.columns[0].values.dtype = "<c16"
    unknown_metric = sample_batch(source, ["a"], [0], [0], {99: np.ones(1)})
    reply = await telemetry.IngestSamples(
        telemetry_pb2.IngestSamplesRequest(batch=b) for b in (repeated, bad_dtype, unknown_metric)
    )
    assert reply.rejected == 3 and reply.stored == 0
    assert [r.reason.split(":")[0] for r in reply.reasons] == [
        "batch.columns[1].metric",
        "batch.columns[0].values",
        "batch.columns[0].metric",
    ]


async def test_sources_are_listed_in_pages_and_deleted(telemetry, source):
    other = await telemetry.CreateSource(
        telemetry_pb2.CreateSourceRequest(
            source_id=new_id("run"),
            source=telemetry_pb2.Source(kind=M.SOURCE_KIND_SIMULATED, simulation="simulations/s1"),
        )
    )
    names, token = [], ""
    while True:
        page = await telemetry.ListSources(telemetry_pb2.ListSourcesRequest(page_size=1, page_token=token))
        names += [s.name for s in page.sources]
        token = page.next_page_token
        if not token:
            break
    assert {source, other.name} <= set(names)
    await telemetry.DeleteSource(telemetry_pb2.DeleteSourceRequest(name=other.name))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await telemetry.GetSource(telemetry_pb2.GetSourceRequest(name=other.name))
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize(
    ("call", "request_message", "code", "field"),
    [
        (
            "CreateSource",
            M.CreateSourceRequest(source_id="Bad_Id", source=M.Source(kind=1)),
            "INVALID_ARGUMENT",
            "source_id",
        ),
        ("CreateSource", M.CreateSourceRequest(source_id="fine"), "INVALID_ARGUMENT", "source.kind"),
        ("GetSource", M.GetSourceRequest(name="fabrics/x"), "INVALID_ARGUMENT", "name"),
        ("GetSource", M.GetSourceRequest(name="sources/none"), "NOT_FOUND", "sources/none"),
        ("QuerySeries", M.QuerySeriesRequest(source="sources/x"), "INVALID_ARGUMENT", "metric"),
        (
            "QuerySeries",
            M.QuerySeriesRequest(source="sources/x", metric=1, aggregation=42),
            "INVALID_ARGUMENT",
            "aggregation",
        ),
        (
            "QuerySeries",
            M.QuerySeriesRequest(source="sources/x", metric=1, page_token="junk"),
            "INVALID_ARGUMENT",
            "page_token",
        ),
        ("TopLinks", M.TopLinksRequest(source="x", metric=1), "INVALID_ARGUMENT", "source"),
        ("ListSources", M.ListSourcesRequest(page_size=-1), "INVALID_ARGUMENT", "page_size"),
    ],
)
async def test_bad_requests_fail_with_a_status_naming_the_field(
    telemetry, call, request_message, code, field
):
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await getattr(telemetry, call)(request_message)
    assert caught.value.code() == getattr(grpc.StatusCode, code)
    assert field in caught.value.details()


async def test_creating_a_source_twice_is_already_exists(telemetry, source):
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await telemetry.CreateSource(
            M.CreateSourceRequest(source_id=source.split("/")[1], source=M.Source(kind=M.SOURCE_KIND_LIVE))
        )
    assert caught.value.code() == grpc.StatusCode.ALREADY_EXISTS


async def test_a_source_is_updated_through_a_field_mask(telemetry, source):
    updated = await telemetry.UpdateSource(
        M.UpdateSourceRequest(
            source=M.Source(name=source, retention_ns=3_600_000_000_000, display_name="pod 1", fabric="x"),
            update_mask=field_mask_pb2.FieldMask(paths=["retention_ns", "display_name"]),
        )
    )
    assert (updated.retention_ns, updated.display_name, updated.fabric) == (
        3_600_000_000_000,
        "pod 1",
        "fabrics/f1",
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await telemetry.UpdateSource(
            M.UpdateSourceRequest(
                source=M.Source(name=source), update_mask=field_mask_pb2.FieldMask(paths=["fabric"])
            )
        )
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details().startswith("update_mask.paths[0]:")


async def test_rejected_batches_name_the_field_apart_from_the_reason(telemetry, source):
    back_in_time = sample_batch(source, ["a"], [0, 0], [5, 1], {M.METRIC_DROPS: np.ones(2)})
    negative = sample_batch(source, ["a"], [0], [9], {M.METRIC_UTILISATION: np.array([-0.5])})
    reply = await telemetry.IngestSamples(M.IngestSamplesRequest(batch=b) for b in (back_in_time, negative))
    assert [(r.batch, r.field, r.row) for r in reply.reasons] == [
        (0, "batch.time_ns", 1),
        (1, "batch.columns[0].values", 0),
    ]
    assert reply.reasons[0].reason.startswith("batch.time_ns: 1 ns is before 5 ns")


async def test_skew_and_loss_history_answer_over_grpc(telemetry, source):
    ports = ["leaf-0->spine-0", "leaf-0->spine-1", "leaf-0->spine-2", "leaf-0->spine-3"]
    columns = {
        M.METRIC_UTILISATION: np.array([0.9, 0.1, 0.1, 0.1]),
        M.METRIC_RX_BYTES: np.array([1e9, 0, 0, 0]),
        M.METRIC_SYMBOL_ERRORS: np.array([8.0, 0, 0, 0]),
    }
    await telemetry.IngestSamples(
        iter([M.IngestSamplesRequest(batch=sample_batch(source, ports, range(4), [0] * 4, columns))])
    )
    skew = await telemetry.GetUtilisationSkew(
        M.GetUtilisationSkewRequest(source=source, ports=M.PortSelector(patterns=["leaf-*"]))
    )
    (point,) = skew.points
    assert (point.ports, point.share_hot, point.share_idle) == (4, 0.25, 0.75)
    assert point.max_over_mean == pytest.approx(0.9 / 0.3)
    loss = await telemetry.GetLossHistory(M.GetLossHistoryRequest(source=source, port="leaf-0->spine-0"))
    assert [(p.symbol_errors, p.rx_bytes, p.estimated_ber) for p in loss.points] == [(8.0, 1e9, 1e-9)]


@pytest.mark.parametrize(
    ("call", "request_message", "code", "field"),
    [
        ("QuerySeries", M.QuerySeriesRequest(metric=1, step_ns=1), "INVALID_ARGUMENT", "step_ns"),
        (
            "QuerySeries",
            M.QuerySeriesRequest(metric=1, time_range=common_pb2.TimeRange(start_ns=9, end_ns=3)),
            "INVALID_ARGUMENT",
            "time_range",
        ),
        (
            "TopLinks",
            M.TopLinksRequest(metric=1, ports=M.PortSelector(patterns=["no-such-port"])),
            "NOT_FOUND",
            "ports.patterns[0]",
        ),
        ("GetLossHistory", M.GetLossHistoryRequest(port="nope"), "NOT_FOUND", "port"),
        ("GetUtilisationSkew", M.GetUtilisationSkewRequest(step_ns=-5), "INVALID_ARGUMENT", "step_ns"),
    ],
)
async def test_bad_queries_name_the_field(telemetry, source, call, request_message, code, field):
    await telemetry.IngestSamples(
        iter(
            [
                M.IngestSamplesRequest(
                    batch=sample_batch(source, ["a"], [0, 0], [0, 10**12], {M.METRIC_TX_BYTES: np.ones(2)})
                )
            ]
        )
    )
    request_message.source = source
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await getattr(telemetry, call)(request_message)
    assert caught.value.code() == getattr(grpc.StatusCode, code)
    assert caught.value.details().startswith(f"{field}:"), caught.value.details()


def test_the_service_flags_have_environment_variables():
    config = load_config(
        "telemetry",
        ["--ingest-parallelism", "3", "--query-threads", "12"],
        env={
            "FABRICTWIN_MAINTENANCE_INTERVAL_SECONDS": "0.5",
            "FABRICTWIN_MAX_POINTS": "7",
            "FABRICTWIN_DATABASE_PROBE_INTERVAL_SECONDS": "0.25",
        },
        extra_flags=extra_flags,
    )
    assert config.extra == {
        "ingest_parallelism": 3,
        "maintenance_interval_seconds": 0.5,
        "max_points": 7,
        "query_threads": 12,
        "database_probe_interval_seconds": 0.25,
    }


async def test_the_service_sweeps_every_source_on_its_own(database_url, tmp_path):
    config = ServiceConfig(
        service="telemetry",
        port=0,
        database_url=database_url,
        data_dir=str(tmp_path),
        extra={"maintenance_interval_seconds": 0.1},
    )
    definitions, cleanup = await build(config)
    try:
        async with (
            serving(config, definitions) as running,
            grpc.aio.insecure_channel(running.address) as channel,
        ):
            stub = telemetry_pb2_grpc.TelemetryServiceStub(channel)
            name = (
                await stub.CreateSource(
                    M.CreateSourceRequest(source_id=new_id("swept"), source=M.Source(kind=1))
                )
            ).name
            minute = 60_000_000_000
            batch = sample_batch(name, ["a"], [0, 0], [0, 2 * minute], {M.METRIC_DROPS: np.ones(2)})
            await stub.IngestSamples(iter([M.IngestSamplesRequest(batch=batch)]))
            for _ in range(100):
                source = await stub.GetSource(M.GetSourceRequest(name=name))
                if source.rolled_up_until_ns:
                    break
                await asyncio.sleep(0.05)
            assert source.rolled_up_until_ns == 2 * minute
            await stub.DeleteSource(M.DeleteSourceRequest(name=name))
    finally:
        await cleanup()


async def test_a_group_of_a_fabric_the_topology_service_does_not_know_names_the_patterns(store, tmp_path):
    topology_config = ServiceConfig(service="topology", port=0, data_dir=str(tmp_path))
    topology_definitions, topology_cleanup = await build_topology(topology_config)
    try:
        async with serving(topology_config, topology_definitions) as topology:
            servicer = TelemetryServicer(store, TopologyLinks(topology.address))
            definition = ServiceDefinition(
                "fabrictwin.v1.TelemetryService",
                servicer,
                telemetry_pb2_grpc.add_TelemetryServiceServicer_to_server,
            )
            async with (
                serving(ServiceConfig(service="telemetry", port=0), [definition]) as running,
                grpc.aio.insecure_channel(running.address) as channel,
            ):
                stub = telemetry_pb2_grpc.TelemetryServiceStub(channel)
                created = await stub.CreateSource(
                    M.CreateSourceRequest(
                        source_id=new_id("orphan"), source=M.Source(kind=1, fabric="fabrics/gone")
                    )
                )
                query = M.QuerySeriesRequest(
                    source=created.name, metric=1, ports=M.PortSelector(patterns=["group:uplinks"])
                )
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await stub.QuerySeries(query)
                assert caught.value.code() == grpc.StatusCode.NOT_FOUND
                assert caught.value.details().startswith("ports.patterns: ")
                await stub.DeleteSource(M.DeleteSourceRequest(name=created.name))
    finally:
        if topology_cleanup is not None:
            await topology_cleanup()
