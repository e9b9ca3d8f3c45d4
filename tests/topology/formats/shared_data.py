"""Real dumps from ../shared/testdata, read in place (never copied); a test skips where they are absent."""

from __future__ import annotations

import pathlib

import pytest

__all__ = ["TESTDATA", "read_shared"]

TESTDATA = pathlib.Path(__file__).resolve().parents[3].parent / "shared" / "testdata"


def read_shared(relative: str) -> str:
    """The text of `relative` under the shared test data, or skip the test with the reason."""
    path = TESTDATA / relative
    if not path.is_file():
        pytest.skip(f"{path} is absent (the shared test data lives next to the project)")
    return path.read_text()
