"""The Helm chart in deploy/fabrictwin, rendered by Helm's own Go library (helm-python-sdk, no helm binary).

`render(values)` returns every manifest as a dict plus NOTES.txt; values are merged over a database
Secret, without which the chart refuses to render.
"""

from __future__ import annotations

import copy
import dataclasses
import pathlib
from collections.abc import Callable, Mapping
from typing import Any

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "fabrictwin"
NAMESPACE = "lab"
RELEASE = "ft"
COMPONENTS = ("topology", "simulator", "telemetry", "orchestrator")
DATABASE = {"database": {"existingSecret": "fabrictwin-db", "key": "url"}}


def merged(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """`override` deep-merged over `base` (as Helm merges -f files)."""
    result = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(result.get(key), Mapping):
            result[key] = merged(result[key], value)
        else:
            result[key] = copy.deepcopy(value)
    return result


@dataclasses.dataclass
class Rendered:
    """What `helm template` would print: the manifests and the NOTES."""

    manifests: list[dict[str, Any]]
    notes: str

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [m for m in self.manifests if m["kind"] == kind]

    def named(self, kind: str, name: str) -> dict[str, Any]:
        found = [m for m in self.of_kind(kind) if m["metadata"]["name"] == name]
        assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
        return found[0]

    def deployment(self, component: str) -> dict[str, Any]:
        return self.named("Deployment", f"{RELEASE}-fabrictwin-{component}")

    def service(self, component: str) -> dict[str, Any]:
        return self.named("Service", f"{RELEASE}-fabrictwin-{component}")

    def container(self, component: str) -> dict[str, Any]:
        (container,) = self.deployment(component)["spec"]["template"]["spec"]["containers"]
        return container

    def env(self, component: str) -> dict[str, Any]:
        """name -> value, or name -> the valueFrom mapping for variables read from a Secret."""
        return {e["name"]: e.get("value", e.get("valueFrom")) for e in self.container(component)["env"]}


@pytest.fixture(scope="session")
def helm():
    """helm-python-sdk's module; skips with the reason printed where the dev extra is missing."""
    return pytest.importorskip(
        "helm_python", reason="helm-python-sdk (the dev extra) is not installed: run `make venv`"
    )


@pytest.fixture(scope="session")
def chart(helm):
    with helm.Chart.load(str(CHART)) as loaded:
        yield loaded


@pytest.fixture(scope="session")
def render(chart) -> Callable[..., Rendered]:
    """render(values=None, with_database=True) -> Rendered; raises helm's error when the chart refuses."""
    yaml = pytest.importorskip("yaml", reason="PyYAML (the dev extra) is not installed: run `make venv`")

    def _render(values: Mapping[str, Any] | None = None, *, with_database: bool = True) -> Rendered:
        full = merged(DATABASE if with_database else {}, values or {})
        files = chart.render(full, name=RELEASE, namespace=NAMESPACE)
        manifests = [
            document
            for path, text in sorted(files.items())
            if path.endswith(".yaml")
            for document in yaml.safe_load_all(text)
            if document
        ]
        return Rendered(manifests, files.get("fabrictwin/templates/NOTES.txt", ""))

    return _render
