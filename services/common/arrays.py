"""numpy arrays <-> fabrictwin.v1.NumericArray, the one place that converts them."""

from __future__ import annotations

import math

import numpy as np
from fabrictwin.v1 import common_pb2

from services.common.errors import InvalidArgument

__all__ = ["from_numeric_array", "to_numeric_array"]

_ALLOWED = {
    "|b1",
    "<i1",
    "|i1",
    "<i2",
    "<i4",
    "<i8",
    "<u1",
    "|u1",
    "<u2",
    "<u4",
    "<u8",
    "<f4",
    "<f8",
}


def to_numeric_array(values: np.ndarray) -> common_pb2.NumericArray:
    """Little-endian raw bytes plus dtype and shape; ValueError for a dtype the wire does not carry."""
    array = np.ascontiguousarray(values)
    array = array.astype(array.dtype.newbyteorder("<"), copy=False)
    if array.dtype.str not in _ALLOWED:
        raise ValueError(
            f"dtype {array.dtype} cannot be sent as a NumericArray; use one of {sorted(_ALLOWED)}"
        )
    return common_pb2.NumericArray(dtype=array.dtype.str, shape=list(array.shape), data=array.tobytes())


def from_numeric_array(message: common_pb2.NumericArray, field: str = "array") -> np.ndarray:
    """Decode without a Python loop per element; bad dtype, shape or length is InvalidArgument naming `field`.

    The result is a read-only view of the message's bytes (no copy); `.copy()` it to modify it.
    """
    if message.dtype not in _ALLOWED:
        raise InvalidArgument(field, f"unsupported dtype {message.dtype!r}; use one of {sorted(_ALLOWED)}")
    dtype = np.dtype(message.dtype)
    if len(message.data) % dtype.itemsize:
        raise InvalidArgument(field, f"{len(message.data)} bytes is not a whole number of {dtype} values")
    array = np.frombuffer(message.data, dtype=dtype)
    if message.shape:
        shape = tuple(message.shape)
        if any(extent < 0 for extent in shape):
            raise InvalidArgument(field, f"shape {list(shape)} has a negative dimension")
        expected = math.prod(shape)  # Python ints: np.prod would overflow silently on a hostile shape
        if expected != array.size:
            raise InvalidArgument(field, f"shape {list(shape)} needs {expected} values, got {array.size}")
        array = array.reshape(shape)
    return array
