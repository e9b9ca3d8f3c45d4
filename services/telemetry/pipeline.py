"""Ingest of one stream of batches with several transactions in flight.

A client stream is read batch by batch; each batch is decoded and validated in a thread, then
written in its own transaction, also in a thread. Up to `parallelism` writes run at once (each on
its own database connection, so PostgreSQL works on them on several cores) while the next batch is
already being received and decoded. Batches stay independent: each is stored whole or not at all,
and a row sent twice is stored once, whichever batch commits first.

One ordering rule keeps cumulative counters right: a batch with cumulative columns is converted
against each port's last stored reading, so it waits for every earlier batch of the stream to
commit, and later batches wait for it.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable
from typing import TypeVar

from services.telemetry.batches import PreparedBatch

__all__ = ["Decoded", "ingest_stream"]

Request = TypeVar("Request")
Outcome = TypeVar("Outcome")


@dataclasses.dataclass(frozen=True)
class Decoded:
    """A batch ready to write (`source_id`, `batch`), or the outcome of one refused before writing."""

    source_id: str = ""
    batch: PreparedBatch | None = None
    refused: object = None  # the caller's outcome type for a batch rejected while decoding


async def ingest_stream(
    requests: AsyncIterator[Request],
    decode: Callable[[Request], Decoded],
    write: Callable[[str, PreparedBatch], Outcome],
    parallelism: int = 1,
) -> list[Outcome]:
    """Decode and write every batch of `requests`; returns the outcomes in stream order."""
    outcomes: dict[int, Outcome] = {}
    in_flight: set[asyncio.Task] = set()
    ordered: asyncio.Task | None = None  # the last batch with cumulative columns, if still writing

    async def write_one(number: int, source_id: str, batch: PreparedBatch) -> None:
        outcomes[number] = await asyncio.to_thread(write, source_id, batch)

    count = 0
    try:
        async for request in requests:
            number, count = count, count + 1
            decoded = await asyncio.to_thread(decode, request)
            if decoded.batch is None:
                outcomes[number] = decoded.refused  # type: ignore[assignment]
                continue
            if decoded.batch.cumulative and in_flight:
                await asyncio.gather(*in_flight)
                in_flight.clear()
            elif ordered is not None and not ordered.done():
                await ordered
            while len(in_flight) >= max(1, parallelism):
                done, in_flight = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
                for finished in done:
                    finished.result()  # a failed write ends the stream with its error
            task = asyncio.create_task(write_one(number, decoded.source_id, decoded.batch))
            in_flight.add(task)
            if decoded.batch.cumulative:
                ordered = task
        if in_flight:
            await asyncio.gather(*in_flight)
    except BaseException:
        # The stream broke (or a write failed): let the writes in flight finish their transactions
        # so that what the client was told about stays true, then report the failure.
        if in_flight:
            await asyncio.gather(*in_flight, return_exceptions=True)
        raise
    return [outcomes[number] for number in range(count)]
