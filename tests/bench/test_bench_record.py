"""`make bench` keeps the results page's raw data: each result appended, stamped, to a JSON Lines file."""

from __future__ import annotations

import json
import os

import bench.__main__ as runner
from bench.registry import BENCHMARKS
from bench.results import append_result


def test_append_result_adds_one_stamped_line_per_call(tmp_path):
    path = tmp_path / "docs" / "results.jsonl"

    append_result(path, {"bench": "a.b", "wall_s": 1.5})
    append_result(path, {"bench": "a.c", "wall_s": 2.0})

    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["bench"] for line in lines] == ["a.b", "a.c"]
    first = lines[0]
    assert first["wall_s"] == 1.5
    assert first["date"].endswith("+00:00")
    assert first["cpu_count"] == os.cpu_count()
    assert isinstance(first["commit"], str) and 4 <= len(first["commit"]) <= 40  # this checkout's
    assert isinstance(first["uncommitted_changes"], bool)


def test_the_runner_records_what_succeeds_and_not_what_fails(tmp_path, monkeypatch, capsys):
    def broken() -> dict:
        raise RuntimeError("no")

    monkeypatch.setattr(runner, "_load", lambda: None)  # no real benchmark is imported or run

    def in_process(name: str) -> dict:
        try:
            return runner._run_one(name)
        except RuntimeError as exc:
            return {"bench": name, "error": [str(exc)]}

    monkeypatch.setattr(runner, "_run_isolated", in_process)
    monkeypatch.setitem(BENCHMARKS, "zz_test.trivial", lambda: {"answer": 42})
    monkeypatch.setitem(BENCHMARKS, "zz_test.broken", broken)
    path = tmp_path / "results.jsonl"

    assert runner.main(["--record", str(path), "zz_test."]) == 1  # one failed

    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["bench"] for line in printed] == ["zz_test.broken", "zz_test.trivial"]
    (kept,) = [json.loads(line) for line in path.read_text().splitlines()]
    assert kept["bench"] == "zz_test.trivial" and kept["answer"] == 42 and "commit" in kept
    assert kept["wall_s"] >= 0 and kept["peak_rss_mb"] > 0

    assert runner.main(["zz_test.trivial"]) == 0  # without --record nothing more is written
    assert len(path.read_text().splitlines()) == 1
