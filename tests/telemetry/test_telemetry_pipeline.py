"""A stream of batches written with several transactions in flight stores every row exactly once and
keeps cumulative counters in order."""

from __future__ import annotations

import numpy as np
import pytest

from services.telemetry.batches import BatchRejected
from services.telemetry.counters import CounterKind
from services.telemetry.pipeline import Decoded, ingest_stream
from services.telemetry.store import IngestOutcome, TelemetryStore

PORTS = [f"leaf-{i // 8}/p{i % 8 + 1}" for i in range(64)]


async def _stream(items):
    for item in items:
        yield item


def _decoder(store: TelemetryStore, source_id: str):
    def decode(request: dict) -> Decoded:
        try:
            return Decoded(source_id, store.prepare(**request))
        except BatchRejected as exc:
            return Decoded(refused=IngestOutcome(rejected=len(request["time_ns"]), reasons=(exc.rejection,)))

    return decode


def _batch(first_time: int, times: int, kinds=None, column="tx_bytes", values=None) -> dict:
    time_ns = np.repeat(np.arange(first_time, first_time + times, dtype=np.int64) * 1000, len(PORTS))
    port_index = np.tile(np.arange(len(PORTS)), times)
    data = values if values is not None else np.ones(time_ns.size)
    return {
        "ports": PORTS,
        "port_index": port_index,
        "time_ns": time_ns,
        "columns": {column: data},
        "counter_kinds": kinds,
    }


@pytest.mark.parametrize("parallelism", [1, 3])
async def test_overlapping_batches_in_flight_together_store_each_row_once(
    store: TelemetryStore, source_id: str, parallelism: int
):
    # Ten batches of 10 times each; batches 3 and 7 repeat the rows of batches 2 and 6, batch 5 is bad.
    requests = [_batch(10 * b, 10) for b in range(10)]
    requests[3], requests[7] = _batch(20, 10), _batch(60, 10)
    requests[5]["time_ns"] = requests[5]["time_ns"][::-1].copy()
    outcomes = await ingest_stream(
        _stream(requests), _decoder(store, source_id), store.write, parallelism=parallelism
    )
    assert [o.rejected > 0 for o in outcomes] == [i == 5 for i in range(10)]
    assert sum(o.stored for o in outcomes) == 7 * 10 * len(PORTS)
    assert sum(o.duplicates for o in outcomes) == 2 * 10 * len(PORTS)
    assert store.get_source(source_id).sample_count == 7 * 10 * len(PORTS)


async def test_cumulative_batches_are_converted_in_stream_order(store: TelemetryStore, source_id: str):
    kinds = {"rx_bytes": CounterKind.CUMULATIVE_64}
    # Each port's counter grows by 100 per sample across eight batches of 5 samples.
    requests = []
    for b in range(8):
        readings = np.repeat(np.arange(5 * b, 5 * b + 5, dtype=np.uint64) * 100, len(PORTS))
        requests.append(_batch(5 * b, 5, kinds, "rx_bytes", readings))
    outcomes = await ingest_stream(_stream(requests), _decoder(store, source_id), store.write, parallelism=4)
    assert all(o.rejected == 0 for o in outcomes)
    series = store.query_series(source_id, "rx_bytes", port_patterns=["leaf-3/p4"]).series[0]
    assert series.values.tolist() == [100.0] * 39  # every delta; the first reading has none
