"""The SDK is a separate distribution that needs grpcio, protobuf and prometheus-client only."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys
import tomllib

import fabrictwin

PACKAGE = pathlib.Path(fabrictwin.__file__).parent
ALLOWED_TOP_LEVEL = {"grpc", "google", "fabrictwin"}


def test_the_distribution_declares_only_grpcio_protobuf_and_prometheus_client() -> None:
    project = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["project"]
    names = {dep.split(">")[0].split("<")[0].split("=")[0].strip() for dep in project["dependencies"]}
    # prometheus-client: pure Python, no dependencies; the Prometheus importer parses scrapes with it.
    assert names == {"grpcio", "protobuf", "prometheus-client"}
    assert project["scripts"]["fabrictwin"] == "fabrictwin.cli:main"


def test_no_sdk_module_imports_anything_but_the_standard_library_grpc_and_protobuf() -> None:
    offenders = []
    for path in sorted(PACKAGE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            for module in modules:
                top = module.split(".")[0]
                if top not in sys.stdlib_module_names and top not in ALLOWED_TOP_LEVEL:
                    offenders.append(f"{path.name}: {module}")
    assert offenders == []


def test_importing_the_sdk_and_cli_loads_no_numpy_and_no_services() -> None:
    # (grpc_health is not in the list: grpcio itself imports it whenever that package is installed.)
    code = (
        "import sys, fabrictwin, fabrictwin.cli; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'numpy', 'services', 'sqlalchemy', 'numba'}))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd="/")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
