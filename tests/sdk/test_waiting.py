"""Waiting for long-running resources: follow Watch, fall back to polling Get, give up at the deadline."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from fabrictwin.errors import DeadlineExceededError, UnimplementedError
from fabrictwin.jobs import wait_until_done
from fabrictwin.v1 import common_pb2, simulation_pb2

PENDING, RUNNING, SUCCEEDED = (
    common_pb2.JOB_STATE_PENDING,
    common_pb2.JOB_STATE_RUNNING,
    common_pb2.JOB_STATE_SUCCEEDED,
)


def _sim(state: int) -> simulation_pb2.Simulation:
    return simulation_pb2.Simulation(name="simulations/s", state=state)


def test_the_watch_stream_is_followed_to_the_terminal_state() -> None:
    gets = []

    def watch(name: str, timeout: float | None) -> Iterator[simulation_pb2.Simulation]:
        yield from (_sim(PENDING), _sim(RUNNING), _sim(SUCCEEDED), _sim(RUNNING))

    done = wait_until_done("simulations/s", gets.append, watch, timeout=5)
    assert done.state == SUCCEEDED and gets == []


def test_a_server_without_watch_is_polled_until_done() -> None:
    states = iter([PENDING, RUNNING, RUNNING, SUCCEEDED])

    def watch(name: str, timeout: float | None) -> Iterator[simulation_pb2.Simulation]:
        raise UnimplementedError("WatchSimulation: not yet")
        yield  # pragma: no cover

    assert (
        wait_until_done("simulations/s", lambda n: _sim(next(states)), watch, timeout=10).state == SUCCEEDED
    )


def test_a_stream_that_ends_early_is_continued_by_polling() -> None:
    def watch(name: str, timeout: float | None) -> Iterator[simulation_pb2.Simulation]:
        yield _sim(RUNNING)  # then the server restarts

    assert wait_until_done("simulations/s", lambda n: _sim(SUCCEEDED), watch, timeout=10).state == SUCCEEDED


def test_waiting_gives_up_at_the_deadline() -> None:
    def watch(name: str, timeout: float | None) -> Iterator[simulation_pb2.Simulation]:
        return iter(())

    started = time.monotonic()
    with pytest.raises(DeadlineExceededError, match=r"simulations/s is not finished after 0\.3 s"):
        wait_until_done("simulations/s", lambda n: _sim(RUNNING), watch, timeout=0.3)
    assert time.monotonic() - started < 2
