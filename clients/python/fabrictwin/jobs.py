"""Waiting for long-running resources (simulations, scenario runs) to reach a terminal state.

FabricTwin's long-running work is the resource itself (AIP-151 style): Start/Run returns it PENDING and
Get/Watch report progress. `wait_until_done` follows the Watch stream, the responsive way, and falls
back to polling Get with a growing interval when the server does not implement Watch or the stream ends
early (a server restart), so a script's `wait` works against any server that implements Get.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from fabrictwin.errors import DeadlineExceededError, UnavailableError, UnimplementedError
from fabrictwin.v1 import common_pb2

__all__ = ["TERMINAL_STATES", "is_done", "wait_until_done"]

TERMINAL_STATES = frozenset(
    {common_pb2.JOB_STATE_SUCCEEDED, common_pb2.JOB_STATE_FAILED, common_pb2.JOB_STATE_CANCELLED}
)

R = TypeVar("R")

_FIRST_POLL_SECONDS = 0.05
_MAX_POLL_SECONDS = 1.0


def is_done(resource: Any) -> bool:
    """True when a Simulation or Run has SUCCEEDED, FAILED or been CANCELLED."""
    return resource.state in TERMINAL_STATES


def wait_until_done(
    name: str,
    get: Callable[[str], R],
    watch: Callable[[str, float | None], Iterator[R]],
    timeout: float | None,
    progress: Callable[[R], None] | None = None,
) -> R:
    """The resource `name` once it is in a terminal state.

    `get(name)` fetches it once; `watch(name, timeout)` streams it. Raises DeadlineExceededError if it
    is not done after `timeout` seconds (None: wait for ever). A FAILED resource is returned, not
    raised: its `error` field says why. `progress(resource)` is called with every state the wait sees
    (each change the stream reports, or each poll), the last one included.
    """
    report = progress or (lambda _: None)
    deadline = None if timeout is None else time.monotonic() + timeout

    def remaining() -> float | None:
        return None if deadline is None else max(0.0, deadline - time.monotonic())

    def too_late() -> DeadlineExceededError:
        return DeadlineExceededError(f"{name} is not finished after {timeout:g} s")

    try:
        for resource in watch(name, remaining()):
            report(resource)
            if is_done(resource):
                return resource
    except DeadlineExceededError:
        raise too_late() from None
    except (UnimplementedError, UnavailableError):
        pass  # poll instead: Get may still answer (and raises a clean error if it cannot)

    interval = _FIRST_POLL_SECONDS
    while True:
        resource = get(name)
        report(resource)
        if is_done(resource):
            return resource
        left = remaining()
        if left is not None and left <= 0:
            raise too_late()
        time.sleep(interval if left is None else min(interval, left))
        interval = min(interval * 1.5, _MAX_POLL_SECONDS)
