"""The packet engine's compiled code: cached per engine source, compiled ahead by the warm-up, and
announced to whoever waits on the run that has to compile it."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from services.simulator.cancel import RESULTS_STAGE
from services.simulator.packet.compile_cache import (
    COMPILING_STAGE,
    PYTHON_SIDE_MODULES,
    engine_cache_dir,
    engine_compiled,
    engine_source_hash,
)
from services.simulator.packet.warm_up import warm_up
from services.simulator.progress import ProgressBoard
from services.simulator.runner import run_simulation
from tests.simulator.fabrics import leaf_spine, point_to_point_spec

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "services.simulator.packet"
FABRIC = leaf_spine(2, 1, 2, rate_bps=100_000_000_000)
SPEC = point_to_point_spec(FABRIC, [(0, 3, 64 << 10)])

# Runs SPEC with a progress callback that prints every stage it is told and stops the process at the
# compiling one (so that the test does not wait for the compile itself).
_STAGES_SCRIPT = textwrap.dedent(
    """
    import os
    from services.simulator.packet.compile_cache import COMPILING_STAGE, engine_compiled
    from services.simulator.runner import run_simulation
    from tests.simulator.fabrics import leaf_spine, point_to_point_spec

    class Stages:
        def __call__(self, fraction):
            return True

        def report_stage(self, stage):
            print("STAGE", stage, flush=True)
            if stage == COMPILING_STAGE:
                os._exit(0)

    print("COMPILED", engine_compiled(), flush=True)
    fabric = leaf_spine(2, 1, 2, rate_bps=100_000_000_000)
    run_simulation(point_to_point_spec(fabric, [(0, 3, 64 << 10)]), fabric, Stages())
    print("FINISHED", flush=True)
    """
)


class RecordedStages:
    def __init__(self) -> None:
        self.stages: list[str] = []

    def __call__(self, fraction: float) -> bool:
        return True

    def report_stage(self, stage: str) -> None:
        self.stages.append(stage)


def test_a_run_on_an_empty_cache_tells_whoever_waits_that_the_engine_compiles_first(tmp_path):
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", _STAGES_SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    # The setup phases first (run_simulation built the workload before), then the compile.
    assert result.stdout.splitlines() == [
        "COMPILED False",
        "STAGE routing",
        "STAGE setting up the engine",
        f"STAGE {COMPILING_STAGE}",
    ]


def test_a_run_on_a_warm_cache_is_not_announced_as_compiling():
    warm_up()  # compiles here only if no test before did
    assert engine_compiled()
    progress = RecordedStages()
    outcome = run_simulation(SPEC, FABRIC, progress)
    assert outcome.packets.delivered_bytes == 64 << 10
    assert progress.stages == ["routing", "setting up the engine", "", RESULTS_STAGE]  # "": simulating


def test_the_cache_directory_is_named_after_the_whole_engine_source(tmp_path, monkeypatch):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    assert engine_cache_dir() == tmp_path / f"engine-{engine_source_hash()}"
    assert not engine_compiled()  # nothing was compiled into this directory


def test_the_service_progress_record_carries_the_stage_between_processes():
    board = ProgressBoard()
    try:
        progress = board.new()
        assert progress.stage() == ""
        progress.report_stage(COMPILING_STAGE)
        assert progress.stage() == COMPILING_STAGE
    finally:
        board.close()


def test_no_compiled_code_depends_on_the_modules_left_out_of_the_cache_key():
    # The cache key skips the Python-side modules: no module with compiled functions may import one,
    # directly or through another module of the package.
    package = ROOT / "services" / "simulator" / "packet"
    imports: dict[str, set[str]] = {}
    for path in package.glob("*.py"):
        imported = imports.setdefault(path.stem, set())
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom) or not node.module:
                continue
            if node.module == PACKAGE:  # from services.simulator.packet import layout
                imported.update(alias.name for alias in node.names)
            elif node.module.startswith(PACKAGE + "."):
                imported.add(node.module.rsplit(".", 1)[-1])
    compiled = {
        stem
        for stem in imports
        if any(marker in (package / f"{stem}.py").read_text() for marker in ("@njit", "@kernel"))
    }
    assert {"loop", "nic", "forward", "heap"} <= compiled
    reached, todo = set(), list(compiled)
    while todo:
        module = todo.pop()
        if module not in reached:
            reached.add(module)
            todo.extend(imports.get(module, ()))
    assert not reached & PYTHON_SIDE_MODULES
