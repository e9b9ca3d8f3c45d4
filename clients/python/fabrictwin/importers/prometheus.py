"""Port counters from the Prometheus text exposition: node_exporter (InfiniBand, Ethernet) and snmp_exporter.

The text is parsed by prometheus_client's parser (`text_string_to_metric_families`); families
not listed below are ignored. Every mapped counter is cumulative and sent as the exporter reports
it, with kind `cumulative_64` (64-bit, a drop is a reset) unless said otherwise; the telemetry
service turns readings into per-interval amounts. Values are exact integers as written; a value
written as a float (`3.6e+13`) is exact up to 2^53 (8 PiB of traffic). The whole text is parsed:
a malformed line, in any family, is a FormatError naming its line.

node_exporter, infiniband collector (labels `device` and `port`; data counters already in bytes):

    node_infiniband_port_data_transmitted_bytes_total   tx_bytes
    node_infiniband_port_data_received_bytes_total      rx_bytes
    node_infiniband_port_packets_transmitted_total      tx_packets
    node_infiniband_port_packets_received_total         rx_packets
    node_infiniband_port_transmit_wait_total            xmit_wait
    node_infiniband_port_discards_transmitted_total     xmit_discards
    node_infiniband_port_discards_received_total        drops
    node_infiniband_port_errors_received_total          rcv_errors
    node_infiniband_symbol_error_total                  symbol_errors
    node_infiniband_link_downed_total                   link_downed
    node_infiniband_legacy_{data_transmitted_bytes,data_received_bytes,packets_transmitted,
        packets_received}_total: the same four, only for a port that lacks the current name
    node_infiniband_rate_bytes_per_second               link rate (x 8 bits/s)

node_exporter, netdev and netclass collectors (label `device`: a Linux interface, lo and eth0 too):

    node_network_transmit_bytes_total         tx_bytes
    node_network_receive_bytes_total          rx_bytes
    node_network_transmit_packets_total       tx_packets
    node_network_receive_packets_total        rx_packets
    node_network_receive_drop_total           drops        (ethtool rx_discards_phy wins, see below)
    node_network_transmit_drop_total          xmit_discards
    node_network_receive_errs_total           rcv_errors   (ethtool rx_crc_errors_phy wins)
    node_network_carrier_changes_total        carrier_changes
    node_network_carrier_down_changes_total   link_downed
    node_network_speed_bytes                  link rate (x 8 bits/s; negative = unknown, skipped)
    node_network_info{operstate=...}          operational state
    node_network_up                           operational state, only where node_network_info is absent

  `node_network_transmit_errs_total` is not mapped: it counts the host driver's transmit failures
  (aborted, FIFO, carrier, window errors), none of which is a twin metric.

node_exporter, ethtool collector (label `device`; mlx5 statistics, PFC priority `pfc_priority`, 3 by
convention the RoCE lossless one). node_exporter exposes statistic `s` untyped as `node_ethtool_`
+ `s` with the tokens rx/tx spelled received/transmitted (`rx_prio3_pause` is
`node_ethtool_received_prio3_pause`); the raw `node_ethtool_rx_prio3_pause`, and either with
`_total`, are read too:

    rx_prio3_pause               pause_rx
    tx_prio3_pause               pause_tx
    rx_prio3_pause_duration      pause_duration_ns  (mlx5 counts microseconds: x 1000)
    rx_discards_phy              drops
    rx_symbol_err_phy            symbol_errors
    rx_crc_errors_phy            rcv_errors
    np_cnp_sent                  cnp_sent
    rp_cnp_handled               cnp_handled
    np_ecn_marked_roce_packets   ecn_marked
    out_of_sequence              out_of_sequence
    packet_seq_err               packet_seq_errors

  On mlx5 the last five are RDMA hw_counters (/sys/class/infiniband/<dev>/ports/<n>/hw_counters),
  which `ethtool -S` does not list: they are read when a textfile script exposes them under these
  names, with the interface (or the RDMA device, mapped by `port_names`) as `device`.
  Where a device reports both, the physical-port counters rx_discards_phy and rx_crc_errors_phy
  win over netdev's receive_drop and receive_errs: they count what the port dropped and the
  frames that failed FCS on the wire, the twin's drops and errors, while netdev's add host-side
  drops and other receive errors.

snmp_exporter, if_mib module (the device is label `ifName`, else `ifDescr`, else `ifIndex`):

    ifHCInOctets       rx_bytes       ifInErrors      rcv_errors     (Counter32: cumulative_32)
    ifHCOutOctets      tx_bytes       ifOutDiscards   xmit_discards  (Counter32: cumulative_32)
    ifHCInUcastPkts    rx_packets     ifInDiscards    drops          (Counter32: cumulative_32)
    ifHCOutUcastPkts   tx_packets     ifHighSpeed     link rate (Mb/s x 1e6; 0 = unknown)
    ifOperStatus       operational state: 1 up, 2 down, 3 testing, 4 unknown, 5 dormant,
                       6 notPresent, 7 lowerLayerDown; also as a state set or `ifOperStatus_info`
                       with the state in label `ifOperStatus`

Operational state (`PortReading.oper_up`): "up" is True; "down", "lowerLayerDown" and "notPresent"
are False; "unknown", "dormant" and "testing" are None (not reported). node_network_up is 1 exactly
when operstate is "up", so it cannot tell "down" from "unknown" (node_exporter reports the
loopback's operstate as unknown): it decides only for a device without node_network_info. A port
that reports a state but no counters is still a reading, with no values, so a mirror sees it go
down; `columns_of` leaves such readings out of the columns.

Port names: InfiniBand ports by `port_name`, a template over {node}, {device} and {port}
(`{device}/p{port}`, or `{node}/{device}/p{port}` when `node` is given); the other families by
`device_port_name`, over {node} and {device} (`{device}`, or `{node}/{device}`). `port_names`, if
given, maps the name a port gets by default without a node (`swp3`, `mlx5_0/p1`) to its name in the
twin (`leaf0/p3`), and ports it does not map are skipped. A sample's optional timestamp (ms since the
epoch) is its time; samples without one take the `time_ns` given to `parse` (the scrape time).
"""

from __future__ import annotations

import enum
import functools
import math
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Final

from fabrictwin.errors import InvalidArgumentError
from fabrictwin.importers import FormatError, PortReading
from fabrictwin.importers.prometheus_families import (
    IF_MIB_NAME_LABELS,
    IF_MIB_OPER_STATUS,
    KIND,
    LEGACY_METRICS,
    METRICS,
    OPER_STATUS,
    RATE_METRIC,
    Rule,
    oper_up,
    rules,
)

if TYPE_CHECKING:  # prometheus_client itself is imported on first use (_text_parser)
    from prometheus_client.metrics_core import Metric
    from prometheus_client.samples import Sample

__all__ = ["KIND", "LEGACY_METRICS", "METRICS", "QUOTE_LIMIT", "RATE_METRIC", "parse"]

QUOTE_LIMIT = 200  # characters of the input an error message quotes at most
_LIBRARY_ERRORS = (ValueError, IndexError, TypeError)  # what prometheus_client raises on bad text

Number = int | float


@functools.cache
def _text_parser() -> Callable[[str], Iterable[Metric]]:
    # Imported on first use: prometheus_client's package import (~40 ms) pulls in its HTTP exposition
    # code, which the CLI should not pay for on every command that never reads a scrape.
    from prometheus_client.parser import text_string_to_metric_families

    return text_string_to_metric_families


def _quote(text: str) -> str:
    """`text` as a Python literal, cut to QUOTE_LIMIT characters."""
    if len(text) <= QUOTE_LIMIT:
        return repr(text)
    return f"{text[:QUOTE_LIMIT]!r}... ({len(text)} characters)"


class _SampleError(Exception):
    """A sample that parsed but cannot be read; `parse` finds its line for the FormatError."""

    def __init__(self, sample: Sample, problem: str) -> None:
        super().__init__(problem)
        self.sample = sample
        self.problem = problem


def _problem(exc: Exception) -> str:
    """What prometheus_client found wrong, in words that quote no input (the caller quotes the line)."""
    message = str(exc)
    if message.startswith(("Invalid labels", "invalid line, duplicate label")):
        return "malformed labels"
    if message.startswith("Invalid metric type"):
        return "unknown metric type"
    return "malformed line"


def _families(text: str, where: str) -> list[Metric]:
    """The metric families of `text`; a syntax error is a FormatError naming its line."""
    parser = _text_parser()
    try:
        return list(parser(text))
    except _LIBRARY_ERRORS as exc:
        problem = _problem(exc)
    # The error path only: prometheus_client does not say where, so find the first line that fails
    # on its own (the parser's errors all come from one line; the parser splits at "\n").
    for number, line in enumerate(text.split("\n"), start=1):
        try:
            for _ in parser(line):
                pass
        except _LIBRARY_ERRORS as exc:
            raise FormatError(f"{where}:{number}: {_problem(exc)}: {_quote(line.strip())}") from None
    raise FormatError(f"{where}: {problem}")


def _same(a: Number | None, b: Number | None) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def _line_of(text: str, sample: Sample) -> tuple[int, str]:
    """The number and text of the first line that holds `sample` (0 and "" if none does)."""
    parser, base = _text_parser(), sample.name.removesuffix("_total")
    for number, line in enumerate(text.split("\n"), start=1):
        stripped = line.strip()
        if not stripped.startswith(base):
            continue
        try:
            found = [s for family in parser(stripped) for s in family.samples]
        except _LIBRARY_ERRORS:
            continue
        for other in found:
            if (
                other.name.removesuffix("_total") == base
                and other.labels == sample.labels
                and _same(other.value, sample.value)
                and other.timestamp == sample.timestamp
            ):
                return number, stripped
    return 0, ""


def _counter(value: Number, sample: Sample) -> Number:
    """A counter reading: an int where the value is integral; negative or not finite is refused."""
    if isinstance(value, float):
        if not math.isfinite(value) or value < 0:
            raise _SampleError(sample, f"counter value {value} is not a finite number >= 0")
        return int(value) if value.is_integer() else value
    if value < 0:
        raise _SampleError(sample, f"counter value {value} is not a finite number >= 0")
    return value


class _Names:
    """Port names by family and labels, cached per device (a scrape names each device many times)."""

    def __init__(
        self, node: str, port_name: str, device_port_name: str, port_names: Mapping[str, str] | None
    ) -> None:
        self.node = node
        self.ib_template = port_name or ("{node}/{device}/p{port}" if node else "{device}/p{port}")
        self.template = device_port_name or ("{node}/{device}" if node else "{device}")
        self.mapping = port_names
        self.cache: dict[tuple[bool, str, str], str | None] = {}

    def _device(self, rule: Rule, sample: Sample) -> tuple[str, str]:
        labels = sample.labels
        if rule.family == "infiniband":
            if "device" not in labels or "port" not in labels:
                raise _SampleError(sample, f"{sample.name} needs the labels device and port")
            return labels["device"], labels["port"]
        if rule.family == "if_mib":
            for label in IF_MIB_NAME_LABELS:
                if labels.get(label):
                    return labels[label], ""
            raise _SampleError(
                sample, f"{sample.name} needs one of the labels {', '.join(IF_MIB_NAME_LABELS)}"
            )
        if "device" not in labels:
            raise _SampleError(sample, f"{sample.name} needs the label device")
        return labels["device"], ""

    def port(self, rule: Rule, sample: Sample) -> str | None:
        """The twin's name of the sample's port; None if `port_names` does not map it."""
        device, port = self._device(rule, sample)
        infiniband = rule.family == "infiniband"
        key = (infiniband, device, port)
        if key in self.cache:
            return self.cache[key]
        if self.mapping is not None:
            name = self.mapping.get(f"{device}/p{port}" if infiniband else device)
        else:
            template = self.ib_template if infiniband else self.template
            values = {"node": self.node, "device": device, **({"port": port} if infiniband else {})}
            try:
                name = template.format(**values)
            except (KeyError, IndexError, ValueError) as exc:
                option = "port_name" if infiniband else "device_port_name"
                takes = "{node}, {device} and {port}" if infiniband else "{node} and {device}"
                raise InvalidArgumentError(
                    f"{option}: template {_quote(template)} does not format ({exc!r}): it takes {takes}"
                ) from None
        self.cache[key] = name
        return name


def parse(
    text: str,
    time_ns: int,
    *,
    where: str = "<metrics>",
    node: str = "",
    port_name: str = "",
    device_port_name: str = "",
    port_names: Mapping[str, str] | None = None,
    pfc_priority: int = 3,
) -> list[PortReading]:
    """Port readings of a node_exporter or snmp_exporter scrape, in time then port order.

    A malformed line, or a mapped sample that cannot be read (a negative counter, a missing label),
    is a FormatError naming the line: `<where>:<line>: <problem>`. Naming and families: see the
    module's documentation.

    >>> line = 'node_infiniband_port_transmit_wait_total{device="mlx5_0",port="1"} 42\\n'
    >>> reading, = parse(line, 5, node="gpu-7")
    >>> reading.port, reading.values
    ('gpu-7/mlx5_0/p1', {'xmit_wait': (42, 'cumulative_64')})
    >>> scrape = '''# TYPE node_network_receive_bytes_total counter
    ... node_network_receive_bytes_total{device="swp3"} 1.5e+09
    ... node_network_info{device="swp3",operstate="down"} 1
    ... node_network_speed_bytes{device="swp3"} 5e+10
    ... '''
    >>> reading, = parse(scrape, 5, port_names={"swp3": "leaf0/p3"})
    >>> reading.port, reading.values, reading.rate_bps, reading.oper_up
    ('leaf0/p3', {'rx_bytes': (1500000000, 'cumulative_64')}, 400000000000.0, False)
    """
    if not isinstance(pfc_priority, int) or not 0 <= pfc_priority <= 7:
        raise InvalidArgumentError(f"pfc_priority: a PFC priority is 0..7, got {pfc_priority!r}")
    table = rules(pfc_priority)
    families = _families(text, where)
    try:
        return _readings(families, table, time_ns, _Names(node, port_name, device_port_name, port_names))
    except _SampleError as exc:
        number, line = _line_of(text, exc.sample)
        at = f"{where}:{number}" if number else where
        raise FormatError(f"{at}: {exc.problem}" + (f": {_quote(line)}" if line else "")) from None


def _readings(
    families: Iterable[Metric], table: Mapping[str, Rule], time_ns: int, names: _Names
) -> list[PortReading]:
    # (port, time) -> metric -> (precedence, value, kind); a later sample of equal precedence wins
    # (a series repeated in one text is a later reading of the same counter).
    counters: dict[tuple[str, int], dict[str, tuple[int, Number, str]]] = {}
    rates: dict[str, float] = {}
    states: dict[str, tuple[int, int, bool | None]] = {}  # port -> (precedence, time, up)
    for family in families:
        for sample in family.samples:
            name = sample.name
            rule = table.get(name[:-6] if name.endswith("_total") else name)
            if rule is None:
                continue
            port = names.port(rule, sample)
            if port is None:
                continue  # not in port_names
            # The text format's timestamps are floats (OpenMetrics' Timestamp objects convert to one).
            stamp = sample.timestamp
            time = time_ns if stamp is None else round(float(stamp) * 1000) * 1_000_000
            value = sample.value
            if rule.role == "counter":
                reading = _counter(value, sample)
                if rule.scale != 1:
                    reading *= rule.scale
                metrics = counters.setdefault((port, time), {})
                held = metrics.get(rule.metric)
                if held is None or held[0] <= rule.precedence:
                    metrics[rule.metric] = (rule.precedence, reading, rule.kind)
            elif rule.role == "rate":
                if rule.family == "infiniband":  # as before: a bad rate is refused
                    rates[port] = float(_counter(value, sample)) * rule.scale
                elif math.isfinite(value) and value > 0:  # netdev: negative is unknown; if_mib: 0 is
                    rates[port] = float(value) * rule.scale
            else:
                state = _state(rule, sample)
                if state is not _NO_STATE:
                    held_state = states.get(port)
                    if held_state is None or held_state[0] <= rule.precedence:
                        states[port] = (rule.precedence, time, state)
    readings = [
        PortReading(
            port,
            time,
            {metric: (value, kind) for metric, (_, value, kind) in values.items()},
            rates.get(port, 0.0),
            states[port][2] if port in states else None,
        )
        for (port, time), values in counters.items()
    ]
    counted = {port for port, _ in counters}
    readings += [
        PortReading(port, time, {}, rates.get(port, 0.0), up)
        for port, (_, time, up) in states.items()
        if port not in counted
    ]
    readings.sort(key=lambda r: (r.time_ns, r.port))
    return readings


class _NoState(enum.Enum):
    """What a sample that says nothing about the state reads as (a state set's inactive member)."""

    NO_STATE = enum.auto()


_NO_STATE: Final = _NoState.NO_STATE


def _state(rule: Rule, sample: Sample) -> bool | _NoState | None:
    if rule.role == "up":
        return sample.value == 1
    if rule.role == "operstate":
        return oper_up(sample.labels.get("operstate", "unknown"))
    # IF-MIB ifOperStatus: a number, or a state set / info metric with the state as a label.
    if IF_MIB_OPER_STATUS in sample.labels:
        return oper_up(sample.labels[IF_MIB_OPER_STATUS]) if sample.value == 1 else _NO_STATE
    value = sample.value
    if not (isinstance(value, int) or (math.isfinite(value) and value.is_integer())):
        return None
    return oper_up(OPER_STATUS.get(int(value), "unknown"))
