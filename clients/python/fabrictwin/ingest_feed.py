"""One IngestSamples call fed while its caller goes on producing: `IngestFeed`.

The mirror's poll puts each wave of parsed targets here as it completes; a thread of the feed sends
the batches on one stream (`TelemetryApi.ingest`, which resends what was not acknowledged if the
stream is cut), so the service stores one wave while the next is still being scraped and parsed.
`close()` ends the stream and returns the service's reply (or raises its error).

>>> from fabrictwin import Client  # doctest: +SKIP
>>> feed = IngestFeed(client, "sources/pod1")  # doctest: +SKIP
>>> feed.put(chunks)  # doctest: +SKIP
>>> reply = feed.close()  # doctest: +SKIP
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from fabrictwin.importers import SampleColumns
from fabrictwin.telemetry import column_batches
from fabrictwin.v1 import telemetry_pb2

if TYPE_CHECKING:
    from fabrictwin.client import Client

__all__ = ["IngestFeed"]

_END = None  # what ends the stream


class IngestFeed:
    """Batches put from one thread, sent on one IngestSamples stream by another (module docstring).
    The stream starts with the first `put`; a feed nothing was put into sends nothing."""

    def __init__(self, client: Client, source: str) -> None:
        self._client = client
        self._source = source
        self._queue: queue.SimpleQueue[telemetry_pb2.SampleBatch | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._reply: telemetry_pb2.IngestSamplesResponse | None = None
        self._error: BaseException | None = None
        self._closed = False

    def put(self, chunks: Iterable[SampleColumns]) -> None:
        """Send these columns' batches (validated here: an InvalidArgumentError is the caller's)."""
        batches = [batch for chunk in chunks for batch in column_batches(self._source, chunk)]
        if not batches:
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._send, name="ingest-feed", daemon=True)
            self._thread.start()
        for batch in batches:
            self._queue.put(batch)

    def _batches(self) -> Iterator[telemetry_pb2.SampleBatch]:
        while (batch := self._queue.get()) is not _END:
            yield batch

    def _send(self) -> None:
        try:
            self._reply = self._client.telemetry.ingest(self._batches())
        except BaseException as exc:  # handed to close(), in the caller's thread
            self._error = exc

    def abandon(self) -> None:
        """End the stream, if still open, without waiting for its reply (after the caller failed)."""
        if self._thread is not None and self._thread.is_alive() and not self._closed:
            self._closed = True
            self._queue.put(_END)

    def close(self) -> telemetry_pb2.IngestSamplesResponse | None:
        """End the stream and wait for the reply (None: nothing was put); the call's error if it failed."""
        if self._thread is None:
            return None
        if not self._closed:
            self._closed = True
            self._queue.put(_END)
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._reply
