"""The Prometheus text exposition of node_exporter's InfiniBand collector.

node_exporter reads the port counters from sysfs and exposes them as counters labelled with the HCA
`device` and its `port`:

    node_infiniband_port_data_transmitted_bytes_total{device="mlx5_0",port="1"} 3.6298026860928e+13

They are cumulative and 64-bit, and the data counters are already in bytes (sysfs counts 4-octet
units; node_exporter multiplies), so every mapped metric is sent with kind `cumulative_64`. The
`legacy_*` variants (counters_ext in sysfs) are used only for a port that lacks the current name.
The port's link rate (`node_infiniband_rate_bytes_per_second`, times 8) travels with the readings,
so the service can turn transmitted bytes into utilisation. Other metrics and comment lines are
skipped. A sample's optional timestamp (ms since the epoch) is its time; samples without one take
the `time_ns` given to `parse` (the scrape time). Values are floats in the exposition: they are
exact integers up to 2^53 (8 PiB of traffic).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from fabrictwin.importers import FormatError, PortReading

__all__ = ["METRICS", "parse"]

KIND = "cumulative_64"
METRICS = {
    "node_infiniband_port_data_transmitted_bytes_total": "tx_bytes",
    "node_infiniband_port_data_received_bytes_total": "rx_bytes",
    "node_infiniband_port_packets_transmitted_total": "tx_packets",
    "node_infiniband_port_packets_received_total": "rx_packets",
    "node_infiniband_port_transmit_wait_total": "xmit_wait",
    "node_infiniband_port_discards_transmitted_total": "xmit_discards",
    "node_infiniband_port_discards_received_total": "drops",
    "node_infiniband_port_errors_received_total": "rcv_errors",
    "node_infiniband_symbol_error_total": "symbol_errors",
    "node_infiniband_link_downed_total": "link_downed",
}
RATE_METRIC = (
    "node_infiniband_rate_bytes_per_second"  # the port's link rate: lets the service derive utilisation
)
LEGACY_METRICS = {
    "node_infiniband_legacy_data_transmitted_bytes_total": "tx_bytes",
    "node_infiniband_legacy_data_received_bytes_total": "rx_bytes",
    "node_infiniband_legacy_packets_transmitted_total": "tx_packets",
    "node_infiniband_legacy_packets_received_total": "rx_packets",
}

_SAMPLE = re.compile(
    r"(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+(?P<timestamp>-?\d+))?\s*$"
)
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,|$)')
_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def _labels(text: str, where: str) -> dict[str, str]:
    labels, position = {}, 0
    while position < len(text):
        match = _LABEL.match(text, position)
        if match is None:
            raise FormatError(f"{where}: malformed labels {{{text}}}")
        labels[match[1]] = re.sub(r"\\[\\\"n]", lambda m: _ESCAPES[m[0]], match[2])
        position = match.end()
    return labels


def _value(text: str, where: str) -> int | float:
    try:
        value = float(text)
    except ValueError:
        raise FormatError(f"{where}: value {text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise FormatError(f"{where}: counter value {text} is not a finite number >= 0")
    return int(value) if value.is_integer() else value


def parse(
    text: str,
    time_ns: int,
    *,
    where: str = "<metrics>",
    node: str = "",
    port_name: str = "",
) -> list[PortReading]:
    """Port readings of a node_exporter scrape; FormatError names the line of a malformed sample.

    Ports are named by `port_name`, a template over {node}, {device} and {port}; by default
    `{device}/p{port}`, or `{node}/{device}/p{port}` when `node` is given.

    >>> line = 'node_infiniband_port_transmit_wait_total{device="mlx5_0",port="1"} 42\\n'
    >>> reading, = parse(line, 5, node="gpu-7")
    >>> reading.port, reading.values
    ('gpu-7/mlx5_0/p1', {'xmit_wait': (42, 'cumulative_64')})
    """
    template = port_name or ("{node}/{device}/p{port}" if node else "{device}/p{port}")
    current: dict[tuple[str, int], dict[str, tuple[int | float, str]]] = {}
    legacy: dict[tuple[str, int], dict[str, tuple[int | float, str]]] = {}
    rates: dict[str, float] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        sample = _SAMPLE.match(stripped)
        name = sample["name"] if sample is not None else stripped.split("{", 1)[0].split()[0]
        if name not in METRICS and name not in LEGACY_METRICS and name != RATE_METRIC:
            continue  # every other family of the scrape
        at = f"{where}:{number}"
        if sample is None:
            raise FormatError(f"{at}: malformed sample line")
        labels = _labels(sample["labels"] or "", at)
        if "device" not in labels or "port" not in labels:
            raise FormatError(f"{at}: {name} needs the labels device and port")
        time = int(sample["timestamp"]) * 1_000_000 if sample["timestamp"] else time_ns
        port = template.format(node=node, device=labels["device"], port=labels["port"])
        if name == RATE_METRIC:
            rates[port] = float(_value(sample["value"], at)) * 8
            continue
        table, metric = (current, METRICS[name]) if name in METRICS else (legacy, LEGACY_METRICS[name])
        # A series repeated in one text is a later reading of the same counter: the last one wins.
        table.setdefault((port, time), {})[metric] = (_value(sample["value"], at), KIND)
    readings = []
    for key in sorted(current.keys() | legacy.keys(), key=lambda k: (k[1], k[0])):
        values: Mapping[str, tuple[int | float, str]] = {**legacy.get(key, {}), **current.get(key, {})}
        readings.append(PortReading(key[0], key[1], dict(values), rates.get(key[0], 0.0)))
    return readings
