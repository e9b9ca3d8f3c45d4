"""The protobuf exposition (varint-delimited io.prometheus.client.MetricFamily messages, what
node_exporter and the client libraries serve when asked) reads exactly as the same scrape in the text
format, and what does not decode is a FormatError naming where.

Both formats are written here from one description of the families, as an exporter writes both from
its one set of metrics.
"""

from __future__ import annotations

import math
import struct

import pytest
from fabrictwin.importers import (
    FormatError,
    PortReading,
    SampleColumns,
    columns_of,
    merge_columns,
    prometheus,
)
from fabrictwin.prometheus.metrics_pb2 import MetricFamily

from .exposition import Family, Labels, as_protobuf, as_text, varint


def dev(device: str, **more: str) -> Labels:
    return {"device": device, **more}


# Every kind of family the importer maps, as node_exporter and snmp_exporter name and type them.
SCRAPE: list[Family] = [
    ("node_network_receive_bytes_total", "counter", [(dev("swp1"), 1.5e9, None), (dev("swp2"), 2**53, None)]),
    ("node_network_transmit_bytes_total", "counter", [(dev("swp1"), 42, None), (dev("lo"), 12345, None)]),
    ("node_network_receive_drop_total", "counter", [(dev("swp1"), 3, None)]),
    ("node_network_receive_errs_total", "counter", [(dev("swp1"), 7, None)]),
    ("node_network_carrier_down_changes_total", "counter", [(dev("swp2"), 1, None)]),
    ("node_network_transmit_errs_total", "counter", [(dev("swp1"), 99, None)]),  # not mapped
    ("node_network_speed_bytes", "gauge", [(dev("swp1"), 5e10, None), (dev("swp2"), -125000, None)]),
    ("node_network_up", "gauge", [(dev("swp1"), 1, None), (dev("swp2"), 0, None), (dev("lo"), 0, None)]),
    (
        "node_network_info",
        "gauge",
        [
            (
                dev("swp1", address="02:00:00:00:00:01", ifalias='to "spine" \\ 0\nup', operstate="up"),
                1,
                None,
            ),
            (dev("swp2", address="02:00:00:00:00:02", ifalias="", operstate="lowerlayerdown"), 1, None),
        ],
    ),
    # ethtool: untyped, node_exporter's names and the raw ones; microseconds of pause
    ("node_ethtool_received_prio3_pause", "untyped", [(dev("swp1"), 11, None)]),
    ("node_ethtool_rx_prio3_pause_duration", "untyped", [(dev("swp1"), 2.5, None)]),
    ("node_ethtool_rx_discards_phy", "untyped", [(dev("swp1"), 4, None)]),  # wins over receive_drop
    ("node_qdisc_drops_total", "counter", [({"device": "swp2", "kind": "tbf"}, 1431, None)]),
    ("node_ethtool_np_cnp_sent_total", "counter", [(dev("swp1"), 8, None)]),
    # InfiniBand, with timestamps: two readings of one series
    (
        "node_infiniband_port_data_transmitted_bytes_total",
        "counter",
        [
            ({"device": "mlx5_0", "port": "1"}, 1000, 1_700_000_000_123),
            ({"device": "mlx5_0", "port": "1"}, 3000, 1_700_000_010_456),
        ],
    ),
    ("node_infiniband_rate_bytes_per_second", "untyped", [({"device": "mlx5_0", "port": "1"}, 5e10, None)]),
    # snmp_exporter if_mib: counters typed without _total, the state as a number and as a state set
    ("ifHCInOctets", "counter", [({"ifName": "Ethernet1", "ifIndex": "1"}, 77, None)]),
    ("ifInErrors", "counter", [({"ifDescr": "Ethernet2", "ifIndex": "2"}, 5, None)]),
    ("ifHighSpeed", "gauge", [({"ifName": "Ethernet1"}, 100000, None)]),
    ("ifOperStatus", "gauge", [({"ifName": "Ethernet1"}, 1, None), ({"ifDescr": "Ethernet2"}, 7, None)]),
    # Families nothing maps: skipped either way
    ("process_cpu_seconds_total", "counter", [({}, 1.25, None)]),
    ("go_gc_duration_seconds", "summary", [({"quantile": "0.5"}, 0.001, None)]),
    ("http_request_duration_seconds", "histogram", [({"le": "1"}, 3, None)]),
]


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"node": "leaf0"},
        {
            "port_names": {
                "swp1": "leaf0/p1",
                "swp2": "leaf0/p2",
                "mlx5_0/p1": "leaf0/p9",
                "Ethernet1": "leaf0/p5",
            }
        },
        {"node": "gpu1", "port_name": "{node}/{device}.{port}", "device_port_name": "{node}:{device}"},
        {"pfc_priority": 4},
    ],
    ids=["plain", "node", "port-names", "templates", "pfc4"],
)
def test_the_same_scrape_as_text_and_as_protobuf_gives_the_same_readings(options):
    from_text = prometheus.parse(as_text(SCRAPE), 5_000, **options)
    from_protobuf = prometheus.parse_protobuf(as_protobuf(SCRAPE), 5_000, **options)
    assert from_protobuf == from_text
    assert len(from_text) >= 3  # and it says something


def test_the_readings_are_those_of_the_text_format():
    readings = {r.port: r for r in prometheus.parse_protobuf(as_protobuf(SCRAPE), 5_000)}
    swp1, swp2 = readings["swp1"], readings["swp2"]
    assert swp1.values["rx_bytes"] == (1_500_000_000, "cumulative_64") and swp1.values["drops"][0] == 4
    assert swp1.values["pause_duration_ns"][0] == 2500 and (swp1.rate_bps, swp1.oper_up) == (4e11, True)
    assert swp2.values["rx_bytes"][0] == 2**53 and (swp2.rate_bps, swp2.oper_up) == (0.0, False)
    ib = [r for r in readings.values() if r.port == "mlx5_0/p1"]
    assert [r.values["tx_bytes"][0] for r in ib] == [3000]  # by port: the later of the two readings
    assert {r.time_ns for r in prometheus.parse_protobuf(as_protobuf(SCRAPE), 5_000)} == {
        5_000,
        1_700_000_000_123_000_000,
        1_700_000_010_456_000_000,
    }
    assert readings["Ethernet1"].values["rx_bytes"][0] == 77 and readings["Ethernet2"].oper_up is False


@pytest.mark.parametrize(
    "value", [0, 1, 2**53, 2**64 - 1, 3.6e13, 1e300, 0.5, -1.0, math.inf, math.nan], ids=repr
)
def test_any_counter_value_reads_the_same_or_is_refused_the_same(value):
    family: list[Family] = [
        ("node_network_receive_bytes_total", "counter", [(dev("swp1"), float(value), None)])
    ]
    outcomes = []
    for parse, data in (
        (prometheus.parse, as_text(family)),
        (prometheus.parse_protobuf, as_protobuf(family)),
    ):
        try:
            outcomes.append(parse(data, 1))  # type: ignore[operator]
        except FormatError as exc:
            outcomes.append(exc.details.split(": ", 1)[1].split(":")[0])  # the problem, without where
    assert outcomes[0] == outcomes[1]


def test_scrape_is_read_by_its_content_type():
    text, data = as_text(SCRAPE), as_protobuf(SCRAPE)
    expected = prometheus.parse(text, 1)
    assert prometheus.parse_scrape(data, prometheus.PROTOBUF_CONTENT_TYPE, 1) == expected
    spaced = "application/vnd.google.protobuf;encoding=delimited;proto=io.prometheus.client.MetricFamily"
    assert prometheus.parse_scrape(data, spaced, 1) == expected
    for content_type in ("text/plain; version=0.0.4; charset=utf-8", "", "text/html"):
        assert prometheus.parse_scrape(text.encode(), content_type, 1) == expected
    with pytest.raises(FormatError) as caught:
        prometheus.parse_scrape(
            data, "application/vnd.google.protobuf; proto=other.Message; encoding=delimited", 1
        )
    assert "is not application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily" in str(
        caught.value
    )


def test_a_stream_that_does_not_decode_is_a_format_error_naming_the_message():
    data = as_protobuf(SCRAPE[:2])
    first = len(as_protobuf(SCRAPE[:1]))  # where the second message starts
    cases = {
        data[:-3]: f"leaf0: message 2 at byte {first}: ",  # cut short
        data + b"\xff\xff": f"leaf0: message 3 at byte {len(data)}: its length is cut short",
        data + b"\xff" * 11: f"leaf0: message 3 at byte {len(data)}: its length is longer than 10 bytes",
        b"\x12\x0a\x0fnode_network_up\xff": "leaf0: message 1 at byte 0: not a MetricFamily",  # bad tag
        b"\x04\x12\x05abc": "leaf0: message 1 at byte 0: not a MetricFamily",  # help longer than the message
    }
    for stream, expected in cases.items():
        with pytest.raises(FormatError) as caught:
            prometheus.parse_protobuf(stream, 1, where="leaf0")
        assert caught.value.details.startswith(expected), (stream, caught.value.details)


def test_a_mapped_metric_without_its_value_or_with_a_bad_one_is_refused_naming_it():
    family = MetricFamily(name="node_network_receive_bytes_total", type=0)
    family.metric.add().label.add(name="device", value="swp1")  # no counter field at all
    body = family.SerializeToString()
    with pytest.raises(FormatError) as caught:
        prometheus.parse_protobuf(varint(len(body)) + body, 1, where="leaf0")
    assert caught.value.details == (
        "leaf0: a counter metric without its value: 'node_network_receive_bytes_total{device=\"swp1\"}'"
    )
    negative: list[Family] = [("node_network_receive_bytes_total", "counter", [(dev("swp1"), -5.0, None)])]
    with pytest.raises(FormatError) as caught:
        prometheus.parse_protobuf(as_protobuf(negative), 1, where="leaf0")
    assert caught.value.details == (
        "leaf0: counter value -5.0 is not a finite number >= 0: "
        "'node_network_receive_bytes_total{device=\"swp1\"}'"
    )
    nameless: list[Family] = [("node_network_receive_bytes_total", "counter", [({}, 5, None)])]
    with pytest.raises(FormatError, match="needs the label device"):
        prometheus.parse_protobuf(as_protobuf(nameless), 1, where="leaf0")


def test_families_of_other_types_or_names_are_skipped():
    unknown = MetricFamily(name="node_network_receive_bytes_total", type=6)  # a type of the future
    unknown.metric.add().label.add(name="device", value="swp1")
    body = unknown.SerializeToString()
    assert prometheus.parse_protobuf(varint(len(body)) + body, 1) == []
    # An unmapped family whose name comes first is not decoded: the bytes after it are not looked at.
    skipped = b"\x0a\x0fprocess_unknown" + b"\xff\xff"
    assert prometheus.parse_protobuf(varint(len(skipped)) + skipped + as_protobuf(SCRAPE[:1]), 1) != []
    assert prometheus.parse_protobuf(b"", 1) == []


def _with(families: list[Family], name: str, metrics: list[tuple[Labels, float, int | None]]) -> list[Family]:
    return [(n, kind, metrics if n == name else ms) for n, kind, ms in families]


def test_plans_read_each_later_scrape_as_decoding_it_would(monkeypatch):
    decoded = []
    real = prometheus._decoded
    monkeypatch.setattr(prometheus, "_decoded", lambda *a: decoded.append(a[0]) or real(*a))
    plans = prometheus.ProtobufPlans()
    rx = "node_network_receive_bytes_total"
    grown = [*SCRAPE[0][2], (dev("swp9"), 5, None)]
    scrapes = {
        "first": SCRAPE,
        "second": SCRAPE,  # plans made
        "values changed": [(n, k, [(lb, v * 3 + 1, t) for lb, v, t in ms]) for n, k, ms in SCRAPE],
        "a label changed": _with(SCRAPE, rx, [(dev("swp1", alias="x"), 1.0, None), (dev("swp2"), 2.0, None)]),
        "a metric more": _with(SCRAPE, rx, grown),
        "a timestamp": _with(SCRAPE, rx, [(dev("swp1"), 1.0, 1_700_000_000_000), (dev("swp2"), 2.0, None)]),
        "a counter now a gauge": [(n, "gauge" if n == rx else k, ms) for n, k, ms in SCRAPE],
        "back to the first": SCRAPE,
        "the first again": SCRAPE,  # plans made again
        "and again": SCRAPE,
    }
    for step, families in scrapes.items():
        data = as_protobuf(families)
        without = prometheus.parse_protobuf(data, 7, where="leaf0")
        decoded.clear()
        assert prometheus.parse_protobuf(data, 7, where="leaf0", plans=plans) == without, step
        if step in ("values changed", "and again"):
            # Nothing decoded but node_network_up: proto3 leaves its zeros out (no value, no plan);
            # exporters write every value (client_model is proto2), so theirs always get one.
            assert [message[2:17] for message in decoded] == [b"node_network_up"], step
    assert len(plans) >= 15  # one per mapped family of the target
    other = prometheus.parse_protobuf(as_protobuf(SCRAPE), 7, where="leaf1", plans=plans)  # another target
    assert other == prometheus.parse_protobuf(as_protobuf(SCRAPE), 7, where="leaf1")


def test_plans_are_bounded_and_forget_the_oldest_first():
    plans = prometheus.ProtobufPlans(limit=4)
    for n in range(10):
        for _ in range(2):  # a plan is made the second time a family is read
            prometheus.parse_protobuf(as_protobuf(SCRAPE[:3]), 1, where=f"node{n}", plans=plans)
    assert len(plans) == 4 and plans.get(("node9", SCRAPE[2][0])) is not None
    assert plans.get(("node0", SCRAPE[0][0])) is None


def _field(number: int, payload: bytes) -> bytes:
    return bytes([number << 3 | 2]) + varint(len(payload)) + payload


def test_a_value_given_twice_is_read_as_a_parser_merges_it_with_or_without_plans():
    label = _field(1, _field(1, b"device") + _field(2, b"swp1"))
    counters = [_field(3, b"\x09" + struct.pack("<d", value)) for value in (5.0, 9.0)]
    family = _field(1, b"node_network_receive_bytes_total") + _field(4, label + counters[0] + counters[1])
    data = varint(len(family)) + family
    plans = prometheus.ProtobufPlans()
    for _ in range(2):
        (reading,) = prometheus.parse_protobuf(data, 1, where="x", plans=plans)
        assert reading.values == {"rx_bytes": (9, "cumulative_64")}  # the parser merges: the last wins
    assert len(plans) == 0  # no plan for a layout it cannot read by position


def test_merged_columns_hold_the_rows_columns_of_makes_from_all_the_readings():
    def rows(chunks):
        return {
            tuple(sorted(c.counter_kinds.items())): sorted(
                (c.ports[p], t, *(c.columns[m][i] for m in sorted(c.columns)))
                for i, (p, t) in enumerate(zip(c.port_index, c.time_ns, strict=True))
            )
            for c in chunks
        }

    targets = [
        prometheus.parse_protobuf(as_protobuf(SCRAPE), 7, node=node) for node in ("leaf0", "leaf1", "spine0")
    ]
    merged = merge_columns([chunk for readings in targets for chunk in columns_of(readings)])
    every = columns_of([reading for readings in targets for reading in readings])
    assert rows(merged) == rows(every)
    for chunk in merged:
        assert len(set(chunk.ports)) == len(chunk.ports)
    # The same port from two chunks: listed once, its rows in time order.
    late = [PortReading("a/p1", 20, {"tx_bytes": (5, "cumulative_64")}, rate_bps=1e9)]
    early = [PortReading("a/p1", 10, {"tx_bytes": (3, "cumulative_64")})]
    (chunk,) = merge_columns(columns_of(late) + columns_of(early))
    assert (chunk.ports, chunk.time_ns, chunk.columns, chunk.port_rates) == (
        ["a/p1"],
        [10, 20],
        {"tx_bytes": [3, 5]},
        [1e9],
    )


# What a proto3 writer leaves out (a zero value) cannot be read by position; exporters write every
# value (client_model is proto2). The scrape's families with every value non-zero, without times,
# and a port with a state only.
UNSTAMPED: list[Family] = [
    (name, kind, [(labels, 3.0 if value == 2.5 else value, None) for labels, value, _ in metrics]
     + ([(dev("eth9", operstate="up"), 1.0, None)] if name == "node_network_info" else []))
    for name, kind, metrics in SCRAPE
    if all(value for _, value, _ in metrics)
]  # fmt: skip


def _outcome(data: bytes, time_ns: int, **options):
    """A scrape's ScrapeColumns, or its error's message."""
    try:
        return prometheus.parse_scrape_columns(data, prometheus.PROTOBUF_CONTENT_TYPE, time_ns, **options)
    except FormatError as exc:
        return exc.details


def _set(families: list[Family], name: str, value: float) -> list[Family]:
    return [(n, kind, [(lb, value if n == name else v, t) for lb, v, t in ms]) for n, kind, ms in families]


@pytest.mark.parametrize(
    "options",
    [{}, {"node": "leaf0"}, {"port_names": {"swp1": "leaf0/p1", "Ethernet1": "leaf0/p5"}}, {"rate_bps": 4e11},
     {"pfc_priority": 4}],
    ids=["plain", "node", "port-names", "rate", "pfc4"],
)  # fmt: skip
def test_templates_read_each_later_scrape_as_parsing_it_would(monkeypatch, options):
    """A target's scrape laid out as its last one is read from its values alone (prometheus._Template),
    giving what parsing gives; values a parse reads otherwise, or refuses, are parsed."""
    read = []
    real = prometheus._Template.read
    monkeypatch.setattr(prometheus._Template, "read", lambda *a: read.append(real(*a)) or read[-1])
    rx = "node_network_receive_bytes_total"
    scrapes = {
        "first": (UNSTAMPED, False),
        "second": (UNSTAMPED, False),  # plans and the template made
        "values changed": ([(n, k, [(lb, v * 3 + 1, t) for lb, v, t in ms]) for n, k, ms in UNSTAMPED], True),
        "a counter past 2^64": (_set(UNSTAMPED, rx, 2.0**70), True),
        "a counter not whole": (_set(UNSTAMPED, rx, 2.5), False),
        "a negative counter": (_set(UNSTAMPED, rx, -1.0), False),
        "a NaN counter": (_set(UNSTAMPED, rx, math.nan), False),
        "an infinite counter": (_set(UNSTAMPED, rx, math.inf), False),
        "speed unknown": (_set(UNSTAMPED, "node_network_speed_bytes", -1.0), True),
        # refused where its port is one of port_names; else not read at all
        "an InfiniBand rate refused": (_set(UNSTAMPED, "node_infiniband_rate_bytes_per_second", -8.0), None),
        "oper status down": (_set(UNSTAMPED, "ifOperStatus", 2.0), True),
        "a label changed": (_with(UNSTAMPED, rx, [(dev("swp1", alias="x"), 1.0, None)]), False),
        "a metric more": (_with(UNSTAMPED, rx, [*UNSTAMPED[0][2], (dev("swp9"), 5, None)]), False),
        "a timestamp": (_with(UNSTAMPED, rx, [(dev("swp1"), 1.0, 1_700_000_000_000)]), False),
        "back": (UNSTAMPED, False),  # its family's plan made again, and the template
        "again": (_set(UNSTAMPED, rx, 77.0), True),
    }
    plans = prometheus.ProtobufPlans()
    for at, (step, (families, by_template)) in enumerate(scrapes.items()):
        data = as_protobuf(families)
        read.clear()
        expected = _outcome(data, 1_000 + at, where="leaf0", **options)
        assert _outcome(data, 1_000 + at, where="leaf0", plans=plans, **options) == expected, step
        refused = isinstance(expected, str)
        assert (read[-1:] != [None] and read != []) == (
            not refused if by_template is None else by_template
        ), step
        named = "port_names" not in options or "refused" not in step
        bad = any(word in step for word in ("refused", "negative", "NaN", "infinite"))
        assert refused == (bad and named), step
    # Other options for the same target: parsed, as they name other ports.
    other = {**options, "node": "spine9"}
    data = as_protobuf(UNSTAMPED)
    assert _outcome(data, 5, where="leaf0", plans=plans, **other) == _outcome(data, 5, where="leaf0", **other)


def test_templates_read_random_values_as_parsing_them(monkeypatch):
    import random

    read = []
    real = prometheus._Template.read
    monkeypatch.setattr(prometheus._Template, "read", lambda *a: read.append(real(*a)) or read[-1])
    chance = random.Random(28)
    picks = [1.0, 7.0, 2.0**53, 2.0**64, 1e300, 0.5, -3.0, 5e10, -125000.0, 2.0, 3.0, 7.0, math.inf, math.nan]
    plans = prometheus.ProtobufPlans()
    outcomes = set()
    for at in range(400):
        families = [
            (n, k, [(lb, chance.choice(picks) if chance.random() < 0.05 else v, t) for lb, v, t in ms])
            for n, k, ms in UNSTAMPED
        ]
        data = as_protobuf(families)
        expected = _outcome(data, at, node="leaf0", where="leaf0")
        assert _outcome(data, at, node="leaf0", where="leaf0", plans=plans) == expected, at
        outcomes.add(isinstance(expected, str))
    assert outcomes == {True, False}  # refused and read alike
    assert sum(found is not None for found in read) > 100  # and most read by the template


def test_merged_columns_keep_a_port_listed_twice_in_one_chunk_apart_from_the_next_chunks_ports():
    twice = SampleColumns(["x", "x"], [0, 1], [1, 2], {"tx_bytes": [10, 20]}, {"tx_bytes": "cumulative_64"})
    other = SampleColumns(["y"], [0], [1], {"tx_bytes": [5]}, {"tx_bytes": "cumulative_64"})
    (chunk,) = merge_columns([twice, other])
    rows = sorted(zip((chunk.ports[i] for i in chunk.port_index), chunk.columns["tx_bytes"], strict=True))
    assert rows == [("x", 10), ("x", 20), ("y", 5)]
