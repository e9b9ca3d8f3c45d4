"""PostgreSQL stopped mid-ingest and mid-query: every call answers UNAVAILABLE (not INTERNAL), health
says NOT_SERVING while the database is away and SERVING once it is back, and work then succeeds.

The test stops and starts the machine's own PostgreSQL cluster (`pg_ctlcluster`, as root), the one
FABRICTWIN_TEST_POSTGRES_URL points at; it is skipped, with the reason, where that is not possible.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time

import grpc
import numpy as np
import psycopg
import pytest
from fabrictwin.v1 import common_pb2, telemetry_pb2, telemetry_pb2_grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from sqlalchemy.engine import make_url

from services.common.config import ServiceConfig
from services.common.db import normalise_url
from services.common.resources import new_id
from services.common.server import serving
from services.telemetry.__main__ import SERVICE_NAME, build
from tests.telemetry.batches import sample_batch

pytestmark = pytest.mark.postgres

M = telemetry_pb2
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def _cluster_of(url: str) -> tuple[str, str]:
    """(version, name) of the local cluster listening on the URL's port; skips when there is none."""
    if shutil.which("pg_ctlcluster") is None or shutil.which("pg_lsclusters") is None:
        pytest.skip("pg_ctlcluster is not installed: cannot stop and start PostgreSQL here")
    if os.geteuid() != 0:
        pytest.skip("stopping PostgreSQL with pg_ctlcluster needs root")
    parsed = make_url(normalise_url(url))
    if parsed.host not in ("127.0.0.1", "localhost", "::1"):
        pytest.skip(f"the test database is on {parsed.host}, not this machine's cluster")
    listed = subprocess.run(["pg_lsclusters", "-h"], capture_output=True, text=True, check=True).stdout
    for line in listed.splitlines():
        version, name, port, *_ = line.split()
        if int(port) == (parsed.port or 5432):
            return version, name
    pytest.skip(f"no local cluster listens on port {parsed.port}")


def _libpq(url: str) -> str:
    return make_url(normalise_url(url)).set(drivername="postgresql").render_as_string(hide_password=False)


def _wait_accepting(url: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with psycopg.connect(_libpq(url), connect_timeout=2) as connection:
                connection.execute("SELECT 1")
                return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


class Cluster:
    """The local PostgreSQL cluster behind the test URL."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.version, self.name = _cluster_of(url)

    def stop(self) -> None:
        """Stop the cluster: open connections are ended (fast shutdown), new ones refused."""
        command = ["pg_ctlcluster", "--mode", "fast", self.version, self.name, "stop"]
        subprocess.run(command, check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        """Start the cluster (a no-op when it runs) and wait until it accepts connections."""
        command = ["pg_ctlcluster", self.version, self.name, "start"]
        subprocess.run(command, capture_output=True, timeout=120)  # "already running" is fine
        _wait_accepting(self.url)


@pytest.fixture
def cluster(postgres_url: str):
    cluster = Cluster(postgres_url)
    try:
        yield cluster
    finally:
        cluster.start()  # whatever happened, leave PostgreSQL running


async def _health(stub: health_pb2_grpc.HealthStub) -> int:
    return (await stub.Check(health_pb2.HealthCheckRequest(service=SERVICE_NAME), timeout=5)).status


async def _wait_health(stub: health_pb2_grpc.HealthStub, wanted: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while (status := await _health(stub)) != wanted:
        assert time.monotonic() < deadline, f"health still {status} after {timeout} s, not {wanted}"
        await asyncio.sleep(0.1)


def _batch(source: str, first_time: int) -> telemetry_pb2.SampleBatch:
    ports = [f"leaf-1/p{p}" for p in range(1, 5)]
    port_index = np.tile(np.arange(4), 5)
    time_ns = np.repeat(np.arange(first_time, first_time + 5, dtype=np.int64), 4)
    return sample_batch(source, ports, port_index, time_ns, {M.METRIC_UTILISATION: np.full(20, 0.5)})


async def _code_of(call) -> grpc.StatusCode:  # type: ignore[no-untyped-def]
    try:
        await call
    except grpc.aio.AioRpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


async def test_postgresql_away_is_unavailable_and_not_serving_until_it_is_back(cluster, tmp_path):
    config = ServiceConfig(
        service="telemetry",
        port=0,
        database_url=cluster.url,
        data_dir=str(tmp_path),
        extra={"maintenance_interval_seconds": 0, "database_probe_interval_seconds": 0.2},
    )
    definitions, cleanup = await build(config)
    try:
        async with (
            serving(config, definitions) as running,
            grpc.aio.insecure_channel(running.address) as channel,
        ):
            stub = telemetry_pb2_grpc.TelemetryServiceStub(channel)
            health = health_pb2_grpc.HealthStub(channel)
            name = (
                await stub.CreateSource(
                    M.CreateSourceRequest(source_id=new_id("away"), source=M.Source(kind=1))
                )
            ).name
            query = M.QuerySeriesRequest(
                source=name, metric=M.METRIC_UTILISATION, time_range=common_pb2.TimeRange(end_ns=100)
            )
            stream = stub.IngestSamples()
            await stream.write(M.IngestSamplesRequest(batch=_batch(name, 0)))
            for _ in range(100):  # the first batch is committed while the stream stays open
                if (await stub.GetSource(M.GetSourceRequest(name=name))).sample_count == 20:
                    break
                await asyncio.sleep(0.05)
            assert await _health(health) == SERVING

            await asyncio.to_thread(cluster.stop)
            try:
                await stream.write(M.IngestSamplesRequest(batch=_batch(name, 10)))
                await stream.done_writing()
                assert await _code_of(stream) == grpc.StatusCode.UNAVAILABLE
                assert await _code_of(stub.QuerySeries(query)) == grpc.StatusCode.UNAVAILABLE
                assert await _code_of(stub.GetSource(M.GetSourceRequest(name=name))) == (
                    grpc.StatusCode.UNAVAILABLE
                )
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await stub.IngestSamples(iter([M.IngestSamplesRequest(batch=_batch(name, 10))]))
                assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
                assert "database" in caught.value.details()
                await _wait_health(health, NOT_SERVING, timeout=15)
            finally:
                await asyncio.to_thread(cluster.start)

            await _wait_health(health, SERVING, timeout=30)
            reply = await stub.IngestSamples(iter([M.IngestSamplesRequest(batch=_batch(name, 10))]))
            assert reply.stored == 20
            assert (await stub.GetSource(M.GetSourceRequest(name=name))).sample_count == 40
            assert len((await stub.QuerySeries(query)).series) == 4
            await stub.DeleteSource(M.DeleteSourceRequest(name=name))
    finally:
        await cleanup()
