"""No scrape target can knock the mirror over: `fabrictwin.scrape.Scraper` against targets that answer
garbage, die mid-response, print without end or leave processes behind.

Each failure is that target's only: it is reported with why, and the scrape returns. The HTTP
targets are real servers on localhost (raw sockets where a well-behaved server cannot misbehave
enough); the command targets are real /bin/sh commands.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import signal
import socket
import socketserver
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from fabrictwin.mirror_config import TargetConfig
from fabrictwin.scrape import Scraper

BODY = (
    b'node_network_transmit_bytes_total{device="swp1"} 12\n'
    b'node_network_receive_bytes_total{device="swp1"} 34\n'
)
FIRST_LINE = BODY.index(b"\n") + 1


@contextlib.contextmanager
def raw_server(answer: Callable[[socket.socket], None]) -> Iterator[str]:
    """A TCP server on localhost whose every connection is handed to `answer` (after the request)."""

    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            self.request.recv(65536)  # the request (it fits one read)
            answer(self.request)

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def scrape_one(target: TargetConfig, timeout_s: float = 5, **options: int) -> tuple[str, bytes]:
    scraper = Scraper(timeout_s, **options)
    try:
        (result,) = scraper.scrape([target])
    finally:
        scraper.close()
    return result.error, result.body


def url(address: str) -> TargetConfig:
    return TargetConfig("leaf-0", url=address)


def command(text: str) -> TargetConfig:
    return TargetConfig("leaf-0", command=text)


# --- HTTP targets ---------------------------------------------------------------------------------


def test_a_target_answering_garbage_over_http_is_its_failure_only():
    with raw_server(lambda s: s.sendall(b"SSH-2.0-OpenSSH_9.2p1\r\n")) as address:
        error, body = scrape_one(url(address))
    assert error == "bad HTTP response: BadStatusLine: 'SSH-2.0-OpenSSH_9.2p1\\r\\n'" and body == b""


def test_a_target_hanging_up_without_an_answer_is_its_failure_only():
    with raw_server(lambda s: None) as address:
        error, _ = scrape_one(url(address))
    assert error == "bad HTTP response: Remote end closed connection without response"


def test_an_http_header_line_without_end_is_its_failure_only():
    def endless_header(s: socket.socket) -> None:
        s.sendall(b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * 70_000 + b"\r\n\r\n")

    with raw_server(endless_header) as address:
        error, _ = scrape_one(url(address))
    assert error == "bad HTTP response: LineTooLong: got more than 65536 bytes when reading header line"


def test_an_exporter_dying_in_a_chunked_body_is_its_failure_only():
    def cut_chunk(s: socket.socket) -> None:
        s.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1000\r\n" + BODY)  # then closes

    with raw_server(cut_chunk) as address:
        error, body = scrape_one(url(address))
    assert error == "bad HTTP response: IncompleteRead(0 bytes read)" and body == b""


def test_an_exporter_dying_before_its_content_length_is_its_failure_not_a_shorter_scrape():
    def cut_body(s: socket.socket) -> None:
        # The first line is whole: read as it came, the scrape would parse, one counter short.
        s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(BODY) + BODY[:FIRST_LINE])

    with raw_server(cut_body) as address:
        error, body = scrape_one(url(address))
    assert error == f"truncated: {FIRST_LINE} of {len(BODY)} bytes" and body == b""


def test_an_exporter_resetting_the_connection_mid_response_is_its_failure_only():
    def reset(s: socket.socket) -> None:
        s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + BODY)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # RST

    with raw_server(reset) as address:
        error, body = scrape_one(url(address))
    # Whether the reset or the end of the data reaches the reader first is the kernel's business.
    assert error in ("[Errno 104] Connection reset by peer", f"truncated: {len(BODY)} of 100000 bytes")
    assert body == b""


def test_a_url_answering_more_than_the_bound_is_refused_without_reading_it_all():
    big = b"# " + b"x" * (2 * 1024 * 1024) + b"\n"

    def chunked(s: socket.socket) -> None:  # no Content-Length to refuse it by: read up to the bound
        s.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        with contextlib.suppress(OSError):  # the scraper hangs up at the bound
            for at in range(0, len(big), 65536):
                piece = big[at : at + 65536]
                s.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
            s.sendall(b"0\r\n\r\n")

    with raw_server(chunked) as address:
        error, _ = scrape_one(url(address), max_bytes=1024 * 1024)
    assert error == "more than 1048576 bytes"

    def announced(s: socket.socket) -> None:
        s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(big))

    with raw_server(announced) as address:
        error, _ = scrape_one(url(address), max_bytes=1024 * 1024)
    assert error == f"more than 1048576 bytes (Content-Length {len(big)})"


# --- command targets ------------------------------------------------------------------------------


def _living(marker: str) -> list[int]:
    """Processes (not zombies) whose command line holds `marker`."""
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


@contextlib.contextmanager
def no_process_left(marker: str) -> Iterator[None]:
    """Asserts that no process with `marker` in its command line outlives the block (waiting up to
    10 s for SIGKILLed ones to be gone: signals are delivered asynchronously); kills any that did."""
    try:
        yield
        deadline = time.monotonic() + 10
        while _living(marker) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _living(marker) == [], "processes outlived the scrape"
    finally:
        for pid in _living(marker):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def _marker() -> str:
    """A unique `sleep` argument: 1000.<digits> seconds."""
    return f"1000.{uuid.uuid4().int % 10**12:012d}"


def test_a_timed_out_command_leaves_no_process_behind():
    marker = _marker()
    with no_process_left(marker):
        error, _ = scrape_one(command(f"sleep {marker} & sleep {marker}"), timeout_s=0.5)
    assert error == "timed out after 0.5 s"


def test_a_command_printing_without_end_is_stopped_at_the_bound_and_leaves_no_process():
    marker = _marker()
    # `yes` prints forever (GB/s): read whole, it would fill the memory before its timeout.
    text = f"sleep {marker} & yes 'node_network_up{{device=\"swp1\"}} 1'"
    with no_process_left(marker), no_process_left("node_network_up"):
        error, body = scrape_one(command(text), timeout_s=60, max_bytes=1024 * 1024)
    assert error == "more than 1048576 bytes of output" and body == b""


def test_a_command_leaving_a_process_behind_after_its_output_has_it_ended():
    marker = _marker()
    with no_process_left(marker):
        error, body = scrape_one(command(f"sleep {marker} >/dev/null 2>&1 & echo done"), timeout_s=5)
    assert (error, body) == ("", b"done\n")


def test_a_command_failing_says_its_exit_status_and_last_line_of_stderr():
    error, _ = scrape_one(command("echo first >&2; echo why >&2; exit 3"))
    assert error == "exited with 3: why"
    error, body = scrape_one(command("head -c 300000 /dev/zero | tr '\\0' x; echo"))  # beyond a pipe's 64 KiB
    assert error == "" and len(body) == 300_001


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_a_command_filling_stderr_and_stdout_does_not_block(stream: str):
    redirect = ">&2" if stream == "stderr" else ""
    error, body = scrape_one(command(f"head -c 1000000 /dev/zero {redirect}; echo ok"))
    assert error == "" and body.endswith(b"ok\n")


# --- `fabrictwin telemetry mirror --url/--command` (fabrictwin.mirror) fetches the same way ------


def test_the_telemetry_mirror_reports_a_garbage_url_or_an_endless_command_as_a_failed_poll():
    from fabrictwin.mirror import poll_command, poll_url, text_parser

    parser = text_parser("prometheus", "s")
    with raw_server(lambda s: s.sendall(b"SSH-2.0-OpenSSH_9.2p1\r\n")) as address:
        (poll,) = poll_url(address, parser, 0.05, until=time.monotonic() + 0.01)
    assert (
        poll.error
        == f"cannot fetch {address}: bad HTTP response: BadStatusLine: 'SSH-2.0-OpenSSH_9.2p1\\r\\n'"
    )
    marker = _marker()
    with no_process_left(marker), no_process_left("node_network_up"):
        polls = poll_command(
            f"sleep {marker} & yes node_network_up", parser, 0.05, until=time.monotonic() + 0.01
        )
        (poll,) = polls
    assert poll.error == "command: more than 16777216 bytes of output"
    (poll,) = poll_command("echo broken >&2; exit 3", parser, 0.05, until=time.monotonic() + 0.01)
    assert poll.error == "command exited with 3: broken"


# -- when a scrape is stamped -------------------------------------------------------------------------


def _stamped(target: TargetConfig) -> tuple[int, int, int]:
    """(asked, stamped, returned) wall-clock times of one scrape of `target`."""
    scraper = Scraper(10)
    try:
        asked = time.time_ns()
        (result,) = scraper.scrape([target])
        returned = time.time_ns()
    finally:
        scraper.close()
    assert not result.error, result.error
    return asked, result.time_ns, returned


def test_a_url_scrape_is_stamped_when_its_answer_began_not_when_it_was_asked():
    """An exporter that takes 0.6 s to read its counters and then 0.6 s to send them: the counters are
    those of the moment the answer began (a sample stamped at the ask put 1.6 s of bytes in a 1 s
    interval on a busy machine)."""

    def slow(conn: socket.socket) -> None:
        time.sleep(0.6)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n" % len(BODY))
        time.sleep(0.6)
        conn.sendall(BODY)

    with raw_server(slow) as address:
        asked, stamped, returned = _stamped(url(address))
    assert stamped - asked >= 0.6e9  # not before the answer
    assert returned - stamped >= 0.6e9  # nor after the body came


def test_a_command_scrape_is_stamped_at_its_first_output():
    asked, stamped, returned = _stamped(command(f"sleep 0.6; printf '{BODY.decode()}'; sleep 0.6"))
    assert stamped - asked >= 0.6e9
    assert returned - stamped >= 0.6e9
