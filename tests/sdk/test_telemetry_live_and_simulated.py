"""The same SDK calls answer the seeds' questions on a simulated run and on a live cluster: a real
simulator writes a run's series; a node_exporter on localhost is mirrored; both resolve the fabric's
uplink group through the real topology service."""

from __future__ import annotations

import http.server
import threading

import pytest
from fabrictwin import Client, collective_job, simulation_spec
from fabrictwin.mirror import poll_url, text_parser
from fabrictwin.v1 import common_pb2

from services.simulator.__main__ import build as build_simulator
from services.telemetry.__main__ import build as build_telemetry
from services.topology.__main__ import build as build_topology

from .conftest import BackgroundServer, config

FABRIC = "twin-ls"  # 2 leaves x 4 spines, 4 hosts per leaf


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    data_dir = str(tmp_path_factory.mktemp("twin"))
    with BackgroundServer(build_topology, config("topology", data_dir)) as topology:
        telemetry_config = config(
            "telemetry",
            data_dir,
            topology_address=topology.address,
            extra={"maintenance_interval_seconds": 0},
        )
        with BackgroundServer(build_telemetry, telemetry_config) as telemetry:
            peers = {"topology_address": topology.address, "telemetry_address": telemetry.address}
            with BackgroundServer(build_simulator, config("simulator", data_dir, **peers)) as simulator:
                yield {
                    "topology": topology.address,
                    "telemetry": telemetry.address,
                    "simulator": simulator.address,
                }


@pytest.fixture(scope="module")
def client(servers):
    with Client(**servers, timeout=60) as connected:
        connected.fabrics.create_leaf_spine(2, 4, 4, fabric_id=FABRIC)
        yield connected


@pytest.fixture(scope="module")
def simulated(client) -> str:
    """An ECMP ring AllReduce whose every hop crosses the spines, written to telemetry by the simulator."""
    job = collective_job(ranks=8, size="64MiB", placement="scattered")
    spec = simulation_spec(FABRIC, [job], "ecmp", seed=3, telemetry_source="twin-sim")
    done = client.simulations.wait(client.simulations.start(spec).name, timeout=300)
    assert done.state == common_pb2.JOB_STATE_SUCCEEDED, done.error.message
    return "twin-sim"


@pytest.fixture(scope="module")
def live(client) -> str:
    """A live source mirrored from a switch exporter: the leaves' uplink ports, two of them hot."""
    uplinks = []  # (leaf, port) of every leaf-to-spine link, as the topology service lists it
    for link in client.fabrics.links(FABRIC):
        ends = {link.node_a.rsplit("/", 1)[-1]: link.port_a, link.node_b.rsplit("/", 1)[-1]: link.port_b}
        leaves = [node for node in ends if node.startswith("leaf-")]
        if leaves and any(node.startswith("spine-") for node in ends):
            uplinks.append((leaves[0], ends[leaves[0]]))
    assert len(uplinks) == 8
    scrapes = {"count": 0}

    class Exporter(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            scrapes["count"] += 1
            at = 1_700_000_000_000 + scrapes["count"] * 1000  # the exporter stamps a scrape a second
            lines = []
            for i, (node, port) in enumerate(uplinks):
                labels = f'device="{node}",port="{port}"'
                sent = int(scrapes["count"] * (0.95 if i < 2 else 0.05) * 1e9)  # of a 1 GB/s port per second
                lines += [
                    f"node_infiniband_port_data_transmitted_bytes_total{{{labels}}} {sent} {at}",
                    f"node_infiniband_port_data_received_bytes_total{{{labels}}} {sent} {at}",
                    f"node_infiniband_symbol_error_total{{{labels}}} {scrapes['count'] * (i == 0)} {at}",
                    f"node_infiniband_rate_bytes_per_second{{{labels}}} 1000000000 {at}",
                ]
            self.send_response(200)
            self.end_headers()
            self.wfile.write(("\n".join(lines) + "\n").encode())

        def log_message(self, *args):
            pass

    exporter = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Exporter)
    thread = threading.Thread(target=exporter.serve_forever, daemon=True)
    thread.start()
    try:
        client.telemetry.create_source("twin-live", fabric=FABRIC)
        url = f"http://127.0.0.1:{exporter.server_address[1]}/metrics"
        report = client.telemetry.mirror(
            "twin-live", poll_url(url, text_parser("prometheus", "twin-live"), 0.1), count=4
        )
        assert (report.failed_polls, report.rejected) == (0, 0)
    finally:
        exporter.shutdown()
        thread.join()
    return "twin-live"


@pytest.mark.parametrize("which", ["simulated", "live"])
def test_uplink_utilisation_skew_and_loss_answer_on_both(client, request, which):
    source = request.getfixturevalue(which)
    uplinks = list(client.telemetry.query_series(source, "utilisation", ports=["group:uplinks"], step_ns=0))
    assert len(uplinks) == 8  # 2 leaves x 4 spines, one direction each
    named = {s.port for s in uplinks}
    assert all(name.startswith("leaf-") for name in named)
    assert all(len(s.values) > 0 for s in uplinks)

    top = client.telemetry.top_links(source, "utilisation", ports=["group:uplinks"], limit=3)
    assert len(top) == 3 and top[0].value >= top[1].value >= top[2].value and top[0].port in named

    (skew,) = client.telemetry.utilisation_skew(source, ports=["group:uplinks"])
    assert skew.ports == 8 and skew.max_over_mean >= 1.0
    assert skew.share_hot > 0 and skew.share_idle > 0  # ECMP pinning: hot and idle uplinks together

    loss = client.telemetry.loss_history(source, top[0].port)
    assert loss and all(p.time_ns >= 0 for p in loss)
    downlinks = list(client.telemetry.query_series(source, "utilisation", ports=["group:downlinks"]))
    assert not named & {s.port for s in downlinks}


def test_the_live_mirror_reports_errors_and_an_estimated_ber(client, live):
    hot = client.telemetry.top_links(live, "symbol_errors", aggregation="sum", limit=1)[0]
    (point,) = client.telemetry.loss_history(live, hot.port)
    assert point.symbol_errors == 3.0  # three deltas after the first reading
    assert point.estimated_ber == pytest.approx(3.0 / (point.rx_bytes * 8))
