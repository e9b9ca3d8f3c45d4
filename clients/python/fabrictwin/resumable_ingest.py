"""Ingest that survives a cut: every batch acknowledged once stored, and a resume after the cut.

`resumable_ingest` sends the caller's batches over IngestSamplesAcked, each numbered by its position
among them (its sequence). The service acknowledges a batch once its transaction has committed. A
batch sent and not yet acknowledged stays in a small window (which also bounds how far sending runs
ahead); when the stream breaks with UNAVAILABLE (the service restarted, the connection was reset,
the database went away for a moment), a new stream re-sends the window and goes on with the rest,
for as long as the service comes back within `resume_s` of the cut. Nothing is stored twice: a
batch that committed but whose acknowledgement was lost in the cut comes back as duplicates.

Against a service without IngestSamplesAcked (UNIMPLEMENTED before any acknowledgement) every batch
goes over the client-streaming IngestSamples, which answers once at the end.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator

import grpc

from fabrictwin.connection import Connection
from fabrictwin.errors import UnavailableError
from fabrictwin.v1 import telemetry_pb2, telemetry_pb2_grpc

__all__ = ["DEFAULT_RESUME_S", "DEFAULT_WINDOW", "resumable_ingest"]

DEFAULT_RESUME_S = 30.0  # how long after a cut the service may take to come back
DEFAULT_WINDOW = 8  # batches sent ahead of their acknowledgements (50,000 rows each by default)
_MAX_REASONS = 100
_RETRY_PAUSE_S = (0.1, 0.25, 0.5, 1.0, 2.0)


class _Outbox:
    """The caller's batches, numbered, and those sent but not yet acknowledged.

    `requests()` is what gRPC pulls (in its own thread) for one stream: the unacknowledged batches
    first, then new ones, never more than `window` ahead. An exception raised by the caller's
    iterable is kept in `error` and ends the stream (what was sent is still acknowledged), so that
    the caller gets it back as it was.
    """

    def __init__(self, batches: Iterable[telemetry_pb2.SampleBatch], window: int) -> None:
        self._batches = iter(batches)
        self._window = max(1, window)
        self._changed = threading.Condition()
        self.unacknowledged: dict[int, telemetry_pb2.SampleBatch] = {}
        self.taken = 0  # batches taken from the caller
        self.exhausted = False
        self.error: BaseException | None = None
        self._stream = 0  # the stream whose requests() may run; an older one stops

    @property
    def done(self) -> bool:
        return self.exhausted and not self.unacknowledged

    def requests(self) -> Iterator[telemetry_pb2.IngestSamplesAckedRequest]:
        with self._changed:
            self._stream += 1
            stream = self._stream
            resend = sorted(self.unacknowledged.items())
        for sequence, batch in resend:
            yield telemetry_pb2.IngestSamplesAckedRequest(batch=batch, sequence=sequence)
        while True:
            with self._changed:
                self._changed.wait_for(
                    lambda: stream != self._stream or len(self.unacknowledged) < self._window
                )
                if stream != self._stream or self.exhausted:
                    return
                # Taken under the lock: a stream that ended mid-pull must not race the next one.
                try:
                    batch = next(self._batches)
                except StopIteration:
                    self.exhausted = True
                    self._changed.notify_all()
                    return
                except Exception as exc:
                    self.error, self.exhausted = exc, True
                    self._changed.notify_all()
                    return
                sequence = self.taken
                self.taken += 1
                self.unacknowledged[sequence] = batch
            yield telemetry_pb2.IngestSamplesAckedRequest(batch=batch, sequence=sequence)

    def acknowledge(self, sequence: int) -> bool:
        """Forget an acknowledged batch; False if it was acknowledged before (a duplicate answer)."""
        with self._changed:
            found = self.unacknowledged.pop(sequence, None) is not None
            self._changed.notify_all()
        return found

    def end_stream(self) -> None:
        """Stop the current stream's requests() (a new stream takes over)."""
        with self._changed:
            self._stream += 1
            self._changed.notify_all()

    def remaining(self) -> Iterator[telemetry_pb2.SampleBatch]:
        """Unacknowledged batches, then the caller's rest (for the IngestSamples fallback)."""
        with self._changed:
            self._stream += 1
            self._changed.notify_all()
            pending = [batch for _, batch in sorted(self.unacknowledged.items())]
            self.unacknowledged.clear()
        yield from pending
        if not self.exhausted:
            for batch in self._batches:
                self.taken += 1
                yield batch


def _count(
    totals: telemetry_pb2.IngestSamplesResponse, ack: telemetry_pb2.IngestSamplesAckedResponse
) -> None:
    totals.stored += ack.stored
    totals.duplicates += ack.duplicates
    totals.rejected += ack.rejected
    for reason in ack.reasons[: _MAX_REASONS - len(totals.reasons)]:
        totals.reasons.add(batch=ack.sequence, row=reason.row, reason=reason.reason, field=reason.field)


def _wait_ready(connection: Connection, timeout: float) -> bool:
    try:
        grpc.channel_ready_future(connection.channel).result(timeout=max(0.0, timeout))
    except grpc.FutureTimeoutError:
        return False
    return True


def resumable_ingest(
    connection: Connection,
    batches: Iterable[telemetry_pb2.SampleBatch],
    *,
    resume_s: float = DEFAULT_RESUME_S,
    window: int = DEFAULT_WINDOW,
) -> telemetry_pb2.IngestSamplesResponse:
    """Stream `batches` in, resuming after cuts (module docstring); returns what was stored.

    The reply's `batches` counts the caller's batches and a reason's `batch` is that batch's
    position among them. Raises UnavailableError when the service stays away `resume_s` after a
    cut, saying how many batches were acknowledged (stored) before.
    """
    stub = telemetry_pb2_grpc.TelemetryServiceStub(connection.channel)
    outbox = _Outbox(batches, window)
    totals = telemetry_pb2.IngestSamplesResponse()
    cut_at: float | None = None
    cut_by = ""  # what the service (or gRPC) said when the stream broke
    attempt = 0
    while not outbox.done:
        if cut_at is not None:
            left = cut_at + resume_s - time.monotonic()
            if left <= 0 or not _wait_ready(connection, left):
                acknowledged = outbox.taken - len(outbox.unacknowledged)
                raise UnavailableError(
                    f"{connection.address} took no batch within {resume_s:g} s of the cut ({cut_by}): "
                    f"{acknowledged} of {outbox.taken} batches sent were acknowledged (stored); sending "
                    "them all again is safe, stored rows come back as duplicates",
                    service=connection.service,
                    address=connection.address,
                )
        call = stub.IngestSamplesAcked(outbox.requests(), metadata=connection.metadata, timeout=None)
        try:
            for ack in call:
                if outbox.acknowledge(ack.sequence):
                    _count(totals, ack)
                    cut_at, attempt = None, 0  # progress: a later cut gets the whole resume_s again
        except grpc.RpcError as exc:
            if outbox.error is not None:
                raise outbox.error from None
            code = exc.code() if hasattr(exc, "code") else None
            if code == grpc.StatusCode.UNIMPLEMENTED and outbox.taken == len(outbox.unacknowledged):
                return _fall_back(connection, stub, outbox, totals)
            if code != grpc.StatusCode.UNAVAILABLE:
                raise connection.error(exc) from None
            cut_by = (exc.details() if hasattr(exc, "details") else "") or "UNAVAILABLE"
            outbox.end_stream()
            if cut_at is None:
                cut_at = time.monotonic()
            time.sleep(_RETRY_PAUSE_S[min(attempt, len(_RETRY_PAUSE_S) - 1)])
            attempt += 1
            continue
        finally:
            call.cancel()  # a no-op when the call has ended; stops its request thread otherwise
        outbox.end_stream()
        if outbox.error is not None:
            raise outbox.error
    totals.batches = outbox.taken
    return totals


def _fall_back(
    connection: Connection,
    stub: telemetry_pb2_grpc.TelemetryServiceStub,
    outbox: _Outbox,
    totals: telemetry_pb2.IngestSamplesResponse,
) -> telemetry_pb2.IngestSamplesResponse:
    """A service without acknowledgements: everything over IngestSamples, one answer at the end."""
    requests = (telemetry_pb2.IngestSamplesRequest(batch=batch) for batch in outbox.remaining())
    reply = connection.client_stream(stub.IngestSamples, requests, timeout=None)
    reply.stored += totals.stored
    reply.duplicates += totals.duplicates
    reply.rejected += totals.rejected
    return reply
