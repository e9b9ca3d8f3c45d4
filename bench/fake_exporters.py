"""Many node_exporters in one process, for `mirror.poll`: `python -m bench.fake_exporters DOCS_DIR [--text]`.

Serves `/NODE/metrics` for every `NODE.json` LLDP document in DOCS_DIR: the node_exporter netdev
families (with HELP and TYPE lines, `lo` included, as the netdev collector prints them) for each of
the node's interfaces, every counter a little higher at each scrape. As node_exporter does, it
answers in the protobuf exposition (delimited io.prometheus.client.MetricFamily messages, the same
families and values) when the request's Accept asks for it, else in the text format; with `--text`
it serves text only (an exporter that knows no protobuf). Prints its port, then serves until
killed. The lines and messages are built once; a scrape only writes the counters in (in protobuf a
counter is a fixed 8-byte double, so every message keeps its length). Connections are kept open
between requests as node_exporter (Go's net/http) keeps them, unless a request says
`Connection: close`.
"""

from __future__ import annotations

import asyncio
import json
import pathlib
import struct
import sys

from fabrictwin.prometheus.metrics_pb2 import GAUGE, MetricFamily

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


PROTOBUF = "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited"
# Values no counter takes: where they land in the serialized messages, a scrape writes its counters.
_SENTINELS = (1.0000000000000002e-300, 2.0000000000000004e-300, 3.0000000000000006e-300)


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def protobuf_template(interfaces: list[str]) -> list[bytes | int]:
    """The same families as `template`, as delimited MetricFamily messages: byte strings, and k for
    where counter k goes (8 bytes, a little-endian double)."""
    devices = ["lo", *interfaces]
    families = []
    for family in FAMILIES:
        message = MetricFamily(
            name=f"node_network_{family}_total", help=f"Network device statistic {family}."
        )
        for i, d in enumerate(devices):
            metric = message.metric.add(counter={"value": _SENTINELS[i % 3]})
            metric.label.add(name="device", value=d)
        families.append(message)
    speed = MetricFamily(
        name="node_network_speed_bytes", help="Network device property: speed_bytes", type=GAUGE
    )
    for d in interfaces:
        speed.metric.add(gauge={"value": 5e10}).label.add(name="device", value=d)
    info = MetricFamily(
        name="node_network_info", help="Non-numeric data from /sys/class/net/<iface>", type=GAUGE
    )
    for d in interfaces:
        metric = info.metric.add(gauge={"value": 1})
        labels = {"address": "02:00:00:00:00:01", "broadcast": "ff:ff:ff:ff:ff:ff", "device": d,
                  "duplex": "full", "ifalias": "", "operstate": "up"}  # fmt: skip
        for key, value in labels.items():
            metric.label.add(name=key, value=value)
    stream = b"".join(_varint(m.ByteSize()) + m.SerializeToString() for m in [*families, speed, info])
    spots = []  # (offset, k) of every counter
    for k, sentinel in enumerate(_SENTINELS):
        packed = struct.pack("<d", sentinel)
        at = stream.find(packed)
        while at >= 0:
            spots.append((at, k))
            at = stream.find(packed, at + 8)
    parts: list[bytes | int] = []
    start = 0
    for at, k in sorted(spots):
        parts += [stream[start:at], k]
        start = at + 8
    parts.append(stream[start:])
    return parts


def render_protobuf(parts: list[bytes | int], counters: tuple[int, int, int]) -> bytes:
    values = [struct.pack("<d", value) for value in counters]
    return b"".join(values[part] if isinstance(part, int) else part for part in parts)


def main(directory: str, text_only: bool = False) -> None:
    texts = {}
    messages = {}
    for path in sorted(pathlib.Path(directory).glob("*.json")):
        table = json.loads(path.read_text())["lldp"].get("interface", [])
        items = [next(iter(entry)) for entry in table] if isinstance(table, list) else list(table)
        texts[path.stem] = template(items)
        if not text_only:
            messages[path.stem] = protobuf_template(items)
    scrapes = {"count": 0}

    def answer(request: bytes, close: bool) -> bytes:
        line, _, headers = request.partition(b"\r\n")
        parts = line.split(b" ")
        node = parts[1].decode(errors="replace").strip("/").split("/")[0] if len(parts) > 1 else ""
        text = texts.get(node)
        ending = b"Connection: close\r\n\r\n" if close else b"\r\n"
        if text is None:
            return b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n" + ending
        scrapes["count"] += 1
        n = scrapes["count"]
        counters = (n * 1_000_000, n * 1_000, n)
        if node in messages and b"application/vnd.google.protobuf" in headers:  # as the Accept asks
            body, content_type = render_protobuf(messages[node], counters), PROTOBUF
        else:
            body, content_type = render(text, counters), "text/plain; version=0.0.4"
        head = f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
        return head.encode() + ending + body

    class Exporter(asyncio.Protocol):
        """One connection: its GETs answered in turn, kept open as Go's net/http server keeps it
        (node_exporter's): closed after an answer only when the request asked (`Connection: close`,
        or HTTP/1.0), or by the client."""

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            assert isinstance(transport, asyncio.Transport)
            self.transport = transport
            self.request = b""

        def data_received(self, data: bytes) -> None:
            self.request += data
            while (end := self.request.find(b"\r\n\r\n")) >= 0:
                request, self.request = self.request[: end + 4], self.request[end + 4 :]
                close = b"\r\nconnection: close\r\n" in request.lower() or b" HTTP/1.0\r\n" in request
                self.transport.write(answer(request, close))
                if close:
                    self.transport.close()
                    return

    async def serve() -> None:
        # An asyncio server, not http.server's thread per connection: the exporters' own cost stays
        # small next to the mirror's on the one machine (real exporters run on their own machines).
        loop = asyncio.get_running_loop()
        server = await loop.create_server(Exporter, "127.0.0.1", 0, backlog=1024)
        print(server.sockets[0].getsockname()[1], flush=True)
        await server.serve_forever()

    asyncio.run(serve())


if __name__ == "__main__":
    main(sys.argv[1], text_only="--text" in sys.argv[2:])
