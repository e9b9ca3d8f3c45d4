"""Mirroring a live cluster through the SDK and the CLI, against the real telemetry service: a
node_exporter served over HTTP on localhost, perfquery printed by a command, a growing file."""

from __future__ import annotations

import http.server
import json
import sys
import threading
import time

import pytest
from fabrictwin import Client
from fabrictwin.cli import main
from fabrictwin.mirror import poll_url, text_parser

from services.telemetry.__main__ import build

from .conftest import BackgroundServer, config

STEP = 1000  # bytes per scrape and port


@pytest.fixture(scope="module")
def telemetry(tmp_path_factory):
    cfg = config(
        "telemetry", str(tmp_path_factory.mktemp("mirror")), extra={"maintenance_interval_seconds": 0}
    )
    with BackgroundServer(build, cfg) as server:
        yield server


def labels(device: int) -> str:
    return f'device="mlx5_{device}",port="1"'


def _words(text: str) -> list[str]:
    return text.split()


@pytest.fixture
def node_exporter():
    """A node_exporter stand-in on localhost whose transmit counters grow by STEP bytes per scrape."""
    scrapes = {"count": 0}

    class Metrics(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            scrapes["count"] += 1
            sent = 10**12 + scrapes["count"] * STEP
            body = "".join(
                f"node_infiniband_port_data_transmitted_bytes_total{{{labels(d)}}} {sent * (d + 1)}\n"
                f"node_infiniband_port_errors_received_total{{{labels(d)}}} {scrapes['count']}\n"
                for d in range(2)
            )
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args):  # keep the test output clean
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    server.shutdown()
    thread.join()


def _cli(telemetry, *argv: str) -> int:
    return main([f"--telemetry={telemetry.address}", *argv])


def test_the_sdk_mirrors_a_node_exporter_scraped_over_http(telemetry, node_exporter):
    with Client(telemetry=telemetry.address, timeout=30) as client:
        client.telemetry.create_source("mirror-http")
        seen = []
        polls = poll_url(node_exporter, text_parser("prometheus", "mirror-http", node="gpu-0"), 0.05)
        report = client.telemetry.mirror(
            "mirror-http", polls, count=4, on_poll=lambda p, r: seen.append(r.stored)
        )
        assert (report.polls, report.failed_polls, report.stored, report.rejected) == (4, 0, 8, 0)
        assert seen == [2, 2, 2, 2]  # every poll acknowledged as it happened
        series = {s.port: list(s.values) for s in client.telemetry.query_series("mirror-http", "tx_bytes")}
        # Cumulative byte counters become bytes per interval; the first reading has nothing before it.
        assert series == {"gpu-0/mlx5_0/p1": [STEP] * 3, "gpu-0/mlx5_1/p1": [2 * STEP] * 3}
        top = client.telemetry.top_links("mirror-http", "rcv_errors", aggregation="sum")
        assert [(p.port, p.value) for p in top] == [("gpu-0/mlx5_0/p1", 3.0), ("gpu-0/mlx5_1/p1", 3.0)]


PERFQUERY = """\
import pathlib, sys
state = pathlib.Path(sys.argv[1])
count = int(state.read_text()) if state.exists() else 0
state.write_text(str(count + 1))
data = (2**32 - 250 + 100 * count) % 2**32  # PortXmitData wraps between the second and third poll
print("# Port counters: Lid 7 port 3 (CapMask: 0x5A00)")
print(f"PortXmitData:....................{data}")
print(f"SymbolErrorCounter:..............{count}")
"""


def test_the_cli_mirrors_perfquery_printed_by_a_command(telemetry, tmp_path, capsys):
    script = tmp_path / "fake_perfquery.py"
    script.write_text(PERFQUERY)
    command = f"{sys.executable} {script} {tmp_path / 'state'}"
    assert _cli(telemetry, "telemetry", "create-source", "mirror-cmd") == 0
    capsys.readouterr()
    flags = _words("--format perfquery --source mirror-cmd --lid 7=leaf-2 --interval 100ms --count 4")
    code = _cli(telemetry, "telemetry", "mirror", *flags, "--command", command)
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out.strip().splitlines()[-1] == "4 polls (0 failed): stored 4 rows, 0 duplicates, 0 rejected"
    assert err.count("poll at ") == 4
    with Client(telemetry=telemetry.address) as client:
        (series,) = client.telemetry.query_series("mirror-cmd", "tx_bytes")
        assert series.port == "leaf-2/p3"
        assert list(series.values) == [400.0, 400.0, 400.0]  # 100 units of 4 octets, across the wrap
        (errors,) = client.telemetry.query_series("mirror-cmd", "symbol_errors")
        assert list(errors.values) == [1.0, 1.0, 1.0]


def test_the_cli_follows_a_growing_perfquery_file(telemetry, tmp_path, capsys):
    log = tmp_path / "perfquery.log"
    block = (
        "# Port extended counters: Lid 9 port 1 (CapMask: 0x5300)\n"
        "PortRcvData:.....................{}\n# timestamp {}\n"
    )
    log.write_text(block.format(1000, 1_700_000_000) + block.format(1250, 1_700_000_010))
    assert _cli(telemetry, "telemetry", "create-source", "mirror-file") == 0
    capsys.readouterr()
    flags = _words("--format perfquery --source mirror-file --node spine-1 --duration 2s --json")
    done = {}
    follower = threading.Thread(
        target=lambda: done.setdefault(
            "code", _cli(telemetry, "telemetry", "mirror", *flags, "--file", str(log))
        )
    )
    follower.start()
    time.sleep(0.8)
    with log.open("a") as stream:
        stream.write(block.format(1500, 1_700_000_020))
    follower.join(10)
    report = json.loads(capsys.readouterr().out)
    assert done["code"] == 0 and report["stored"] == 3 and report["polls"] == 2
    with Client(telemetry=telemetry.address) as client:
        (series,) = client.telemetry.query_series("mirror-file", "rx_bytes")
        assert (series.port, list(series.time_ns)) == (
            "spine-1/p1",
            [1_700_000_010 * 10**9, 1_700_000_020 * 10**9],
        )
        assert list(series.values) == [1000.0, 1000.0]


def test_a_failed_poll_is_reported_and_the_mirror_goes_on(telemetry, capsys):
    assert _cli(telemetry, "telemetry", "create-source", "mirror-fail") == 0
    flags = _words("--format prometheus --source mirror-fail --interval 50ms --count 2")
    code = _cli(telemetry, "telemetry", "mirror", *flags, "--command", "echo broken >&2; exit 3")
    out, err = capsys.readouterr()
    assert code == 1
    assert "2 polls (2 failed)" in out and "command exited with 3: broken" in err


def test_the_cli_imports_a_scrape_and_answers_skew_loss_and_top(telemetry, tmp_path, capsys):
    scrape = tmp_path / "scrape.prom"
    lines = []
    for port, (sent, errors) in enumerate([(9_000, 0), (1_000, 6), (1_000, 0), (1_000, 0)], start=1):
        labels = f'device="mlx5_0",port="{port}"'
        lines += [
            f"node_infiniband_port_data_transmitted_bytes_total{{{labels}}} {sent} 1000",
            f"node_infiniband_port_data_transmitted_bytes_total{{{labels}}} {2 * sent} 2000",
            f"node_infiniband_port_data_received_bytes_total{{{labels}}} 0 1000",
            f"node_infiniband_port_data_received_bytes_total{{{labels}}} 1000000 2000",
            f"node_infiniband_symbol_error_total{{{labels}}} 0 1000",
            f"node_infiniband_symbol_error_total{{{labels}}} {errors} 2000",
            f"node_infiniband_rate_bytes_per_second{{{labels}}} 10000",  # 9000 B in 1 s is 90 %
        ]
    scrape.write_text("\n".join(lines) + "\n")
    assert _cli(telemetry, "telemetry", "create-source", "imported") == 0
    capsys.readouterr()
    code = _cli(
        telemetry, "telemetry", "import", "--format", "prometheus", "--source", "imported", str(scrape)
    )
    assert code == 0 and capsys.readouterr().out.startswith("stored 8 rows")

    assert (
        _cli(telemetry, "telemetry", "top", "imported", "--metric", "tx_bytes", "--limit", "1", "--json") == 0
    )
    assert json.loads(capsys.readouterr().out)[0] == {"port": "mlx5_0/p1", "value": 9000.0}
    assert _cli(telemetry, "telemetry", "loss", "imported", "--port", "mlx5_0/p2", "--json") == 0
    (point,) = json.loads(capsys.readouterr().out)
    assert point["symbol_errors"] == 6.0 and point["estimated_ber"] == pytest.approx(6 / 8e6)
    assert _cli(telemetry, "telemetry", "skew", "imported", "--port", "mlx5_0/*", "--json") == 0
    (point,) = json.loads(capsys.readouterr().out)
    # Utilisation from bytes over the 1 s between the readings at the reported rate: 90 % and 3 x 10 %.
    assert point["ports"] == 4 and point["max_utilisation"] == pytest.approx(0.9)
    assert (point["share_hot"], point["share_idle"]) == (0.25, 0.75)
    assert _cli(telemetry, "telemetry", "skew", "imported", "--port", "mlx5_0/*") == 0
    assert "90.0%" in capsys.readouterr().out
    assert _cli(telemetry, "telemetry", "update-source", "imported", "--retention", "1h", "--json") == 0
    assert json.loads(capsys.readouterr().out)["retention_ns"] == str(3600 * 10**9)
