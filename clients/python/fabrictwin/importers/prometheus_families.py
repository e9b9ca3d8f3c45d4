"""The tables of `fabrictwin.importers.prometheus`: which exposed metric becomes which twin metric.

`prometheus` (the module users read) documents every family; this module holds the names. A rule
is looked up by the sample's name without a trailing `_total`: prometheus_client appends `_total`
to the samples of a family typed `counter` whose name lacks it (snmp_exporter's `ifHCInOctets`), and
node_exporter's ethtool stats are untyped, so with or without the suffix they find the same rule.
"""

from __future__ import annotations

import dataclasses
import functools
import re

__all__ = [
    "ETHTOOL_STATS",
    "IF_MIB_METRICS",
    "IF_MIB_NAME_LABELS",
    "IF_MIB_OPER_STATUS",
    "IF_MIB_SPEED",
    "KIND",
    "KIND_32",
    "LEGACY_METRICS",
    "METRICS",
    "NETDEV_INFO",
    "NETDEV_METRICS",
    "NETDEV_SPEED",
    "NETDEV_UP",
    "OPER_STATUS",
    "RATE_METRIC",
    "Rule",
    "ethtool_names",
    "oper_up",
    "rules",
]

KIND = "cumulative_64"
KIND_32 = "cumulative_32"  # IF-MIB Counter32 objects: they wrap at 2^32

# --- node_exporter, infiniband collector (labels device, port) -------------------------------------
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
LEGACY_METRICS = {  # counters_ext in sysfs: used only for a port that lacks the current name
    "node_infiniband_legacy_data_transmitted_bytes_total": "tx_bytes",
    "node_infiniband_legacy_data_received_bytes_total": "rx_bytes",
    "node_infiniband_legacy_packets_transmitted_total": "tx_packets",
    "node_infiniband_legacy_packets_received_total": "rx_packets",
}

# --- node_exporter, netdev and netclass collectors (label device) ----------------------------------
NETDEV_METRICS = {
    "node_network_transmit_bytes_total": "tx_bytes",
    "node_network_receive_bytes_total": "rx_bytes",
    "node_network_transmit_packets_total": "tx_packets",
    "node_network_receive_packets_total": "rx_packets",
    "node_network_receive_drop_total": "drops",  # ethtool rx_discards_phy wins where both exist
    "node_network_transmit_drop_total": "xmit_discards",
    "node_network_receive_errs_total": "rcv_errors",  # ethtool rx_crc_errors_phy wins where both exist
    "node_network_carrier_changes_total": "carrier_changes",
    "node_network_carrier_down_changes_total": "link_downed",
}
QDISC_DROPS = "node_qdisc_drops_total"  # node_exporter --collector.qdisc: the root qdisc of each device
NETDEV_SPEED = "node_network_speed_bytes"  # bytes/s; negative (-125000 for -1 Mb/s) when unknown
NETDEV_UP = "node_network_up"  # 1 if operstate is "up", else 0 (also for "unknown")
NETDEV_INFO = "node_network_info"  # label operstate

# --- node_exporter, ethtool collector (label device): mlx5 statistic names, {p} the PFC priority ----
ETHTOOL_STATS = {
    "rx_prio{p}_pause": "pause_rx",
    "tx_prio{p}_pause": "pause_tx",
    "rx_prio{p}_pause_duration": "pause_duration_ns",  # microseconds on mlx5: times 1000
    "np_cnp_sent": "cnp_sent",
    "rp_cnp_handled": "cnp_handled",
    "np_ecn_marked_roce_packets": "ecn_marked",
    "rx_discards_phy": "drops",
    "out_of_sequence": "out_of_sequence",
    "packet_seq_err": "packet_seq_errors",
    "rx_symbol_err_phy": "symbol_errors",
    "rx_crc_errors_phy": "rcv_errors",
}
_ETHTOOL_SCALE = {"rx_prio{p}_pause_duration": 1000}  # us -> ns
_RX = re.compile(r"(^|_)rx(_|$)")
_TX = re.compile(r"(^|_)tx(_|$)")

# --- snmp_exporter, if_mib module (labels ifName, ifDescr, ifIndex) -------------------------------
IF_MIB_METRICS = {  # (metric, kind): the HC objects are Counter64, the others Counter32 (RFC 2863)
    "ifHCInOctets": ("rx_bytes", KIND),
    "ifHCOutOctets": ("tx_bytes", KIND),
    "ifHCInUcastPkts": ("rx_packets", KIND),
    "ifHCOutUcastPkts": ("tx_packets", KIND),
    "ifInErrors": ("rcv_errors", KIND_32),
    "ifOutDiscards": ("xmit_discards", KIND_32),
    "ifInDiscards": ("drops", KIND_32),
}
IF_MIB_SPEED = "ifHighSpeed"  # Mb/s
IF_MIB_OPER_STATUS = "ifOperStatus"  # 1 up .. 7 lowerLayerDown; or a state set / _info labelled so
IF_MIB_NAME_LABELS = ("ifName", "ifDescr", "ifIndex")  # the first one present names the device
OPER_STATUS = {
    1: "up",
    2: "down",
    3: "testing",
    4: "unknown",
    5: "dormant",
    6: "notPresent",
    7: "lowerLayerDown",
}

# Operational states (Linux operstate, IF-MIB ifOperStatus, RFC 2863) -> up; the rest are None.
_OPER_UP = {"up": True, "down": False, "lowerlayerdown": False, "notpresent": False}


def oper_up(state: str) -> bool | None:
    """True for "up", False for "down", "lowerLayerDown" and "notPresent", None for the others.

    >>> oper_up("up"), oper_up("lowerLayerDown"), oper_up("unknown"), oper_up("dormant")
    (True, False, None, None)
    """
    return _OPER_UP.get(state.lower())


@dataclasses.dataclass(frozen=True)
class Rule:
    """What one exposed metric is: a counter of a twin metric, a link rate, or an operational state."""

    family: str  # "infiniband", "netdev", "ethtool", "if_mib": says which labels name the port
    role: str  # "counter", "rate", "up" (1/0 gauge), "operstate" (label), "oper_status" (IF-MIB)
    metric: str = ""  # counters: the twin's metric
    kind: str = KIND
    scale: float = 1  # counters: reading times this (ethtool pause duration: 1000); rates: bits/s per unit
    precedence: int = 0  # the higher one wins where two rules give one metric of one port


def ethtool_names(stat: str) -> tuple[str, ...]:
    """The names an ethtool statistic is exposed under: node_exporter's and the raw `node_ethtool_<stat>`.

    node_exporter lower-cases the statistic, turns the tokens rx and tx into received and
    transmitted, and exposes it untyped; other exporters (textfile scripts) keep the raw name.

    >>> ethtool_names("rx_prio3_pause")
    ('node_ethtool_received_prio3_pause', 'node_ethtool_rx_prio3_pause')
    >>> ethtool_names("np_cnp_sent")
    ('node_ethtool_np_cnp_sent',)
    """
    name = _TX.sub(r"\1transmitted\2", _RX.sub(r"\1received\2", stat.lower()))
    return tuple(dict.fromkeys((f"node_ethtool_{name}", f"node_ethtool_{stat}")))


def _base(name: str) -> str:
    return name.removesuffix("_total")


@functools.lru_cache(maxsize=8)
def rules(pfc_priority: int = 3) -> dict[str, Rule]:
    """Every rule by the exposed name without `_total`, for the given PFC priority of the ethtool stats."""
    table: dict[str, Rule] = {}
    for name, metric in LEGACY_METRICS.items():
        table[_base(name)] = Rule("infiniband", "counter", metric)
    for name, metric in METRICS.items():
        table[_base(name)] = Rule("infiniband", "counter", metric, precedence=1)
    table[RATE_METRIC] = Rule("infiniband", "rate", scale=8)
    for name, metric in NETDEV_METRICS.items():
        table[_base(name)] = Rule("netdev", "counter", metric)
    # The root qdisc's drops (the qdisc collector, labels device and kind): what tc's queue and shaper
    # dropped on transmit, which netdev's transmit_drop (the driver's, after the qdisc) does not count.
    table[_base(QDISC_DROPS)] = Rule("netdev", "counter", "xmit_discards", precedence=1)
    table[NETDEV_SPEED] = Rule("netdev", "rate", scale=8)
    table[NETDEV_UP] = Rule("netdev", "up")
    table[NETDEV_INFO] = Rule("netdev", "operstate", precedence=1)
    for pattern, metric in ETHTOOL_STATS.items():
        rule = Rule("ethtool", "counter", metric, scale=_ETHTOOL_SCALE.get(pattern, 1), precedence=1)
        for name in ethtool_names(pattern.format(p=pfc_priority)):
            table[name] = rule
    for name, (metric, kind) in IF_MIB_METRICS.items():
        table[name] = Rule("if_mib", "counter", metric, kind)
    table[IF_MIB_SPEED] = Rule("if_mib", "rate", scale=1e6)
    table[IF_MIB_OPER_STATUS] = Rule("if_mib", "oper_status", precedence=1)
    table[f"{IF_MIB_OPER_STATUS}_info"] = Rule("if_mib", "oper_status", precedence=1)
    return table
