"""An ingest cut off mid-stream (the telemetry process killed) resumes after the last acknowledged batch
once the service is back, and every row is stored exactly once."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest
from fabrictwin import Client
from fabrictwin.errors import UnavailableError
from fabrictwin.telemetry import sample_batches

from services.stack import free_port
from tests.conftest import ROOT

PORTS = [f"leaf-{i // 16}/p{i % 16 + 1}" for i in range(64)]
TIMES_PER_BATCH = 20
BATCHES = 30
ROWS_PER_BATCH = len(PORTS) * TIMES_PER_BATCH


class TelemetryProcess:
    """`python -m services.telemetry` on a fixed port and SQLite file, killed and restarted at will."""

    def __init__(self, data_dir: str) -> None:
        self.port = free_port()
        self.data_dir = data_dir
        self.process: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        env = {
            **os.environ,
            "FABRICTWIN_DATA_DIR": self.data_dir,
            "FABRICTWIN_MAINTENANCE_INTERVAL_SECONDS": "0",
            "FABRICTWIN_LOG_FORMAT": "json",
            "PYTHONPATH": str(ROOT),
        }
        log = open(os.path.join(self.data_dir, "telemetry.log"), "ab")  # noqa: SIM115 - the child's
        self.process = subprocess.Popen(
            [sys.executable, "-m", "services.telemetry", "--port", str(self.port)],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()

    def wait_serving(self, client: Client, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while client.health(["telemetry"], timeout=1)["telemetry"] != "SERVING":
            assert self.process is not None and self.process.poll() is None, "telemetry exited"
            assert time.monotonic() < deadline, "telemetry did not start"
            time.sleep(0.05)

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def rows_in_sql(self) -> int:
        with sqlite3.connect(os.path.join(self.data_dir, "telemetry.db")) as db:
            return db.execute("SELECT count(*) FROM telemetry_samples").fetchone()[0]


@pytest.fixture
def telemetry(tmp_path) -> Iterator[TelemetryProcess]:
    service = TelemetryProcess(str(tmp_path))
    service.start()
    try:
        yield service
    finally:
        service.stop()


def _batches(source: str, cut_after: int, cut) -> Iterator:  # type: ignore[no-untyped-def]
    """BATCHES batches of new rows; `cut()` runs once batch `cut_after` has been handed to gRPC."""
    for b in range(BATCHES):
        times = [(b * TIMES_PER_BATCH + t) * 1_000_000 for t in range(TIMES_PER_BATCH)]
        (batch,) = sample_batches(
            source,
            PORTS,
            [p for _ in times for p in range(len(PORTS))],
            [t for t in times for _ in PORTS],
            {"utilisation": [0.25] * ROWS_PER_BATCH},
            batch_rows=ROWS_PER_BATCH,
        )
        yield batch
        if b == cut_after:
            cut()


def test_an_ingest_cut_by_a_killed_service_resumes_and_stores_every_row_once(telemetry):
    with Client(telemetry=telemetry.address, timeout=30) as client:
        telemetry.wait_serving(client)
        client.telemetry.create_source("resumed")

        def kill_and_restart() -> None:
            telemetry.kill()
            # Back half a second later on the same port and database: the SDK keeps trying meanwhile.
            threading.Timer(0.5, telemetry.start).start()

        reply = client.telemetry.ingest(_batches("resumed", cut_after=BATCHES // 2, cut=kill_and_restart))

        rows = BATCHES * ROWS_PER_BATCH
        assert telemetry.process is not None and telemetry.process.poll() is None  # the restarted one
        assert reply.batches == BATCHES and reply.rejected == 0
        assert reply.stored + reply.duplicates == rows
        # Only batches in flight at the cut (sent, not yet acknowledged) may be sent twice.
        assert reply.duplicates <= 8 * ROWS_PER_BATCH
        assert client.telemetry.get_source("resumed").sample_count == rows
    assert telemetry.rows_in_sql() == rows


def test_an_ingest_gives_up_with_unavailable_when_the_service_stays_away(telemetry):
    with Client(telemetry=telemetry.address, timeout=30) as client:
        telemetry.wait_serving(client)
        client.telemetry.create_source("abandoned")
        began = time.monotonic()
        with pytest.raises(UnavailableError) as caught:
            client.telemetry.ingest(_batches("abandoned", cut_after=3, cut=telemetry.kill), resume_s=2.0)
        assert time.monotonic() - began < 20
        assert "acknowledged" in str(caught.value)


def test_an_error_raised_by_the_batches_reaches_the_caller_as_it_was(telemetry):
    def failing() -> Iterator:  # type: ignore[type-arg]
        batches = _batches("failing", cut_after=-1, cut=lambda: None)
        yield next(batches)
        yield next(batches)
        raise ValueError("line 3: not a number")

    with Client(telemetry=telemetry.address, timeout=30) as client:
        telemetry.wait_serving(client)
        client.telemetry.create_source("failing")
        with pytest.raises(ValueError, match=r"^line 3: not a number$"):
            client.telemetry.ingest(failing())
        assert client.telemetry.get_source("failing").sample_count == 2 * ROWS_PER_BATCH


@pytest.mark.postgres
def test_an_ingest_across_a_postgresql_restart_resumes_and_stores_every_row_once(
    postgres_url, tmp_path, serve
):
    from services.telemetry.__main__ import build
    from tests.sdk.conftest import config
    from tests.telemetry.test_telemetry_database_away import Cluster

    cluster = Cluster(postgres_url)
    try:
        server = serve(build, config("telemetry", str(tmp_path), database_url=postgres_url))
        with Client(telemetry=server.address, timeout=30) as client:
            source = f"restarted-{os.getpid()}"
            client.telemetry.create_source(source)

            def restart_postgresql() -> None:
                cluster.stop()
                threading.Timer(1.0, cluster.start).start()

            try:
                reply = client.telemetry.ingest(
                    _batches(source, cut_after=BATCHES // 2, cut=restart_postgresql)
                )
                rows = BATCHES * ROWS_PER_BATCH
                assert reply.rejected == 0 and reply.stored + reply.duplicates == rows
                assert client.telemetry.get_source(source).sample_count == rows
            finally:
                client.telemetry.delete_source(source)
    finally:
        cluster.start()


def test_a_service_without_acknowledgements_gets_the_batches_over_ingest_samples(tmp_path, serve):
    from fabrictwin.v1 import telemetry_pb2_grpc

    from services.common.server import ServiceDefinition
    from services.telemetry.servicer import TelemetryServicer
    from services.telemetry.store import TelemetryStore
    from tests.sdk.conftest import config, definitions_build

    class Older(TelemetryServicer):
        def IngestSamplesAcked(self, request_iterator, context):  # type: ignore[no-untyped-def]
            raise NotImplementedError  # as a service built before IngestSamplesAcked answers

    store = TelemetryStore.open(f"sqlite:///{tmp_path / 'older.db'}")
    try:
        definition = ServiceDefinition(
            "fabrictwin.v1.TelemetryService",
            Older(store),
            telemetry_pb2_grpc.add_TelemetryServiceServicer_to_server,
        )
        server = serve(definitions_build([definition]), config("telemetry", str(tmp_path)))
        with Client(telemetry=server.address, timeout=30) as client:
            client.telemetry.create_source("older")
            reply = client.telemetry.ingest(_batches("older", cut_after=-1, cut=lambda: None))
            assert (reply.batches, reply.stored) == (BATCHES, BATCHES * ROWS_PER_BATCH)
    finally:
        store.close()
