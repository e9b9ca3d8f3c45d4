"""Fixtures for the format tests."""

from __future__ import annotations

import pytest

from tests.topology.formats.shared_data import read_shared


@pytest.fixture
def shared_text():
    """`shared_text("ibnetdiscover/ibtopotool-3.topo")` -> the file's text, or skip with the reason."""
    return read_shared
