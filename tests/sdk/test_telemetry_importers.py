"""The SDK's importers read perfquery, node_exporter and CSV text as the equipment reports it, with the
counter kinds the telemetry service needs to turn readings into amounts; the standard library and
prometheus_client's parser only."""

from __future__ import annotations

import ast
import doctest
import importlib
import pathlib
import sys

import fabrictwin
import pytest
from fabrictwin.importers import FormatError, PortReading, columns_of, perfquery, prometheus
from fabrictwin.importers.csv_samples import CsvSamples

BASIC = """\
# Port counters: Lid 12 port 1 (CapMask: 0x5A00)
PortSelect:......................1
CounterSelect:...................0x0000
SymbolErrorCounter:..............3
LinkErrorRecoveryCounter:........0
LinkDownedCounter:...............1
PortRcvErrors:...................2
PortRcvRemotePhysicalErrors:.....0
PortXmitDiscards:................5
PortXmitData:....................4294967200
PortRcvData:.....................1000
PortXmitPkts:....................77
PortRcvPkts:.....................88
PortXmitWait:....................9
"""
EXTENDED = """\
# Port extended counters: Lid 12 port 1 (CapMask: 0x5300 CapMask2: 0x0000002)
PortSelect:......................1
CounterSelect:...................0x0000
PortXmitData:....................36298026860928
PortRcvData:.....................12279028775751
PortXmitPkts:....................101733204203
PortRcvPkts:.....................32262508468
PortUnicastXmitPkts:.............101708165289
CounterSelect2:..................0x00000000
SymbolErrorCounter:..............0
PortXmitWait:....................22730501
"""
SCRAPE = """\
# HELP node_infiniband_port_data_transmitted_bytes_total Number of data octets transmitted on all links
# TYPE node_infiniband_port_data_transmitted_bytes_total counter
node_infiniband_port_data_transmitted_bytes_total{device="mlx5_0",port="1"} 3.6298026860928e+13
node_infiniband_port_data_transmitted_bytes_total{device="mlx5_1",port="1"} 12
node_infiniband_port_data_received_bytes_total{device="mlx5_0",port="1"} 1.2e+07
node_infiniband_port_transmit_wait_total{device="mlx5_0",port="1"} 22730501
node_infiniband_port_errors_received_total{device="mlx5_0",port="1"} 4
node_infiniband_info{board_id="MT_0000000010",device="mlx5_0",firmware_version="20.31.1014"} 1
node_cpu_seconds_total{cpu="0",mode="idle"} 12345.5
"""


def test_perfquery_port_counters_carry_their_widths_and_4_octet_units():
    (reading,) = perfquery.parse(BASIC, 5, nodes={12: "leaf-3"})
    assert (reading.port, reading.time_ns) == ("leaf-3/p1", 5)
    assert reading.values == {
        "symbol_errors": (3, "cumulative_16"),
        "link_downed": (1, "cumulative_8"),
        "rcv_errors": (2, "cumulative_16"),
        "xmit_discards": (5, "cumulative_16"),
        "tx_bytes": (4294967200, "ib_data_32"),
        "rx_bytes": (1000, "ib_data_32"),
        "tx_packets": (77, "cumulative_32"),
        "rx_packets": (88, "cumulative_32"),
        "xmit_wait": (9, "cumulative_32"),
    }


def test_perfquery_extended_counters_are_64_bit_and_win_over_the_basic_block():
    (reading,) = perfquery.parse(BASIC + EXTENDED, 5, node="leaf-3")
    assert reading.values["tx_bytes"] == (36298026860928, "ib_data_64")
    assert reading.values["xmit_wait"] == (22730501, "cumulative_64")
    assert reading.values["symbol_errors"] == (0, "cumulative_64")
    assert reading.values["link_downed"] == (1, "cumulative_8")  # only in the basic block


def test_perfquery_timestamp_lines_time_the_blocks_before_them():
    text = (
        BASIC
        + "# timestamp 1700000000.5\n"
        + BASIC.replace("Lid 12 port 1", "Lid 12 port 2")
        + "ibwarn: [21453] x\n"
    )
    readings = perfquery.parse(text, 99)
    assert [(r.port, r.time_ns) for r in readings] == [
        ("lid-12/p1", 1_700_000_000_500_000_000),
        ("lid-12/p2", 99),
    ]


def test_perfquery_skips_aggregates_and_other_attributes():
    text = (
        BASIC.replace("port 1 ", "port 255 ")
        + "# PortRcvErrorDetails counters: Lid 12 port 1\nPortLocalPhysicalErrors:.........0\n"
    )
    assert perfquery.parse(text, 0) == []


def test_a_malformed_perfquery_counter_names_its_line():
    with pytest.raises(FormatError, match=r"^q\.txt:10: PortXmitData 'lots' is not an integer"):
        perfquery.parse(BASIC.replace("4294967200", "lots"), 0, where="q.txt")


def test_node_exporter_counters_are_64_bit_bytes_named_by_device_and_port():
    readings = {r.port: r for r in prometheus.parse(SCRAPE, 7, node="gpu-7")}
    assert set(readings) == {"gpu-7/mlx5_0/p1", "gpu-7/mlx5_1/p1"}
    assert readings["gpu-7/mlx5_0/p1"].values == {
        "tx_bytes": (36298026860928, "cumulative_64"),
        "rx_bytes": (12_000_000, "cumulative_64"),
        "xmit_wait": (22730501, "cumulative_64"),
        "rcv_errors": (4, "cumulative_64"),
    }
    assert readings["gpu-7/mlx5_1/p1"].time_ns == 7


def test_a_sample_timestamp_and_a_port_name_template_are_honoured():
    line = 'node_infiniband_port_packets_received_total{device="mlx5_0",port="1"} 10 1700000000123\n'
    (reading,) = prometheus.parse(line, 0, node="host-3", port_name="{node}/p{port}")
    assert (reading.port, reading.time_ns) == ("host-3/p1", 1_700_000_000_123_000_000)


def test_legacy_counters_stand_in_only_where_the_current_ones_are_missing():
    text = (
        'node_infiniband_legacy_data_transmitted_bytes_total{device="a",port="1"} 5\n'
        'node_infiniband_legacy_data_transmitted_bytes_total{device="b",port="1"} 6\n'
        'node_infiniband_port_data_transmitted_bytes_total{device="b",port="1"} 60\n'
    )
    assert {r.port: r.values["tx_bytes"][0] for r in prometheus.parse(text, 0)} == {"a/p1": 5, "b/p1": 60}


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ('node_infiniband_port_transmit_wait_total{device="a",port="1"} NaN', "not a finite number"),
        ('node_infiniband_port_transmit_wait_total{device="a"} 5', "needs the labels device and port"),
        ('node_infiniband_port_transmit_wait_total{device="a",port=1} 5', "malformed labels"),
    ],
)
def test_a_malformed_scrape_names_its_line(line, problem):
    with pytest.raises(FormatError, match=rf"^m:2: .*{problem}"):
        prometheus.parse("# comment\n" + line + "\n", 0, where="m")


def test_csv_headers_may_carry_counter_kinds_and_a_source_column():
    reader = CsvSamples("s.csv", "pod1")
    chunk = reader.parse(
        "time_ns,source,port,rx_bytes:ib_data_32,utilisation\n0,pod1,a,4,0.5\n10,sources/pod1,a,8,0.25\n"
    )
    assert (chunk.ports, chunk.time_ns, chunk.counter_kinds) == (
        ["a"],
        [0, 10],
        {"rx_bytes": "ib_data_32", "utilisation": "delta"},
    )
    assert chunk.columns == {"rx_bytes": [4, 8], "utilisation": [0.5, 0.25]}
    more = reader.parse("20,pod1,b,1,0.1\n")  # later pieces of a growing file keep the header
    assert (more.ports, more.time_ns) == (["b"], [20])


def test_a_csv_that_mixes_sources_is_refused_naming_the_line():
    reader = CsvSamples("s.csv", "pod1")
    with pytest.raises(
        FormatError, match=r"^s\.csv:3: source 'pod2' is not sources/pod1: a file mixes sources"
    ):
        reader.parse("time_ns,source,port,drops\n0,pod1,a,1\n0,pod2,a,1\n")


def test_readings_with_different_metrics_go_into_separate_columns():
    readings = [
        PortReading("a", 1, {"tx_bytes": (5, "ib_data_32")}),
        PortReading("b", 1, {"tx_bytes": (7, "ib_data_64")}),
        PortReading("a", 2, {"tx_bytes": (6, "ib_data_32")}),
    ]
    chunks = columns_of(readings)
    assert [(c.ports, c.port_index, c.time_ns, c.counter_kinds) for c in chunks] == [
        (["a"], [0, 0], [1, 2], {"tx_bytes": "ib_data_32"}),
        (["b"], [0], [1], {"tx_bytes": "ib_data_64"}),
    ]


def test_importers_and_the_mirror_use_the_standard_library_grpc_protobuf_and_prometheus_client_only():
    package = pathlib.Path(fabrictwin.__file__).parent
    modules = [
        *sorted((package / "importers").glob("*.py")),
        package / "mirror.py",
        package / "cli_telemetry_ingest.py",
    ]
    offenders = []
    for path in modules:
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            offenders += [
                f"{path.name}: {n}"
                for n in names
                if n.split(".")[0] not in sys.stdlib_module_names
                # prometheus_client: the exposition format's reference parser (pure Python), an SDK
                # dependency since the importer reads node_exporter and snmp_exporter scrapes with it.
                and n.split(".")[0] not in {"grpc", "google", "fabrictwin", "prometheus_client"}
            ]
    assert offenders == []


@pytest.mark.parametrize(
    "module",
    [
        "fabrictwin.importers",
        "fabrictwin.importers.perfquery",
        "fabrictwin.importers.prometheus",
        "fabrictwin.importers.prometheus_families",
    ],
)
def test_the_importers_docstring_examples_hold(module: str):
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0
