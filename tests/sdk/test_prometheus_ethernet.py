"""The Prometheus importer reads Ethernet too: node_exporter's netdev/netclass and ethtool collectors and
snmp_exporter's if_mib module, parsed by prometheus_client, with link rates and operational states."""

from __future__ import annotations

import random

import pytest
from fabrictwin.errors import InvalidArgumentError
from fabrictwin.importers import FormatError, PortReading, columns_of, port_rates, port_states, prometheus

K64, K32 = "cumulative_64", "cumulative_32"

# A GPU host's node_exporter (v1.8 output, trimmed): loopback, the management NIC and two ConnectX
# ports, eth3 with its cable pulled; other collectors' families in between.
NODE = """\
# HELP go_gc_duration_seconds A summary of the wall-time pause (stop-the-world) duration in garbage collection cycles.
# TYPE go_gc_duration_seconds summary
go_gc_duration_seconds{quantile="0"} 2.4531e-05
go_gc_duration_seconds{quantile="1"} 0.000112873
go_gc_duration_seconds_sum 0.053829617
go_gc_duration_seconds_count 1177
# HELP node_cpu_seconds_total Seconds the CPUs spent in each mode.
# TYPE node_cpu_seconds_total counter
node_cpu_seconds_total{cpu="0",mode="idle"} 1.8593497e+06
node_cpu_seconds_total{cpu="0",mode="user"} 20456.37
# HELP node_network_carrier_changes_total Network device property: carrier_changes_total
# TYPE node_network_carrier_changes_total counter
node_network_carrier_changes_total{device="eth0"} 2
node_network_carrier_changes_total{device="eth2"} 4
node_network_carrier_changes_total{device="eth3"} 7
node_network_carrier_changes_total{device="lo"} 0
# HELP node_network_carrier_down_changes_total Network device property: carrier_down_changes_total
# TYPE node_network_carrier_down_changes_total counter
node_network_carrier_down_changes_total{device="eth0"} 1
node_network_carrier_down_changes_total{device="eth2"} 2
node_network_carrier_down_changes_total{device="eth3"} 4
node_network_carrier_down_changes_total{device="lo"} 0
# HELP node_network_info Non-numeric data from /sys/class/net/<iface>, value is always 1.
# TYPE node_network_info gauge
node_network_info{address="00:00:00:00:00:00",adminstate="up",broadcast="00:00:00:00:00:00",device="lo",duplex="",ifalias="",operstate="unknown"} 1
node_network_info{address="3c:ec:ef:10:22:a0",adminstate="up",broadcast="ff:ff:ff:ff:ff:ff",device="eth0",duplex="full",ifalias="",operstate="up"} 1
node_network_info{address="b8:3f:d2:4a:10:0c",adminstate="up",broadcast="ff:ff:ff:ff:ff:ff",device="eth2",duplex="full",ifalias="",operstate="up"} 1
node_network_info{address="b8:3f:d2:4a:10:0d",adminstate="up",broadcast="ff:ff:ff:ff:ff:ff",device="eth3",duplex="unknown",ifalias="",operstate="down"} 1
# HELP node_network_mtu_bytes Network device property: mtu_bytes
# TYPE node_network_mtu_bytes gauge
node_network_mtu_bytes{device="eth2"} 9000
# HELP node_network_receive_bytes_total Network device statistic receive_bytes.
# TYPE node_network_receive_bytes_total counter
node_network_receive_bytes_total{device="eth0"} 2.8371843086e+10
node_network_receive_bytes_total{device="eth2"} 8.83920125441e+14
node_network_receive_bytes_total{device="eth3"} 1.2e+07
node_network_receive_bytes_total{device="lo"} 1.1452389e+07
# HELP node_network_receive_drop_total Network device statistic receive_drop.
# TYPE node_network_receive_drop_total counter
node_network_receive_drop_total{device="eth0"} 12
node_network_receive_drop_total{device="eth2"} 3
node_network_receive_drop_total{device="eth3"} 0
node_network_receive_drop_total{device="lo"} 0
# HELP node_network_receive_errs_total Network device statistic receive_errs.
# TYPE node_network_receive_errs_total counter
node_network_receive_errs_total{device="eth0"} 0
node_network_receive_errs_total{device="eth2"} 5
node_network_receive_errs_total{device="eth3"} 0
node_network_receive_errs_total{device="lo"} 0
# HELP node_network_receive_packets_total Network device statistic receive_packets.
# TYPE node_network_receive_packets_total counter
node_network_receive_packets_total{device="eth0"} 3.1458812e+07
node_network_receive_packets_total{device="eth2"} 2.14721338e+11
node_network_receive_packets_total{device="eth3"} 9000
node_network_receive_packets_total{device="lo"} 81234
# HELP node_network_speed_bytes Network device property: speed_bytes
# TYPE node_network_speed_bytes gauge
node_network_speed_bytes{device="eth0"} 1.25e+08
node_network_speed_bytes{device="eth2"} 5e+10
node_network_speed_bytes{device="eth3"} -125000
# HELP node_network_transmit_bytes_total Network device statistic transmit_bytes.
# TYPE node_network_transmit_bytes_total counter
node_network_transmit_bytes_total{device="eth0"} 6.203370872e+09
node_network_transmit_bytes_total{device="eth2"} 9.01822004117e+14
node_network_transmit_bytes_total{device="eth3"} 3.4e+07
node_network_transmit_bytes_total{device="lo"} 1.1452389e+07
# HELP node_network_transmit_drop_total Network device statistic transmit_drop.
# TYPE node_network_transmit_drop_total counter
node_network_transmit_drop_total{device="eth0"} 0
node_network_transmit_drop_total{device="eth2"} 1
node_network_transmit_drop_total{device="eth3"} 0
node_network_transmit_drop_total{device="lo"} 0
# HELP node_network_transmit_errs_total Network device statistic transmit_errs.
# TYPE node_network_transmit_errs_total counter
node_network_transmit_errs_total{device="eth2"} 9
# HELP node_network_transmit_packets_total Network device statistic transmit_packets.
# TYPE node_network_transmit_packets_total counter
node_network_transmit_packets_total{device="eth0"} 2.0458872e+07
node_network_transmit_packets_total{device="eth2"} 2.19045513e+11
node_network_transmit_packets_total{device="eth3"} 21000
node_network_transmit_packets_total{device="lo"} 81234
# HELP node_network_up Value is 1 if operstate is 'up', 0 otherwise.
# TYPE node_network_up gauge
node_network_up{device="eth0"} 1
node_network_up{device="eth2"} 1
node_network_up{device="eth3"} 0
node_network_up{device="lo"} 0
# HELP node_time_seconds System time in seconds since epoch (1970).
# TYPE node_time_seconds gauge
node_time_seconds 1.7001234567e+09
"""  # noqa: E501 (exporter lines as they are)

# node_exporter's ethtool collector on a ConnectX-7 (eth2): untyped, rx/tx spelled received/transmitted.
# The RDMA hw_counters (np_*, rp_*, out_of_sequence, packet_seq_err) come from a textfile script.
ETHTOOL = """\
# HELP node_ethtool_info A metric with a constant '1' value labeled by bus_info, device, driver, expansion_rom_version, firmware_version, version.
# TYPE node_ethtool_info gauge
node_ethtool_info{bus_info="0000:17:00.0",device="eth2",driver="mlx5_core",expansion_rom_version="",firmware_version="28.39.1002 (MT_0000000838)",version="24.01-0.3.3"} 1
# HELP node_ethtool_received_discards_phy Network interface rx_discards_phy
# TYPE node_ethtool_received_discards_phy untyped
node_ethtool_received_discards_phy{device="eth2"} 17
# HELP node_ethtool_received_crc_errors_phy Network interface rx_crc_errors_phy
# TYPE node_ethtool_received_crc_errors_phy untyped
node_ethtool_received_crc_errors_phy{device="eth2"} 2
# HELP node_ethtool_received_symbol_err_phy Network interface rx_symbol_err_phy
# TYPE node_ethtool_received_symbol_err_phy untyped
node_ethtool_received_symbol_err_phy{device="eth2"} 11
# HELP node_ethtool_received_prio0_pause Network interface rx_prio0_pause
# TYPE node_ethtool_received_prio0_pause untyped
node_ethtool_received_prio0_pause{device="eth2"} 99
# HELP node_ethtool_received_prio3_pause Network interface rx_prio3_pause
# TYPE node_ethtool_received_prio3_pause untyped
node_ethtool_received_prio3_pause{device="eth2"} 52311
# HELP node_ethtool_received_prio3_pause_duration Network interface rx_prio3_pause_duration
# TYPE node_ethtool_received_prio3_pause_duration untyped
node_ethtool_received_prio3_pause_duration{device="eth2"} 1830
# HELP node_ethtool_transmitted_prio3_pause Network interface tx_prio3_pause
# TYPE node_ethtool_transmitted_prio3_pause untyped
node_ethtool_transmitted_prio3_pause{device="eth2"} 4410
# HELP node_ethtool_received_bytes_total Network interface bytes received
# TYPE node_ethtool_received_bytes_total untyped
node_ethtool_received_bytes_total{device="eth2"} 8.83920125441e+14
# TYPE node_ethtool_np_cnp_sent counter
node_ethtool_np_cnp_sent{device="eth2"} 3021
node_ethtool_rp_cnp_handled_total{device="eth2"} 2987
node_ethtool_np_ecn_marked_roce_packets{device="eth2"} 3050
node_ethtool_out_of_sequence{device="eth2"} 14
node_ethtool_packet_seq_err{device="eth2"} 6
"""  # noqa: E501 (exporter lines as they are)

# snmp_exporter's if_mib module against a leaf switch (trimmed): port 1 up at 400G, port 2 down.
IF_MIB = """\
# HELP ifHCInOctets The total number of octets received on the interface, including framing characters - 1.3.6.1.2.1.31.1.1.1.6
# TYPE ifHCInOctets counter
ifHCInOctets{ifAlias="to spine0 p1",ifDescr="Ethernet1/1",ifIndex="436207616",ifName="Eth1/1"} 8.340012345e+12
ifHCInOctets{ifAlias="",ifDescr="Ethernet1/2",ifIndex="436211712",ifName="Eth1/2"} 1.024e+06
# HELP ifHCOutOctets The total number of octets transmitted out of the interface, including framing characters - 1.3.6.1.2.1.31.1.1.1.10
# TYPE ifHCOutOctets counter
ifHCOutOctets{ifAlias="to spine0 p1",ifDescr="Ethernet1/1",ifIndex="436207616",ifName="Eth1/1"} 7.1100023e+12
ifHCOutOctets{ifAlias="",ifDescr="Ethernet1/2",ifIndex="436211712",ifName="Eth1/2"} 2048
# HELP ifHCInUcastPkts The number of packets, delivered by this sub-layer to a higher (sub-)layer, which were not addressed to a multicast or broadcast address at this sub-layer - 1.3.6.1.2.1.31.1.1.1.7
# TYPE ifHCInUcastPkts counter
ifHCInUcastPkts{ifAlias="to spine0 p1",ifDescr="Ethernet1/1",ifIndex="436207616",ifName="Eth1/1"} 2.033e+09
# HELP ifInErrors For packet-oriented interfaces, the number of inbound packets that contained errors preventing them from being deliverable to a higher-layer protocol - 1.3.6.1.2.1.2.2.1.14
# TYPE ifInErrors counter
ifInErrors{ifAlias="to spine0 p1",ifDescr="Ethernet1/1",ifIndex="436207616",ifName="Eth1/1"} 3
# HELP ifInDiscards The number of inbound packets which were chosen to be discarded even though no errors had been detected - 1.3.6.1.2.1.2.2.1.13
# TYPE ifInDiscards counter
ifInDiscards{ifAlias="to spine0 p1",ifDescr="Ethernet1/1",ifIndex="436207616",ifName="Eth1/1"} 41
# HELP ifOutDiscards The number of outbound packets which were chosen to be discarded even though no errors had been detected - 1.3.6.1.2.1.2.2.1.19
# TYPE ifOutDiscards counter
ifOutDiscards{ifAlias="to spine0 p1",ifDescr="Ethernet1/1",ifIndex="436207616",ifName="Eth1/1"} 7
# HELP ifHighSpeed An estimate of the interface's current bandwidth in units of 1,000,000 bits per second - 1.3.6.1.2.1.31.1.1.1.15
# TYPE ifHighSpeed gauge
ifHighSpeed{ifAlias="to spine0 p1",ifDescr="Ethernet1/1",ifIndex="436207616",ifName="Eth1/1"} 400000
ifHighSpeed{ifAlias="",ifDescr="Ethernet1/2",ifIndex="436211712",ifName="Eth1/2"} 0
# HELP ifOperStatus The current operational state of the interface - 1.3.6.1.2.1.2.2.1.8
# TYPE ifOperStatus gauge
ifOperStatus{ifAlias="to spine0 p1",ifDescr="Ethernet1/1",ifIndex="436207616",ifName="Eth1/1"} 1
ifOperStatus{ifAlias="",ifDescr="Ethernet1/2",ifIndex="436211712",ifName="Eth1/2"} 2
# HELP snmp_scrape_duration_seconds Total SNMP time scrape took (walk and processing).
# TYPE snmp_scrape_duration_seconds gauge
snmp_scrape_duration_seconds{module="if_mib"} 0.48
"""  # noqa: E501 (exporter lines as they are)


def _by_port(readings: list[PortReading]) -> dict[str, PortReading]:
    return {r.port: r for r in readings}


def test_node_exporter_netdev_counters_rates_and_states_of_a_gpu_host():
    readings = _by_port(prometheus.parse(NODE, 7, node="gpu-7"))
    assert set(readings) == {"gpu-7/lo", "gpu-7/eth0", "gpu-7/eth2", "gpu-7/eth3"}
    eth2 = readings["gpu-7/eth2"]
    assert eth2.values == {
        "carrier_changes": (4, K64),
        "link_downed": (2, K64),
        "rx_bytes": (883920125441000, K64),
        "drops": (3, K64),
        "rcv_errors": (5, K64),
        "rx_packets": (214721338000, K64),
        "tx_bytes": (901822004117000, K64),
        "xmit_discards": (1, K64),
        "tx_packets": (219045513000, K64),
    }  # transmit_errs has no twin metric
    assert (eth2.time_ns, eth2.rate_bps, eth2.oper_up) == (7, 400e9, True)
    assert (readings["gpu-7/eth0"].rate_bps, readings["gpu-7/eth0"].oper_up) == (1e9, True)


def test_a_down_port_is_seen_down_and_an_unknown_speed_is_no_rate():
    eth3 = _by_port(prometheus.parse(NODE, 7))["eth3"]
    assert (eth3.oper_up, eth3.rate_bps) == (False, 0.0)  # speed -125000: node_exporter's -1 Mb/s


def test_the_loopbacks_unknown_operstate_is_not_reported_as_down():
    # node_network_up is 0 for lo (operstate "unknown" is not "up"); node_network_info decides.
    readings = prometheus.parse(NODE, 7)
    assert _by_port(readings)["lo"].oper_up is None
    assert port_states(readings) == {"eth0": True, "eth2": True, "eth3": False}


@pytest.mark.parametrize(
    ("state", "up"),
    [("up", True), ("down", False), ("lowerlayerdown", False), ("notpresent", False), ("dormant", None),
     ("testing", None), ("unknown", None)],
)  # fmt: skip
def test_operstates_map_to_up_down_or_not_reported(state, up):
    text = f'node_network_info{{device="swp1",operstate="{state}"}} 1\nnode_network_up{{device="swp1"}} 0\n'
    assert prometheus.parse(text, 0)[0].oper_up is up


def test_node_network_up_decides_only_without_node_network_info():
    text = 'node_network_up{device="swp1"} 0\nnode_network_up{device="swp2"} 1\n'
    assert port_states(prometheus.parse(text, 0)) == {"swp1": False, "swp2": True}


def test_a_port_that_reports_only_its_state_is_a_reading_but_not_a_column():
    text = (
        'node_network_info{device="swp9",operstate="down"} 1\n'
        'node_network_speed_bytes{device="swp9"} 5e+10\n'
        'node_network_receive_bytes_total{device="swp1"} 10\n'
    )
    readings = prometheus.parse(text, 3)
    assert PortReading("swp9", 3, {}, 400e9, False) in readings
    (chunk,) = columns_of(readings)
    assert (chunk.ports, chunk.columns) == (["swp1"], {"rx_bytes": [10]})
    assert port_rates(readings) == {"swp9": 400e9}


def test_ethtool_mlx5_statistics_with_pause_duration_in_ns_and_physical_port_counters_winning():
    eth2 = _by_port(prometheus.parse(NODE + ETHTOOL, 7))["eth2"]
    assert {m: v for m, (v, _) in eth2.values.items()} == {
        "carrier_changes": 4,
        "link_downed": 2,
        "rx_bytes": 883920125441000,
        "drops": 17,  # rx_discards_phy, not netdev's receive_drop 3
        "rcv_errors": 2,  # rx_crc_errors_phy, not netdev's receive_errs 5
        "rx_packets": 214721338000,
        "tx_bytes": 901822004117000,
        "xmit_discards": 1,
        "tx_packets": 219045513000,
        "symbol_errors": 11,
        "pause_rx": 52311,  # priority 3; prio0 is not the RoCE priority
        "pause_duration_ns": 1_830_000,  # 1830 us
        "pause_tx": 4410,
        "cnp_sent": 3021,  # typed counter: prometheus_client names the sample ..._total
        "cnp_handled": 2987,
        "ecn_marked": 3050,
        "out_of_sequence": 14,
        "packet_seq_errors": 6,
    }
    assert {kind for _, kind in eth2.values.values()} == {K64}


def test_the_physical_port_counters_win_in_either_order():
    ethtool_first = (
        'node_ethtool_rx_discards_phy{device="eth2"} 17\nnode_network_receive_drop_total{device="eth2"} 3\n'
    )
    assert prometheus.parse(ethtool_first, 0)[0].values["drops"] == (17, K64)


def test_the_root_qdiscs_drops_are_the_ports_transmit_discards_winning_over_the_drivers():
    """node_exporter --collector.qdisc: what tc's tbf dropped on a hot port (invisible before)."""
    text = (
        'node_network_transmit_drop_total{device="swp3"} 2\n'
        'node_qdisc_drops_total{device="swp3",kind="tbf"} 1431\n'
        'node_qdisc_drops_total{device="swp4",kind="fq_codel"} 0\n'
    )
    by_port = _by_port(prometheus.parse(text, 0))
    assert by_port["swp3"].values == {"xmit_discards": (1431, K64)}
    assert by_port["swp4"].values == {"xmit_discards": (0, K64)}


def test_raw_ethtool_names_and_another_pfc_priority():
    text = (
        'node_ethtool_rx_prio0_pause{device="eth2"} 99\n'
        'node_ethtool_rx_prio3_pause_total{device="eth2"} 5\n'
        'node_ethtool_received_prio0_pause_duration{device="eth2"} 2\n'
    )
    assert prometheus.parse(text, 0)[0].values == {"pause_rx": (5, K64)}
    assert prometheus.parse(text, 0, pfc_priority=0)[0].values == {
        "pause_rx": (99, K64),
        "pause_duration_ns": (2000, K64),
    }
    with pytest.raises(InvalidArgumentError, match=r"pfc_priority: a PFC priority is 0\.\.7, got 8"):
        prometheus.parse(text, 0, pfc_priority=8)


def test_snmp_exporter_if_mib_counters_speed_and_oper_status():
    readings = _by_port(prometheus.parse(IF_MIB, 11, node="leaf0"))
    assert set(readings) == {"leaf0/Eth1/1", "leaf0/Eth1/2"}
    up = readings["leaf0/Eth1/1"]
    assert up.values == {
        "rx_bytes": (8340012345000, K64),
        "tx_bytes": (7110002300000, K64),
        "rx_packets": (2033000000, K64),
        "rcv_errors": (3, K32),  # IF-MIB Counter32: wraps at 2^32
        "drops": (41, K32),
        "xmit_discards": (7, K32),
    }
    assert (up.rate_bps, up.oper_up) == (400e9, True)
    down = readings["leaf0/Eth1/2"]
    assert (down.values, down.rate_bps, down.oper_up) == (
        {"rx_bytes": (1024000, K64), "tx_bytes": (2048, K64)},
        0.0,
        False,
    )


def test_if_mib_devices_fall_back_to_ifdescr_then_ifindex_and_states_may_be_labels():
    text = (
        'ifHCInOctets{ifDescr="Ethernet7",ifIndex="7"} 5\n'
        'ifHCInOctets{ifIndex="8"} 6\n'
        'ifOperStatus{ifIndex="8",ifOperStatus="up"} 0\n'
        'ifOperStatus{ifIndex="8",ifOperStatus="lowerLayerDown"} 1\n'
        'ifOperStatus_info{ifDescr="Ethernet7",ifIndex="7",ifOperStatus="up"} 1\n'
        'ifOperStatus{ifIndex="9"} 5\n'  # dormant
    )
    readings = _by_port(prometheus.parse(text, 0))
    assert {p: (r.values, r.oper_up) for p, r in readings.items()} == {
        "Ethernet7": ({"rx_bytes": (5, K64)}, True),
        "8": ({"rx_bytes": (6, K64)}, False),
        "9": ({}, None),
    }


def test_port_names_map_devices_to_the_twins_ports_and_skip_the_others():
    ib = 'node_infiniband_port_transmit_wait_total{device="mlx5_0",port="1"} 42\n'
    mapping = {"eth2": "gpu-7/p1", "Eth1/1": "leaf0/p1", "mlx5_0/p1": "gpu-7/p0"}
    readings = prometheus.parse(NODE + ETHTOOL + IF_MIB + ib, 0, node="ignored", port_names=mapping)
    assert sorted(r.port for r in readings) == ["gpu-7/p0", "gpu-7/p1", "leaf0/p1"]
    assert _by_port(readings)["gpu-7/p1"].values["pause_rx"] == (52311, K64)


def test_device_port_name_templates_leave_infiniband_naming_as_it_was():
    text = NODE + 'node_infiniband_port_transmit_wait_total{device="mlx5_0",port="1"} 42\n'
    ports = {r.port for r in prometheus.parse(text, 0, node="gpu-7", device_port_name="{node}:{device}")}
    assert ports == {"gpu-7:lo", "gpu-7:eth0", "gpu-7:eth2", "gpu-7:eth3", "gpu-7/mlx5_0/p1"}
    with pytest.raises(InvalidArgumentError, match=r"device_port_name: template '\{node\}/p\{port\}'"):
        prometheus.parse(NODE, 0, device_port_name="{node}/p{port}")


def test_unknown_families_are_ignored():
    text = (
        "# HELP http_request_duration_seconds A histogram.\n"
        "# TYPE http_request_duration_seconds histogram\n"
        'http_request_duration_seconds_bucket{le="0.1"} 3\n'
        'http_request_duration_seconds_bucket{le="+Inf"} 5\n'
        "http_request_duration_seconds_sum 0.7\n"
        "http_request_duration_seconds_count 5\n"
        'node_network_receive_fifo_total{device="eth0"} 3\n'
        'node_network_transmit_errs_total{device="eth0"} -1\n'  # unmapped: not even checked
        'node_ethtool_received_prio3_packets{device="eth0"} NaN\n'
        'node_hwmon_temp_celsius{chip="nvme_nvme0",sensor="temp1"} 36.85\n'
    )
    assert prometheus.parse(text, 0) == []


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ('node_network_receive_bytes_total{device="eth0",} 5 6 7 8', None),  # lax but valid
        ('node_network_receive_bytes_total{device="eth0} 5', "malformed line"),
        ("node_network_receive_bytes_total{device=eth0} 5", "malformed labels"),
        ('node_network_receive_bytes_total{device="eth0"} lots', "malformed line"),
        ('node_cpu_seconds_total{cpu="0",mode="idle"} 1 2 x', "malformed line"),  # any family
        ("# TYPE node_network_up gaugish", "unknown metric type"),
        ("this is not prometheus", "malformed line"),
        ('node_network_receive_bytes_total{device="eth0"} -5', "counter value -5 is not a finite number"),
        ('node_network_receive_bytes_total{device="eth0"} +Inf', "counter value inf is not a finite number"),
        ('node_network_receive_bytes_total{port="1"} 5', "needs the label device"),
        ('ifInErrors{ifAlias="x"} 5', "needs one of the labels ifName, ifDescr, ifIndex"),
    ],
)
def test_a_malformed_line_is_refused_naming_its_line(line, problem):
    lines = NODE.split("\n")
    lines.insert(40, line)  # line 41, among node_network_info's samples
    text = "\n".join(lines)
    if problem is None:
        assert prometheus.parse(text, 0)
        return
    with pytest.raises(FormatError) as raised:
        prometheus.parse(text, 0, where="gpu-7:9100")
    message = raised.value.details
    assert message.startswith("gpu-7:9100:41: ") and problem in message
    assert message.endswith(f": {line!r}")


def test_a_repeated_bad_sample_names_the_line_that_holds_it():
    text = 'node_network_up{device="a"} 1\nnode_network_carrier_changes_total{device="a"} 1 1000\n'
    bad = text + 'node_network_carrier_changes_total{device="a"} NaN 2000\n'
    with pytest.raises(FormatError, match=r"^<metrics>:3: counter value nan is not a finite number"):
        prometheus.parse(bad, 0)


def test_error_messages_quote_at_most_200_characters_of_the_input():
    long_device = "x" * 5000
    for line in (
        'node_network_receive_bytes_total{device="' + long_device + "} 1",  # unclosed quote
        f'node_network_receive_bytes_total{{device="{long_device}"}} -1',  # a bad value
    ):
        with pytest.raises(FormatError) as raised:
            prometheus.parse(line + "\n", 0)
        message = raised.value.details
        assert message.count("x") <= prometheus.QUOTE_LIMIT and len(message) < 400
        assert message.endswith(f"... ({len(line)} characters)")
    with pytest.raises(InvalidArgumentError) as raised:
        prometheus.parse(NODE, 0, device_port_name="{node}/" + "y" * 1000 + "/{port}")
    assert len(raised.value.details) < 400


def switch_scrape(ports: int = 64, seed: int = 1) -> str:
    """A leaf switch's node_exporter: mgmt eth0, lo and swp1..swp64 (50 GB/s), netdev and netclass
    families with HELP and TYPE lines, and other collectors' families: about 1,560 lines."""
    rnd = random.Random(seed)
    devices = ["eth0", "lo", *(f"swp{i}" for i in range(1, ports + 1))]
    out: list[str] = []

    def family(name: str, kind: str, samples: list[str]) -> None:
        out.extend([f"# HELP {name} Network device statistic.", f"# TYPE {name} {kind}", *samples])

    for direction in ("receive", "transmit"):
        for stat in ("bytes", "compressed", "drop", "errs", "fifo", "frame", "multicast", "packets"):
            name = f"node_network_{direction}_{stat}_total"
            family(name, "counter", [f'{name}{{device="{d}"}} {rnd.randrange(10**12)}' for d in devices])
    for stat in ("carrier_changes_total", "carrier_down_changes_total"):
        name = f"node_network_{stat}"
        family(name, "counter", [f'{name}{{device="{d}"}} {rnd.randrange(9)}' for d in devices])
    family(
        "node_network_info",
        "gauge",
        [
            f'node_network_info{{address="1c:34:da:00:00:{i:02x}",adminstate="up",broadcast="ff:ff:ff:ff:ff:ff",'
            f'device="{d}",duplex="full",ifalias="",operstate="{"unknown" if d == "lo" else "up"}"}} 1'
            for i, d in enumerate(devices)
        ],
    )
    for name, value in (("speed_bytes", "5e+10"), ("up", None), ("mtu_bytes", "9216")):
        samples = [f'node_network_{name}{{device="{d}"}} {value or int(d != "lo")}' for d in devices]
        family(f"node_network_{name}", "gauge", samples)
    cpu = [f'node_cpu_seconds_total{{cpu="{c}",mode="{m}"}} {rnd.random() * 1e6:.2f}' for c in range(8)
           for m in ("idle", "iowait", "irq", "nice", "softirq", "steal", "system", "user")]  # fmt: skip
    family("node_cpu_seconds_total", "counter", cpu)
    field = 0
    while len(out) < 1560:
        name = f"node_memory_F{field}_bytes"
        family(name, "gauge", [f"{name} {rnd.randrange(10**10)}"])
        field += 1
    return "\n".join(out) + "\n"


def test_a_64_port_switch_scrape():
    text = switch_scrape()
    readings = prometheus.parse(text, 0, node="leaf0")
    assert len(readings) == 66 and all(len(r.values) == 9 for r in readings)
    assert port_states(readings) == {f"leaf0/{d}": True for d in ["eth0", *(f"swp{i}" for i in range(1, 65))]}
    assert set(port_rates(readings).values()) == {400e9}
