"""The core's enums and the metric columns agree with fabrictwin.v1 (the contract)."""

from __future__ import annotations

from fabrictwin.v1 import telemetry_pb2

from services.telemetry.aggregates import Aggregation
from services.telemetry.counters import CounterKind
from services.telemetry.schema import METRIC_COLUMNS, samples


def test_every_metric_has_the_sample_column_named_after_it():
    proto = {v: n.removeprefix("METRIC_").lower() for n, v in telemetry_pb2.Metric.items() if v}
    assert proto == METRIC_COLUMNS
    assert set(METRIC_COLUMNS.values()) <= set(samples.c.keys())


def test_counter_kinds_carry_the_proto_numbers():
    assert {k.name: k.value for k in CounterKind} == {
        n.removeprefix("COUNTER_KIND_"): v for n, v in telemetry_pb2.CounterKind.items()
    }


def test_every_aggregation_of_the_proto_is_known_to_the_core():
    names = {n.removeprefix("AGGREGATION_") for n, v in telemetry_pb2.Aggregation.items() if v}
    assert names == {a.name for a in Aggregation}
