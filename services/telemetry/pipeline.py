"""Ingest of one stream of batches with several transactions in flight, acknowledged as they commit.

A client stream is read batch by batch; each batch is decoded and validated in a thread, then
written in its own transaction, also in a thread (`run` says where: the service's write threads).
Up to `parallelism` writes run at once (each on its own database connection, so PostgreSQL works on
them on several cores) while the next batch is already being received and decoded. Batches stay
independent: each is stored whole or not at all, and a row sent twice is stored once, whichever
batch commits first.

`acknowledged_stream` yields each batch's outcome as soon as its transaction has committed (or it
was refused), in commit order: what IngestSamplesAcked sends back. A write that fails (the
database went away) stops the reading; the writes still in flight finish, their outcomes are
yielded, then the failure is raised. `ingest_stream` gathers the outcomes in stream order for the
single answer of IngestSamples.

One ordering rule keeps cumulative counters right: a batch with cumulative columns is converted
against each port's last stored reading, so it waits for every earlier batch of the stream to
commit, and later batches wait for it.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Generic, TypeVar

from services.telemetry.batches import PreparedBatch

__all__ = ["Acknowledged", "Decoded", "acknowledged_stream", "ingest_stream"]

Request = TypeVar("Request")
Outcome = TypeVar("Outcome")
Runner = Callable[..., Awaitable[Any]]  # run(fn, *args) in a thread: asyncio.to_thread or a pool's


@dataclasses.dataclass(frozen=True)
class Decoded:
    """A batch ready to write (`source_id`, `batch`), or the outcome of one refused before writing."""

    source_id: str = ""
    batch: PreparedBatch | None = None
    refused: object = None  # the caller's outcome type for a batch rejected while decoding


@dataclasses.dataclass(frozen=True)
class Acknowledged(Generic[Request, Outcome]):
    """What became of one batch: its position in the stream, the request that carried it, the outcome."""

    number: int
    request: Request
    outcome: Outcome


class _Stream(Generic[Request, Outcome]):
    """The reader of one stream and its writes in flight, reporting to one queue of events."""

    def __init__(
        self,
        decode: Callable[[Request], Decoded],
        write: Callable[[str, PreparedBatch], Outcome],
        parallelism: int,
        run: Runner,
    ) -> None:
        self.decode, self.write, self.run = decode, write, run
        self.parallelism = max(1, parallelism)
        self.events: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self.in_flight: set[asyncio.Task] = set()

    def _settled(self, task: asyncio.Task) -> None:
        self.in_flight.discard(task)
        if task.cancelled():
            return
        error = task.exception()
        self.events.put_nowait(("failed", error) if error is not None else ("done", task.result()))

    async def _write(self, number: int, request: Request, decoded: Decoded) -> Acknowledged:
        outcome = await self.run(self.write, decoded.source_id, decoded.batch)
        return Acknowledged(number, request, outcome)

    async def read(self, requests: AsyncIterator[Request]) -> None:
        """Decode every request and start its write; posts `read` when done (or stopped)."""
        ordered: asyncio.Task | None = None  # the last batch with cumulative columns, if still writing
        number = 0
        try:
            async for request in requests:
                decoded = await self.run(self.decode, request)
                if decoded.batch is None:
                    self.events.put_nowait(("done", Acknowledged(number, request, decoded.refused)))
                    number += 1
                    continue
                if decoded.batch.cumulative and self.in_flight:
                    await asyncio.wait(set(self.in_flight))
                elif ordered is not None and not ordered.done():
                    await asyncio.wait({ordered})
                while len(self.in_flight) >= self.parallelism:
                    await asyncio.wait(set(self.in_flight), return_when=asyncio.FIRST_COMPLETED)
                task = asyncio.ensure_future(self._write(number, request, decoded))
                task.add_done_callback(self._settled)
                self.in_flight.add(task)
                if decoded.batch.cumulative:
                    ordered = task
                number += 1
        except asyncio.CancelledError:
            pass  # stopped on purpose: a write failed, or the caller went away
        except Exception as exc:  # the stream broke, or a decode failed unexpectedly
            self.events.put_nowait(("failed", exc))
        finally:
            self.events.put_nowait(("read", None))


async def acknowledged_stream(
    requests: AsyncIterator[Request],
    decode: Callable[[Request], Decoded],
    write: Callable[[str, PreparedBatch], Outcome],
    parallelism: int = 1,
    run: Runner = asyncio.to_thread,
) -> AsyncIterator[Acknowledged[Request, Outcome]]:
    """Decode and write every batch of `requests`; yields each outcome once its batch is settled."""
    stream: _Stream[Request, Outcome] = _Stream(decode, write, parallelism, run)
    reader = asyncio.ensure_future(stream.read(requests))
    reading, failure = True, None
    try:
        while reading or stream.in_flight:
            kind, value = await stream.events.get()
            if kind == "done":
                yield value
            elif kind == "read":
                reading = False
            elif failure is None:  # the first failure ends the reading; writes in flight finish
                failure = value
                reader.cancel()
        while not stream.events.empty():  # outcomes settled together with the last write
            kind, value = stream.events.get_nowait()
            if kind == "done":
                yield value
            elif kind == "failed" and failure is None:
                failure = value
    finally:
        # However the stream ends (the caller cancelled, too), let the writes in flight finish their
        # transactions, so that what was acknowledged and what is stored stay the same.
        reader.cancel()
        pending = {reader, *stream.in_flight}
        while pending:
            _, pending = await asyncio.wait(pending)
    if failure is not None:
        raise failure


async def ingest_stream(
    requests: AsyncIterator[Request],
    decode: Callable[[Request], Decoded],
    write: Callable[[str, PreparedBatch], Outcome],
    parallelism: int = 1,
    run: Runner = asyncio.to_thread,
) -> list[Outcome]:
    """Decode and write every batch of `requests`; returns the outcomes in stream order."""
    outcomes: dict[int, Outcome] = {}
    async for settled in acknowledged_stream(requests, decode, write, parallelism, run):
        outcomes[settled.number] = settled.outcome
    return [outcomes[number] for number in sorted(outcomes)]
