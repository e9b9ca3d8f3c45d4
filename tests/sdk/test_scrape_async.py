"""`fabrictwin.scrape`'s HTTP client (asyncio streams, one event loop for all of a scrape's URLs)
against real servers on localhost: what it asks, the bodies it reads (by Content-Length, chunked, to
the end), redirects and error statuses, the bounds on an answer's head, https, and many targets at
once with one that never answers.

The servers are asyncio servers on port 0, each on an event loop in a thread of its own; a handler is
given the request's head and the connection, and answers as the test wants (well or not).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import threading
import time
from collections.abc import Awaitable, Callable, Iterator

import pytest
from fabrictwin.mirror_config import TargetConfig
from fabrictwin.scrape import ACCEPT, Scraper, ScrapeResult, fetch_url, fetch_url_timed, why_failed

from tests.common.test_tls import OPENSSL, Pki, pki  # noqa: F401 - `pki` is a fixture

BODY = b'node_network_transmit_bytes_total{device="swp1"} 12\n'
Handler = Callable[[str, bytes, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Server:
    """An asyncio server on localhost: every connection's request head is kept (`requests`), then the
    connection is handed to `handler(path, head, reader, writer)` and closed when it returns."""

    def __init__(self, handler: Handler, tls: ssl.SSLContext | None = None) -> None:
        self.handler = handler
        self.tls = tls
        self.requests: list[bytes] = []
        self.connections = 0
        self.loop = asyncio.new_event_loop()
        self.port = 0

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            self.requests.append(head)
            path = head.split(b" ", 2)[1].decode()
            await self.handler(path, head, reader, writer)
            await writer.drain()
        except (OSError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # the client hung up (as it does at a bound, or a timeout), or the server stops
        finally:
            writer.close()

    async def _start(self) -> asyncio.Server:
        return await asyncio.start_server(self._connection, "127.0.0.1", 0, ssl=self.tls, backlog=1024)

    @contextlib.contextmanager
    def running(self) -> Iterator[Server]:
        thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        thread.start()
        server = asyncio.run_coroutine_threadsafe(self._start(), self.loop).result()
        self.port = server.sockets[0].getsockname()[1]
        try:
            yield self
        finally:

            async def stop() -> None:
                server.close()
                tasks = asyncio.all_tasks() - {asyncio.current_task()}
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

            asyncio.run_coroutine_threadsafe(stop(), self.loop).result()
            self.loop.call_soon_threadsafe(self.loop.stop)
            thread.join()
            self.loop.close()

    def url(self, path: str = "/metrics", scheme: str = "http", host: str = "127.0.0.1") -> str:
        return f"{scheme}://{host}:{self.port}{path}"


def answer(status: str = "200 OK", body: bytes = BODY, **headers: str) -> Handler:
    """A handler answering `status`, `headers` (Content_Type -> Content-Type) and `body`."""
    lines = "".join(f"{name.replace('_', '-')}: {value}\r\n" for name, value in headers.items())

    async def handler(path: str, head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        writer.write(f"HTTP/1.1 {status}\r\n{lines}\r\n".encode() + body)

    return handler


def raw(data: bytes) -> Handler:
    """A handler answering `data`, whatever it is."""

    async def handler(path: str, head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        writer.write(data)

    return handler


def scrape(*targets: TargetConfig, timeout_s: float = 5, **options: int) -> list[ScrapeResult]:
    scraper = Scraper(timeout_s, **options)
    try:
        return scraper.scrape(targets)
    finally:
        scraper.close()


def scrape_url(url: str, timeout_s: float = 5, **options: int) -> ScrapeResult:
    (result,) = scrape(TargetConfig("leaf-0", url=url), timeout_s=timeout_s, **options)
    return result


# --- what is asked ---------------------------------------------------------------------------------


def test_the_request_asks_for_protobuf_first_names_the_host_and_keeps_the_path_and_query():
    with Server(
        answer(Content_Type="text/plain; version=0.0.4", Content_Length=str(len(BODY)))
    ).running() as s:
        result = scrape_url(s.url("/probe?target=leaf-0&module=if_mib"))
    assert (result.error, result.body, result.content_type) == ("", BODY, "text/plain; version=0.0.4")
    (request,) = s.requests
    lines = request.decode().split("\r\n")
    assert lines[0] == "GET /probe?target=leaf-0&module=if_mib HTTP/1.1"
    headers = dict(line.split(": ", 1) for line in lines[1:] if line)
    assert headers["Host"] == f"127.0.0.1:{s.port}" and headers["Accept"] == ACCEPT


def test_fetch_url_without_accept_asks_for_no_format_and_works_inside_a_running_event_loop():
    with Server(answer(Content_Length=str(len(BODY)))).running() as s:

        async def inside() -> tuple[bytes, str]:
            return fetch_url(s.url(), 5, accept=None)

        assert asyncio.run(inside()) == (BODY, "")  # (no Content-Type said: "")
    assert b"Accept:" not in s.requests[0]


# --- bodies ------------------------------------------------------------------------------------------


def test_a_chunked_body_is_decoded_with_extensions_and_trailers():
    chunks = b"".join(b"%x;name=value\r\n%s\r\n" % (len(part), part) for part in (BODY[:10], BODY[10:]))
    handler = answer(body=chunks + b"0\r\nX-Trailer: yes\r\n\r\n", Transfer_Encoding="chunked")
    with Server(handler).running() as s:
        result = scrape_url(s.url())
    assert (result.error, result.body) == ("", BODY)


def test_a_chunked_body_cut_between_chunks_or_not_chunked_at_all_is_an_incomplete_read():
    whole = b"%x\r\n%s\r\n" % (len(BODY), BODY)
    for body, error in [
        (whole, f"bad HTTP response: IncompleteRead({len(BODY)} bytes read)"),  # no last chunk
        (whole + b"zz\r\n", f"bad HTTP response: IncompleteRead({len(BODY)} bytes read)"),
        (BODY, "bad HTTP response: IncompleteRead(0 bytes read)"),
    ]:
        with Server(answer(body=body, Transfer_Encoding="chunked")).running() as s:
            assert scrape_url(s.url()).error == error


def test_a_body_with_neither_length_nor_chunks_is_read_to_the_end_of_the_connection():
    with Server(answer(body=BODY * 3)).running() as s:
        result = scrape_url(s.url())
    assert (result.error, result.body) == ("", BODY * 3)
    with Server(answer(body=BODY * 3)).running() as s:
        assert scrape_url(s.url(), max_bytes=100).error == "more than 100 bytes"


def test_a_body_in_many_pieces_is_whole():
    async def slowly(path: str, head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        body = BODY * 5000  # 265 KB
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body))
        for at in range(0, len(body), 7000):
            writer.write(body[at : at + 7000])
            await writer.drain()
            await asyncio.sleep(0.001)

    with Server(slowly).running() as s:
        result = scrape_url(s.url())
    assert (result.error, result.body) == ("", BODY * 5000)


# --- statuses --------------------------------------------------------------------------------------


def test_an_error_status_says_its_code_and_reason_and_redirects_are_followed():
    async def handler(path: str, head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        if path == "/old":
            writer.write(b"HTTP/1.1 301 Moved Permanently\r\nLocation: /metrics\r\nContent-Length: 0\r\n\r\n")
        elif path == "/loop":
            writer.write(b"HTTP/1.1 302 Found\r\nLocation: /loop\r\n\r\n")
        elif path == "/metrics":
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY))
        else:
            writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nnot found")

    with Server(handler).running() as s:
        assert scrape_url(s.url("/nothing")).error == "HTTP 404 Not Found"
        assert (scrape_url(s.url("/old")).body, s.requests[-1].split(b"\r\n")[0]) == (
            BODY,
            b"GET /metrics HTTP/1.1",
        )
        assert scrape_url(s.url("/loop")).error == "HTTP 302 Found: more than 10 redirects"


def test_an_interim_answer_is_passed_over():
    handler = answer(body=b"", Content_Length="0")

    async def interim(path: str, head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY))

    with Server(interim).running() as s, Server(handler).running() as empty:
        assert scrape_url(s.url()).body == BODY
        assert scrape_url(empty.url()).body == b""


# --- the head's bounds -----------------------------------------------------------------------------


def test_an_answer_with_too_many_headers_or_too_many_bytes_of_them_is_refused():
    many = "".join(f"X-{i}: {i}\r\n" for i in range(101))
    with Server(raw(f"HTTP/1.1 200 OK\r\n{many}\r\n".encode() + BODY)).running() as s:
        error = scrape_url(s.url()).error
    assert error == "bad HTTP response: HTTPException: got more than 100 headers"
    big = "".join(f"X-{i}: {'a' * 60_000}\r\n" for i in range(5))
    with Server(raw(f"HTTP/1.1 200 OK\r\n{big}\r\n".encode() + BODY)).running() as s:
        error = scrape_url(s.url()).error
    assert error == "bad HTTP response: HTTPException: got more than 262144 bytes of headers"


def test_a_server_trickling_headers_is_timed_out_within_the_targets_timeout():
    async def trickle(path: str, head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        writer.write(b"HTTP/1.1 200 OK\r\n")
        for i in range(50):  # one header every 40 ms: each read is quick, the whole head is not
            writer.write(b"X-%d: %d\r\n" % (i, i))
            await writer.drain()
            await asyncio.sleep(0.04)
        writer.write(b"Content-Length: %d\r\n\r\n%s" % (len(BODY), BODY))

    with Server(trickle).running() as s:
        started = time.monotonic()
        result = scrape_url(s.url(), timeout_s=0.5)
    assert result.error == "timed out after 0.5 s"
    assert 0.5 <= time.monotonic() - started < 1.5


def test_a_timeout_bounds_the_body_too():
    async def slow_body(path: str, head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
        for _ in range(100):
            writer.write(b"# 10 bytes")
            await writer.drain()
            await asyncio.sleep(0.02)

    with Server(slow_body).running() as s:
        started = time.monotonic()
        result = scrape_url(s.url(), timeout_s=0.5)
    assert result.error == "timed out after 0.5 s" and result.seconds < 1
    assert time.monotonic() - started < 1.5


def test_a_refused_connection_says_so_in_the_systems_words():
    with Server(answer()).running() as s:
        url = s.url()
    result = scrape_url(url)
    assert result.error == "[Errno 111] Connection refused"
    with pytest.raises(OSError) as refused:
        fetch_url_timed(url, 5)
    assert why_failed(refused.value, 5) == "[Errno 111] Connection refused"


# --- many at once ----------------------------------------------------------------------------------


def test_many_targets_at_once_one_never_answering_delays_no_other_beyond_its_own_timeout():
    async def handler(path: str, head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        if path == "/silent/metrics":
            await reader.read()  # until the client hangs up
        node = path.split("/")[1].encode()
        body = b'node_network_up{device="%s"} 1\n' % node
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))

    names = [f"leaf-{i}" for i in range(600)]
    names.insert(17, "silent")
    with Server(handler).running() as s:
        targets = [TargetConfig(name, url=s.url(f"/{name}/metrics")) for name in names]
        started = time.monotonic()
        results = scrape(*targets, timeout_s=1.5, max_workers=64)
        took = time.monotonic() - started
    assert [result.target.node for result in results] == names  # in the targets' order
    assert results[17].error == "timed out after 1.5 s"
    others = results[:17] + results[18:]
    assert all(r.error == "" and r.body == b'node_network_up{device="%s"} 1\n' % r.target.node.encode()
               for r in others)  # fmt: skip
    assert max(r.seconds for r in others) < 1.0
    assert took < 1.5 + 1.0  # the silent one's timeout, not the others waiting behind it


def test_a_closed_scraper_leaves_no_thread_behind():
    with Server(answer(Content_Length=str(len(BODY)))).running() as s:
        before = set(threading.enumerate())
        scraper = Scraper(5)
        assert scraper.scrape([TargetConfig("leaf-0", url=s.url())])[0].body == BODY
        scraper.close()
        deadline = time.monotonic() + 5
        while set(threading.enumerate()) - before and time.monotonic() < deadline:
            time.sleep(0.01)
    assert set(threading.enumerate()) - before == set()


# --- https -----------------------------------------------------------------------------------------


@pytest.mark.skipif(OPENSSL is None, reason="the openssl CLI is not installed; cannot make certificates")
def test_https_against_the_systems_cas_and_a_server_not_trusted_is_refused(pki: Pki, monkeypatch):  # noqa: F811
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(pki.server_cert, pki.server_key)
    with Server(answer(Content_Length=str(len(BODY))), tls=tls).running() as s:
        untrusted = scrape_url(s.url(scheme="https"))
        monkeypatch.setenv("SSL_CERT_FILE", str(pki.ca))  # the CAs ssl.create_default_context loads
        trusted = scrape_url(s.url(scheme="https", host="localhost"))
        body, _ = fetch_url(s.url(scheme="https"), 5)
    assert "CERTIFICATE_VERIFY_FAILED" in untrusted.error
    assert (trusted.error, trusted.body, body) == ("", BODY, BODY)
    assert f"\r\nHost: localhost:{s.port}\r\n".encode() in s.requests[-2]


# --- kept connections ------------------------------------------------------------------------------

Turn = Callable[[int, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[bool]]


class KeepingServer(Server):
    """A server keeping its connections, as Go's net/http does: `turn(n, reader, writer)` answers the
    n-th request (0, 1, ...) on a connection and says whether to keep it for another."""

    def __init__(self, turn: Turn) -> None:
        super().__init__(answer())
        self.turn = turn
        self.closed = 0  # connections that ended

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            for n in range(1000):
                try:
                    self.requests.append(await reader.readuntil(b"\r\n\r\n"))
                except asyncio.IncompleteReadError:
                    break  # the client closed it
                if not await self.turn(n, reader, writer):
                    break
                await writer.drain()
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            self.closed += 1
            writer.close()


def ok(body: bytes = BODY) -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


async def always(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
    writer.write(ok())
    return True


def test_connections_are_kept_for_the_next_scrape_and_closed_with_the_scraper():
    with KeepingServer(always).running() as s:
        scraper = Scraper(5, max_workers=1)
        targets = [TargetConfig(f"leaf-{i}", url=s.url(f"/leaf-{i}/metrics")) for i in range(3)]
        try:
            for _ in range(2):
                assert [r.body for r in scraper.scrape(targets)] == [BODY] * 3
            assert (s.connections, s.closed, len(s.requests)) == (1, 0, 6)
            assert all(b"Connection: close" not in request for request in s.requests)
        finally:
            scraper.close()
        deadline = time.monotonic() + 5
        while s.closed < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert s.closed == 1  # closed by the scraper's close


@pytest.mark.parametrize("how", ["closed", "reset", "408"])
def test_a_kept_connection_the_server_dropped_is_asked_again_once_on_a_new_one(how: str):
    async def one_each(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        if n == 0:
            writer.write(ok())
            return True
        # The second request on a connection: as a server closing an idle connection just then.
        if how == "reset":
            writer.transport.abort()
        elif how == "408":
            writer.write(b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
        return False

    with KeepingServer(one_each).running() as s:
        scraper = Scraper(5, max_workers=1)
        target = TargetConfig("leaf-0", url=s.url())
        try:
            first = scraper.scrape([target])
            second = scraper.scrape([target])
        finally:
            scraper.close()
    assert [(r.error, r.body) for r in first + second] == [("", BODY), ("", BODY)]
    assert (s.connections, len(s.requests)) == (2, 3)


def test_a_kept_connection_failing_once_its_answer_began_is_not_asked_again():
    async def cut(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        writer.write(ok() if n == 0 else b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc")
        return n == 0

    with KeepingServer(cut).running() as s:
        scraper = Scraper(5, max_workers=1)
        target = TargetConfig("leaf-0", url=s.url())
        try:
            first, second = scraper.scrape([target]) + scraper.scrape([target])
        finally:
            scraper.close()
    assert (first.error, second.error) == ("", "truncated: 3 of 100 bytes")
    assert (s.connections, len(s.requests)) == (1, 2)


def test_an_answer_that_ends_the_connection_or_says_close_is_not_kept():
    async def closing(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        writer.write(
            b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY)
        )
        return True  # (kept open by the server all the same: the client is to close it)

    async def http_1_0(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY))
        return True

    for turn in (closing, http_1_0):
        with KeepingServer(turn).running() as s:
            scraper = Scraper(5, max_workers=1)
            target = TargetConfig("leaf-0", url=s.url())
            try:
                results = scraper.scrape([target]) + scraper.scrape([target])
            finally:
                scraper.close()
        assert [r.body for r in results] == [BODY, BODY]
        assert (s.connections, len(s.requests)) == (2, 2)


# --- results as they come --------------------------------------------------------------------------


def test_scrape_each_hands_on_each_result_as_it_comes_with_what_after_made_of_it_where_it_ran():
    """The answers come as they are in (the slow target's last: it answers only once the test has
    had every other), each with what `after` returned in the thread that scraped it; skipped targets
    first; an `after` that raises stops the scrape here with its error."""
    others_in = threading.Event()

    async def handler(path: str, head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        if path == "/slow/metrics":
            await asyncio.get_running_loop().run_in_executor(None, others_in.wait, 10)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY))

    with Server(handler).running() as s:
        names = ["slow", *(f"leaf-{i}" for i in range(20))]
        targets = [TargetConfig(name, url=s.url(f"/{name}/metrics")) for name in names]
        targets.append(TargetConfig("cmd", command="printf 'up 1\\n'"))
        scraper = Scraper(15)
        try:
            seen = []
            for i, result, made in scraper.scrape_each(
                targets, lambda r: (r.target.node, threading.current_thread().name)
            ):
                seen.append(i)
                assert made[0] == result.target.node and result.error == ""
                assert made[1] == "scrape-loop" if result.target.url else made[1].startswith("scrape")
                if len(seen) == len(targets) - 1:
                    others_in.set()
            assert sorted(seen) == list(range(len(targets))) and seen[-1] == 0  # the slow one last
            scraper.failed(targets[3])  # backing off: handed on first, and `after` is not run on it

            def fails(result: ScrapeResult) -> object:
                raise ValueError(f"cannot read {result.target.node}")

            each = scraper.scrape_each(targets, fails)
            i, result, made = next(each)
            assert (i, result.skipped, made) == (3, True, None)
            with pytest.raises(ValueError, match="cannot read"):
                list(each)
        finally:
            scraper.close()


def test_the_mirror_command_raises_its_open_file_limit_so_a_connection_is_kept_per_target():
    import json
    import subprocess
    import sys

    child = """
import json, resource
from fabrictwin.cli_mirror import open_files_raised
from fabrictwin.scrape import _idle_bound
resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
before = _idle_bound()
raised = open_files_raised()
print(json.dumps([raised, before, _idle_bound(), resource.getrlimit(resource.RLIMIT_NOFILE)]))
"""
    printed = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=True).stdout
    (soft, now), before, after, (limit, hard) = json.loads(printed)
    assert soft == 256 and before == 64 and now == limit == hard  # from a quarter of 256 to the hard limit's
    assert after == (1 << 20 if hard == -1 else max(64, hard // 4))
