"""The fabric mirror (`fabrictwin mirror --config`) against real topology and telemetry services, with
node_exporters served over HTTP on localhost and LLDP tables in a directory.

The lab test (tests/lab) runs the same mirror against a real Linux fabric; these tests cover what a
lab cannot stage quickly: a hanging target, a malformed scrape, a recabling.
"""

from __future__ import annotations

import http.server
import json
import pathlib
import signal
import subprocess
import sys
import threading
import time

import pytest
from fabrictwin import Client
from fabrictwin.fabric_mirror import FabricMirror
from fabrictwin.importers.prometheus import PROTOBUF_CONTENT_TYPE
from fabrictwin.mirror_config import parse_mirror_config

from services.orchestrator.__main__ import build as build_orchestrator
from services.topology.formats.lldp import neighbour_documents
from services.topology.generators import leaf_spine

from .conftest import BackgroundServer, config
from .exposition import Family, as_protobuf

GBPS = 10  # the exporters' node_network_speed_bytes


@pytest.fixture
def client(services):
    with Client(topology=services["topology"], telemetry=services["telemetry"]) as client:
        yield client


class Exporters:
    """node_exporter stand-ins at /NODE/metrics: netdev counters per device, set by the test.

    They serve the text format, unless `protobuf` is set and the request asks for protobuf (then the
    same counters as protobuf); /text/NODE/metrics is always text."""

    def __init__(self) -> None:
        self.devices: dict[str, dict[str, dict[str, float]]] = {}
        self.broken: dict[str, str] = {}  # node -> body to serve instead
        self.misbehave: dict[str, str] = {}  # node -> "garbage" (not HTTP) or "cut" (dies mid-body)
        self.hang: set[str] = set()
        self.protobuf = False
        self.served: list[str] = []  # the Content-Type of every answer
        self.url = ""
        self.clock = time.monotonic  # a device's `tx_per_s` adds that many bytes a second to its tx

    def _tx(self, values: dict[str, float]) -> float:
        return values["tx"] + values.get("tx_per_s", 0.0) * self.clock()

    def families(self, node: str) -> list[Family]:
        """What `text` says, as families (for the protobuf format)."""
        devices = sorted(self.devices.get(node, {}).items())

        def of(key: str) -> list[tuple[dict[str, str], float, None]]:
            return [({"device": d}, values[key], None) for d, values in devices if key in values]

        families: list[Family] = [
            (
                "node_network_transmit_bytes_total",
                "counter",
                [*(({"device": d}, self._tx(v), None) for d, v in devices), ({"device": "lo"}, 12345, None)],
            ),
            ("node_network_receive_bytes_total", "counter", of("rx")),
            (
                "node_network_speed_bytes",
                "untyped",
                [({"device": d}, GBPS * 1e9 / 8, None) for d, _ in devices],
            ),
            ("node_network_receive_errs_total", "untyped", of("errs")),
            ("node_network_carrier_down_changes_total", "untyped", of("downs")),
            (
                "node_qdisc_drops_total",
                "counter",
                [({"device": d, "kind": "tbf"}, v["qdrops"], None) for d, v in devices if "qdrops" in v],
            ),
        ]
        info = [
            (
                {
                    "address": "",
                    "broadcast": "",
                    "device": d,
                    "operstate": "up" if v.get("up", 1) else "down",
                },
                1,
                None,
            )
            for d, v in devices
        ]
        return [family for family in [*families, ("node_network_info", "untyped", info)] if family[2]]

    def text(self, node: str) -> str:
        lines = [
            "# HELP node_network_transmit_bytes_total Network device statistic transmit_bytes.",
            "# TYPE node_network_transmit_bytes_total counter",
        ]
        for device, values in sorted(self.devices.get(node, {}).items()):
            label = f'device="{device}"'
            lines.append(f"node_network_transmit_bytes_total{{{label}}} {self._tx(values):.0f}")
            lines.append(f"node_network_receive_bytes_total{{{label}}} {values['rx']:.0f}")
            lines.append(f"node_network_speed_bytes{{{label}}} {GBPS * 1e9 / 8:.0f}")
            if "errs" in values:
                lines.append(f"node_network_receive_errs_total{{{label}}} {values['errs']:.0f}")
            if "downs" in values:
                lines.append(f"node_network_carrier_down_changes_total{{{label}}} {values['downs']:.0f}")
            if "qdrops" in values:
                lines.append(f'node_qdisc_drops_total{{{label},kind="tbf"}} {values["qdrops"]:.0f}')
            state = "up" if values.get("up", 1) else "down"
            lines.append(f'node_network_info{{address="",broadcast="",{label},operstate="{state}"}} 1')
        lines.append('node_network_transmit_bytes_total{device="lo"} 12345')
        return "\n".join(lines) + "\n"


@pytest.fixture
def exporters():
    state = Exporters()

    class Metrics(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            parts = self.path.strip("/").split("/")
            text_only = parts[0] == "text"
            node = parts[1] if text_only else parts[0]
            if node in state.hang:
                time.sleep(3)
            if state.misbehave.get(node) == "garbage":
                self.wfile.write(b"SSH-2.0-OpenSSH_9.2p1\r\n")
                return
            if state.misbehave.get(node) == "cut":
                self.send_response(200)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                self.wfile.write(b"1000\r\n" + state.text(node).encode()[:100])
                self.close_connection = True
                return
            asks = "application/vnd.google.protobuf" in self.headers.get("Accept", "")
            if state.protobuf and asks and not text_only and node not in state.broken:
                body, content_type = as_protobuf(state.families(node)), PROTOBUF_CONTENT_TYPE
            else:
                body = (state.broken.get(node) or state.text(node)).encode()
                content_type = "text/plain; version=0.0.4"
            state.served.append(content_type)
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield state
    server.shutdown()
    thread.join()


def write_lldp(directory: pathlib.Path, fabric) -> None:
    directory.mkdir(exist_ok=True)
    for old in directory.glob("*.json"):
        old.unlink()
    for name, text in neighbour_documents(fabric):
        (directory / name).write_text(text)


LEAVES = ("leaf-0", "leaf-1")


def mirror_config(exporters: Exporters, lldp_dir: pathlib.Path, **top: object) -> str:
    extra = "".join(f"{key} = {json.dumps(value)}\n" for key, value in top.items())
    return f"""
fabric = "ls"
source = "ls-live"
interval_s = 0.5
timeout_s = 1
{extra}
[lldp]
directory = "{lldp_dir}"
interval_s = 3600

[[targets]]
nodes = ["spine-0", "spine-1", "leaf-0", "leaf-1"]
url = "{exporters.url}/{{node}}/metrics"
"""


def start_counters(exporters: Exporters) -> None:
    for leaf in LEAVES:
        exporters.devices[leaf] = {f"swp{p}": {"tx": 0, "rx": 0} for p in (1, 2, 3, 4)}
    for spine in ("spine-0", "spine-1"):
        exporters.devices[spine] = {f"swp{p}": {"tx": 0, "rx": 0} for p in (1, 2)}


@pytest.fixture
def config_text(exporters, tmp_path):
    """The mirror.toml of a 2-leaf, 2-spine, 4-host fabric whose LLDP tables and exporters are up."""
    write_lldp(tmp_path / "lldp", leaf_spine(2, 2, 2))
    start_counters(exporters)
    return mirror_config(exporters, tmp_path / "lldp")


@pytest.fixture
def mirror(client, config_text):
    mirror = FabricMirror(client, parse_mirror_config(config_text))
    yield mirror
    mirror.close()


def test_the_mirror_imports_the_cabling_ingests_every_poll_and_follows_link_states(
    client, exporters, mirror, tmp_path
):
    done = mirror.start()
    assert done[0] == "imported fabrics/ls from LLDP: 4 switches, 4 hosts, 8 links"
    links = {link.display_name: link for link in client.fabrics.links("ls")}
    # Speeds from node_network_speed_bytes where an exporter reports the port; hosts report none.
    assert links["spine-0/p1<->leaf-0/p3"].speed_gbps == GBPS
    assert links["leaf-0/p1<->host-0/p1"].speed_gbps == GBPS  # the leaf end is reported
    first = mirror.poll()
    assert (first.scraped, first.failed, first.ports) == (4, {}, 12)  # `lo` is no fabric port
    exporters.devices["leaf-0"]["swp3"]["tx"] += 5_000_000
    second = mirror.poll()
    assert second.stored == first.stored == 12 and second.link_changes == []
    series = list(client.telemetry.query_series("ls-live", "tx_bytes", ports=["leaf-0/p3"]))
    assert sum(value for s in series for value in s.values if value == value) == 5_000_000

    exporters.devices["leaf-0"]["swp4"]["up"] = 0
    down = mirror.poll()
    assert [(c.link, c.state) for c in down.link_changes] == [("spine-1/p1<->leaf-0/p4", "DOWN")]
    assert client.fabrics.link("ls", "spine-1/p1<->leaf-0/p4").state == 2  # LINK_STATE_DOWN
    assert mirror.poll().link_changes == []  # said once
    exporters.devices["leaf-0"]["swp4"]["up"] = 1
    up = mirror.poll()
    assert [(c.link, c.state) for c in up.link_changes] == [("spine-1/p1<->leaf-0/p4", "UP")]


def test_with_a_health_table_the_mirror_marks_erring_links_degraded_and_dropped_ones_down(
    client, exporters, tmp_path
):
    write_lldp(tmp_path / "lldp", leaf_spine(2, 2, 2))
    start_counters(exporters)
    for node, device in (("leaf-0", "swp3"), ("leaf-1", "swp3")):
        exporters.devices[node][device] |= {"errs": 0, "downs": 0}
    text = (
        mirror_config(exporters, tmp_path / "lldp") + "\n[health]\nwindow_s = 3600\nber_threshold = 1e-10\n"
    )
    mirror = FabricMirror(client, parse_mirror_config(text))
    try:
        mirror.start()
        assert mirror.poll().health_changes == []  # the first scrape: no traffic, nothing to say
        exporters.devices["leaf-0"]["swp3"]["rx"] += 10**9
        exporters.devices["leaf-0"]["swp3"]["errs"] += 100  # 100 errors in 8e9 bits: 1.25e-8
        exporters.devices["leaf-1"]["swp3"]["rx"] += 10**9
        exporters.devices["leaf-1"]["swp3"]["downs"] += 1
        report = mirror.poll()
        assert sorted((c.link, c.state) for c in report.health_changes) == [
            ("spine-0/p1<->leaf-0/p3", "DEGRADED"),
            ("spine-0/p2<->leaf-1/p3", "DOWN"),
        ], report.health_error
        degraded = client.fabrics.link("ls", "spine-0/p1<->leaf-0/p3")
        assert degraded.state == 3 and degraded.bit_error_rate == pytest.approx(100 / 8e9, rel=1e-12)
        assert client.fabrics.link("ls", "spine-0/p2<->leaf-1/p3").state == 2  # LINK_STATE_DOWN
        assert mirror.poll().health_changes == []  # said once
    finally:
        mirror.close()


def test_with_a_diagnosis_table_the_mirror_finds_pinning_and_queue_drops_with_the_rules_thresholds(
    services, exporters, tmp_path
):
    """[diagnosis]: the orchestrator's Diagnose after each poll, on the uplinks, with the pinning
    rule's thresholds from the table: leaf-0's spine-0 uplink at ~52% beside its idle spine-1 uplink
    (and leaf-1's at ~8%) is pinned, the tbf drops on it a lossy link; a stricter max/mean finds no
    pinning in the same counters."""
    data = str(tmp_path / "orchestrator")
    orchestrator_config = config(
        "orchestrator",
        data,
        topology_address=services["topology"],
        telemetry_address=services["telemetry"],
        simulator_addresses="127.0.0.1:1",
    )
    write_lldp(tmp_path / "lldp", leaf_spine(2, 2, 2))
    start_counters(exporters)
    exporters.devices["leaf-0"]["swp3"]["qdrops"] = 0
    table = '\n[diagnosis]\nwindow_s = 3600\nports = ["group:uplinks"]\n'
    with (
        BackgroundServer(build_orchestrator, orchestrator_config) as orchestrator,
        Client(**services, orchestrator=orchestrator.address) as client,
    ):
        found = {}
        for name, extra in (("default", ""), ("strict", "max_over_mean = 3.5\n")):
            text = mirror_config(exporters, tmp_path / "lldp") + table + extra
            text = text.replace('source = "ls-live"', f'source = "ls-{name}"')
            mirror = FabricMirror(client, parse_mirror_config(text))
            try:
                mirror.start()
                uplinks = (("leaf-0", "swp3", 0.52), ("leaf-1", "swp3", 0.08), ("leaf-1", "swp4", 0.1))
                for node, device, share in uplinks:  # sending at that share of the link, from now on
                    exporters.devices[node][device]["tx_per_s"] = share * GBPS * 1e9 / 8
                mirror.poll()
                time.sleep(0.5)
                exporters.devices["leaf-0"]["swp3"]["qdrops"] += 1431
                found[name] = mirror.poll()
                for node, device, _ in uplinks:
                    del exporters.devices[node][device]["tx_per_s"]
            finally:
                mirror.close()
    default = found["default"]
    assert default.diagnosis_error == ""
    kinds = {finding.kind: finding for finding in default.findings or []}
    assert set(kinds) == {"ECMP_PINNING", "LOSSY_LINK"}, default.findings
    pinning = kinds["ECMP_PINNING"].evidence
    assert "hot: leaf-0/p3 (52%)" in pinning and "leaf-0/p4 (0%), leaf-1/p3 (8%)" in pinning, pinning
    assert kinds["LOSSY_LINK"].ports == ["leaf-0/p3"]
    assert "1431 discarded by its egress queue" in kinds["LOSSY_LINK"].evidence
    strict = {finding.kind for finding in found["strict"].findings or []}
    assert strict == {"LOSSY_LINK"}  # max/mean 52 / 17.5 = 3.0 < 3.5


def test_a_hanging_or_malformed_target_is_reported_and_backed_off_while_the_others_are_stored(
    client, exporters, mirror, tmp_path
):
    mirror.start()
    exporters.hang.add("spine-0")
    exporters.broken["spine-1"] = 'node_network_transmit_bytes_total{device="swp1" 12\n'
    started = time.monotonic()
    report = mirror.poll()
    assert time.monotonic() - started < 2.5  # one timeout (1 s), not one per target in turn
    assert report.failed["spine-0"] == "timed out after 1 s"
    assert report.failed["spine-1"].startswith("cannot parse: spine-1")
    assert ":1:" in report.failed["spine-1"]  # names the line
    assert report.scraped == 2 and report.stored == 8  # both leaves, four ports each
    again = mirror.poll()
    assert sorted(again.skipped) == ["spine-0", "spine-1"]  # backing off one interval
    assert again.scraped == 2


def test_a_target_answering_garbage_or_dying_mid_response_is_reported_while_the_others_are_stored(
    client, exporters, mirror
):
    mirror.start()
    exporters.misbehave = {"spine-0": "garbage", "spine-1": "cut"}
    report = mirror.poll()
    assert report.failed == {
        "spine-0": "bad HTTP response: BadStatusLine: 'SSH-2.0-OpenSSH_9.2p1\\r\\n'",
        "spine-1": "bad HTTP response: IncompleteRead(0 bytes read)",
    }
    assert report.scraped == 2 and report.stored == 8  # both leaves, four ports each
    again = mirror.poll()
    assert sorted(again.skipped) == ["spine-0", "spine-1"] and again.scraped == 2


def test_a_command_target_printing_without_end_is_stopped_at_max_scrape_bytes(client, exporters, tmp_path):
    write_lldp(tmp_path / "lldp", leaf_spine(2, 2, 2))
    start_counters(exporters)
    scrape, flood = tmp_path / "leaf-1.prom", tmp_path / "flood"
    scrape.write_text(exporters.text("leaf-1"))
    text = mirror_config(exporters, tmp_path / "lldp", max_scrape_bytes=1024 * 1024)
    text = text.replace("timeout_s = 1", "timeout_s = 30").replace(', "leaf-1"]', "]")
    command = f"if [ -e {flood} ]; then yes node_network_up; else cat {scrape}; fi"
    text += f'[[targets]]\nnode = "leaf-1"\ncommand = "{command}"\n'
    mirror = FabricMirror(client, parse_mirror_config(text))
    try:
        mirror.start()
        assert mirror.poll().scraped == 4
        flood.touch()  # `yes` prints GB/s: read whole, it would fill the memory before its timeout
        report = mirror.poll()
        assert report.failed == {"leaf-1": "more than 1048576 bytes of output"}
        assert report.scraped == 3 and report.stored == 8  # leaf-0's four ports, the spines' two each
    finally:
        mirror.close()


def test_the_same_counters_served_as_protobuf_and_as_text_are_stored_the_same(client, exporters, tmp_path):
    write_lldp(tmp_path / "lldp", leaf_spine(2, 2, 2))
    start_counters(exporters)
    for node, device in (("leaf-0", "swp3"), ("spine-1", "swp2")):
        exporters.devices[node][device] |= {"errs": 0, "downs": 0}
    exporters.protobuf = True
    protobuf = mirror_config(exporters, tmp_path / "lldp")
    text = protobuf.replace('"ls-live"', '"ls-text"').replace("/{node}/metrics", "/text/{node}/metrics")
    mirrors = [FabricMirror(client, parse_mirror_config(config)) for config in (protobuf, text)]
    try:
        for mirror in mirrors:
            mirror.start()
        for step in range(4):
            for devices in exporters.devices.values():
                for n, values in enumerate(devices.values()):
                    values["tx"] += step * 1_000_003 * (n + 1)
                    values["rx"] += 2**40 + step
                    if "errs" in values:
                        values["errs"] += step
                        values["downs"] += step % 2
            exporters.devices["leaf-0"]["swp4"]["up"] = int(step != 2)
            exporters.served.clear()
            by_protobuf, by_text = (mirror.poll() for mirror in mirrors)
            assert exporters.served == [PROTOBUF_CONTENT_TYPE] * 4 + ["text/plain; version=0.0.4"] * 4
            assert by_protobuf.failed == by_text.failed == {}
            assert (by_protobuf.ports, by_protobuf.stored) == (by_text.ports, by_text.stored) == (12, 12)
            if step == 2:  # the first mirror to see the port down sets the link; the other finds it so
                assert [c.link for c in by_protobuf.link_changes] == ["spine-1/p1<->leaf-0/p4"]
        for metric in ("tx_bytes", "rx_bytes", "rcv_errors", "link_downed"):
            stored = [
                {s.port: list(s.values) for s in client.telemetry.query_series(source, metric)}
                for source in ("ls-live", "ls-text")
            ]
            assert stored[0] == stored[1] and stored[0], metric
    finally:
        for mirror in mirrors:
            mirror.close()


def test_text_parsed_in_worker_processes_and_sent_in_waves_is_stored_as_one_poll_parsed_here(
    client, exporters, tmp_path, monkeypatch
):
    """A poll's text scrapes parsed by worker processes, and its targets sent in waves of one (a batch
    each on the one IngestSamples stream), store what one merge of the poll parsed here stores."""
    from fabrictwin import poll_waves

    monkeypatch.setattr(poll_waves, "PARALLEL_FROM", 1)  # workers for 4 targets, not 64
    write_lldp(tmp_path / "lldp", leaf_spine(2, 2, 2))
    start_counters(exporters)
    here = mirror_config(exporters, tmp_path / "lldp", parse_workers=1)
    there = here.replace("parse_workers = 1", "parse_workers = 3").replace('"ls-live"', '"ls-workers"')
    mirrors = [FabricMirror(client, parse_mirror_config(config)) for config in (here, there)]
    try:
        for mirror in mirrors:
            mirror.start()
        for step in range(4):
            for devices in exporters.devices.values():
                for values in devices.values():
                    values["tx"] += 1000 * step
            exporters.devices["leaf-1"]["swp1"]["up"] = int(step != 1)
            exporters.broken = {"spine-1": "not metrics\n"} if step == 2 else {}
            reports = []
            for mirror, wave in zip(mirrors, (poll_waves.WAVE, 1), strict=True):
                monkeypatch.setattr(poll_waves, "WAVE", wave)
                reports.append(mirror.poll())
            assert reports[0].failed == reports[1].failed
            assert (reports[0].scraped, reports[0].ports, reports[0].stored) == (
                reports[1].scraped,
                reports[1].ports,
                reports[1].stored,
            )
            if step == 2:
                assert reports[1].failed["spine-1"].startswith("cannot parse: spine-1")
        assert mirrors[0]._pool is None and mirrors[1]._pool is not None
        stored = [
            {s.port: list(s.values) for s in client.telemetry.query_series(source, "tx_bytes")}
            for source in ("ls-live", "ls-workers")
        ]
        assert stored[0] == stored[1] and len(stored[0]) == 12
    finally:
        for mirror in mirrors:
            mirror.close()


def test_new_cabling_becomes_a_new_fabric_version_with_its_own_source(client, mirror, config_text, tmp_path):
    mirror.start()
    assert mirror.refresh_cabling().changed is False
    # A second cable per leaf-spine pair: the leaves' uplinks move to swp3-swp6.
    write_lldp(tmp_path / "lldp", leaf_spine(2, 2, 2, parallel_links=2))
    report = mirror.refresh_cabling()
    assert report.changed and len(report.added) == 7 and len(report.removed) == 3
    assert "leaf-0:swp4 <-> spine-1:swp1" in report.removed
    assert "leaf-0:swp4 <-> spine-0:swp2" in report.added
    assert (report.fabric, report.source) == ("ls-v2", "ls-live-v2")
    assert client.fabrics.get("ls").link_count == 8  # the old version stays as it was
    assert client.fabrics.get("ls-v2").link_count == 12
    assert client.telemetry.get_source("ls-live-v2").fabric == "fabrics/ls-v2"
    assert mirror.poll().fabric == "ls-v2"
    # A restarted mirror goes on with the newest version.
    again = FabricMirror(client, parse_mirror_config(config_text))
    try:
        assert again.start() == ["mirroring fabrics/ls-v2"]
        assert again.source == "ls-live-v2"
    finally:
        again.close()


def test_the_cli_imports_a_directory_of_lldp_tables_and_prints_what_it_noticed(services, tmp_path, capsys):
    from fabrictwin.cli import main

    write_lldp(tmp_path / "lldp", leaf_spine(2, 2, 2))
    (tmp_path / "lldp" / "host-3.json").write_text('{"lldp": {}}')  # host-3 has not heard leaf-1 yet
    argv = [
        f"--topology={services['topology']}",
        "fabric",
        "import",
        str(tmp_path / "lldp"),
        "--format",
        "lldp",
        "--id",
        "ls",
        "--port-speed",
        "leaf-0/swp3=100",
        "--json",
    ]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["link_count"] == 8
    assert "note: one-sided link leaf-1:swp2 <-> host-3:eth0" in err
    assert main([*argv[:-1], "--format", "json"]) == 2  # --port-speed is for lldp only
    assert "--port-speed applies to --format lldp only" in capsys.readouterr().err
    (tmp_path / "lldp" / "leaf-0.json").write_text('{"lldp": {"interface": ')
    assert main([*argv[:6], "--id", "bad"]) == 1
    assert "documents['leaf-0.json']: line 1: not JSON" in capsys.readouterr().err


def test_a_neighbour_vanishing_from_lldp_sets_its_link_down_and_back_up_when_heard_again(
    client, exporters, mirror, tmp_path
):
    mirror.start()
    for node, peer in (("leaf-0", "spine-1"), ("spine-1", "leaf-0")):  # both ends stop hearing
        path = tmp_path / "lldp" / f"{node}.json"
        table = json.loads(path.read_text())
        entries = table["lldp"]["interface"]
        table["lldp"]["interface"] = [e for e in entries if peer not in next(iter(e.values()))["chassis"]]
        path.write_text(json.dumps(table))
    report = mirror.refresh_cabling()
    assert not report.changed and report.removed == ["leaf-0:swp4 <-> spine-1:swp1"]
    assert [(c.link, c.state, c.reason) for c in report.link_changes] == [
        ("spine-1/p1<->leaf-0/p4", "DOWN", "LLDP neighbour vanished")
    ]
    write_lldp(tmp_path / "lldp", leaf_spine(2, 2, 2))
    back = mirror.refresh_cabling()
    assert [(c.link, c.state) for c in back.link_changes] == [("spine-1/p1<->leaf-0/p4", "UP")]


def test_the_cli_mirrors_until_sigterm_printing_json_lines(services, exporters, tmp_path):
    write_lldp(tmp_path / "lldp", leaf_spine(2, 2, 2))
    start_counters(exporters)
    path = tmp_path / "mirror.toml"
    path.write_text(mirror_config(exporters, tmp_path / "lldp"))
    command = [
        sys.executable,
        "-m",
        "fabrictwin.cli",
        f"--topology={services['topology']}",
        f"--telemetry={services['telemetry']}",
        "mirror",
        "--config",
        str(path),
        "--json",
    ]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and sum(1 for x in lines if x["kind"] == "poll") < 3:
            line = process.stdout.readline()
            if not line:
                break
            lines.append(json.loads(line))
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err
    assert lines[0] == {
        "kind": "start",
        "message": "imported fabrics/ls from LLDP: 4 switches, 4 hosts, 8 links",
    }
    polls = [line for line in lines if line["kind"] == "poll"]
    assert [p["poll"] for p in polls[:3]] == [1, 2, 3] and all(p["stored"] == 12 for p in polls)
    assert "mirror: SIGTERM, stopping after this step" in err and "Traceback" not in err


def test_mirror_config_mistakes_name_the_key(tmp_path):
    from fabrictwin.errors import InvalidArgumentError

    base = 'fabric = "f"\nsource = "s"\n'
    cases = {
        base + 'intervall_s = 1\n[[targets]]\nnode = "a"\nurl = "http://a"\n': "intervall_s: unknown key",
        base + '[[targets]]\nnode = "a"\n': "targets[0]: give a url or a command",
        base + '[[targets]]\nnodes = ["a", "b"]\nurl = "http://x/metrics"\n': "use {node} in it",
        base + '[[targets]]\nnode = "a"\nurl = "ftp://a"\n': "targets[0].url: must start with http",
        base + "interval_s = -1\n[lldp]\ndirectory = '/x'\n": "interval_s: must be > 0",
        base + '[lldp]\ncommand = "ssh x"\nnodes = ["a"]\n': "lldp.command: must contain {node}",
        'fabric = "f"\n[lldp]\ndirectory = "/x"\n': "source: name the telemetry source",
        "fabric = \n": "not TOML",
        base + "[lldp]\ndirectory = '/x'\n[health]\nber_threshold = 1.5\n": "health.ber_threshold: must",
        base + "[lldp]\ndirectory = '/x'\n[health]\nwindow_s = 0\n": "health.window_s: must be > 0",
        base + "[lldp]\ndirectory = '/x'\n[health]\nwindow = 5\n": "health.window: unknown key",
        base
        + "[lldp]\ndirectory = '/x'\n[diagnosis]\nhot_above = 80\n": "diagnosis.hot_above: a utilisation",
        base + "[lldp]\ndirectory = '/x'\n[diagnosis]\nmax_over_mean = 0.5\n": "max_over_mean: at least 1",
        base + "[lldp]\ndirectory = '/x'\n[diagnosis]\nports = []\n": "diagnosis.ports: must be a list",
        base + "[lldp]\ndirectory = '/x'\n[diagnosis]\nthreshold = 1\n": "diagnosis.threshold: unknown key",
    }
    for text, expected in cases.items():
        with pytest.raises(InvalidArgumentError) as caught:
            parse_mirror_config(text)
        assert expected in str(caught.value), text
