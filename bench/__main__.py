"""Run benchmarks: `python -m bench [--record PATH] [PREFIX]`, one JSON line per benchmark on stdout.

With `--record PATH` (what `make bench` passes: docs/results.jsonl) each benchmark that succeeds is
also appended to PATH with the date, the short git commit and the machine's CPU count.
"""

from __future__ import annotations

import importlib
import json
import pathlib
import resource
import subprocess
import sys
import time

from fabrictwin.cli_wait import ProgressView

from bench.registry import BENCHMARKS
from bench.results import append_result

MODULES = sorted(p.stem for p in pathlib.Path(__file__).parent.glob("bench_*.py"))


def _load() -> None:
    for module in MODULES:
        importlib.import_module(f"bench.{module}")


def _run_one(name: str) -> dict:
    start = time.perf_counter()
    figures = BENCHMARKS[name]()
    wall = time.perf_counter() - start
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    return {"bench": name, **figures, "peak_rss_mb": round(peak_mb, 1), "wall_s": round(wall, 3)}


def _run_isolated(name: str) -> dict:
    """Run one benchmark in its own process (its peak RSS its own): its line, or its error."""
    result = subprocess.run([sys.executable, "-m", "bench", "--one", name], capture_output=True, text=True)
    if result.returncode != 0:
        return {"bench": name, "error": result.stderr.strip().splitlines()[-1:]}
    return json.loads(result.stdout.strip().splitlines()[-1])


def main(argv: list[str]) -> int:
    _load()
    if argv[:1] == ["--one"]:
        print(json.dumps(_run_one(argv[1])), flush=True)
        return 0
    record = None
    if argv[:1] == ["--record"]:
        record, argv = pathlib.Path(argv[1]), argv[2:]
    prefix = argv[0] if argv else ""
    names = [n for n in sorted(BENCHMARKS) if n.startswith(prefix)]
    if not names:
        print(f"no benchmark starts with {prefix!r}; known: {sorted(BENCHMARKS)}", file=sys.stderr)
        return 2
    failed = 0
    # Progress on stderr, as every long CLI wait shows it (a bar on a terminal, lines otherwise);
    # stdout stays one JSON line per benchmark.
    view = ProgressView(enabled=True, stream=sys.stderr)
    for i, name in enumerate(names):
        view.show("make bench", i / len(names), f"{name} ({i + 1} of {len(names)})")
        line = _run_isolated(name)
        print(json.dumps(line), flush=True)
        if "error" in line:
            failed += 1
        elif record is not None:
            append_result(record, line)
    view.show("make bench", 1.0, f"{len(names)} benchmarks, {failed} failed")
    view.close()
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
