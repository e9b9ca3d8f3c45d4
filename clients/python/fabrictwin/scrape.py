"""Scraping many targets at once, each with a timeout and a size bound, and backing off the ones that
keep failing.

`Scraper.scrape(targets)` fetches every target that is not backing off, all at the same time (one
thread per target in flight, at most `max_workers`): a URL with urllib, a command with /bin/sh. A
target that fails is reported with why, and skipped for the next 1, 2, 4, then 8 intervals after 1,
2, 3, 4+ consecutive failures, so a dead switch costs one timeout now and then instead of one per
interval; a success clears its back-off. One target failing never stops the others, whatever it
does:

- a URL: refused, timed out, an HTTP error status, an answer that is not HTTP (`bad HTTP response:
  BadStatusLine: ...`), a body cut short (`truncated: N of M bytes` against its Content-Length,
  `bad HTTP response: IncompleteRead(...)` for a chunked one), a reset. `timeout_s` bounds each
  socket operation and the body as a whole (read in pieces); a server that trickles its status line
  and headers a byte at a time is bounded only per operation (http.client reads those);
- a command: a non-zero exit (`exited with 3: <last line of stderr>`), a timeout. It runs in a
  session of its own, and the whole process group is killed when it times out, prints too much, or
  ends leaving processes behind, so no scrape outlives its target's turn;
- either: more than `max_bytes` (`more than N bytes`), stopped there without reading the rest (a
  command's stdout is read as it comes, and the command killed at the bound).

URL targets ask for the protobuf exposition first (`ACCEPT`, as Prometheus asks) with the text
format as the fallback; a result carries the body's bytes and its Content-Type, and the parser
(`fabrictwin.importers.prometheus.parse_scrape`) reads whichever came back.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import http.client
import os
import selectors
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence

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


def fetch_url(
    url: str, timeout_s: float, max_bytes: int = DEFAULT_MAX_SCRAPE_BYTES, accept: str | None = ACCEPT
) -> tuple[bytes, str]:
    """The body of `url` and its Content-Type; ScrapeError (or OSError, HTTPException) if it fails
    (`why_failed` says why in words).

    The body is read in pieces: past `max_bytes` (or a Content-Length above it) the read stops, and
    so it does when `timeout_s` has passed since the request (each socket operation also has that
    timeout). A body shorter than its Content-Length is refused, not passed on as a shorter scrape.
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
    deadline = time.monotonic() + timeout_s
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        answered = time.time_ns()
        content_type = response.headers.get("Content-Type", "")
        announced = response.headers.get("Content-Length", "").strip()
        length = (
            int(announced) if announced.isdigit() and not response.headers.get("Transfer-Encoding") else None
        )
        if length is not None and length > max_bytes:
            raise ScrapeError(f"more than {max_bytes} bytes (Content-Length {length})")
        pieces: list[bytes] = []
        size = 0
        while True:
            piece: bytes = response.read(_PIECE)
            if not piece:
                break
            size += len(piece)
            if size > max_bytes:
                raise ScrapeError(f"more than {max_bytes} bytes")
            pieces.append(piece)
            if time.monotonic() > deadline:
                raise ScrapeError(f"timed out after {timeout_s:g} s")
    if length is not None and size < length:
        raise ScrapeError(f"truncated: {size} of {length} bytes")
    return b"".join(pieces), content_type, answered


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
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code} {exc.reason}"
    if isinstance(exc, http.client.HTTPException):  # not HTTP, a chunked body cut short, ...: no OSError
        return _http_problem(exc)
    if isinstance(exc, urllib.error.URLError | OSError | ValueError):
        reason = getattr(exc, "reason", exc)
        return f"timed out after {timeout_s:g} s" if "timed out" in str(reason) else str(reason)[:200]
    # Anything else a target can provoke is still only that target's failure.
    return f"unexpected {type(exc).__name__}: {exc}"[:300]


def _scrape_one(target: TargetConfig, timeout_s: float, max_bytes: int) -> ScrapeResult:
    at = time.time_ns()  # a failure's time: when it was tried
    started = time.monotonic()
    try:
        if target.url:
            body, content_type, answered = fetch_url_timed(target.url, timeout_s, max_bytes)
        else:
            (body, answered), content_type = fetch_command_timed(target.command, timeout_s, max_bytes), ""
    except Exception as exc:
        return ScrapeResult(target, at, error=why_failed(exc, timeout_s), seconds=time.monotonic() - started)
    return ScrapeResult(target, answered, body, content_type, seconds=time.monotonic() - started)


class Scraper:
    """Concurrent scrapes with per-target timeouts, a size bound and back-off (module docstring)."""

    def __init__(
        self, timeout_s: float, max_workers: int = 64, max_bytes: int = DEFAULT_MAX_SCRAPE_BYTES
    ) -> None:
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=max_workers, thread_name_prefix="scrape"
        )
        self._failures: dict[str, int] = {}
        self._skip: dict[str, int] = {}

    def backing_off(self, target: TargetConfig) -> int:
        """Intervals the target will still be skipped for (0: it is tried)."""
        return self._skip.get(target.where, 0)

    def scrape(self, targets: Sequence[TargetConfig]) -> list[ScrapeResult]:
        """Scrape every target not backing off; results in the order of `targets`."""
        now = time.time_ns()
        futures: dict[int, concurrent.futures.Future[ScrapeResult]] = {}
        results: list[ScrapeResult | None] = [None] * len(targets)
        for i, target in enumerate(targets):
            skip = self._skip.get(target.where, 0)
            if skip:
                self._skip[target.where] = skip - 1
                results[i] = ScrapeResult(target, now, error=f"backing off ({skip} more)", skipped=True)
            else:
                futures[i] = self._pool.submit(_scrape_one, target, self.timeout_s, self.max_bytes)
        for i, future in futures.items():
            result = future.result()
            if result.error:
                self.failed(result.target)
            else:
                self._failures.pop(result.target.where, None)
            results[i] = result
        return [result for result in results if result is not None]

    def failed(self, target: TargetConfig) -> None:
        """Count a failure of `target` (also one found after the scrape, such as text that does not
        parse) and back it off accordingly."""
        failures = self._failures.get(target.where, 0) + 1
        self._failures[target.where] = failures
        self._skip[target.where] = min(2 ** (failures - 1), MAX_BACKOFF_INTERVALS)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
