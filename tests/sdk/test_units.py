"""Sizes and durations as people type them, parsed into integer bytes and nanoseconds."""

from __future__ import annotations

import pytest
from fabrictwin.units import parse_duration_ns, parse_size
from hypothesis import given
from hypothesis import strategies as st


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("256MiB", 256 * 2**20),
        ("1GiB", 2**30),
        ("1gib", 2**30),
        ("256Mi", 256 * 2**20),
        ("1e6", 1_000_000),
        ("1.5GB", 1_500_000_000),
        ("4096", 4096),
        ("4 KiB", 4096),
        ("2TB", 2 * 10**12),
        ("0", 0),
    ],
)
def test_sizes_parse_with_binary_and_decimal_units(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "MiB", "12XB", "-1MiB", "0.5", "1.5B", "1e-3", "ten"])
def test_a_size_that_is_not_a_whole_number_of_bytes_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match=repr(text)):
        parse_size(text)


@given(
    st.integers(min_value=0, max_value=2**40),
    st.sampled_from([("KiB", 2**10), ("MiB", 2**20), ("kB", 10**3)]),
)
def test_every_whole_count_of_a_unit_parses_exactly(count: int, unit: tuple[str, int]) -> None:
    assert parse_size(f"{count}{unit[0]}") == count * unit[1]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("500", 500),
        ("500ns", 500),
        ("10us", 10_000),
        ("1.5ms", 1_500_000),
        ("2s", 2 * 10**9),
        ("5m", 300 * 10**9),
    ],
)
def test_durations_parse_into_nanoseconds(text: str, expected: int) -> None:
    assert parse_duration_ns(text) == expected


def test_a_fraction_of_a_nanosecond_is_refused() -> None:
    with pytest.raises(ValueError, match="whole number of nanoseconds"):
        parse_duration_ns("1.5ns")
