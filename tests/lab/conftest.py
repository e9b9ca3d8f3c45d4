"""Registers the `lab` marker for the tests that build a fabric in network namespaces."""

from __future__ import annotations


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "lab: builds a real fabric in Linux network namespaces")
