"""The generated fabrictwin.v1 (and fabrictwin.prometheus) code must match the protos: `make proto`
after every .proto change."""

import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "clients" / "python" / "fabrictwin"
GENERATED = ("v1", "prometheus")  # the API; Prometheus's exposition schema (the mirror's protobuf scrapes)


@pytest.mark.parametrize("package", GENERATED)
def test_generated_code_is_not_stale(tmp_path, package):
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_protos.py"), str(tmp_path)],
        check=True,
        capture_output=True,
    )
    fresh = {p.name: p.read_bytes() for p in (tmp_path / "fabrictwin" / package).iterdir() if p.is_file()}
    committed = {p.name: p.read_bytes() for p in (PACKAGE / package).iterdir() if p.is_file()}
    assert sorted(fresh) == sorted(committed), "generated file set differs: run `make proto`"
    stale = [name for name in fresh if fresh[name] != committed[name]]
    assert not stale, f"stale generated code (run `make proto`): {stale}"


def test_buf_lint_is_clean():
    buf = shutil.which("buf", path=str(pathlib.Path(sys.executable).parent))
    if buf is None:
        pytest.skip("buf (PyPI buf-bin) is not installed in this environment")
    result = subprocess.run([buf, "lint"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_service_enum_starts_with_unspecified():
    from fabrictwin.v1 import common_pb2, scenario_pb2, simulation_pb2, telemetry_pb2, topology_pb2

    for module in (common_pb2, scenario_pb2, simulation_pb2, telemetry_pb2, topology_pb2):
        for enum in module.DESCRIPTOR.enum_types_by_name.values():
            assert enum.values_by_number[0].name.endswith("_UNSPECIFIED"), enum.full_name
