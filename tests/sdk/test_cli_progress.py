"""The CLI's progress display: bars refreshed in place on a terminal (tqdm), throttled plain lines
elsewhere, nothing with --json."""

from __future__ import annotations

import io

import pytest
from fabrictwin import cli_wait
from fabrictwin.cli_wait import ProgressView


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_without_a_terminal_progress_is_plain_lines_only_when_something_changed(monkeypatch) -> None:
    clock = iter([0.0, 0.0, 1.0, 2.0, 7.0, 8.0, 20.0])
    monkeypatch.setattr(cli_wait.time, "monotonic", lambda: next(clock))
    out = io.StringIO()
    view = ProgressView(enabled=True, stream=out)  # a StringIO is no terminal
    assert not view.bars
    view.show("simulations/a", 0.1, "simulating")  # t=0: first report, shown
    view.show("simulations/a", 0.1, "simulating")  # t=1: same, not shown
    view.show("simulations/a", 0.2, "simulating")  # t=2: changed, but within the interval
    view.show("simulations/a", 0.3, "simulating")  # t=7: changed and past the interval: shown
    view.show("simulations/a", 1.0, "SUCCEEDED")  # t=8: finished: always shown
    lines = out.getvalue().splitlines()
    assert [line.split("] ", 1)[1] for line in lines] == [
        "simulations/a: 10.0% simulating",
        "simulations/a: 30.0% simulating",
        "simulations/a: 100.0% SUCCEEDED",
    ]


def test_on_a_terminal_each_key_gets_a_bar_refreshed_in_place() -> None:
    pytest.importorskip("tqdm", reason="tqdm (the fabrictwin[cli] extra) is not installed")
    out = Terminal()
    view = ProgressView(enabled=True, stream=out)
    assert view.bars
    view.show("ECMP", 0.0, "RUNNING")
    view.show("ADAPTIVE", 0.0, "PENDING")
    view.show("ECMP", 1.0, "SUCCEEDED: 1.20 ms")
    view.close()
    text = out.getvalue()
    assert "\r" in text or "\x1b[" in text  # redrawn in place, not one line per update
    assert "ECMP 100%" in text and "SUCCEEDED: 1.20 ms" in text and "ADAPTIVE   0%" in text


def test_with_json_nothing_is_shown() -> None:
    out = Terminal()
    view = ProgressView(enabled=False, stream=out)
    view.show("x", 0.5, "half")
    view.close()
    assert out.getvalue() == ""


def test_without_tqdm_a_terminal_gets_plain_lines(monkeypatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "tqdm", None)  # as if the fabrictwin[cli] extra were missing
    out = Terminal()
    view = ProgressView(enabled=True, stream=out)
    assert not view.bars
    view.show("simulations/a", 1.0, "SUCCEEDED")
    assert "simulations/a: 100.0% SUCCEEDED" in out.getvalue()


def test_a_long_single_call_shows_that_it_is_still_going(monkeypatch) -> None:
    import time as real_time

    from fabrictwin.cli_wait import working

    monkeypatch.setattr(cli_wait, "LINE_INTERVAL_S", 0.0)  # every tick is worth a line here
    out = io.StringIO()
    with working(ProgressView(enabled=True, stream=out), "fabric import", "importing dump.topo", tick_s=0.05):
        real_time.sleep(0.3)
    lines = out.getvalue().splitlines()
    assert len(lines) >= 3  # several ticks while the call runs, then the end
    assert "importing dump.topo: 0." in lines[0] and "done in 0." in lines[-1]


def test_a_quick_or_failed_single_call_shows_nothing() -> None:
    from fabrictwin.cli_wait import working

    out = io.StringIO()
    with working(ProgressView(enabled=True, stream=out), "fabric import", "importing x", tick_s=0.5):
        pass
    with pytest.raises(ValueError), working(ProgressView(enabled=True, stream=out), "k", "x", tick_s=0.5):
        raise ValueError("refused")
    assert out.getvalue() == ""
