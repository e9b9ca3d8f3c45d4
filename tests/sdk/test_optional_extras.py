"""matplotlib, pandas and pyarrow are optional extras: the SDK imports without them and, asked to
plot or make a DataFrame, names the extra to install. Each case runs in a fresh interpreter with
the library hidden (`sys.modules[name] = None` makes `import name` fail as if it were missing)."""

from __future__ import annotations

import subprocess
import sys
import tomllib

import pytest
from fabrictwin import plots

from tests.sdk.test_sdk_is_light import PACKAGE


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd="/")


def test_importing_plots_frames_and_the_cli_loads_no_matplotlib_pandas_or_numpy() -> None:
    done = _run(
        "import sys, fabrictwin.plots, fabrictwin.frames, fabrictwin.plot_data, fabrictwin.cli; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'matplotlib', 'pandas', 'pyarrow', 'numpy'}))"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("hidden", "call", "extra"),
    [
        ("matplotlib", "fabrictwin.plots.sorted_utilisation({'ECMP': [0.9, 0.1]})", "fabrictwin[plots]"),
        ("pandas", "fabrictwin.frames.to_pandas([telemetry_pb2.PortValue(port='a')])", "fabrictwin[pandas]"),
        (
            "pyarrow",
            "f.write_frame(f.to_pandas([telemetry_pb2.PortValue()]), 'x.parquet')",
            "fabrictwin[parquet]",
        ),
    ],
)
def test_a_missing_extra_is_named_in_the_error(hidden: str, call: str, extra: str, tmp_path) -> None:
    if hidden != "matplotlib":
        pytest.importorskip("pandas")
    code = (
        f"import sys; sys.modules[{hidden!r}] = None\n"
        "import os; os.chdir(sys.argv[1])\n"
        "import fabrictwin.plots, fabrictwin.frames\n"
        "f = fabrictwin.frames\n"
        "from fabrictwin.extras import MissingExtraError\n"
        "from fabrictwin.errors import FabricTwinError\n"
        "from fabrictwin.v1 import telemetry_pb2\n"
        "try:\n"
        f"    {call}\n"
        "except MissingExtraError as exc:\n"
        "    assert isinstance(exc, ImportError) and isinstance(exc, FabricTwinError)\n"
        "    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert f"pip install '{extra}'" in done.stdout
    assert hidden in done.stdout


def test_the_cli_says_which_extra_a_picture_needs_before_calling_any_service(tmp_path) -> None:
    code = (
        "import sys; sys.modules['matplotlib'] = None\n"
        "from fabrictwin.cli import main\n"
        "argv = ['--orchestrator', '127.0.0.1:1', 'plot', 'fct', 'scenarios/a/runs/b', '-o', 'x.png']\n"
        "sys.exit(main(argv))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert done.returncode == 1
    assert "pip install 'fabrictwin[plots]'" in done.stderr and "127.0.0.1:1" not in done.stderr
    assert not (tmp_path / "x.png").exists()


def test_the_extras_are_declared_and_the_dev_install_includes_them() -> None:
    sdk = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["project"]
    extras = sdk["optional-dependencies"]
    assert [d.split(">")[0] for d in extras["plots"]] == ["matplotlib"]
    assert [d.split(">")[0] for d in extras["pandas"]] == ["pandas"]
    assert {d.split(">")[0] for d in extras["parquet"]} == {"pandas", "pyarrow"}
    assert [d.split(">")[0] for d in extras["cli"]] == ["tqdm", "argcomplete", "pyyaml"]
    root = tomllib.loads((PACKAGE.parents[2] / "pyproject.toml").read_text())["project"]
    assert "fabrictwin[plots,pandas,parquet,cli]" in [
        d.split("#")[0].strip() for d in root["optional-dependencies"]["dev"]
    ]


def test_empty_data_is_refused_with_what_was_missing() -> None:
    pytest.importorskip("matplotlib")
    with pytest.raises(Exception, match="no flows"):
        plots.completion_cdf({"ECMP": []})
    with pytest.raises(Exception, match="no modes"):
        plots.sorted_utilisation({})
    with pytest.raises(Exception, match="no series"):
        plots.link_heatmap([])
