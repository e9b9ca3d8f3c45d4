"""The examples in the telemetry core's docstrings run and print what they claim."""

from __future__ import annotations

import doctest
import importlib
import pathlib

import pytest

import services.telemetry

MODULES = sorted(
    f"services.telemetry.{path.stem}"
    for path in pathlib.Path(services.telemetry.__file__).parent.glob("*.py")
    if path.stem not in ("__init__", "__main__")
)


@pytest.mark.parametrize("module", MODULES)
def test_the_docstring_examples_hold(module: str):
    assert doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS).failed == 0
