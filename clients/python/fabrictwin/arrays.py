"""NumericArray <-> Python sequences with the standard library only (no numpy in the SDK).

A `fabrictwin.v1.NumericArray` is raw little-endian bytes plus a numpy-style dtype string ("<i4",
"<f8", "|u1"). `struct` packs and unpacks a whole column in one C call, so even a million-row batch
costs no Python loop per element. Users with numpy can still use `numpy.frombuffer(a.data, a.dtype)`.

>>> array = pack_numeric_array([1, 2, 3], "<i4")
>>> array.data.hex(), unpack_numeric_array(array)
('010000000200000003000000', [1, 2, 3])
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from fabrictwin.errors import InvalidArgumentError
from fabrictwin.v1 import common_pb2

__all__ = ["DTYPE_FORMATS", "pack_numeric_array", "unpack_numeric_array"]

# numpy dtype string -> struct format character (the byte order comes from the "<" prefix we add).
DTYPE_FORMATS = {
    "|i1": "b",
    "<i1": "b",
    "|u1": "B",
    "<u1": "B",
    "<i2": "h",
    "<u2": "H",
    "<i4": "i",
    "<u4": "I",
    "<i8": "q",
    "<u8": "Q",
    "<f4": "f",
    "<f8": "d",
}


def _format(dtype: str) -> str:
    code = DTYPE_FORMATS.get(dtype)
    if code is None:
        raise InvalidArgumentError(f"dtype: {dtype!r} is not one of {', '.join(DTYPE_FORMATS)}")
    return code


def pack_numeric_array(values: Sequence[int] | Sequence[float], dtype: str) -> common_pb2.NumericArray:
    """A one-dimensional NumericArray of `values` as `dtype` ("<i4", "<i8", "<f8", ...).

    Raises InvalidArgumentError if a value does not fit the dtype (e.g. a float in "<i8").
    """
    code = _format(dtype)
    try:
        data = struct.pack(f"<{len(values)}{code}", *values)
    except struct.error as exc:
        raise InvalidArgumentError(f"values do not fit dtype {dtype!r}: {exc}") from None
    return common_pb2.NumericArray(dtype=dtype, data=data)


def unpack_numeric_array(array: common_pb2.NumericArray) -> list[int] | list[float]:
    """The values of a NumericArray as a flat list (C order; `array.shape` gives the dimensions)."""
    code = _format(array.dtype)
    size = struct.calcsize(code)
    if len(array.data) % size:
        raise InvalidArgumentError(f"data: {len(array.data)} bytes is not a multiple of {array.dtype!r}")
    return list(struct.unpack(f"<{len(array.data) // size}{code}", array.data))
