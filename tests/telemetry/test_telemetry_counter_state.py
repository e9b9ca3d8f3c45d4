"""Counter state (each port's last raw reading per cumulative metric) stays right across restarts,
replicas, failed transactions and clients writing one source at once: no interval is counted twice
and none is lost. Every expectation comes from a plain-Python model of the counters, not from the
store's own conversion."""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import itertools
from collections.abc import Iterator

import grpc
import numpy as np
import pytest
import sqlalchemy as sa
from fabrictwin.v1 import common_pb2, telemetry_pb2, telemetry_pb2_grpc

from services.common.config import ServiceConfig
from services.common.resources import new_id
from services.common.server import serving
from services.telemetry.__main__ import build
from services.telemetry.counters import CounterKind
from services.telemetry.store import SourceKind, SourceRecord, TelemetryStore
from tests.telemetry.batches import sample_batch

M = telemetry_pb2
PORTS = [f"leaf-{i // 4}/p{i % 4 + 1}" for i in range(12)]
_WIDTH = {
    CounterKind.CUMULATIVE_64: 64,
    CounterKind.CUMULATIVE_32: 32,
    CounterKind.IB_DATA_32: 32,
    CounterKind.IB_DATA_64: 64,
    CounterKind.CUMULATIVE_16: 16,
    CounterKind.CUMULATIVE_8: 8,
}


@dataclasses.dataclass
class Counters:
    """The model: what the store must answer, from every (port, metric)'s readings in time order."""

    kinds: dict[str, CounterKind]
    last: dict[tuple[str, str], tuple[int, int]] = dataclasses.field(default_factory=dict)
    deltas: dict[tuple[str, str], list[tuple[int, float]]] = dataclasses.field(default_factory=dict)

    def read(self, port: str, metric: str, time_ns: int, reading: int) -> None:
        kind = self.kinds[metric]
        key = (port, metric)
        if key in self.last:
            previous_time, previous = self.last[key]
            assert time_ns > previous_time
            if _WIDTH[kind] == 64:
                delta = reading - previous if reading >= previous else reading  # a drop is a reset
            else:
                delta = (reading - previous) % 2 ** _WIDTH[kind]  # a drop is a wrap
            unit = 4 if kind in (CounterKind.IB_DATA_32, CounterKind.IB_DATA_64) else 1
            self.deltas.setdefault(key, []).append((time_ns, float(delta * unit)))
        self.last[key] = (time_ns, reading)


def _poll(
    model: Counters, ports: list[str], time_ns: int, readings: dict[str, list[int]]
) -> tuple[list[str], np.ndarray, np.ndarray, dict[str, np.ndarray], dict[str, CounterKind]]:
    """One poll of `ports` at one time: the store's ingest arguments, and the model reads them too."""
    for metric, values in readings.items():
        for port, value in zip(ports, values, strict=True):
            model.read(port, metric, time_ns, value)
    columns = {metric: np.array(values, dtype=np.uint64) for metric, values in readings.items()}
    kinds = {metric: model.kinds[metric] for metric in readings}
    return ports, np.arange(len(ports)), np.full(len(ports), time_ns, dtype=np.int64), columns, kinds


def _assert_stored(store: TelemetryStore, source_id: str, model: Counters) -> None:
    for metric in model.kinds:
        page = store.query_series(source_id, metric, limit=1000)
        stored = {s.port: list(zip(s.time_ns.tolist(), s.values.tolist(), strict=True)) for s in page.series}
        expected = {port: model.deltas.get((port, metric), []) for port, m in model.last if m == metric}
        assert {port: stored.get(port, []) for port in expected} == expected, metric


def _readings(rng: np.random.Generator, kind: CounterKind, previous: list[int]) -> list[int]:
    """The next readings: most counters grow, some wrap (narrow kinds) or reset (64-bit kinds)."""
    top = 2 ** _WIDTH[kind]
    grown = [(p + int(rng.integers(0, top // 3))) % top for p in previous]
    for i in rng.choice(len(grown), size=2, replace=False).tolist():
        grown[i] = int(rng.integers(0, 3))  # cleared: a reset on 64 bits, a wrap on narrower ones
    return grown


@contextlib.contextmanager
def _opened(url: str) -> Iterator[TelemetryStore]:
    store = TelemetryStore.open(url)
    try:
        yield store
    finally:
        store.close()


@pytest.mark.parametrize(
    "kind",
    [
        CounterKind.CUMULATIVE_64,
        CounterKind.CUMULATIVE_32,
        CounterKind.CUMULATIVE_16,
        CounterKind.CUMULATIVE_8,
        CounterKind.IB_DATA_32,
        CounterKind.IB_DATA_64,
    ],
)
def test_a_restarted_store_goes_on_from_the_last_committed_readings(database_url: str, kind: CounterKind):
    model = Counters({"rx_bytes": kind, "tx_packets": CounterKind.CUMULATIVE_64})
    rng = np.random.default_rng(int(kind))
    rx = [int(v) for v in rng.integers(0, 2 ** min(_WIDTH[kind], 62), len(PORTS))]
    tx = [0] * len(PORTS)
    source_id = new_id("restart")
    with _opened(database_url) as store:
        store.create_source(SourceRecord(source_id, SourceKind.LIVE))
    try:
        for poll in range(12):  # a new store (a restarted service) for every other poll
            with _opened(database_url) as store:
                for _ in range(2):
                    rx = _readings(rng, kind, rx)
                    tx = [t + 10 * (poll + 1) for t in tx]
                    ports = PORTS if poll % 3 else PORTS[:6]  # some polls miss half the ports
                    readings = {"rx_bytes": rx[: len(ports)], "tx_packets": tx[: len(ports)]}
                    outcome = store.ingest(source_id, *_poll(model, ports, 1000 * (poll * 2 + _), readings))
                    assert (outcome.stored, outcome.rejected) == (len(ports), 0), outcome.reasons
        with _opened(database_url) as store:
            _assert_stored(store, source_id, model)
    finally:
        with _opened(database_url) as store:
            store.delete_source(source_id)


def test_metrics_sent_in_separate_batches_keep_their_own_last_readings_across_a_restart(database_url: str):
    model = Counters({"rx_bytes": CounterKind.CUMULATIVE_64, "tx_bytes": CounterKind.CUMULATIVE_32})
    source_id = new_id("apart")
    with _opened(database_url) as store:
        store.create_source(SourceRecord(source_id, SourceKind.LIVE))
        store.ingest(source_id, *_poll(model, PORTS, 10, {"rx_bytes": [100] * 12}))
        store.ingest(source_id, *_poll(model, PORTS, 20, {"tx_bytes": [2**32 - 1] * 12}))
        store.ingest(source_id, *_poll(model, PORTS, 30, {"rx_bytes": [150] * 12, "tx_bytes": [9] * 12}))
    with _opened(database_url) as store:
        store.ingest(source_id, *_poll(model, PORTS[:3], 40, {"tx_bytes": [19] * 3}))
        store.ingest(source_id, *_poll(model, PORTS, 50, {"rx_bytes": [5] * 12, "tx_bytes": [29] * 12}))
        _assert_stored(store, source_id, model)
        store.delete_source(source_id)


def test_a_batch_resent_after_a_restart_is_duplicates_and_leaves_the_deltas_right(database_url: str):
    model = Counters({"rx_bytes": CounterKind.CUMULATIVE_64})
    source_id = new_id("resent")
    with _opened(database_url) as store:
        store.create_source(SourceRecord(source_id, SourceKind.LIVE))
        store.ingest(source_id, *_poll(model, PORTS, 10, {"rx_bytes": [100] * 12}))
        last = _poll(model, PORTS, 20, {"rx_bytes": [160] * 12})
        store.ingest(source_id, *last)
    with _opened(database_url) as store:
        again = store.ingest(source_id, *last)  # the client did not hear the answer and sends again
        assert (again.stored, again.duplicates, again.rejected) == (0, 12, 0)
        store.ingest(source_id, *_poll(model, PORTS, 30, {"rx_bytes": [200] * 12}))
        _assert_stored(store, source_id, model)
        assert store.get_source(source_id).sample_count == 36
        store.delete_source(source_id)


def test_many_polls_keep_the_stored_counter_state_small(database_url: str):
    model = Counters({"rx_bytes": CounterKind.CUMULATIVE_64, "tx_bytes": CounterKind.CUMULATIVE_64})
    source_id = new_id("compact")
    with _opened(database_url) as store:
        key = store.create_source(SourceRecord(source_id, SourceKind.LIVE)).key
        for poll in range(1, 40):
            ports = PORTS if poll % 4 else PORTS[poll % 12 :]  # now and then a partial poll
            values = [poll * 100] * len(ports)
            store.ingest(source_id, *_poll(model, ports, poll * 10, {"rx_bytes": values, "tx_bytes": values}))
            with store.engine.connect() as connection:
                stored_bytes = _counter_state_bytes(connection, key)
            # Each (port, metric)'s reading and time, 24 entries, at most a few times over.
            assert stored_bytes <= 3 * 24 * 21, poll
    with _opened(database_url) as store:
        _assert_stored(store, source_id, model)
        store.delete_source(source_id)


def _counter_state_bytes(connection: sa.Connection, source_key: int) -> int:
    """Bytes the database holds for a source's counter state (its rows' packed readings)."""
    table = sa.Table("telemetry_counter_log", sa.MetaData(), autoload_with=connection)
    columns = [c for c in table.c if isinstance(c.type, sa.LargeBinary)]
    total = sa.func.coalesce(sa.func.sum(sum(sa.func.length(c) for c in columns)), 0)
    return int(connection.execute(sa.select(total).where(table.c.source_key == source_key)).scalar_one())


def test_two_replicas_writing_one_source_in_turn_keep_every_delta(database_url: str):
    model = Counters({"rx_bytes": CounterKind.CUMULATIVE_32})
    source_id = new_id("replicas")
    with _opened(database_url) as first, _opened(database_url) as second:
        first.create_source(SourceRecord(source_id, SourceKind.LIVE))
        reading = 2**32 - 500
        for poll in range(8):  # each replica has seen the source, then the other one writes it
            reading = (reading + 170) % 2**32
            replica = (first, second, second, first)[poll % 4]
            outcome = replica.ingest(source_id, *_poll(model, PORTS, poll * 10, {"rx_bytes": [reading] * 12}))
            assert outcome.stored == 12
        _assert_stored(first, source_id, model)
        first.delete_source(source_id)


def test_a_batch_whose_transaction_fails_leaves_the_counters_where_they_were(database_url: str):
    model = Counters({"rx_bytes": CounterKind.CUMULATIVE_64})
    source_id = new_id("failed")
    failing = False

    def fail_the_commit(_connection: sa.Connection) -> None:
        if failing:
            raise RuntimeError("the commit failed")

    with _opened(database_url) as store, _opened(database_url) as replica:
        store.create_source(SourceRecord(source_id, SourceKind.LIVE))
        store.ingest(source_id, *_poll(model, PORTS, 10, {"rx_bytes": [100] * 12}))
        sa.event.listen(store.engine, "commit", fail_the_commit)
        failing = True
        ports, port_index, time_ns, columns, kinds = _poll(
            Counters(model.kinds), PORTS, 20, {"rx_bytes": [170] * 12}
        )
        with pytest.raises(RuntimeError, match="the commit failed"):
            store.ingest(source_id, ports, port_index, time_ns, columns, kinds)
        failing = False
        store.ingest(source_id, *_poll(model, PORTS, 30, {"rx_bytes": [250] * 12}))  # 150 since time 10
        failed = _poll(Counters(model.kinds), PORTS, 40, {"rx_bytes": [300] * 12})
        failing = True
        with pytest.raises(RuntimeError, match="the commit failed"):
            store.ingest(source_id, *failed)
        failing = False
        # Another replica stores other readings for the same time, as many batches on: the store
        # must not take the state it made for its failed batch for the one the replica stored.
        replica.ingest(source_id, *_poll(model, PORTS, 40, {"rx_bytes": [280] * 12}))
        store.ingest(source_id, *_poll(model, PORTS, 50, {"rx_bytes": [420] * 12}))  # 140, not 120
        _assert_stored(store, source_id, model)
        assert store.get_source(source_id).sample_count == 4 * 12
        store.delete_source(source_id)


@pytest.mark.parametrize("replicas", [1, 2])
def test_cumulative_batches_from_two_clients_at_once_never_count_an_interval_twice(
    database_url: str, replicas: int
):
    """Client A sends odd times, client B even times of the same ports, each poll its own batch, at
    once: a poll that arrives after a later one is refused as late, and every stored delta is the
    growth since the previous stored reading. Both also send the same rows of other ports."""
    if replicas == 2 and database_url.startswith("sqlite"):
        pytest.skip("replicas share PostgreSQL; a SQLite file has one service")
    shared, raced = PORTS[:6], PORTS[6:]
    polls = 30
    source_id = new_id("race")
    with contextlib.ExitStack() as stack:
        stores = [stack.enter_context(_opened(database_url)) for _ in range(replicas)]
        stores[0].create_source(SourceRecord(source_id, SourceKind.LIVE))

        def client(number: int) -> list[int]:
            store = stores[number % replicas]
            stored_times = []
            for t in range(1, polls + 1):
                kinds = {"rx_bytes": CounterKind.CUMULATIVE_64}
                shared_rows = {"rx_bytes": np.full(len(shared), 1000 * t, dtype=np.uint64)}
                outcome = store.ingest(
                    source_id, shared, np.arange(6), np.full(6, t * 10), shared_rows, kinds
                )
                assert outcome.stored + outcome.duplicates == 6 and not outcome.rejected, outcome.reasons
                if t % 2 != number:
                    continue
                raced_rows = {"rx_bytes": np.full(len(raced), 100 * t, dtype=np.uint64)}
                outcome = store.ingest(
                    source_id, raced, np.arange(6), np.full(6, t * 10 + 5), raced_rows, kinds
                )
                if outcome.stored:
                    assert outcome.stored == 6
                    stored_times.append(t)
                else:
                    assert "not after the last stored reading" in outcome.reasons[0].problem
            return stored_times

        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            stored = sorted(t for times in pool.map(client, [0, 1]) for t in times)
        store = stores[0]
        shared_series = store.query_series(source_id, "rx_bytes", port_patterns=shared).series
        assert all(s.values.tolist() == [1000.0] * (polls - 1) for s in shared_series)
        for series in store.query_series(source_id, "rx_bytes", port_patterns=raced).series:
            # The first stored reading has no delta; each next one grew 100 per time unit since the last.
            assert series.time_ns.tolist() == [t * 10 + 5 for t in stored[1:]]
            assert series.values.tolist() == [100.0 * (b - a) for a, b in itertools.pairwise(stored)]
        assert store.get_source(source_id).sample_count == 6 * polls + 6 * len(stored)
        store.delete_source(source_id)


async def test_a_restarted_service_turns_the_next_poll_into_deltas(database_url: str, tmp_path):
    config = ServiceConfig(
        service="telemetry",
        port=0,
        database_url=database_url,
        data_dir=str(tmp_path),
        extra={"maintenance_interval_seconds": 0, "database_probe_interval_seconds": 0},
    )
    kinds = {M.METRIC_RX_BYTES: M.COUNTER_KIND_CUMULATIVE_32, M.METRIC_TX_BYTES: M.COUNTER_KIND_CUMULATIVE_64}
    readings = [(2**32 - 100, 10**12), (50, 10**12 + 400), (250, 30)]  # a wrap, then a reset

    async def run(polls: list[int], name: str = "") -> tuple[str, telemetry_pb2.QuerySeriesResponse | None]:
        definitions, cleanup = await build(config)
        try:
            async with (
                serving(config, definitions) as running,
                grpc.aio.insecure_channel(running.address) as channel,
            ):
                stub = telemetry_pb2_grpc.TelemetryServiceStub(channel)
                if not name:
                    request = M.CreateSourceRequest(source_id=new_id("restart"), source=M.Source(kind=1))
                    name = (await stub.CreateSource(request)).name
                for poll in polls:
                    rx, tx = readings[poll]
                    columns = {
                        M.METRIC_RX_BYTES: np.full(12, rx, np.uint64),
                        M.METRIC_TX_BYTES: np.full(12, tx, np.uint64),
                    }
                    batch = sample_batch(
                        name, PORTS, np.arange(12), np.full(12, (poll + 1) * 10), columns, kinds
                    )
                    reply = await stub.IngestSamples(iter([M.IngestSamplesRequest(batch=batch)]))
                    assert reply.stored == 12
                if len(polls) < 2:
                    return name, None
                answers = []
                for metric in (M.METRIC_RX_BYTES, M.METRIC_TX_BYTES):
                    query = M.QuerySeriesRequest(
                        source=name, metric=metric, time_range=common_pb2.TimeRange(end_ns=100)
                    )
                    answers.append(await stub.QuerySeries(query))
                await stub.DeleteSource(M.DeleteSourceRequest(name=name))
                return name, answers
        finally:
            await cleanup()

    name, _ = await run([0])
    _, answers = await run([1, 2], name)
    rx, tx = answers
    assert len(rx.series) == len(tx.series) == 12
    assert all(list(s.values) == [150.0, 200.0] for s in rx.series)  # across the wrap
    assert all(list(s.values) == [400.0, 30.0] for s in tx.series)  # then reset: counts from zero
