"""Real ibnetdiscover dumps and ibsim net files import with the counts they really have.

Counts were taken independently of the importer, with grep on each file:
  nodes      = grep -cE '^(Switch|Ca|Hca)' FILE      switches = grep -cE '^Switch' FILE
  ports      = sum of the header port counts: grep -E '^(Switch|Ca|Hca)' FILE | awk '{s+=$2} END {print s}'
  port lines = grep -c '^\\[' FILE; every link is listed from both ends, so links = port lines / 2.
"""

from __future__ import annotations

import numpy as np
import pytest

from services.common.errors import InvalidArgument
from services.topology.fabric import NodeKind
from services.topology.formats import import_fabric
from services.topology.formats.ibnetdiscover import import_ibnetdiscover

# file: (nodes, switches, ports = sum of radix, port lines, links)
REAL_DUMPS = {
    "ibnetdiscover/ibtopotool-2.topo": (3, 1, 12, 4, 2),
    "ibnetdiscover/ibtopotool-3.topo": (8, 2, 57, 20, 10),
    "ibnetdiscover/ibtopotool-4.topo": (2, 1, 38, 2, 1),
    "ibsim/net": (4, 2, 20, 8, 4),
    "ibsim/net.1": (3, 1, 12, 4, 2),
    "ibsim/net.2sw2path": (4, 2, 20, 8, 4),
    "ibsim/net.2sw2path4hca": (6, 2, 24, 12, 6),
    "ibsim/net.2sw2path4hca2port": (4, 2, 20, 12, 6),
}


def _connected_ports(fabric) -> int:
    return 2 * fabric.num_links


@pytest.mark.parametrize(("path", "counts"), REAL_DUMPS.items(), ids=list(REAL_DUMPS))
def test_a_real_dump_imports_with_its_node_port_and_link_counts(shared_text, path, counts):
    nodes, switches, ports, port_lines, links = counts
    fabric = import_fabric("ibnetdiscover", shared_text(path))
    assert fabric.num_nodes == nodes
    assert fabric.num_switches == switches
    assert fabric.num_hosts == nodes - switches
    assert int(fabric.node_radix.sum()) == ports
    assert _connected_ports(fabric) == port_lines
    assert fabric.num_links == links


def test_the_man_page_example_has_links_whose_ends_disagree_and_is_refused_naming_both_lines(shared_text):
    """ibtopotool-1.topo line 15 says 4xSDR for ISR9024 port 10 <-> SW-6IB4 port 1; line 26, the
    other end, says 1xSDR. A real link trains to one width, so the dump contradicts itself."""
    with pytest.raises(InvalidArgument) as error:
        import_fabric("ibnetdiscover", shared_text("ibnetdiscover/ibtopotool-1.topo"))
    assert error.value.field == "line 15"
    assert "line 26" in error.value.problem
    assert "10 Gb/s" in error.value.problem and "2.5 Gb/s" in error.value.problem


def test_the_man_page_example_imports_with_its_counts_when_told_to_take_the_slower_end(shared_text):
    fabric = import_ibnetdiscover(shared_text("ibnetdiscover/ibtopotool-1.topo"), rate_mismatch="slower")
    assert (fabric.num_nodes, fabric.num_switches, int(fabric.node_radix.sum())) == (6, 2, 40)
    assert fabric.num_links == 14 // 2
    # The two disagreeing links (4xSDR one way, 1xSDR the other) run at 1xSDR = 2.5 Gb/s.
    assert sorted((fabric.link_rate_bps / 1e9).tolist()) == [2.5, 2.5, 10, 10, 10, 10, 10]


def test_the_dump_with_a_stray_tool_error_line_imports_and_logs_the_skipped_line(shared_text, caplog):
    text = shared_text("ibnetdiscover/ibtopotool-3.topo")
    assert text.startswith("src/query_smp.c:195; umad")
    with caplog.at_level("WARNING"):
        import_fabric("ibnetdiscover", text)
    assert "skipped tool diagnostic on line 1" in caplog.text


def test_loopback_cables_become_links_between_two_ports_of_one_switch(shared_text):
    fabric = import_fabric("ibnetdiscover", shared_text("ibnetdiscover/ibtopotool-3.topo"))
    loops = fabric.link_a == fabric.link_b
    switch = fabric.node_index("SwitchIB Mellanox Technologies")
    assert (fabric.link_a[loops] == switch).all()
    pairs = sorted(zip(fabric.link_port_a[loops].tolist(), fabric.link_port_b[loops].tolist(), strict=True))
    assert pairs == [(1, 2), (19, 21), (29, 30)]


def test_width_times_speed_becomes_gbps(shared_text):
    """ibtopotool-3.topo: 8 port lines say 4xEDR, 6 4xFDR, 4 4xQDR, 2 4xSDR (grep | sort | uniq -c)."""
    fabric = import_fabric("ibnetdiscover", shared_text("ibnetdiscover/ibtopotool-3.topo"))
    rates, counts = np.unique(fabric.link_rate_bps / 1e9, return_counts=True)
    assert dict(zip(rates.tolist(), counts.tolist(), strict=True)) == {10.0: 1, 40.0: 2, 56.25: 3, 100.0: 4}


def test_guids_lids_and_descriptions_are_kept(shared_text):
    fabric = import_fabric("ibnetdiscover", shared_text("ibnetdiscover/ibtopotool-3.topo"))
    sx = fabric.node_index("MF0;switch-de779e:SX6012/U1")
    assert int(fabric.node_guid[sx]) == 0xF4521403005764B0
    assert int(fabric.node_lid[sx]) == 174
    hca = fabric.node_index("r-ufm216 HCA-2")
    assert fabric.node_kind[hca] == NodeKind.HOST
    assert int(fabric.node_guid[hca]) == 0xE41D2D030061F957
    assert int(fabric.node_lid[hca]) == 2  # from its port line: `# lid 2 lmc 0 ...`


def test_a_ca_takes_the_lid_of_its_lowest_numbered_port(shared_text):
    """In the man-page example H-0008f10403960558 has port 2 at lid 14 (listed first) and port 1 at lid 10."""
    fabric = import_ibnetdiscover(shared_text("ibnetdiscover/ibtopotool-1.topo"), rate_mismatch="slower")
    node = fabric.node_index("MT23108 InfiniHost Mellanox Technologies (H-0008f10403960558)")
    assert int(fabric.node_lid[node]) == 10


def test_nodes_sharing_a_description_are_named_by_description_and_id(shared_text):
    fabric = import_ibnetdiscover(shared_text("ibnetdiscover/ibtopotool-1.topo"), rate_mismatch="slower")
    shared = [name for name in fabric.node_names if name.startswith("MT23108")]
    assert len(shared) == 4 == len(set(shared))
    assert "MT23108 InfiniHost Mellanox Technologies (H-0008f10403960984)" in shared
    assert "ISR9024 Voltaire" in fabric.node_names


def test_a_whitespace_only_line_between_blocks_is_skipped(shared_text):
    text = shared_text("ibnetdiscover/ibtopotool-4.topo")
    assert " \n" in text
    fabric = import_fabric("ibnetdiscover", text)
    assert fabric.link_names == ["Sun DCS 36 QDR switch localhost/p23<->nsn33-43 HCA-1/p2"]


def test_switch_tiers_are_inferred_from_hosts_and_distance(shared_text):
    """ibsim/net: Switch1 has the two HCAs (leaf, tier 1); Switch2 has none and hangs off Switch1 (tier 2)."""
    fabric = import_fabric("ibnetdiscover", shared_text("ibsim/net"))
    tiers = dict(zip(fabric.node_names, fabric.node_tier.tolist(), strict=True))
    assert tiers == {"Switch1": 1, "Switch2": 2, "Hca1": 0, "Hca2": 0}
    # Upper tier on the a side, as generators do.
    assert (fabric.node_tier[fabric.link_a] >= fabric.node_tier[fabric.link_b]).all()


def test_ibsim_links_without_a_width_take_the_default_speed(shared_text):
    fabric = import_fabric("ibnetdiscover", shared_text("ibsim/net.1"), default_link_speed_gbps=200.0)
    assert (fabric.link_rate_bps == 200_000_000_000).all()
    assert fabric.node_lid.tolist() == [1, 2, 3]  # no LIDs in the file: 1..N in node order
