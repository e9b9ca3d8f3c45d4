"""deploy/Dockerfile without Docker (CI has none): it installs what pyproject.toml lists, runs as the
chart's user, and its build context holds every file it copies."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import tomllib

import pytest

from tests.deploy.conftest import COMPONENTS, ROOT

DOCKERFILE = (ROOT / "deploy" / "Dockerfile").read_text()
DOCKERIGNORE = (ROOT / "deploy" / "Dockerfile.dockerignore").read_text().split("\n")


def project(path: str) -> dict:
    with (ROOT / path).open("rb") as handle:
        return tomllib.load(handle)["project"]


def chart_values() -> dict:
    yaml = pytest.importorskip("yaml", reason="PyYAML (the dev extra) is not installed: run `make venv`")
    return yaml.safe_load((ROOT / "deploy" / "fabrictwin" / "values.yaml").read_text())


def dockerfile_instruction(keyword: str) -> list[str]:
    return [line.split(None, 1)[1] for line in DOCKERFILE.splitlines() if line.startswith(keyword + " ")]


def test_the_image_runs_as_the_non_root_user_the_chart_asks_for():
    (user,) = dockerfile_instruction("USER")
    uid, gid = (int(part) for part in user.split(":"))
    pod = chart_values()["podSecurityContext"]
    assert uid != 0 and (uid, gid) == (pod["runAsUser"], pod["runAsGroup"])


def test_the_images_python_meets_both_projects_requires_python():
    (arg,) = [a for a in dockerfile_instruction("ARG") if a.startswith("PYTHON_VERSION=")]
    image_python = tuple(int(part) for part in arg.split("=", 1)[1].split("."))
    for path in ("pyproject.toml", "clients/python/pyproject.toml"):
        minimum = re.fullmatch(r">=(\d+)\.(\d+)", project(path)["requires-python"])
        assert minimum, f"{path}: requires-python is no longer a plain lower bound; update this test"
        assert image_python >= tuple(int(part) for part in minimum.groups()), path


def test_the_image_installs_pyprojects_runtime_dependencies_and_the_sdk_from_source():
    printed = subprocess.run(
        [sys.executable, "deploy/runtime_requirements.py", "pyproject.toml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    sdk = project("clients/python/pyproject.toml")["name"]
    listed = project("pyproject.toml")["dependencies"]
    assert sdk in listed and sdk not in printed  # from clients/python, never from a package index
    assert printed == [d for d in listed if d != sdk]
    assert "pip install /build/sdk" in DOCKERFILE and "source=clients/python" in DOCKERFILE


def test_the_build_context_keeps_every_file_the_dockerfile_uses():
    sources = re.findall(r"source=([^,\s]+)", DOCKERFILE)
    sources += [line.split()[0] for line in dockerfile_instruction("COPY")]
    rules = [line for line in DOCKERIGNORE if line and not line.startswith("#")]
    assert rules[0] == "**"  # everything else stays out: no .venv, .git or local databases in the context
    kept = {rule[1:].rstrip("/") for rule in rules if rule.startswith("!")}
    assert {source.rstrip("/") for source in sources} <= kept


def test_the_image_and_the_chart_agree_on_numbas_cache():
    assert "NUMBA_CACHE_DIR=/var/cache/numba" in DOCKERFILE
    # the chart mounts an emptyDir there and sets the same variable (test_chart_structure checks the mount)
    assert "value: /var/cache/numba" in (ROOT / "deploy/fabrictwin/templates/_workload.tpl").read_text()


@pytest.mark.parametrize("component", COMPONENTS)
def test_each_service_the_chart_starts_is_a_runnable_module(component):
    assert importlib.util.find_spec(f"services.{component}.__main__") is not None
