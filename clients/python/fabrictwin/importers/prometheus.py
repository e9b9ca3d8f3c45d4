"""Port counters from the Prometheus exposition: node_exporter (InfiniBand, Ethernet) and snmp_exporter.

Both formats an exporter serves are read, with the same result: the text format (`parse`, with
prometheus_client's parser, `text_string_to_metric_families`) and the protobuf format (`parse_protobuf`:
varint-delimited `io.prometheus.client.MetricFamily` messages, what node_exporter and the client
libraries answer to `Accept: application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;
encoding=delimited`, read by protobuf's compiled runtime); `parse_scrape` picks by the Content-Type.
Families not listed below are ignored (in protobuf, without being decoded). Every mapped counter
is cumulative and sent as the exporter reports it, with kind `cumulative_64` (64-bit, a drop is a
reset) unless said otherwise; the telemetry service turns readings into per-interval amounts. Values
are exact integers as written; a value written as a float (`3.6e+13`) is exact up to 2^53 (8 PiB of
traffic). The whole text is parsed: a malformed line, in any family, is a FormatError naming its line.

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
    node_qdisc_drops_total                    xmit_discards (wins: see below; qdisc collector)
    node_network_receive_errs_total           rcv_errors   (ethtool rx_crc_errors_phy wins)
    node_network_carrier_changes_total        carrier_changes
    node_network_carrier_down_changes_total   link_downed
    node_network_speed_bytes                  link rate (x 8 bits/s; negative = unknown, skipped)
    node_network_info{operstate=...}          operational state
    node_network_up                           operational state, only where node_network_info is absent

  The qdisc collector (off by default: `--collector.qdisc`) reports each device's root qdisc
  (label `kind`: tbf, fq_codel, mq, ...); its drops are what the queue or shaper dropped on
  transmit, which the driver's transmit_drop does not count, so they win where a device has both.
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

Protobuf: a family's type says which value its metrics carry (counter, gauge, untyped; summaries and
histograms hold nothing mapped and are skipped), and values are doubles as the exporter holds them
(text written as an integer is exact beyond 2^53; node_exporter's values are doubles either way).
A stream that does not decode, or a mapped metric without its value, is a FormatError naming the
message (`where: message 3 at byte 1234: ...`) or the family and labels of the metric.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import math
import operator
import struct
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, NamedTuple, Protocol

from fabrictwin.errors import InvalidArgumentError
from fabrictwin.importers import (
    FormatError,
    PortReading,
    SampleColumns,
    ScrapeColumns,
    columns_of,
    scrape_columns,
)
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

if TYPE_CHECKING:  # prometheus_client and the protobuf schema are imported on first use
    from prometheus_client.metrics_core import Metric

    from fabrictwin.prometheus.metrics_pb2 import MetricFamily

__all__ = [
    "KIND",
    "LEGACY_METRICS",
    "METRICS",
    "PROTOBUF_CONTENT_TYPE",
    "QUOTE_LIMIT",
    "RATE_METRIC",
    "ProtobufPlans",
    "is_protobuf",
    "parse",
    "parse_protobuf",
    "parse_scrape",
    "parse_scrape_columns",
]

# What a protobuf scrape's Content-Type says (its parameters in any order and spacing).
PROTOBUF_CONTENT_TYPE = (
    "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited"
)
_PROTOBUF_MEDIA_TYPE = "application/vnd.google.protobuf"
_PROTOBUF_PARAMETERS = {"proto": "io.prometheus.client.MetricFamily", "encoding": "delimited"}

QUOTE_LIMIT = 200  # characters of the input an error message quotes at most
_LIBRARY_ERRORS = (ValueError, IndexError, TypeError)  # what prometheus_client raises on bad text

Number = int | float


class Sample(Protocol):
    """What is read of a sample: prometheus_client's Sample (text) or a `_Sample` (protobuf)."""

    @property
    def name(self) -> str: ...
    @property
    def labels(self) -> dict[str, str]: ...
    @property
    def value(self) -> float: ...
    @property
    def timestamp(self) -> Any: ...  # seconds since the epoch (a float, or OpenMetrics' Timestamp)


class _Sample(NamedTuple):
    """A metric of a protobuf family, as a sample: its family's name, labels, value and time (s)."""

    name: str
    labels: dict[str, str]
    value: float
    timestamp: float | None


# What the reader reads of a mapped sample, from either format: (rule, name, labels, value, time in
# seconds or None). Plain tuples: a scrape has a few hundred of them and a poll a few hundred thousand.
_Row = tuple[Rule, str, Mapping[str, str], Number, Any]
_UNSET: Final = object()


def _sample_of(row: _Row) -> Sample:
    """The row as a sample (for an error's message)."""
    return _Sample(row[1], dict(row[2]), row[3], row[4])


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


def _counter(value: Number, row: _Row) -> Number:
    """A counter reading: an int where the value is integral; negative or not finite is refused."""
    if isinstance(value, float):
        if not math.isfinite(value) or value < 0:
            raise _SampleError(_sample_of(row), f"counter value {value} is not a finite number >= 0")
        return int(value) if value.is_integer() else value
    if value < 0:
        raise _SampleError(_sample_of(row), f"counter value {value} is not a finite number >= 0")
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

    def port(self, rule: Rule, labels: Mapping[str, str], row: _Row) -> str | None:
        """The twin's name of the row's port; None if `port_names` does not map it."""
        family = rule.family
        if family == "infiniband":
            if "device" not in labels or "port" not in labels:
                raise _SampleError(_sample_of(row), f"{row[1]} needs the labels device and port")
            device, port = labels["device"], labels["port"]
        elif family == "if_mib":
            for label in IF_MIB_NAME_LABELS:
                if labels.get(label):
                    device, port = labels[label], ""
                    break
            else:
                raise _SampleError(
                    _sample_of(row), f"{row[1]} needs one of the labels {', '.join(IF_MIB_NAME_LABELS)}"
                )
        else:
            found = labels.get("device")
            if found is None:
                raise _SampleError(_sample_of(row), f"{row[1]} needs the label device")
            device, port = found, ""
        infiniband = family == "infiniband"
        key = (infiniband, device, port)
        cached = self.cache.get(key, _UNSET)
        if cached is not _UNSET:
            return cached  # type: ignore[return-value]
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
    table = _rules(pfc_priority)
    families = _families(text, where)
    try:
        return _readings(
            _mapped(families, table), time_ns, _Names(node, port_name, device_port_name, port_names)
        )
    except _SampleError as exc:
        number, line = _line_of(text, exc.sample)
        at = f"{where}:{number}" if number else where
        raise FormatError(f"{at}: {exc.problem}" + (f": {_quote(line)}" if line else "")) from None


def _rules(pfc_priority: int) -> dict[str, Rule]:
    if not isinstance(pfc_priority, int) or not 0 <= pfc_priority <= 7:
        raise InvalidArgumentError(f"pfc_priority: a PFC priority is 0..7, got {pfc_priority!r}")
    return rules(pfc_priority)


def _mapped(families: Iterable[Metric], table: Mapping[str, Rule]) -> Iterator[_Row]:
    """The text's samples that a rule maps, as rows."""
    for family in families:
        for sample in family.samples:
            name = sample.name
            rule = table.get(name[:-6] if name.endswith("_total") else name)
            if rule is not None:
                yield rule, name, sample.labels, sample.value, sample.timestamp


def is_protobuf(content_type: str, where: str = "<metrics>") -> bool:
    """Whether a scrape's Content-Type is the delimited protobuf exposition (else it is read as text).

    A protobuf Content-Type of another message or encoding is a FormatError: it is no text either.

    >>> is_protobuf("application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; "
    ...             "encoding=delimited"), is_protobuf("text/plain; version=0.0.4; charset=utf-8")
    (True, False)
    """
    found = _media_type(content_type)
    if found is None:
        raise FormatError(f"{where}: Content-Type {_quote(content_type)} is not {PROTOBUF_CONTENT_TYPE}")
    return found


@functools.lru_cache(maxsize=256)
def _media_type(content_type: str) -> bool | None:
    """True: the delimited protobuf exposition; False: another type (text); None: protobuf of another
    message or encoding. (A poll reads the same few Content-Types a thousand times.)"""
    media_type, *parameters = content_type.split(";")
    if media_type.strip().lower() != _PROTOBUF_MEDIA_TYPE:
        return False
    found = {}
    for parameter in parameters:
        key, _, value = parameter.partition("=")
        found[key.strip().lower()] = value.strip().strip('"')
    return None if any(found.get(key) != value for key, value in _PROTOBUF_PARAMETERS.items()) else True


def parse_scrape(
    body: bytes,
    content_type: str,
    time_ns: int,
    *,
    where: str = "<metrics>",
    node: str = "",
    port_name: str = "",
    device_port_name: str = "",
    port_names: Mapping[str, str] | None = None,
    pfc_priority: int = 3,
    plans: ProtobufPlans | None = None,
) -> list[PortReading]:
    """Port readings of a scrape as served: the protobuf format if `content_type` says so, else text
    (UTF-8, invalid bytes replaced). The options are `parse`'s; `plans` `parse_protobuf`'s."""
    options: dict[str, Any] = {"where": where, "node": node, "port_name": port_name,
                               "device_port_name": device_port_name, "port_names": port_names,
                               "pfc_priority": pfc_priority}  # fmt: skip
    if is_protobuf(content_type, where):
        return parse_protobuf(body, time_ns, plans=plans, **options)
    return parse(body.decode("utf-8", errors="replace"), time_ns, **options)


def parse_scrape_columns(
    body: bytes,
    content_type: str,
    time_ns: int,
    *,
    where: str = "<metrics>",
    node: str = "",
    port_name: str = "",
    device_port_name: str = "",
    port_names: Mapping[str, str] | None = None,
    pfc_priority: int = 3,
    plans: ProtobufPlans | None = None,
    rate_bps: float = 0.0,
    template_only: bool = False,
) -> ScrapeColumns | None:
    """`parse_scrape`'s readings as a mirror keeps them (`scrape_columns`), every port's link rate
    `rate_bps` where given (else as reported).

    With `plans` (`where` naming the target), a protobuf scrape whose mapped families are laid out as
    in the target's last scrape is read from its values alone, with no Python step per sample; the
    columns are the same as parsing it would give (`_Template`). `template_only`: that read or None
    (a caller that must not spend a parse's time where it is, such as an event loop's thread)."""
    if plans is not None and is_protobuf(content_type, where):
        table = _rules(pfc_priority)
        config = (
            node,
            port_name,
            device_port_name,
            None if port_names is None else dict(port_names),
            pfc_priority,
        )
        template = plans.template(where)
        if template is not None and template.config == config:
            found = template.read(body, table, time_ns, rate_bps)
            if found is not None:
                return found
        if template_only:
            return None
        names = _Names(node, port_name, device_port_name, port_names)
        readings = _protobuf_readings(body, time_ns, table, names, where, plans, config)
    elif template_only:
        return None
    else:
        readings = parse_scrape(
            body, content_type, time_ns, where=where, node=node, port_name=port_name,
            device_port_name=device_port_name, port_names=port_names, pfc_priority=pfc_priority, plans=plans,
        )  # fmt: skip
    if rate_bps:
        readings = [dataclasses.replace(reading, rate_bps=rate_bps) for reading in readings]
    return scrape_columns(readings)


@functools.cache
def _metric_family() -> type[MetricFamily]:
    # Imported on first use, as prometheus_client is: most commands never read a scrape.
    from fabrictwin.prometheus.metrics_pb2 import MetricFamily

    return MetricFamily


_VALUE_FIELD = {0: "counter", 1: "gauge", 3: "untyped"}  # MetricType -> the Metric field with the value
_NAME_TAG = 0x0A  # MetricFamily.name: field 1, length-delimited


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """The varint at `at` and the position after it; ValueError if it is cut short or too long."""
    value = shift = 0
    while True:
        if at >= len(data):
            raise ValueError("cut short")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7
        if shift >= 64:
            raise ValueError("longer than 10 bytes")


def _leading_name(data: bytes, start: int, end: int) -> bytes | None:
    """The family name of the message in data[start:end] when it is the message's first field (as
    every exporter writes it), so that an unmapped family is skipped undecoded; else None."""
    if start >= end or data[start] != _NAME_TAG:
        return None
    try:
        length, at = _varint(data, start + 1)
    except ValueError:
        return None
    return data[at : at + length] if at + length <= end else None


def _protobuf_messages(
    data: bytes, table: Mapping[str, Rule], where: str
) -> Iterator[tuple[int, int, bytes, str | None]]:
    """The delimited stream's messages that a rule may map: (number, offset, bytes, family name if it
    comes first). The others are skipped undecoded."""
    at, number = 0, 0
    while at < len(data):
        start, number = at, number + 1
        try:
            length, at = _varint(data, at)
        except ValueError as exc:
            raise FormatError(f"{where}: message {number} at byte {start}: its length is {exc}") from None
        end = at + length
        if end > len(data):
            raise FormatError(
                f"{where}: message {number} at byte {start}: {length} bytes long, {len(data) - at} left"
            )
        leading = _leading_name(data, at, end)
        name = None if leading is None else leading.decode("utf-8", errors="replace")
        if name is None or table.get(name[:-6] if name.endswith("_total") else name) is not None:
            yield number, start, data[at:end], name
        at = end


def _decoded(message: bytes, number: int, start: int, where: str) -> MetricFamily:
    from google.protobuf.message import DecodeError

    family = _metric_family()()
    try:
        family.ParseFromString(message)
    except DecodeError as exc:
        raise FormatError(f"{where}: message {number} at byte {start}: not a MetricFamily: {exc}") from None
    return family


def _family_samples(family: MetricFamily, table: Mapping[str, Rule]) -> list[_Row]:
    """The family's metrics as rows, in order, if a rule maps it (else none)."""
    name = family.name
    rule = table.get(name[:-6] if name.endswith("_total") else name)
    field = _VALUE_FIELD.get(family.type)
    if rule is None or field is None:
        return []  # not mapped; or a summary or histogram (their samples are no rule's)
    samples: list[_Row] = []
    for metric in family.metric:
        labels = {pair.name: pair.value for pair in metric.label}
        if not metric.HasField(field):  # type: ignore[arg-type]
            raise _SampleError(_Sample(name, labels, math.nan, None), f"a {field} metric without its value")
        value = getattr(metric, field).value
        stamp = metric.timestamp_ms / 1000 if metric.HasField("timestamp_ms") else None
        samples.append((rule, name, labels, value, stamp))
    return samples


def _protobuf_samples(
    data: bytes,
    table: Mapping[str, Rule],
    where: str,
    plans: ProtobufPlans | None,
    used: list[_Plan | None] | None = None,
) -> Iterator[_Row]:
    """The stream's mapped rows; `used` gets, per message read, the plan that reads it now (None:
    none can, yet)."""
    for number, start, message, name in _protobuf_messages(data, table, where):
        key = (where, name or "")
        plan = plans.get(key) if plans is not None and name is not None else None
        if isinstance(plan, _Plan):
            rows = plan.rows(message)
            if rows is not None:
                if used is not None:
                    used.append(plan)
                yield from rows
                continue
        family = _decoded(message, number, start, where)
        samples = _family_samples(family, table)
        made: _Plan | _Seen | None = None
        if plans is not None and name is not None and samples:
            # A plan is made when a family is seen again after a scrape that had none for it, so a
            # family whose layout changes at every scrape costs a plan every other scrape at most.
            made = _Plan.of(message, family.type, samples, plans) if plan is _SEEN else _SEEN
            plans.put(key, made)
        if used is not None:
            used.append(made if isinstance(made, _Plan) else None)
        yield from samples


# --- Plans: a family read again by its layout ------------------------------------------------------
# An exporter's families keep their layout from one scrape to the next: the same metrics, labels and
# order; only the values change, and a value is a fixed 8-byte double in its Gauge, Counter or
# Untyped message. A plan is a family message's bytes with its values cut out, and the samples it
# gave: when a later message is the same bytes around its values, its samples are the plan's with
# those values, read by one struct.unpack instead of decoding the message.

_VALUE_FIELD_NUMBER = {"counter": 3, "gauge": 2, "untyped": 5}  # Metric's fields
_METRIC_FIELD_NUMBER = 4  # MetricFamily.metric
_DOUBLE_VALUE_TAG = 0x09  # field 1, fixed64: Gauge.value, Counter.value, Untyped.value


def _skip(data: bytes, at: int, wire: int) -> int:
    """The position after a field's value of wire type `wire` at `at` (ValueError: not one to skip)."""
    if wire == 0:
        return _varint(data, at)[1]
    if wire == 1:
        return at + 8
    if wire == 2:
        length, at = _varint(data, at)
        return at + length
    if wire == 5:
        return at + 4
    raise ValueError(f"wire type {wire}")


def _fields(data: bytes, at: int, end: int) -> Iterator[tuple[int, int, int]]:
    """(field number, wire type, position of the value) of each field in data[at:end]."""
    while at < end:
        tag, at = _varint(data, at)
        yield tag >> 3, tag & 7, at
        at = _skip(data, at, tag & 7)
    if at != end:
        raise ValueError("a field runs past its message")


def _value_offsets(message: bytes, value_field: int) -> list[int]:
    """Where each metric's value lies in a family message, metric by metric (ValueError where the
    layout is not the plain one: a value field or value given twice, which a parser would merge)."""
    offsets = []
    metric_tag, value_tag = _METRIC_FIELD_NUMBER << 3 | 2, value_field << 3 | 2
    at, end = 0, len(message)
    while at < end:
        tag, at = _varint(message, at)
        if tag != metric_tag:
            at = _skip(message, at, tag & 7)
            continue
        length, at = _varint(message, at)
        metric_end = at + length
        found = []
        while at < metric_end:
            tag = message[at]  # tags and lengths under 128 take one byte: the usual case, read inline
            at += 1
            if tag & 0x80:
                tag, at = _varint(message, at - 1)
            if tag != value_tag:
                if tag & 7 == 2 and message[at] < 0x80:
                    at += 1 + message[at]
                else:
                    at = _skip(message, at, tag & 7)
                continue
            size, at = _varint(message, at)
            if size == 9 and message[at] == _DOUBLE_VALUE_TAG:  # the value alone: how exporters write it
                found.append(at + 1)
            else:
                values = [
                    (wire, where) for field, wire, where in _fields(message, at, at + size) if field == 1
                ]
                if len(values) != 1 or values[0][0] != 1:
                    raise ValueError("not one plain value")
                found.append(values[0][1])
            at += size
        if len(found) != 1 or at != metric_end:
            raise ValueError("not one plain value")
        offsets.append(found[0])
    if at != end:
        raise ValueError("a field runs past its message")
    return offsets


class _Seen(enum.Enum):
    """A family read once without a plan: the next time it is read, a plan is made."""

    SEEN = enum.auto()


_SEEN: Final = _Seen.SEEN


@functools.lru_cache(maxsize=4096)
def _layout(gaps: tuple[int, ...], tail: int) -> struct.Struct:
    """The struct that splits a message into the bytes between its values and its values (shared:
    the families of targets with the same interfaces have the same layout)."""
    return struct.Struct("<" + "".join(f"{gap}sd" for gap in gaps) + f"{tail}s")


@dataclasses.dataclass(frozen=True)
class _Plan:
    """A family message's bytes around its values, and its rows but the values."""

    layout: struct.Struct
    skeleton: bytes  # the message without its values
    rule: Rule
    name: str
    labels: tuple[Mapping[str, str], ...]  # per metric
    stamps: tuple[Any, ...] | None  # per metric, if any has a time

    @classmethod
    def of(cls, message: bytes, kind: int, rows: list[_Row], plans: ProtobufPlans) -> _Plan | None:
        """The plan of a decoded message, or None if its values cannot be found where they must be."""
        try:
            offsets = _value_offsets(message, _VALUE_FIELD_NUMBER[_VALUE_FIELD[kind]])
        except (ValueError, IndexError, KeyError):
            return None
        if len(offsets) != len(rows):
            return None
        gaps, previous = [], 0
        for offset, row in zip(offsets, rows, strict=True):
            if offset < previous or message[offset : offset + 8] != struct.pack("<d", row[3]):
                return None  # what the parser read is not where the plan would read it
            gaps.append(offset - previous)
            previous = offset + 8
        layout = _layout(tuple(gaps), len(message) - previous)
        skeleton = b"".join(layout.unpack(message)[0::2])
        stamps = tuple(row[4] for row in rows)
        labels = tuple(plans.interned(row[2]) for row in rows)
        return cls(layout, skeleton, rows[0][0], rows[0][1], labels, stamps if any(stamps) else None)

    def values(self, message: bytes) -> tuple[float, ...] | None:
        """The values of a message laid out as this plan's, in metric order, else None."""
        if len(message) != self.layout.size:
            return None
        parts = self.layout.unpack(message)
        if b"".join(parts[0::2]) != self.skeleton:
            return None
        return parts[1::2]

    def rows(self, message: bytes) -> list[_Row] | None:
        """The rows of a message laid out as this plan's, else None."""
        values = self.values(message)
        if values is None:
            return None
        rule, name = self.rule, self.name
        stamps = self.stamps or (None,) * len(values)
        return [(rule, name, *row) for row in zip(self.labels, values, stamps, strict=True)]


class ProtobufPlans:
    """The plans of the family messages last read, per target (`where`) and family, for `parse_protobuf`
    to read a scrape whose families kept their layout without decoding them; at most `limit`, the
    oldest forgotten first (1,000 targets of 11 families: ~20 MB). Safe to share between threads.

    A plan is used only when the new message is byte for byte the old one around its values, so a
    scrape reads the same with or without plans; one that changed in any other way (a label, a metric
    more or less, a timestamp) is decoded, and its plan replaced.
    """

    def __init__(self, limit: int = 100_000) -> None:
        self.limit = limit
        self._plans: dict[tuple[str, str], _Plan | _Seen] = {}
        self._labels: dict[tuple[tuple[str, str], ...], Mapping[str, str]] = {}  # one copy of each
        self._templates: dict[str, _Template] = {}  # per target
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """The plans held (families only seen once are not counted)."""
        return sum(1 for plan in list(self._plans.values()) if plan is not _SEEN)

    def get(self, key: tuple[str, str]) -> _Plan | _Seen | None:
        return self._plans.get(key)

    def put(self, key: tuple[str, str], plan: _Plan | _Seen | None) -> None:
        """Remember the plan of a target's family (or that it was seen; None: one cannot be made)."""
        with self._lock:
            self._plans.pop(key, None)
            if plan is None:  # seen, but no plan can be made: from scratch (a plan is tried again later)
                return
            while len(self._plans) >= self.limit:
                del self._plans[next(iter(self._plans))]
            self._plans[key] = plan

    def template(self, where: str) -> _Template | None:
        """The target's template (`_Template`), if its last scrape made one."""
        return self._templates.get(where)

    def put_template(self, where: str, template: _Template | None) -> None:
        with self._lock:
            self._templates.pop(where, None)
            if template is not None:
                while len(self._templates) >= self.limit:
                    del self._templates[next(iter(self._templates))]
                self._templates[where] = template

    def interned(self, labels: Mapping[str, str]) -> Mapping[str, str]:
        """One shared copy of equal label sets (every switch has a `device="swp1"`); never changed."""
        key = tuple(labels.items())
        held = self._labels.get(key)
        if held is None:
            with self._lock:
                if len(self._labels) >= 4 * self.limit:
                    self._labels.clear()  # plans still hold theirs
                held = self._labels.setdefault(key, labels)
        return held


def _described(sample: Sample) -> str:
    """A protobuf metric as the text format would write it (for error messages)."""
    labels = ",".join(f'{key}="{value}"' for key, value in sample.labels.items())
    return f"{sample.name}{{{labels}}}" if labels else sample.name


def parse_protobuf(
    data: bytes,
    time_ns: int,
    *,
    where: str = "<metrics>",
    node: str = "",
    port_name: str = "",
    device_port_name: str = "",
    port_names: Mapping[str, str] | None = None,
    pfc_priority: int = 3,
    plans: ProtobufPlans | None = None,
) -> list[PortReading]:
    """Port readings of a scrape in the delimited protobuf format; the same as `parse` of the same
    scrape in the text format (naming, families and options: see the module's documentation).

    With `plans` (kept from one scrape of a target to the next, `where` naming the target), the
    families laid out as in the last scrape are read without decoding them (`ProtobufPlans`).

    >>> from fabrictwin.prometheus.metrics_pb2 import MetricFamily
    >>> family = MetricFamily(name="node_network_receive_bytes_total", type=0)
    >>> metric = family.metric.add(counter={"value": 1.5e9})
    >>> _ = metric.label.add(name="device", value="swp3")
    >>> body = family.SerializeToString()
    >>> reading, = parse_protobuf(bytes([len(body)]) + body, 5, port_names={"swp3": "leaf0/p3"})
    >>> reading.port, reading.values
    ('leaf0/p3', {'rx_bytes': (1500000000, 'cumulative_64')})
    """
    names = _Names(node, port_name, device_port_name, port_names)
    return _protobuf_readings(data, time_ns, _rules(pfc_priority), names, where, plans)


def _protobuf_readings(
    data: bytes,
    time_ns: int,
    table: Mapping[str, Rule],
    names: _Names,
    where: str,
    plans: ProtobufPlans | None,
    config: tuple[Any, ...] | None = None,
) -> list[PortReading]:
    """`parse_protobuf`; with `config` (the options it was parsed with), the target's `_Template` is
    made, or forgotten, from this scrape."""
    used: list[_Plan | None] | None = [] if plans is not None and config is not None else None
    try:
        rows = list(_protobuf_samples(data, table, where, plans, used))
        routes = _Routes(rows, time_ns, names)
        readings = routes.readings(rows, time_ns)
    except _SampleError as exc:
        raise FormatError(f"{where}: {exc.problem}: {_quote(_described(exc.sample))}") from None
    if plans is not None and used is not None:
        ready = bool(used) and None not in used and not routes.stamped
        ready = ready and sum(len(plan.labels) for plan in used if plan is not None) == len(rows)
        plans.put_template(where, _Template(tuple(used), routes, config) if ready else None)  # type: ignore[arg-type]
    return readings


def _getter(indices: Sequence[int]) -> Callable[[Sequence[Any]], tuple[Any, ...]]:
    """What picks these indices of a sequence, as a tuple (operator.itemgetter, for any count)."""
    if len(indices) > 1:
        return operator.itemgetter(*indices)
    return lambda values: tuple(values[i] for i in indices)


class _Template:
    """A target's protobuf scrape routed once (`_Routes`) and read again. While every mapped family
    message is laid out as its plan, the same plans in the same order, the plans' values are the rows'
    values, and the scrape's columns are those values put where the routes put the last scrape's:
    the same `ScrapeColumns` as parsing it, without a Python step per sample. A scrape whose counters
    are not all whole numbers >= 0, or whose InfiniBand rate is refused, is parsed instead (for the
    same readings, or the same error). Made only where no row has a time of its own."""

    def __init__(self, plans: tuple[_Plan, ...], routes: _Routes, config: tuple[Any, ...]) -> None:
        self.plans = plans
        self.config = config
        self.counters = _getter(routes.counter_rows)
        self.rates, self.states = routes.rates, routes.states
        self.rate_values = _getter([index for _, index, _ in routes.rates])
        self.state_values = _getter([index for _, index, _ in routes.states])
        # The last rates and states read, by their rows' values (a port's speed and state seldom change).
        self.last_rates: tuple[tuple[Any, ...], dict[str, float]] | None = None
        self.last_states: tuple[tuple[Any, ...], dict[str, bool], list[str]] | None = None
        self.counted = {port for port, _ in routes.counters}
        self.mapped: dict[bytes, bool] = {}  # a family's name -> whether a rule maps it
        # columns_of's columns, made of the winning rows' indices instead of their values: per chunk,
        # one pick of all its values, then each metric's slice of them and their scales (None: all 1).
        indices = {key: {metric: (index, kind) for metric, (_, index, kind, _) in metrics.items()}
                   for key, metrics in routes.counters.items()}  # fmt: skip
        scales = {
            index: scale for metrics in routes.counters.values() for _, index, _, scale in metrics.values()
        }
        self.chunks: list[tuple[SampleColumns, Callable[[Sequence[Any]], tuple[Any, ...]], list[_Slice]]] = []
        for chunk in columns_of(_port_readings(indices, {}, {})):
            picked: list[int] = []
            slices = []
            for metric, column in chunk.columns.items():
                rows = [int(i) for i in column]
                every_one = all(scales[i] == 1 for i in rows)
                slices.append(
                    (
                        metric,
                        len(picked),
                        len(picked) + len(rows),
                        None if every_one else [scales[i] for i in rows],
                    )
                )
                picked += rows
            self.chunks.append((chunk, _getter(picked), slices))

    def _values(self, data: bytes, table: Mapping[str, Rule]) -> list[float] | None:
        """The values of the mapped family messages, in order, if each is laid out as its plan (and
        the stream as `_protobuf_messages` would walk it), else None."""
        values: list[float] = []
        plans, mapped = self.plans, self.mapped
        count, at, size = 0, 0, len(data)
        while at < size:
            length = data[at]
            if length < 0x80:
                at += 1
            elif at + 1 < size and data[at + 1] < 0x80:  # most families: 128 bytes to 16 KiB
                length, at = length & 0x7F | data[at + 1] << 7, at + 2
            else:
                try:
                    length, at = _varint(data, at)
                except ValueError:
                    return None
            end, named = at + length, at + 2
            if end > size or length < 2 or data[at] != _NAME_TAG or data[at + 1] >= 0x80:
                return None  # cut short, or a name not first or long: as parsing reads it
            name = data[named : named + data[at + 1]]
            if named + len(name) > end or len(name) != data[at + 1]:
                return None
            known = mapped.get(name)
            if known is None:
                text = name.decode("utf-8", errors="replace")
                known = mapped[name] = table.get(text[:-6] if text.endswith("_total") else text) is not None
            if known:
                found = plans[count].values(data[at:end]) if count < len(plans) else None
                if found is None:
                    return None
                values += found
                count += 1
            at = end
        return values if count == len(plans) else None

    def read(
        self, data: bytes, table: Mapping[str, Rule], time_ns: int, rate_bps: float
    ) -> ScrapeColumns | None:
        """The scrape's columns, or None where it must be parsed (laid out otherwise, or values a
        parse would read otherwise)."""
        values = self._values(data, table)
        if values is None:
            return None
        counters = self.counters(values)
        if counters and not (
            math.isfinite(sum(counters)) and min(counters) >= 0.0 and all(map(float.is_integer, counters))
        ):
            return None
        # (read into locals once: another thread may read this target's template at the same time)
        key, last_rates = self.rate_values(values), self.last_rates
        if last_rates is None or last_rates[0] != key:
            try:
                last_rates = self.last_rates = (key, _port_rates(self.rates, values))
            except _SampleError:
                return None
        rates = last_rates[1]
        key, last_states = self.state_values(values), self.last_states
        if last_states is None or last_states[0] != key:
            found = _port_states(self.states, values, time_ns)
            ups = {port: up for port, (_, up) in found.items() if up is not None}
            last_states = self.last_states = (key, ups, sorted(self.counted.union(found)))
        _, ups, ports = last_states
        chunks = []
        for chunk, picker, slices in self.chunks:
            named = list(chunk.ports)
            out = SampleColumns(
                named, list(chunk.port_index), [time_ns] * chunk.rows, {}, dict(chunk.counter_kinds)
            )
            readings: list[Number] = list(map(int, picker(values)))
            for metric, first, last, scales in slices:
                column = readings[first:last]
                out.columns[metric] = (
                    column if scales is None else [v * s for v, s in zip(column, scales, strict=True)]
                )
            if rate_bps:
                out.port_rates = [rate_bps] * len(named)
            elif any(rates.get(port) for port in named):
                out.port_rates = [rates.get(port, 0.0) for port in named]
            chunks.append(out)
        return ScrapeColumns(chunks, {port: (time_ns, up) for port, up in ups.items()}, list(ports))


_Slice = tuple[str, int, int, list[float] | None]  # a metric's values in a chunk's pick, and scales


def _readings(rows: Iterable[_Row], time_ns: int, names: _Names) -> list[PortReading]:
    rows = list(rows)
    return _Routes(rows, time_ns, names).readings(rows, time_ns)


def _time_of(stamp: Any, time_ns: int) -> int:
    """A row's time: its own (seconds, a float or OpenMetrics' Timestamp), else the scrape's."""
    return time_ns if stamp is None else round(float(stamp) * 1000) * 1_000_000


def _reading(value: Number, scale: float, row: _Row) -> Number:
    """A counter's reading (`_counter`), times its rule's scale."""
    if value.__class__ is float and 0.0 <= value < math.inf:  # the usual case, as _counter reads it
        reading: Number = int(value) if value.is_integer() else value
    else:
        reading = _counter(value, row)
    return reading * scale if scale != 1 else reading


def _port_rates(entries: Iterable[tuple[str, int, _Row]], values: Sequence[Number]) -> dict[str, float]:
    """Each port's link rate in bits/s from its rate rows (port, row index, row) with these values;
    the last known one wins (netdev: negative is unknown; if_mib: 0 is; infiniband: refused)."""
    rates = {}
    for port, index, row in entries:
        rule, value = row[0], values[index]
        if rule.family == "infiniband":
            rates[port] = float(_counter(value, row)) * rule.scale
        elif math.isfinite(value) and value > 0:
            rates[port] = float(value) * rule.scale
    return rates


def _port_states(
    entries: Iterable[tuple[str, int, _Row]], values: Sequence[Number], time_ns: int
) -> dict[str, tuple[int, bool | None]]:
    """Each port's operational state as (time, up) from its state rows (port, row index, row) with
    these values: the higher precedence wins, and at equal precedence the later row."""
    states: dict[str, tuple[int, int, bool | None]] = {}  # port -> (precedence, time, up)
    for port, index, row in entries:
        rule = row[0]
        state = _state(rule, row[2], values[index])
        if state is not _NO_STATE:
            held = states.get(port)
            if held is None or held[0] <= rule.precedence:
                states[port] = (rule.precedence, _time_of(row[4], time_ns), state)
    return {port: (time, up) for port, (_, time, up) in states.items()}


class _Routes:
    """Where each row of a scrape goes, whatever its value: the port and time it names, which counter
    row wins where two rules give one metric of one port, and which rows say a rate or a state.
    `readings` reads the rows' values. A protobuf scrape laid out as the last one is routed once and
    read again (`_Template`)."""

    def __init__(self, rows: list[_Row], time_ns: int, names: _Names) -> None:
        # (port, time) -> metric -> (precedence, row index, kind, scale); a later row of equal
        # precedence wins (a series repeated in one text is a later reading of the same counter).
        self.counters: dict[tuple[str, int], dict[str, tuple[int, int, str, float]]] = {}
        self.counter_rows: list[int] = []  # every counter row, winner or not: each must be readable
        self.rates: list[tuple[str, int, _Row]] = []  # (port, row index, row), in row order
        self.states: list[tuple[str, int, _Row]] = []
        self.stamped = False  # a row has a time of its own
        for index, row in enumerate(rows):
            rule, _, labels, value, stamp = row
            port = names.port(rule, labels, row)
            if port is None:
                continue  # not in port_names
            time = _time_of(stamp, time_ns)
            self.stamped = self.stamped or stamp is not None
            role = rule.role
            if role == "counter":
                if not (value.__class__ is float and 0.0 <= value < math.inf):
                    _counter(value, row)  # refused here, in row order, if it cannot be read
                self.counter_rows.append(index)
                metrics = self.counters.get((port, time))
                if metrics is None:
                    metrics = self.counters[port, time] = {}
                held = metrics.get(rule.metric)
                if held is None or held[0] <= rule.precedence:
                    metrics[rule.metric] = (rule.precedence, index, rule.kind, rule.scale)
            elif role == "rate":
                self.rates.append((port, index, row))
            else:
                self.states.append((port, index, row))

    def readings(self, rows: list[_Row], time_ns: int) -> list[PortReading]:
        """The rows' readings, in time then port order."""
        counters = {
            key: {metric: (_reading(rows[index][3], scale, rows[index]), kind)
                  for metric, (_, index, kind, scale) in metrics.items()}
            for key, metrics in self.counters.items()
        }  # fmt: skip
        values = [row[3] for row in rows]
        return _port_readings(
            counters, _port_rates(self.rates, values), _port_states(self.states, values, time_ns)
        )


def _port_readings(
    counters: Mapping[tuple[str, int], Mapping[str, tuple[Any, str]]],
    rates: Mapping[str, float],
    states: Mapping[str, tuple[int, bool | None]],
) -> list[PortReading]:
    """Readings of ports with counters (and their rate and state), then of ports with only a state,
    in time then port order."""
    readings = [
        PortReading(
            port, time, dict(values), rates.get(port, 0.0), states[port][1] if port in states else None
        )
        for (port, time), values in counters.items()
    ]
    counted = {port for port, _ in counters}
    readings += [
        PortReading(port, time, {}, rates.get(port, 0.0), up)
        for port, (time, up) in states.items()
        if port not in counted
    ]
    readings.sort(key=lambda r: (r.time_ns, r.port))
    return readings


class _NoState(enum.Enum):
    """What a sample that says nothing about the state reads as (a state set's inactive member)."""

    NO_STATE = enum.auto()


_NO_STATE: Final = _NoState.NO_STATE


def _state(rule: Rule, labels: Mapping[str, str], value: Number) -> bool | _NoState | None:
    if rule.role == "up":
        return value == 1
    if rule.role == "operstate":
        return oper_up(labels.get("operstate", "unknown"))
    # IF-MIB ifOperStatus: a number, or a state set / info metric with the state as a label.
    if IF_MIB_OPER_STATUS in labels:
        return oper_up(labels[IF_MIB_OPER_STATUS]) if value == 1 else _NO_STATE
    if not (isinstance(value, int) or (math.isfinite(value) and value.is_integer())):
        return None
    return oper_up(OPER_STATUS.get(int(value), "unknown"))
