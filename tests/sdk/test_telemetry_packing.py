"""Columns packed with the standard library decode exactly as numpy (the servers' side) reads them."""

from __future__ import annotations

import pytest
from fabrictwin.arrays import pack_numeric_array, unpack_numeric_array
from fabrictwin.errors import InvalidArgumentError
from fabrictwin.telemetry import sample_batches
from fabrictwin.v1 import telemetry_pb2
from hypothesis import given
from hypothesis import strategies as st

from services.common.arrays import from_numeric_array


@given(st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1), max_size=200))
def test_int64_columns_round_trip_through_numpy(values: list[int]) -> None:
    array = pack_numeric_array(values, "<i8")
    assert from_numeric_array(array).tolist() == values
    assert unpack_numeric_array(array) == values


@given(st.lists(st.floats(allow_nan=False), max_size=200))
def test_float64_columns_round_trip_through_numpy(values: list[float]) -> None:
    assert from_numeric_array(pack_numeric_array(values, "<f8")).tolist() == values


def test_a_value_that_does_not_fit_its_dtype_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="<i4"):
        pack_numeric_array([2**40], "<i4")


def test_rows_are_cut_into_batches_of_at_most_batch_rows() -> None:
    rows = 10
    batches = list(
        sample_batches(
            "pod1",
            ["leaf-0/p1", "leaf-0/p2"],
            [i % 2 for i in range(rows)],
            list(range(rows)),
            {"utilisation": [i / 10 for i in range(rows)], "tx_bytes": [2**60 + i for i in range(rows)]},
            counter_kinds={"tx_bytes": "cumulative_64"},
            batch_rows=4,
        )
    )
    assert [len(from_numeric_array(b.time_ns)) for b in batches] == [4, 4, 2]
    last = batches[-1]
    assert last.source == "sources/pod1"
    assert from_numeric_array(last.port_index).tolist() == [0, 1]
    utilisation, tx_bytes = last.columns
    assert utilisation.metric == telemetry_pb2.METRIC_UTILISATION
    assert from_numeric_array(utilisation.values).tolist() == [0.8, 0.9]
    assert tx_bytes.counter_kind == telemetry_pb2.COUNTER_KIND_CUMULATIVE_64
    # integer cumulative counters travel as exact unsigned 64-bit integers (2^60 + 9 is not a float64)
    assert tx_bytes.values.dtype == "<u8"
    assert from_numeric_array(tx_bytes.values).tolist() == [2**60 + 8, 2**60 + 9]


def test_float_values_of_a_cumulative_counter_travel_as_float64() -> None:
    (batch,) = sample_batches(
        "s", ["p"], [0], [1], {"tx_bytes": [1.5]}, counter_kinds={"tx_bytes": "cumulative_64"}
    )
    assert batch.columns[0].values.dtype == "<f8"


def test_a_column_of_the_wrong_length_is_refused_before_anything_is_sent() -> None:
    with pytest.raises(InvalidArgumentError, match=r"columns\[drops\]: 1 rows, but time_ns has 2"):
        sample_batches("s", ["p"], [0, 0], [1, 2], {"drops": [1.0]})


def test_an_unknown_metric_names_the_choices() -> None:
    with pytest.raises(InvalidArgumentError, match="utilisation"):
        sample_batches("s", ["p"], [0], [1], {"goodput": [1.0]})
