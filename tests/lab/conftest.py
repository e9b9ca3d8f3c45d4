"""Shared fixtures of the lab tests."""

from __future__ import annotations

import pathlib

import pytest

from tests.lab.ib_opensm import ibsim_lab_unavailable_reason


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> pathlib.Path:
    """A directory for a module's ibsim runs; skips, with the reason, where ibsim cannot run."""
    reason = ibsim_lab_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    return tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1])
