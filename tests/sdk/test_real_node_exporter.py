"""The real node_exporter (Debian's prometheus-node-exporter) serves the protobuf exposition when the
mirror asks for it, and the importer reads it as it reads the same exporter's text.

Run on a free localhost port with the netdev collector only, for as long as the test takes; skipped
with the reason where the binary is not installed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator

import pytest
from fabrictwin.importers import prometheus
from fabrictwin.scrape import ACCEPT, fetch_url

BINARY = shutil.which("prometheus-node-exporter") or "/usr/bin/prometheus-node-exporter"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def _running(port: int) -> Iterator[subprocess.Popen[bytes]]:
    command = [
        BINARY,
        "--collector.disable-defaults",
        "--collector.netdev",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        assert process.stderr is not None
        process.stderr.close()


@pytest.fixture
def node_exporter() -> Iterator[str]:
    if not os.access(BINARY, os.X_OK):
        pytest.skip(f"{BINARY} is not installed (Debian/Ubuntu: apt-get install prometheus-node-exporter)")
    for _ in range(3):  # the port may be taken between choosing it and the exporter binding it
        port = _free_port()
        url = f"http://127.0.0.1:{port}/metrics"
        with _running(port) as process:
            deadline = time.monotonic() + 30
            while process.poll() is None and time.monotonic() < deadline:
                with contextlib.suppress(OSError):
                    with urllib.request.urlopen(url, timeout=5) as response:
                        response.read()
                    yield url
                    return
                time.sleep(0.05)
            assert process.stderr is not None
            why = process.stderr.read().decode(errors="replace") if process.poll() is not None else ""
        if "address already in use" not in why:
            pytest.fail(f"{BINARY} did not answer on {url} within 30 s: {why[-500:]}")
    pytest.fail(f"{BINARY}: no free port in 3 tries")


def test_node_exporter_serves_protobuf_when_asked_and_it_reads_as_its_text(node_exporter):
    body, content_type = fetch_url(node_exporter, 10)
    assert prometheus.is_protobuf(content_type), content_type
    with urllib.request.urlopen(node_exporter, timeout=10) as response:  # no Accept: the text format
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    assert "application/vnd.google.protobuf" in ACCEPT
    options = {"node": "host", "device_port_name": "{node}/{device}"}
    from_protobuf = prometheus.parse_scrape(body, content_type, 1, **options)
    from_text = prometheus.parse(text, 1, **options)
    # The same interfaces and counters; the values moved between the scrapes (this test's traffic).
    assert [(r.port, sorted(r.values)) for r in from_protobuf] == [
        (r.port, sorted(r.values)) for r in from_text
    ]
    with open("/proc/net/dev") as stream:
        interfaces = {line.split(":")[0].strip() for line in stream.readlines()[2:]}
    assert {r.port.removeprefix("host/") for r in from_protobuf} <= interfaces
    assert from_protobuf and all("rx_bytes" in r.values and "tx_packets" in r.values for r in from_protobuf)
    for earlier, later in zip(from_protobuf, from_text, strict=True):
        assert all(earlier.values[m][0] <= later.values[m][0] for m in earlier.values)


def test_node_exporter_scrapes_read_by_plans_as_decoded(node_exporter, monkeypatch):
    """Its families keep their layout from one scrape to the next: from the third on they are read
    by their plans (prometheus.ProtobufPlans, made at the second), exactly as decoding reads them."""
    decoded: list[bytes] = []
    real = prometheus._decoded
    monkeypatch.setattr(prometheus, "_decoded", lambda *a: decoded.append(a[0]) or real(*a))
    plans = prometheus.ProtobufPlans()
    options = {"where": "host", "node": "host", "device_port_name": "{node}/{device}"}
    ports = []
    for _ in range(4):
        body, _ = fetch_url(node_exporter, 10)
        without = prometheus.parse_protobuf(body, 1, **options)
        ports.append([reading.port for reading in without])
        decoded.clear()
        assert prometheus.parse_protobuf(body, 1, plans=plans, **options) == without
    assert len(plans) >= 5  # receive and transmit bytes, packets, errs, drop, ...: one per mapped family
    if ports[1] == ports[2] == ports[3]:  # (an interface that came or went since changes the layout)
        assert decoded == []  # the fourth scrape: every mapped family read by its plan
