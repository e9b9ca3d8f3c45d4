"""Mirror and LLDP benchmarks.

- `mirror.poll`: one poll of 1,000 scrape targets, end to end: the 980 switches of a k=28 fat-tree
  (28 ports each) and 20 of its hosts, each a node_exporter netdev page (`bench/fake_exporters.py`,
  one local server process for all of them), scraped at once, parsed, and ingested into a real
  telemetry service (its own process, SQLite) bound to the fabric, which a real topology service
  imported from the fabric's LLDP tables. The exporters answer in the protobuf exposition, as
  node_exporter does when asked. The first two polls are reported apart (the first decodes every
  family, the second makes the plans and templates that read the later ones); then the median of
  5 polls, with its phases (they overlap: scrape until the last answer, parse from then until the
  last scrape is parsed, ingest from then until the service's reply).
- `mirror.poll.text`: the same with exporters that serve the text format only (prometheus_client's
  parser instead of protobuf's).
- `topology.import.lldp`: the LLDP neighbour tables of a 2,048-node leaf-spine (64 spines, 64
  leaves, 30 hosts each: 1,920 hosts, 6,016 links) turned into a fabric, median of 5.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

from fabrictwin import Client
from fabrictwin.fabric_mirror import FabricMirror
from fabrictwin.mirror_config import parse_mirror_config

from bench.registry import benchmark
from services.stack import free_port
from services.topology.formats.lldp import import_lldp, neighbour_documents
from services.topology.generators import fat_tree, leaf_spine

_RUNS = 5
_TARGETS = 1_000


@contextlib.contextmanager
def _services(data_dir: str) -> Iterator[Client]:
    """Topology and telemetry, each its own process on SQLite, and a client of both."""
    ports = {"topology": free_port(), "telemetry": free_port()}
    env = {**os.environ, "FABRICTWIN_DATA_DIR": data_dir, "FABRICTWIN_LOG_FORMAT": "json",
           "FABRICTWIN_MAINTENANCE_INTERVAL_SECONDS": "0",
           "FABRICTWIN_TOPOLOGY_ADDRESS": f"127.0.0.1:{ports['topology']}"}  # fmt: skip
    servers = [
        subprocess.Popen(
            [sys.executable, "-m", f"services.{name}", "--port", str(port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for name, port in ports.items()
    ]
    try:
        topology, telemetry = f"127.0.0.1:{ports['topology']}", f"127.0.0.1:{ports['telemetry']}"
        with Client(topology=topology, telemetry=telemetry, timeout=600) as client:
            deadline = time.monotonic() + 60
            while set(client.health(list(ports)).values()) != {"SERVING"}:
                if time.monotonic() > deadline:
                    raise TimeoutError("the services did not start")
                time.sleep(0.1)
            yield client
    finally:
        for server in servers:
            server.terminate()
        for server in servers:
            server.wait(30)


@contextlib.contextmanager
def _exporters(docs: pathlib.Path, text_only: bool = False) -> Iterator[str]:
    command = [sys.executable, "-m", "bench.fake_exporters", str(docs), *(["--text"] if text_only else [])]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline())  # type: ignore[union-attr]
        yield f"http://127.0.0.1:{port}"
    finally:
        server.kill()
        server.wait(10)


@benchmark("mirror.poll")
def mirror_poll() -> dict:
    return _mirror_poll(text_only=False)


@benchmark("mirror.poll.text")
def mirror_poll_text() -> dict:
    return _mirror_poll(text_only=True)


def _mirror_poll(text_only: bool) -> dict:
    fabric = fat_tree(28)
    documents = neighbour_documents(fabric)
    switches = [
        name for name, kind in zip(fabric.node_names, fabric.node_kind.tolist(), strict=True) if kind == 2
    ]
    hosts = [
        name for name, kind in zip(fabric.node_names, fabric.node_kind.tolist(), strict=True) if kind == 1
    ]
    targets = switches + hosts[: _TARGETS - len(switches)]
    with tempfile.TemporaryDirectory() as tmp:
        docs = pathlib.Path(tmp, "lldp")
        docs.mkdir()
        for name, text in documents:
            (docs / name).write_text(text)
        with _services(str(pathlib.Path(tmp, "data"))) as client, _exporters(docs, text_only) as url:
            config = parse_mirror_config(
                f'fabric = "ft28"\nsource = "ft28-live"\ninterval_s = 10\ntimeout_s = 10\n'
                f'[lldp]\ndirectory = "{docs}"\ninterval_s = 3600\n'
                f'[[targets]]\nnodes = {targets!r}\nurl = "{url}/{{node}}/metrics"\n'.replace("'", '"')
            )
            mirror = FabricMirror(client, config)
            try:
                started = time.perf_counter()
                mirror.start()
                start_s = time.perf_counter() - started
                first = mirror.poll()  # first readings: nothing to compare them with yet
                second = mirror.poll()  # where the targets' families are read again: their plans made
                reports = [mirror.poll() for _ in range(_RUNS)]
            finally:
                mirror.close()
    median = sorted(reports, key=lambda r: r.seconds)[len(reports) // 2]
    return {
        "format": "text" if text_only else "protobuf",
        "targets": len(targets),
        "seconds": round(median.seconds, 3),
        "seconds_min": round(min(r.seconds for r in reports), 3),
        "scrape_s": round(median.scrape_seconds, 3),
        "parse_s": round(median.parse_seconds, 3),
        "ingest_s": round(median.ingest_seconds, 3),
        "samples": median.stored,
        "failed": len(median.failed),
        "skipped": len(median.skipped),
        "ports": median.ports,
        "start_s": round(start_s, 3),
        "first_poll_s": round(first.seconds, 3),
        "second_poll_s": round(second.seconds, 3),
        "runs": _RUNS,
    }


@benchmark("topology.import.lldp")
def import_lldp_2048() -> dict:
    fabric = leaf_spine(64, 64, 30)
    documents = neighbour_documents(fabric)
    timings = []
    for _ in range(_RUNS):
        start = time.perf_counter()
        imported = import_lldp(documents)
        timings.append(time.perf_counter() - start)
    return {
        "seconds": round(statistics.median(timings), 4),
        "seconds_min": round(min(timings), 4),
        "runs": _RUNS,
        "documents": len(documents),
        "nodes": imported.num_nodes,
        "links": imported.num_links,
    }
