"""Parsing sizes and durations as people write them: `256MiB`, `1GiB`, `1e6`, `10ms`, `1.5s`.

The API speaks integer bytes and integer nanoseconds; these turn text into those integers and reject
anything that is not a whole, non-negative number of bytes or nanoseconds.

>>> parse_size("256MiB")
268435456
>>> parse_size("1e6")
1000000
>>> parse_duration_ns("1.5ms")
1500000
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

__all__ = ["parse_duration_ns", "parse_size"]

_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 10**3,
    "kb": 10**3,
    "m": 10**6,
    "mb": 10**6,
    "g": 10**9,
    "gb": 10**9,
    "t": 10**12,
    "tb": 10**12,
    "ki": 2**10,
    "kib": 2**10,
    "mi": 2**20,
    "mib": 2**20,
    "gi": 2**30,
    "gib": 2**30,
    "ti": 2**40,
    "tib": 2**40,
}

_DURATION_UNITS = {
    "": 1,
    "ns": 1,
    "us": 10**3,
    "µs": 10**3,
    "ms": 10**6,
    "s": 10**9,
    "m": 60 * 10**9,
    "min": 60 * 10**9,
    "h": 3600 * 10**9,
}

# A decimal number (with optional exponent) followed by an optional unit.
_QUANTITY = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Zµ]*)\s*$")

_EXAMPLES = {"size": "4096, 256MiB, 1GiB, 1.5GB, 1e6", "duration": "500ns, 10us, 1.5ms, 2s, 5m"}


def _parse(text: str, units: dict[str, int], what: str) -> int:
    match = _QUANTITY.match(text)
    if not match:
        raise ValueError(f"{text!r} is not a {what} (examples: {_EXAMPLES[what]})")
    number, unit = match.groups()
    factor = units.get(unit.lower() if what == "size" else unit)
    if factor is None:
        raise ValueError(f"{text!r}: unknown unit {unit!r} (examples: {_EXAMPLES[what]})")
    try:
        value = Decimal(number) * factor
    except InvalidOperation as exc:  # pragma: no cover - the regex only lets numbers through
        raise ValueError(f"{text!r} is not a number") from exc
    if value != value.to_integral_value():
        raise ValueError(f"{text!r} is not a whole number of {'bytes' if what == 'size' else 'nanoseconds'}")
    return int(value)


def parse_size(text: str | int) -> int:
    """Bytes from `4096`, `256MiB`, `1GiB` (powers of 1024), `1.5GB`, `1e6` (powers of 1000).

    Units are case-insensitive; a trailing `B` is optional (`256Mi` = `256MiB`).
    Raises ValueError on anything else, including fractional bytes.
    """
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"size must not be negative, got {text}")
        return text
    return _parse(text, _SIZE_UNITS, "size")


def parse_duration_ns(text: str | int) -> int:
    """Nanoseconds from `500` (ns), `500ns`, `10us`, `1.5ms`, `2s`, `5m`, `1h`.

    Raises ValueError on anything else, including fractional nanoseconds.
    """
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"duration must not be negative, got {text}")
        return text
    return _parse(text, _DURATION_UNITS, "duration")
