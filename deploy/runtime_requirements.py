"""Print the services' runtime requirements from pyproject.toml, less the SDK, for the image build.

The Dockerfile installs the SDK from clients/python first, then these, so pyproject.toml stays the one
list of dependencies and pip never looks for the SDK on a package index.

    python deploy/runtime_requirements.py pyproject.toml > requirements.txt
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

__all__ = ["SDK_DISTRIBUTION", "runtime_requirements"]

SDK_DISTRIBUTION = "fabrictwin"  # clients/python/pyproject.toml's project name, installed from source


def _distribution_name(requirement: str) -> str:
    """The normalised project name at the start of a PEP 508 requirement (PEP 503 normalisation)."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    if match is None:
        raise ValueError(f"not a requirement: {requirement!r}")
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


def runtime_requirements(pyproject: Path) -> list[str]:
    """`project.dependencies` of `pyproject`, without the SDK (installed from its source tree)."""
    with pyproject.open("rb") as handle:
        dependencies = tomllib.load(handle)["project"]["dependencies"]
    return [d for d in dependencies if _distribution_name(d) != SDK_DISTRIBUTION]


if __name__ == "__main__":
    path = Path(sys.argv[1] if len(sys.argv) > 1 else "pyproject.toml")
    print("\n".join(runtime_requirements(path)))
