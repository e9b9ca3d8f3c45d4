"""The results page's raw data: each benchmark's JSON line, stamped, appended to a JSON Lines file."""

from __future__ import annotations

import datetime
import json
import os
import pathlib
import subprocess

__all__ = ["append_result", "stamp"]

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def stamp() -> dict[str, object]:
    """When and where: UTC time, the short commit (null outside git), whether tracked files differ
    from it, and the machine's CPU count."""
    commit = _git("rev-parse", "--short", "HEAD")
    changed = _git("status", "--porcelain", "--untracked-files=no")
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "commit": commit,
        "uncommitted_changes": bool(changed) if changed is not None else None,
        "cpu_count": os.cpu_count(),
    }


def append_result(path: pathlib.Path, result: dict, when: dict[str, object] | None = None) -> None:
    """Append `result` as one line, after the stamp's fields, to `path` (made with its folder)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps({**(when if when is not None else stamp()), **result})
    with path.open("a", encoding="utf-8") as out:
        out.write(line + "\n")
