"""ns-3 HPCC topology text: HPCC's own layout imports; malformed lines are named."""

from __future__ import annotations

import pytest

from services.common.errors import InvalidArgument
from services.topology.fabric import LinkState, NodeKind, format_ipv4
from services.topology.formats import export_fabric, import_fabric
from services.topology.formats.ns3_hpcc import PACKET_BITS

# Two hosts on one switch, then HPCC-style notes after a blank line, as in HPCC's mix/topology.txt.
STAR = """\
3 1 2
2
0 2 100Gbps 0.001ms 0
1 2 25Gbps 500ns 0.01

First line: total node #, switch node #, link #
"""


def test_an_hpcc_topology_imports_with_kinds_rates_delays_and_loss():
    fabric = import_fabric("ns3_hpcc", STAR)
    assert fabric.node_kind.tolist() == [NodeKind.HOST, NodeKind.HOST, NodeKind.SWITCH]
    assert fabric.node_names == ["host-0", "host-1", "switch-2"]
    assert fabric.link_rate_bps.tolist() == [100_000_000_000, 25_000_000_000]
    assert fabric.link_latency_ns.tolist() == [1000, 500]
    assert fabric.link_state.tolist() == [LinkState.UP, LinkState.DEGRADED]
    # A packet of PACKET_BITS bits survives with probability (1 - ber) ** PACKET_BITS = 0.99.
    assert (1 - fabric.link_ber[1]) ** PACKET_BITS == pytest.approx(0.99, rel=1e-12)
    assert fabric.link_port_b.tolist() == [1, 2]  # the switch's ports in the order of its links
    assert [format_ipv4(ip) for ip in fabric.node_ip] == ["11.0.0.1", "11.0.1.1", ""]


def test_an_error_rate_of_one_is_a_down_link_and_exports_back_as_one():
    fabric = import_fabric("ns3_hpcc", STAR.replace("500ns 0.01", "500ns 1"))
    assert fabric.link_state.tolist() == [LinkState.UP, LinkState.DOWN]
    assert export_fabric(fabric, "ns3_hpcc").splitlines()[3] == "1 2 25Gbps 500ns 1.0"


def test_rates_and_delays_in_other_units():
    text = "2 0 1\n0 1 12.5GBps 2us 0\n"
    fabric = import_fabric("ns3_hpcc", text)
    assert fabric.link_rate_bps.tolist() == [100_000_000_000]
    assert fabric.link_latency_ns.tolist() == [2000]


@pytest.mark.parametrize(
    ("text", "line", "expected"),
    [
        ("3 1\n2\n", 1, "expected the header"),
        ("3 x 2\n", 1, "expected the header"),
        ("3 1 2\n2 7\n", 2, "expected 1 switch ids, got 2"),
        ("3 1 2\n5\n", 2, "distinct node ids"),
        ("3 1 2\n2\n0 2 100Gbps 0.001ms\n1 2 100Gbps 1us 0\n", 3, "expected `src dst rate delay error_rate`"),
        ("3 1 2\n2\n0 2 100Gbps 0.001ms 0\n1 9 100Gbps 1us 0\n", 4, "node 9 is not among the 3 nodes"),
        ("3 1 2\n2\n0 2 100Gbps 0.001ms 0\n2 2 100Gbps 1us 0\n", 4, "to itself"),
        ("3 1 2\n2\n0 2 fast 0.001ms 0\n1 2 100Gbps 1us 0\n", 3, "positive rate"),
        ("3 1 2\n2\n0 2 100Gbps soon 0\n1 2 100Gbps 1us 0\n", 3, "expected a delay"),
        ("3 1 2\n2\n0 2 100Gbps 1us 2\n1 2 100Gbps 1us 0\n", 3, "error rate in 0..1"),
        ("3 1 2\n2\n0 2 100Gbps 1us 0\n", 4, "expected link 2 of the 2"),
        ("3 1 1\n2\n0 2 100Gbps 1us 0\n1 2 100Gbps 1us 0\n", 4, "declares 1 links"),
        ("3 1 1\n2\n0 2 100Gbps 1us 0\n\n1 2 100Gbps 1us 0\n", 5, "declares 1 links"),
        ("3 1 1\n2\n0 2 100Gbps 1us 0\nnotes\n", 4, "declares 1 links"),
    ],
)
def test_a_malformed_line_is_named(text, line, expected):
    with pytest.raises(InvalidArgument) as error:
        import_fabric("ns3_hpcc", text)
    assert error.value.field == f"line {line}"
    assert expected in error.value.problem


def test_export_writes_bps_where_the_rate_is_not_whole_gbps():
    fabric = import_fabric("ns3_hpcc", "2 1 1\n1\n0 1 56250000000bps 100ns 0\n")
    assert export_fabric(fabric, "ns3_hpcc").splitlines()[2] == "0 1 56250000000bps 100ns 0"
