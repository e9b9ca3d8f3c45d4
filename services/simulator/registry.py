"""The in-memory registry of simulations: state, progress, results, and watchers of each.

Simulations live only in this process's memory: a restart forgets them (results that must last
go to the telemetry service via `telemetry_source`, or are stored by the orchestrator). Records
are immutable snapshots; every change replaces the record and wakes the watchers of that
simulation. The oldest finished simulations are dropped beyond `capacity`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import enum
from collections.abc import AsyncIterator
from typing import Any

import numpy as np

from services.common.errors import AlreadyExists, FailedPrecondition, NotFound
from services.simulator.results import SimulationOutcome

__all__ = ["SimulationRecord", "SimulationRegistry", "SimulationState"]


class SimulationState(enum.StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def terminal(self) -> bool:
        return self in (SimulationState.SUCCEEDED, SimulationState.FAILED, SimulationState.CANCELLED)


@dataclasses.dataclass(frozen=True)
class SimulationRecord:
    """One simulation as the registry holds it."""

    name: str
    request_spec: Any  # the caller's spec as received (opaque here; the servicer echoes it)
    routing_version: int
    create_time: dt.datetime
    state: SimulationState = SimulationState.PENDING
    fraction: float = 0.0
    stage: str = "queued"
    error_code: str = ""  # a status code name when FAILED
    error_message: str = ""
    outcome: SimulationOutcome | None = None
    end_time: dt.datetime | None = None


# Results of finished simulations kept for Get/Watch/ListLinkSeries; beyond it the oldest are forgotten
# (their results stay wherever the caller stored them: the orchestrator's runs, telemetry).
DEFAULT_BUDGET_BYTES = 2 << 30


def outcome_bytes(value: Any, depth: int = 0) -> int:
    """Roughly what a result holds in memory: its numpy arrays' bytes, ~64 bytes per list item."""
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if depth > 4:
        return 0
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return sum(outcome_bytes(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value))
    if isinstance(value, list | tuple):
        return 64 * len(value) + sum(outcome_bytes(item, depth + 1) for item in value[:16]) * max(
            1, len(value) // 16
        )
    return 0


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class SimulationRegistry:
    """Simulations by name, newest first, with change notification."""

    def __init__(self, capacity: int = 1000, budget_bytes: int = DEFAULT_BUDGET_BYTES) -> None:
        self._records: dict[str, SimulationRecord] = {}  # insertion order = creation order
        self._watchers: dict[str, set[asyncio.Queue[SimulationRecord]]] = {}
        self._capacity = capacity
        self._budget_bytes = budget_bytes
        self._bytes: dict[str, int] = {}  # finished simulations' outcome sizes

    def create(self, name: str, request_spec: Any, routing_version: int) -> SimulationRecord:
        if name in self._records:
            raise AlreadyExists(f"{name} already exists")
        record = SimulationRecord(name, request_spec, routing_version, _now())
        self._records[name] = record
        self._evict()
        return record

    def get(self, name: str) -> SimulationRecord:
        record = self._records.get(name)
        if record is None:
            raise NotFound(f"{name} not found")
        return record

    def page(self, offset: int, size: int) -> tuple[list[SimulationRecord], int | None]:
        """Records newest first from `offset`; the offset of the next page or None."""
        newest_first = list(reversed(self._records.values()))
        chunk = newest_first[offset : offset + size]
        following = offset + size
        return chunk, (following if following < len(newest_first) else None)

    def update(self, name: str, **changes: Any) -> SimulationRecord:
        """Replace fields of a simulation that is not finished; finished ones stay as they are."""
        record = self.get(name)
        if record.state.terminal:
            return record
        if "state" in changes and SimulationState(changes["state"]).terminal:
            changes.setdefault("end_time", _now())
        record = dataclasses.replace(record, **changes)
        self._records[name] = record
        for queue in self._watchers.get(name, ()):
            queue.put_nowait(record)
        if record.state.terminal and record.outcome is not None:
            self._bytes[name] = outcome_bytes(record.outcome)
            self._evict()
        return record

    def cancel(self, name: str) -> SimulationRecord:
        record = self.get(name)
        if record.state.terminal:
            raise FailedPrecondition(f"{name} is already {record.state.value}")
        return self.update(name, state=SimulationState.CANCELLED, stage="cancelled")

    async def watch(self, name: str) -> AsyncIterator[SimulationRecord]:
        """The record now, then after every change, until it is finished."""
        record = self.get(name)
        queue: asyncio.Queue[SimulationRecord] = asyncio.Queue()
        self._watchers.setdefault(name, set()).add(queue)
        try:
            yield record
            while not record.state.terminal:
                record = await queue.get()
                yield record
        finally:
            watchers = self._watchers.get(name, set())
            watchers.discard(queue)
            if not watchers:
                self._watchers.pop(name, None)

    def _evict(self) -> None:
        """Forget the oldest finished simulations while there are more than `capacity` simulations or
        their results hold more than `budget_bytes` (a running one is never forgotten)."""
        excess = len(self._records) - self._capacity
        held = sum(self._bytes.values())
        if excess <= 0 and held <= self._budget_bytes:
            return
        for name in [name for name, r in self._records.items() if r.state.terminal]:
            if excess <= 0 and held <= self._budget_bytes:
                break
            del self._records[name]
            held -= self._bytes.pop(name, 0)
            excess -= 1
