"""Many node_exporters in one process, for `mirror.poll`: `python -m bench.fake_exporters DOCS_DIR`.

Serves `/NODE/metrics` for every `NODE.json` LLDP document in DOCS_DIR: the node_exporter netdev
families (with HELP and TYPE lines, `lo` included, as the netdev collector prints them) for each of
the node's interfaces, every counter a little higher at each scrape. Prints its port, then serves
until killed. The lines are built once; a scrape only writes the counters in.
"""

from __future__ import annotations

import http.server
import json
import pathlib
import sys

FAMILIES = (
    "transmit_bytes",
    "receive_bytes",
    "transmit_packets",
    "receive_packets",
    "receive_drop",
    "transmit_drop",
    "receive_errs",
    "transmit_errs",
    "carrier_changes",
    "carrier_down_changes",
)


def template(interfaces: list[str]) -> list[tuple[str, int]]:
    """The scrape of a node with these interfaces: (line, k) pairs; k >= 0 lines end in counter k."""
    devices = ["lo", *interfaces]
    lines: list[tuple[str, int]] = []
    for family in FAMILIES:
        name = f"node_network_{family}_total"
        lines += [(f"# HELP {name} Network device statistic {family}.", -1), (f"# TYPE {name} counter", -1)]
        lines += [(f'{name}{{device="{d}"}} ', i % 3) for i, d in enumerate(devices)]
    lines += [("# HELP node_network_speed_bytes Network device property: speed_bytes", -1),
              ("# TYPE node_network_speed_bytes gauge", -1)]  # fmt: skip
    lines += [(f'node_network_speed_bytes{{device="{d}"}} 5e+10', -1) for d in interfaces]
    lines += [("# HELP node_network_info Non-numeric data from /sys/class/net/<iface>", -1),
              ("# TYPE node_network_info gauge", -1)]  # fmt: skip
    lines += [(f'node_network_info{{address="02:00:00:00:00:01",broadcast="ff:ff:ff:ff:ff:ff",device="{d}",'
               f'duplex="full",ifalias="",operstate="up"}} 1', -1) for d in interfaces]  # fmt: skip
    return lines


def render(lines: list[tuple[str, int]], counters: tuple[int, int, int]) -> bytes:
    return ("\n".join(line if k < 0 else f"{line}{counters[k]}" for line, k in lines) + "\n").encode()


def main(directory: str) -> None:
    texts = {}
    for path in sorted(pathlib.Path(directory).glob("*.json")):
        table = json.loads(path.read_text())["lldp"].get("interface", [])
        items = [next(iter(entry)) for entry in table] if isinstance(table, list) else list(table)
        texts[path.stem] = template(items)
    scrapes = {"count": 0}

    class Metrics(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            node = self.path.strip("/").split("/")[0]
            text = texts.get(node)
            if text is None:
                self.send_error(404)
                return
            scrapes["count"] += 1
            n = scrapes["count"]
            body = render(text, (n * 1_000_000, n * 1_000, n))
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    class Server(http.server.ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 1024  # the default backlog of 5 drops the mirror's concurrent SYNs

    server = Server(("127.0.0.1", 0), Metrics)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1])
