"""Scraping many targets at once, each with a timeout and a size bound, and backing off the ones that
keep failing.

`Scraper.scrape(targets)` fetches every target that is not backing off, all at the same time: the
URLs on one asyncio event loop (a thread the Scraper owns) with a small HTTP/1.1 client of this
module's own, at most `max_workers` of them in flight; the commands with /bin/sh, one thread per
command in flight (at most `max_workers`). A target that fails is reported with why, and skipped for
the next 1, 2, 4, then 8 intervals after 1, 2, 3, 4+ consecutive failures, so a dead switch costs
one timeout now and then instead of one per interval; a success clears its back-off. One target
failing never stops the others, whatever it does:

- a URL: refused, timed out, an HTTP error status (`HTTP 404 Not Found`; redirects are followed, up
  to 10), an answer that is not HTTP (`bad HTTP response: BadStatusLine: ...`), headers without end
  (a line over 64 KiB, more than 100 headers or 256 KiB of them), a body cut short (`truncated: N of
  M bytes` against its Content-Length, `bad HTTP response: IncompleteRead(N bytes read)` for a
  chunked one, N the bytes of its whole chunks), a reset. `timeout_s` bounds the whole fetch:
  connecting, the status line and headers (however slowly they trickle), the body;
- a command: a non-zero exit (`exited with 3: <last line of stderr>`), a timeout. It runs in a
  session of its own, and the whole process group is killed when it times out, prints too much, or
  ends leaving processes behind, so no scrape outlives its target's turn;
- either: more than `max_bytes` (`more than N bytes`), stopped there without reading the rest (a
  Content-Length above it is refused before the body; a command's stdout is read as it comes, and
  the command killed at the bound).

URL targets ask for the protobuf exposition first (`ACCEPT`, as Prometheus asks) with the text
format as the fallback; a result carries the body's bytes and its Content-Type, and the parser
(`fabrictwin.importers.prometheus.parse_scrape`) reads whichever came back. http and https (the
system's CAs, `ssl.create_default_context`); a body by its Content-Length, chunked, or up to the end
of the connection. As Prometheus does, the Scraper keeps a connection whose answer it read whole for
the next scrape of the same host and port (setting one up costs more than the GET on it); a GET that
fails on a kept connection before its answer began (the server closed it meanwhile) is asked once
more on a new one. Kept connections are closed by `Scraper.close`, after 5 minutes unused, and when
the server has closed them; at most a quarter of the process's file descriptors are kept. No proxy
(urllib's *_proxy variables) is used. `fetch_url` fetches one URL with the same client,
synchronously, one connection a call.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import functools
import http.client
import os
import queue
import re
import selectors
import signal
import ssl
import subprocess
import threading
import time
import weakref
from collections.abc import Callable, Coroutine, Iterator, Sequence
from typing import Any, TypeVar
from urllib.parse import urljoin, urlsplit

from fabrictwin.mirror_config import DEFAULT_MAX_SCRAPE_BYTES, TargetConfig

__all__ = ["ACCEPT", "DEFAULT_MAX_SCRAPE_BYTES", "MAX_BACKOFF_INTERVALS", "ScrapeError", "ScrapeResult",
           "Scraper", "fetch_command", "fetch_command_timed", "fetch_url", "fetch_url_timed",
           "why_failed"]  # fmt: skip

MAX_BACKOFF_INTERVALS = 8
# The exposition formats a URL target is asked for, most wanted first: protobuf (delimited
# io.prometheus.client.MetricFamily messages) is parsed by protobuf's compiled runtime, the text format
# by prometheus_client's Python parser (~7 us a line).
ACCEPT = (
    "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.7,"
    "text/plain;version=0.0.4;q=0.3,*/*;q=0.1"
)
_PIECE = 64 * 1024  # bytes read at a time
_STDERR_KEPT = 4096  # bytes of a command's stderr kept for its error message (the end of it)
# An answer's head: its status line and each header (or chunk-size, or trailer) line at most 64 KiB
# and at most 100 headers (http.client's bounds, and its words), the whole head at most 256 KiB.
_MAX_LINE = 65536
_MAX_HEADERS = 100
_MAX_HEAD = 256 * 1024
_MAX_REDIRECTS = 10  # as urllib
_IDLE_S = 300.0  # a kept connection unused this long is closed
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_NOT_IN_URLS = re.compile("[\x00-\x20\x7f]")  # control characters and spaces: not sent in a request
_T = TypeVar("_T")


class ScrapeError(Exception):
    """A target's failure, in words (the message is the report's `why`)."""


@dataclasses.dataclass(frozen=True)
class ScrapeResult:
    """One target's scrape: its body and Content-Type (or the error), and when it was taken: when its
    answer began (`fetch_url_timed`, `fetch_command_timed`), the time its counters were read, not
    when the poll was due or the thread got to it; a failure's, when it was tried."""

    target: TargetConfig
    time_ns: int
    body: bytes = b""
    content_type: str = ""  # as the server said; "" for a command (text) or a server that said none
    error: str = ""
    seconds: float = 0.0
    skipped: bool = False  # backing off: not tried this interval

    @property
    def text(self) -> str:
        """The body as text (invalid UTF-8 replaced)."""
        return self.body.decode("utf-8", errors="replace")


# --- HTTP: one GET on an asyncio stream ----------------------------------------------------------


@dataclasses.dataclass
class _Head:
    """An answer's status line and headers (names lower-case; the first of a repeated one)."""

    status: int
    reason: str
    http_1_1: bool  # (not HTTP/1.0)
    headers: dict[str, str]


def _status_line(line: bytes) -> tuple[int, str, bool]:
    """The status, reason and whether it says HTTP/1.1 (not 1.0) of a status line; http.client's
    exceptions (and words) if it is none."""
    text = str(line, "iso-8859-1")
    words = text.split(None, 2)
    if len(words) < 2 or not words[0].startswith("HTTP/"):
        raise http.client.BadStatusLine(text)
    try:
        status = int(words[1])
    except ValueError:
        raise http.client.BadStatusLine(text) from None
    if not 100 <= status <= 999:
        raise http.client.BadStatusLine(text)
    http_1_0 = words[0] in ("HTTP/1.0", "HTTP/0.9")
    if not http_1_0 and not words[0].startswith("HTTP/1."):
        raise http.client.UnknownProtocol(words[0])
    return status, words[2].strip() if len(words) > 2 else "", not http_1_0


def _headers(lines: list[bytes]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for line in lines:
        name, colon, value = line.partition(b":")
        if colon and name and name[0] not in b" \t":  # (a folded line continues one not needed here)
            headers.setdefault(name.strip().lower().decode("iso-8859-1"), value.strip().decode("iso-8859-1"))
    return headers


class _Reader:
    """The bytes of one connection as they come: a buffer in front of an asyncio StreamReader."""

    def __init__(self, stream: asyncio.StreamReader) -> None:
        self.stream = stream
        self.buffer = bytearray()
        self.at = 0  # where the unread bytes of `buffer` begin
        self.received = 0  # bytes that came

    async def more(self) -> bool:
        """Read what came next into the buffer; False at the end of the connection."""
        if self.at:  # (what was read goes: the unread bytes move to the front)
            del self.buffer[: self.at]
            self.at = 0
        piece = await self.stream.read(_PIECE)
        self.received += len(piece)
        self.buffer += piece
        return bool(piece)

    async def head(self) -> _Head:
        """The next answer's status line and headers (an interim 1xx answer is passed over)."""
        while True:
            head = await self._head()
            if not 100 <= head.status < 200 or head.status == 101:
                return head

    async def _head(self) -> _Head:
        buffer = self.buffer
        begin = start = self.at  # of the head, of its current line
        lines: list[bytes] = []
        status: tuple[int, str, bool] | None = None
        while True:
            end = buffer.find(b"\n", start)
            if end < 0:
                if len(buffer) - start > _MAX_LINE:
                    raise http.client.LineTooLong("header line" if status else "status line")
                if len(buffer) - begin > _MAX_HEAD:
                    raise http.client.HTTPException(f"got more than {_MAX_HEAD} bytes of headers")
                begin, start = begin - self.at, start - self.at  # (`more` moves the unread bytes)
                if not await self.more():
                    # The end of the connection: what came is all there is (so http.client reads it).
                    if status is None:
                        if start == len(buffer):
                            raise http.client.RemoteDisconnected(
                                "Remote end closed connection without response"
                            )
                        _status_line(bytes(buffer[start:]))
                    buffer += b"\n\n" if start < len(buffer) else b"\n"
                continue
            if end + 1 - start > _MAX_LINE:
                raise http.client.LineTooLong("header line" if status else "status line")
            if end + 1 - begin > _MAX_HEAD:
                raise http.client.HTTPException(f"got more than {_MAX_HEAD} bytes of headers")
            if status is None:
                status = _status_line(bytes(buffer[start : end + 1]))
            elif end == start or (end == start + 1 and buffer[start] == 0x0D):  # the empty line
                self.at = end + 1
                return _Head(*status, _headers(lines))
            else:
                lines.append(bytes(buffer[start:end]))
                if len(lines) > _MAX_HEADERS:
                    raise http.client.HTTPException(f"got more than {_MAX_HEADERS} headers")
            start = end + 1

    async def exactly(self, size: int) -> bytes | None:
        """The next `size` bytes, or None if the connection ends before."""
        while len(self.buffer) - self.at < size:
            if not await self.more():
                return None
        with memoryview(self.buffer) as view:
            piece = bytes(view[self.at : self.at + size])
        self.at += size
        return piece

    async def line(self, what: str) -> bytes | None:
        """The next line (without its end), or None if the connection ends before; LineTooLong
        (naming `what`) past 64 KiB."""
        start = self.at
        while (end := self.buffer.find(b"\n", start)) < 0:
            if len(self.buffer) - self.at > _MAX_LINE:
                raise http.client.LineTooLong(what)
            start = len(self.buffer) - self.at
            if not await self.more():
                return None
            start += self.at
        line = bytes(self.buffer[self.at : end])
        self.at = end + 1
        return line[:-1] if line.endswith(b"\r") else line

    async def chunked(self, max_bytes: int) -> bytes:
        """A chunked body, decoded; IncompleteRead if it is cut short or is not chunked (the bytes of
        its whole chunks read), `more than N bytes` as soon as its chunks add up to more."""
        pieces: list[bytes] = []
        size = 0
        while True:
            line = await self.line("chunk size")
            try:
                length = int(line.split(b";", 1)[0], 16) if line is not None else -1
            except ValueError:
                length = -1
            if length < 0:
                raise http.client.IncompleteRead(b"".join(pieces))
            if length == 0:
                break
            size += length
            if size > max_bytes:
                raise ScrapeError(f"more than {max_bytes} bytes")
            piece = await self.exactly(length)
            if piece is None or (await self.line("chunk size")) != b"":
                raise http.client.IncompleteRead(b"".join(pieces))
            pieces.append(piece)
        trailers = 0
        while line := await self.line("trailer line"):  # up to the empty line (or the end of the connection)
            trailers += len(line)
            if trailers > _MAX_HEAD:
                raise http.client.HTTPException(f"got more than {_MAX_HEAD} bytes of trailers")
        return b"".join(pieces)

    async def to_the_end(self, max_bytes: int) -> bytes:
        """The rest of the connection (at most `max_bytes`)."""
        while len(self.buffer) - self.at <= max_bytes:
            if not await self.more():
                return bytes(self.buffer[self.at :])
        raise ScrapeError(f"more than {max_bytes} bytes")


_Key = tuple[str, str, int]  # scheme, host, port: where a connection goes


class _Unanswered(Exception):
    """A reused connection that failed before the first byte of an answer (the server had closed
    it, or was closing it: Go's servers close idle connections at any time)."""


@functools.lru_cache(maxsize=4096)
def _request(url: str, accept: str | None, close: bool) -> tuple[_Key, bytes]:
    """Where a GET of `url` goes and the request's bytes; ScrapeError if it cannot be asked."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise ScrapeError(f"unknown url type: {scheme or url!r}")
    host = parts.hostname
    if not host:
        raise ScrapeError(f"no host given: {url!r}")
    port = parts.port or (443 if scheme == "https" else 80)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    name = f"[{host}]" if ":" in host else host
    authority = name if parts.port is None else f"{name}:{parts.port}"
    if _NOT_IN_URLS.search(target) or _NOT_IN_URLS.search(authority):
        raise ScrapeError(f"URL can't contain control characters or spaces: {url!r}")
    request = (
        f"GET {target} HTTP/1.1\r\nHost: {authority}\r\n"
        + (f"Accept: {accept}\r\n" if accept else "")
        + "Accept-Encoding: identity\r\nUser-Agent: fabrictwin\r\n"
        + ("Connection: close\r\n" if close else "")
        + "\r\n"
    ).encode("ascii")
    return (scheme, host, port), request


def _idle_bound() -> int:
    """Idle connections kept at most: a quarter of the file descriptors this process may open."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):
        return 256
    return 1 << 20 if soft == resource.RLIM_INFINITY else max(64, soft // 4)


class _Http:
    """HTTP/1.1 GETs on asyncio streams; the TLS context made once, when an https URL first needs it.

    With `keep_alive`, a connection whose answer was read whole (by its Content-Length or chunks) and
    that the server did not close is kept for the next GET to the same place, as Prometheus keeps
    them; a GET that fails on a kept connection before any byte of an answer (or is answered 408, as
    a server closing it may) is asked once more on a new one. Kept connections are closed by `close`,
    after `_IDLE_S` unused, and when the server closed them (`prune`). Without it, one GET per
    connection (`Connection: close`)."""

    def __init__(self, keep_alive: bool) -> None:
        self.keep_alive = keep_alive
        self._tls: ssl.SSLContext | None = None
        self._idle: dict[_Key, list[tuple[asyncio.StreamReader, asyncio.StreamWriter, float]]] = {}
        self._idle_count = 0
        self._idle_bound = _idle_bound() if keep_alive else 0

    def _context(self) -> ssl.SSLContext:
        if self._tls is None:
            self._tls = ssl.create_default_context()
        return self._tls

    async def fetch(
        self, url: str, timeout_s: float, max_bytes: int, accept: str | None
    ) -> tuple[bytes, str, int]:
        """`fetch_url_timed`, on the running event loop."""
        try:
            async with asyncio.timeout(timeout_s):
                hop = 0
                while isinstance(answer := await self._get(url, max_bytes, accept, hop), str):
                    url, hop = answer, hop + 1
                return answer
        except TimeoutError:
            raise ScrapeError(f"timed out after {timeout_s:g} s") from None

    async def _get(
        self, url: str, max_bytes: int, accept: str | None, hop: int
    ) -> tuple[bytes, str, int] | str:
        """The body, Content-Type and answer time of a GET of `url`, or where it redirects to (the
        `hop`th redirect so far)."""
        key, request = _request(url, accept, not self.keep_alive)
        kept = self._take(key)
        if kept is not None:
            with contextlib.suppress(_Unanswered):
                return await self._exchange(url, key, request, *kept, max_bytes, hop, reused=True)
        stream, writer = await asyncio.open_connection(
            key[1], key[2], ssl=self._context() if key[0] == "https" else None
        )
        return await self._exchange(url, key, request, stream, writer, max_bytes, hop, reused=False)

    async def _exchange(
        self,
        url: str,
        key: _Key,
        request: bytes,
        stream: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        max_bytes: int,
        hop: int,
        reused: bool,
    ) -> tuple[bytes, str, int] | str:
        """`_get` on this connection (kept for the next if it can be, else closed)."""
        keep = False
        try:
            writer.write(request)
            reader = _Reader(stream)
            try:
                head = await reader.head()
            except OSError:  # (RemoteDisconnected too: the end of the connection before an answer)
                if reused and not reader.received:
                    raise _Unanswered from None
                raise
            if reused and head.status == 408:
                raise _Unanswered
            answered = time.time_ns()
            if head.status in _REDIRECTS and "location" in head.headers:
                location = urljoin(url, head.headers["location"])
                if hop == _MAX_REDIRECTS:
                    raise ScrapeError(f"HTTP {head.status} {head.reason}: more than {hop} redirects")
                if urlsplit(location).scheme.lower() not in ("http", "https"):
                    raise ScrapeError(f"HTTP {head.status} {head.reason}: a redirect to {location!r}")
                return location
            if not 200 <= head.status < 300:
                raise ScrapeError(f"HTTP {head.status} {head.reason}".rstrip())
            content_type = head.headers.get("content-type", "")
            coding = head.headers.get("transfer-encoding")
            announced = head.headers.get("content-length", "")
            whole = True  # the answer's end is known (not the end of the connection)
            if head.status in (204, 205):
                body = b""
            elif coding is not None and coding.lower() == "chunked":
                body = await reader.chunked(max_bytes)
            elif coding is None and announced.isascii() and announced.isdigit():
                length = int(announced)
                if length > max_bytes:
                    raise ScrapeError(f"more than {max_bytes} bytes (Content-Length {length})")
                piece = await reader.exactly(length)
                if piece is None:
                    raise ScrapeError(f"truncated: {len(reader.buffer) - reader.at} of {length} bytes")
                body = piece
            else:
                body, whole = await reader.to_the_end(max_bytes), False
            keep = (
                self.keep_alive
                and whole
                and head.http_1_1
                and "close" not in head.headers.get("connection", "").lower()
                and reader.at == len(reader.buffer)  # (nothing more came than the answer)
            )
            return body, content_type, answered
        finally:
            if keep and self._idle_count < self._idle_bound:
                self._idle.setdefault(key, []).append((stream, writer, time.monotonic()))
                self._idle_count += 1
            else:
                writer.transport.abort()  # the answer is read (or refused): nothing more to say

    def _take(self, key: _Key) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        """A kept connection to `key` the server has not closed, if there is one."""
        kept = self._idle.get(key)
        while kept:
            stream, writer, _ = kept.pop()
            self._idle_count -= 1
            if not (stream.at_eof() or writer.is_closing() or stream.exception()):
                return stream, writer
            writer.transport.abort()
        return None

    def prune(self) -> None:
        """Close the kept connections unused for `_IDLE_S` and those the server has closed."""
        oldest = time.monotonic() - _IDLE_S
        for key, kept in list(self._idle.items()):
            fresh = []
            for stream, writer, since in kept:
                if since < oldest or stream.at_eof() or writer.is_closing() or stream.exception():
                    writer.transport.abort()
                else:
                    fresh.append((stream, writer, since))
            self._idle_count -= len(kept) - len(fresh)
            if fresh:
                self._idle[key] = fresh
            else:
                del self._idle[key]

    def close(self) -> None:
        """Close every kept connection."""
        for kept in self._idle.values():
            for _, writer, _ in kept:
                writer.transport.abort()
        self._idle.clear()
        self._idle_count = 0


class _ThreadLoop:
    """An event loop for `fetch_url`'s calls in one thread, closed when the thread's local data goes
    (or at exit): asyncio.run per call costs a third of a fetch, a loop in another thread as much."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        weakref.finalize(self, self.loop.close)


_thread_loops = threading.local()


def _forget_the_loops() -> None:
    """In a forked child: the loops (their epoll) were the parent's; the child makes its own."""
    global _thread_loops
    _thread_loops = threading.local()


os.register_at_fork(after_in_child=_forget_the_loops)


def _run(coroutine: Coroutine[Any, Any, _T]) -> _T:
    """Run `coroutine` on this thread's event loop for `fetch_url` (in a thread of its own if this
    thread runs an event loop already)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        own = getattr(_thread_loops, "loop", None)
        if own is None:
            own = _thread_loops.loop = _ThreadLoop()
        return own.loop.run_until_complete(coroutine)
    with concurrent.futures.ThreadPoolExecutor(1) as thread:
        return thread.submit(asyncio.run, coroutine).result()


def fetch_url(
    url: str, timeout_s: float, max_bytes: int = DEFAULT_MAX_SCRAPE_BYTES, accept: str | None = ACCEPT
) -> tuple[bytes, str]:
    """The body of `url` and its Content-Type; ScrapeError (or OSError, HTTPException, ValueError) if
    it fails (`why_failed` says why in words).

    `timeout_s` bounds the whole fetch; past `max_bytes` (or a Content-Length above it) the read
    stops. A body shorter than its Content-Length is refused, not passed on as a shorter scrape.
    `accept`: the formats asked for (None: no Accept header, which exporters answer with text).
    """
    body, content_type, _ = fetch_url_timed(url, timeout_s, max_bytes, accept)
    return body, content_type


def fetch_url_timed(
    url: str, timeout_s: float, max_bytes: int = DEFAULT_MAX_SCRAPE_BYTES, accept: str | None = ACCEPT
) -> tuple[bytes, str, int]:
    """`fetch_url`, and the wall-clock time (ns) its answer began: when the status line and headers
    had come, the moment an exporter has read its counters (node_exporter and the Prometheus client
    libraries read them on the request and say no time of their own), before the body's transfer."""
    return _run(_Http(keep_alive=False).fetch(url, timeout_s, max_bytes, accept))


def _pidfd(pid: int) -> int:
    """A pidfd of `pid` (-1 where there is none: not Linux 5.3+, or refused by a sandbox)."""
    try:
        return os.pidfd_open(pid) if hasattr(os, "pidfd_open") else -1
    except OSError:
        return -1


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the command's process group (its session: start_new_session), then reap the shell.

    Only while the shell is not yet reaped (running, or a zombie) is its process group id sure not
    to have been reused by an unrelated group: once reaped (where there is no pidfd to wait for it
    without reaping), the group is left alone.
    """
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            stream.close()
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(10)  # SIGKILLed: at once, unless stuck in the kernel


def fetch_command(command: str, timeout_s: float, max_bytes: int = DEFAULT_MAX_SCRAPE_BYTES) -> bytes:
    """The stdout of `/bin/sh -c command`; ScrapeError if it times out, exits non-zero or prints more
    than `max_bytes`. It runs in its own session; its process group is killed when it is done."""
    return fetch_command_timed(command, timeout_s, max_bytes)[0]


def fetch_command_timed(
    command: str, timeout_s: float, max_bytes: int = DEFAULT_MAX_SCRAPE_BYTES
) -> tuple[bytes, int]:
    """`fetch_command`, and the wall-clock time (ns) its answer began: its first byte of output (a
    command that prints nothing: when it ended). What it prints was read before it printed it, so
    that is when the counters were read, give or take the command's own printing."""
    answered = 0
    deadline = time.monotonic() + timeout_s
    process = subprocess.Popen(
        ["/bin/sh", "-c", command],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    assert process.stdout is not None and process.stderr is not None
    pieces: list[bytes] = []
    size = 0
    stderr = b""
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ, "out")
            selector.register(process.stderr, selectors.EVENT_READ, "err")
            # A pidfd reads ready when the shell exits, without reaping it (Linux 5.3+); elsewhere
            # the shell is waited for once its output is read.
            pidfd = _pidfd(process.pid)
            if pidfd >= 0:
                selector.register(pidfd, selectors.EVENT_READ, "exit")
            try:
                while selector.get_map():
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise ScrapeError(f"timed out after {timeout_s:g} s")
                    for key, _ in selector.select(left):
                        if key.data == "exit":
                            selector.unregister(key.fileobj)
                            continue
                        piece = os.read(key.fd, _PIECE)
                        if not piece:
                            selector.unregister(key.fileobj)
                        elif key.data == "err":
                            stderr = (stderr + piece)[-_STDERR_KEPT:]
                        else:
                            answered = answered or time.time_ns()
                            size += len(piece)
                            if size > max_bytes:
                                raise ScrapeError(f"more than {max_bytes} bytes of output")
                            pieces.append(piece)
            finally:
                if pidfd >= 0:
                    os.close(pidfd)
        if pidfd < 0:
            try:
                process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise ScrapeError(f"timed out after {timeout_s:g} s") from None
        returncode = process.poll() if pidfd < 0 else _exit_status(process)
    finally:
        _kill_group(process)  # what it left behind (or all of it, on a timeout or too much output)
    if returncode != 0:
        last = (stderr.decode("utf-8", errors="replace").strip().splitlines() or [""])[-1][:200]
        raise ScrapeError(f"exited with {returncode}: {last}")
    return b"".join(pieces), answered or time.time_ns()


def _exit_status(process: subprocess.Popen[bytes]) -> int | None:
    """The exit status of a shell that has exited, read without reaping it (os.waitid WNOWAIT)."""
    info = os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOWAIT)
    if info is None:  # not possible: the pidfd said it exited
        return None
    return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status


def _http_problem(exc: http.client.HTTPException) -> str:
    """What was wrong with an answer, on one line: `bad HTTP response: BadStatusLine: 'SSH-2.0-...'`."""
    if isinstance(exc, http.client.RemoteDisconnected):  # a BadStatusLine with no line
        text = str(exc)
    elif isinstance(exc, http.client.BadStatusLine):
        text = f"BadStatusLine: {str(exc.args[0] if exc.args else '')[:100]!r}"
    else:
        text = str(exc) if type(exc).__name__ in str(exc) else f"{type(exc).__name__}: {exc}"
    return f"bad HTTP response: {text}"[:300].replace("\r", "\\r").replace("\n", "\\n")


def why_failed(exc: Exception, timeout_s: float) -> str:
    """Why a fetch (`fetch_url`, `fetch_command`) failed, in words, on one line."""
    if isinstance(exc, ScrapeError):
        return str(exc)
    if isinstance(exc, http.client.HTTPException):  # not HTTP, a chunked body cut short, ...: no OSError
        return _http_problem(exc)
    if isinstance(exc, OSError | ValueError):
        reason = getattr(exc, "reason", exc)
        if "timed out" in str(reason):
            return f"timed out after {timeout_s:g} s"
        if isinstance(exc, OSError) and exc.errno and str(exc.strerror).startswith("Connect call failed"):
            return f"[Errno {exc.errno}] {os.strerror(exc.errno)}"  # (asyncio's words name the address)
        return str(reason)[:200]
    # Anything else a target can provoke is still only that target's failure.
    return f"unexpected {type(exc).__name__}: {exc}"[:300]


def _scrape_command(target: TargetConfig, timeout_s: float, max_bytes: int) -> ScrapeResult:
    at = time.time_ns()  # a failure's time: when it was tried
    started = time.monotonic()
    try:
        body, answered = fetch_command_timed(target.command, timeout_s, max_bytes)
    except Exception as exc:
        return ScrapeResult(target, at, error=why_failed(exc, timeout_s), seconds=time.monotonic() - started)
    return ScrapeResult(target, answered, body, seconds=time.monotonic() - started)


async def _scrape_url(http: _Http, target: TargetConfig, timeout_s: float, max_bytes: int) -> ScrapeResult:
    at = time.time_ns()  # a failure's time: when it was tried
    started = time.monotonic()
    try:
        body, content_type, answered = await http.fetch(target.url, timeout_s, max_bytes, ACCEPT)
    except Exception as exc:
        return ScrapeResult(target, at, error=why_failed(exc, timeout_s), seconds=time.monotonic() - started)
    return ScrapeResult(target, answered, body, content_type, seconds=time.monotonic() - started)


class _LoopThread:
    """An asyncio event loop running in a thread of its own until `close`."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="scrape-loop", daemon=True)
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        """Run `coroutine` on the loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def close(self, last: Callable[[], None]) -> None:
        """Cancel what still runs (a scrape waiting for it is cancelled), call `last` on the loop, stop
        the loop, close it."""

        async def cancel() -> None:
            tasks = asyncio.all_tasks() - {asyncio.current_task()}
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            last()
            await asyncio.sleep(0)  # (what `last` closed is gone)

        if self._thread.is_alive():
            with contextlib.suppress(concurrent.futures.CancelledError, RuntimeError):
                self.run(cancel())
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join()
        self.loop.close()


def _stopped(done: queue.SimpleQueue[Any], future: concurrent.futures.Future[Any]) -> None:
    """Why a scrape's results will not all come to `scrape_each` (the scraper was closed, or worse)."""
    if future.cancelled():
        done.put(RuntimeError("the scraper was closed"))
    elif (exc := future.exception()) is not None:
        done.put(exc)


class Scraper:
    """Concurrent scrapes with per-target timeouts, a size bound and back-off (module docstring)."""

    def __init__(
        self, timeout_s: float, max_workers: int = 64, max_bytes: int = DEFAULT_MAX_SCRAPE_BYTES
    ) -> None:
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        self.max_workers = max_workers
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=max_workers, thread_name_prefix="scrape"
        )
        self._http = _Http(keep_alive=True)
        self._loop: _LoopThread | None = None  # started by the first URL target
        self._stop_loop: weakref.finalize[[Callable[[], None]], Scraper] | None = None
        self._failures: dict[str, int] = {}
        self._skip: dict[str, int] = {}

    def backing_off(self, target: TargetConfig) -> int:
        """Intervals the target will still be skipped for (0: it is tried)."""
        return self._skip.get(target.where, 0)

    def scrape(self, targets: Sequence[TargetConfig]) -> list[ScrapeResult]:
        """Scrape every target not backing off; results in the order of `targets`."""
        results: list[ScrapeResult | None] = [None] * len(targets)
        for i, result, _ in self.scrape_each(targets):
            results[i] = result
        return [result for result in results if result is not None]

    def scrape_each(
        self, targets: Sequence[TargetConfig], after: Callable[[ScrapeResult], object] | None = None
    ) -> Iterator[tuple[int, ScrapeResult, object]]:
        """`scrape`, each result as soon as it is in, as (the target's position, its result, what
        `after(result)` returned): the targets backing off first, then the others as they answer or
        fail. `after` (None: nothing) runs on each scrape that fetched a body, where the scrape ran
        (the event loop's thread, a command's worker thread) as soon as it is in: work such as
        parsing then goes on between the other scrapes instead of contending with them for the GIL.
        What `after` raises is raised here. The scrapes all start with the first result asked for; a
        caller that stops early leaves the rest to finish unread."""
        now = time.time_ns()
        done: queue.SimpleQueue[tuple[int, ScrapeResult, object] | BaseException] = queue.SimpleQueue()

        def hand_on(i: int, result: ScrapeResult) -> None:
            try:
                done.put((i, result, after(result) if after is not None and not result.error else None))
            except BaseException as exc:
                done.put(exc)

        skipped, urls, commands = [], [], []
        for i, target in enumerate(targets):
            skip = self._skip.get(target.where, 0)
            if skip:
                self._skip[target.where] = skip - 1
                why = f"backing off ({skip} more)"
                skipped.append((i, ScrapeResult(target, now, error=why, skipped=True), None))
            elif target.url:
                urls.append(i)
            else:
                commands.append(i)

        def run_command(i: int) -> None:
            hand_on(i, _scrape_command(targets[i], self.timeout_s, self.max_bytes))

        for i in commands:
            self._pool.submit(run_command, i).add_done_callback(functools.partial(_stopped, done))
        if urls:
            fetching = self._scrape_urls(
                [targets[i] for i in urls], lambda j, result: hand_on(urls[j], result)
            )
            running = asyncio.run_coroutine_threadsafe(fetching, self._event_loop().loop)
            running.add_done_callback(functools.partial(_stopped, done))
        yield from skipped
        for _ in range(len(urls) + len(commands)):
            try:  # (each scrape ends within its timeout: one ends at least that often)
                item = done.get(timeout=self.timeout_s + 60)
            except queue.Empty:
                raise RuntimeError("the scrapes stopped answering (was the scraper closed?)") from None
            if isinstance(item, BaseException):
                raise item
            if item[1].error:
                self.failed(item[1].target)
            else:
                self._failures.pop(item[1].target.where, None)
            yield item

    def _event_loop(self) -> _LoopThread:
        if self._loop is None:
            self._loop = _LoopThread()
            # (`close`, or when the Scraper is collected without it)
            self._stop_loop = weakref.finalize(self, self._loop.close, self._http.close)
        return self._loop

    async def _scrape_urls(
        self, targets: list[TargetConfig], each: Callable[[int, ScrapeResult], object]
    ) -> None:
        """Every target fetched, at most `max_workers` at a time; `each(i, result)` as each is in."""
        self._http.prune()
        todo = iter(enumerate(targets))

        async def worker() -> None:
            for i, target in todo:
                each(i, await _scrape_url(self._http, target, self.timeout_s, self.max_bytes))

        await asyncio.gather(*(worker() for _ in range(min(self.max_workers, len(targets)))))

    def failed(self, target: TargetConfig) -> None:
        """Count a failure of `target` (also one found after the scrape, such as text that does not
        parse) and back it off accordingly."""
        failures = self._failures.get(target.where, 0) + 1
        self._failures[target.where] = failures
        self._skip[target.where] = min(2 ** (failures - 1), MAX_BACKOFF_INTERVALS)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._stop_loop is not None:
            self._stop_loop()
