"""The examples in the SDK's docstrings run and print what they claim."""

from __future__ import annotations

import doctest
import importlib
import pathlib

import fabrictwin
import pytest

MODULES = sorted(
    f"fabrictwin.{path.stem}"
    for path in pathlib.Path(fabrictwin.__file__).parent.glob("*.py")
    if path.stem != "__init__"
)


@pytest.mark.parametrize("module", MODULES)
def test_the_docstring_examples_hold(module: str) -> None:
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
