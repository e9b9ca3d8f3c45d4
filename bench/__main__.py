"""Run benchmarks: `python -m bench [PREFIX]`, one JSON line per benchmark on stdout."""

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


def main(argv: list[str]) -> int:
    _load()
    if argv[:1] == ["--one"]:
        print(json.dumps(_run_one(argv[1])), flush=True)
        return 0
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
        result = subprocess.run(
            [sys.executable, "-m", "bench", "--one", name], capture_output=True, text=True
        )
        if result.returncode != 0:
            failed += 1
            print(json.dumps({"bench": name, "error": result.stderr.strip().splitlines()[-1:]}), flush=True)
            continue
        sys.stdout.write(result.stdout.strip().splitlines()[-1] + "\n")
        sys.stdout.flush()
    view.show("make bench", 1.0, f"{len(names)} benchmarks, {failed} failed")
    view.close()
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
