"""IngestSamplesAcked: every batch is acknowledged, with the client's sequence number, once committed."""

from __future__ import annotations

import asyncio

import grpc
import numpy as np
import pytest
from fabrictwin.v1 import telemetry_pb2, telemetry_pb2_grpc

from services.common.config import ServiceConfig
from services.common.resources import new_id
from services.common.server import serving
from services.telemetry.__main__ import build
from tests.telemetry.batches import sample_batch

M = telemetry_pb2


@pytest.fixture
async def telemetry(database_url: str, tmp_path):
    """The telemetry service as `python -m services.telemetry` builds it, two batches in flight."""
    config = ServiceConfig(
        service="telemetry",
        port=0,
        database_url=database_url,
        data_dir=str(tmp_path),
        extra={"ingest_parallelism": 2, "maintenance_interval_seconds": 0},
    )
    definitions, cleanup = await build(config)
    try:
        async with (
            serving(config, definitions) as running,
            grpc.aio.insecure_channel(running.address) as channel,
        ):
            yield telemetry_pb2_grpc.TelemetryServiceStub(channel)
    finally:
        await cleanup()


@pytest.fixture
async def source(telemetry) -> str:
    created = await telemetry.CreateSource(
        M.CreateSourceRequest(source_id=new_id("acked"), source=M.Source(kind=M.SOURCE_KIND_LIVE))
    )
    yield created.name
    await telemetry.DeleteSource(M.DeleteSourceRequest(name=created.name))


def _batch(source: str, first_time: int, times: int = 10) -> telemetry_pb2.SampleBatch:
    ports = [f"leaf-1/p{p}" for p in range(1, 9)]
    port_index = np.tile(np.arange(len(ports)), times)
    time_ns = np.repeat(np.arange(first_time, first_time + times, dtype=np.int64), len(ports))
    return sample_batch(
        source, ports, port_index, time_ns, {M.METRIC_UTILISATION: np.full(time_ns.size, 0.5)}
    )


async def test_each_batch_is_acknowledged_with_its_sequence_while_the_stream_is_open(telemetry, source):
    stream = telemetry.IngestSamplesAcked()
    await stream.write(M.IngestSamplesAckedRequest(batch=_batch(source, 0), sequence=100))
    first = await asyncio.wait_for(stream.read(), 10)  # before anything else is sent
    assert (first.sequence, first.stored, first.duplicates, first.rejected) == (100, 80, 0, 0)
    got = await telemetry.GetSource(M.GetSourceRequest(name=source))
    assert got.sample_count == 80  # acknowledged means committed

    backwards = _batch(source, 10)
    backwards.time_ns.data = np.arange(80, 0, -1, dtype=np.int64).tobytes()  # a port's rows go back
    await stream.write(M.IngestSamplesAckedRequest(batch=backwards, sequence=101))
    await stream.write(M.IngestSamplesAckedRequest(batch=_batch(source, 0), sequence=102))  # re-sent
    await stream.write(M.IngestSamplesAckedRequest(batch=_batch(source, 20), sequence=103))
    await stream.done_writing()
    acks = {}
    while (ack := await asyncio.wait_for(stream.read(), 10)) is not grpc.aio.EOF:
        acks[ack.sequence] = ack
    assert sorted(acks) == [101, 102, 103]
    assert acks[101].rejected == 80 and acks[101].stored == 0
    assert acks[101].reasons[0].batch == 1 and acks[101].reasons[0].field == "batch.time_ns"
    assert (acks[102].stored, acks[102].duplicates) == (0, 80)
    assert (acks[103].stored, acks[103].duplicates) == (80, 0)
    assert await stream.code() == grpc.StatusCode.OK


async def test_batches_acknowledged_before_a_cut_stay_stored(telemetry, source):
    stream = telemetry.IngestSamplesAcked()
    for sequence in range(3):
        await stream.write(
            M.IngestSamplesAckedRequest(batch=_batch(source, 10 * sequence), sequence=sequence)
        )
    acknowledged = [await asyncio.wait_for(stream.read(), 10) for _ in range(3)]
    stream.cancel()  # the client goes away without closing the stream
    assert sorted(ack.sequence for ack in acknowledged) == [0, 1, 2]
    got = await telemetry.GetSource(M.GetSourceRequest(name=source))
    assert got.sample_count == sum(ack.stored for ack in acknowledged) == 240


async def test_the_old_client_streaming_ingest_still_answers_once(telemetry, source):
    reply = await telemetry.IngestSamples(
        M.IngestSamplesRequest(batch=_batch(source, 10 * b)) for b in range(3)
    )
    assert (reply.batches, reply.stored) == (3, 240)
