"""NumericArray <-> numpy: lossless for every wire dtype and shape; bad messages name the field."""

from __future__ import annotations

import numpy as np
import pytest
from fabrictwin.v1 import common_pb2

from services.common.arrays import from_numeric_array, to_numeric_array
from services.common.errors import InvalidArgument

DTYPES = [
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float32",
    "float64",
]
SHAPES = [(0,), (1,), (7,), (2, 3), (2, 3, 4), (0, 5)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_an_array_survives_the_round_trip(dtype, shape):
    rng = np.random.default_rng(7)
    values = (rng.random(shape) * 100).astype(dtype)
    decoded = from_numeric_array(
        common_pb2.NumericArray.FromString(to_numeric_array(values).SerializeToString())
    )
    assert decoded.dtype == values.dtype
    assert decoded.shape == shape
    np.testing.assert_array_equal(decoded, values)


def test_the_wire_is_little_endian_whatever_the_input():
    big = np.arange(4, dtype=">i4")
    message = to_numeric_array(big)
    assert message.dtype == "<i4"
    assert message.data == np.arange(4, dtype="<i4").tobytes()
    np.testing.assert_array_equal(from_numeric_array(message), big)


def test_a_non_contiguous_view_is_sent_in_c_order():
    matrix = np.arange(12, dtype=np.int64).reshape(3, 4)
    np.testing.assert_array_equal(from_numeric_array(to_numeric_array(matrix.T)), matrix.T)


def test_an_empty_shape_means_one_dimension():
    message = common_pb2.NumericArray(dtype="<f8", data=np.arange(3, dtype="<f8").tobytes())
    assert from_numeric_array(message).shape == (3,)


def test_a_decoded_array_is_a_read_only_view_of_the_message():
    decoded = from_numeric_array(to_numeric_array(np.arange(3)))
    with pytest.raises(ValueError):
        decoded[0] = 1
    copy = decoded.copy()
    copy[0] = 1
    assert copy[0] == 1


@pytest.mark.parametrize("dtype", ["", "int32", ">i4", "<f2", "<c16", "|O", "<U4", "<M8[ns]"])
def test_an_unsupported_dtype_is_invalid_naming_the_field(dtype):
    message = common_pb2.NumericArray(dtype=dtype, data=b"\0" * 16)
    with pytest.raises(InvalidArgument) as rejected:
        from_numeric_array(message, "batch.time_ns")
    assert rejected.value.field == "batch.time_ns"


@pytest.mark.parametrize(
    ("shape", "length"),
    [((), 7), ((3,), 8), ((2, 2), 12), ((-1, -4), 16), ((2**32, 2**32), 16), ((2**62, 4), 0)],
    ids=["ragged", "short", "long", "negative", "overflowing", "huge"],
)
def test_a_length_that_does_not_match_dtype_and_shape_is_invalid_naming_the_field(shape, length):
    message = common_pb2.NumericArray(dtype="<i4", shape=list(shape), data=b"\0" * length)
    with pytest.raises(InvalidArgument) as rejected:
        from_numeric_array(message, "port_index")
    assert rejected.value.field == "port_index"


def test_an_array_the_wire_cannot_carry_is_refused_at_the_sender():
    with pytest.raises(ValueError, match="complex128"):
        to_numeric_array(np.zeros(2, dtype=np.complex128))
