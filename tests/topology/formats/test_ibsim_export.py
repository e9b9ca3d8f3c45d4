"""The `ibsim` export: a net file ibsim reads (tests/lab runs it), and the twin reads back."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from services.common.errors import InvalidArgument
from services.topology.fabric import Fabric, LinkState, NodeKind
from services.topology.formats import export_fabric, import_fabric
from services.topology.formats.ibsim import export_ibsim
from services.topology.generators import fat_tree, leaf_spine


def test_an_ibsim_export_imports_back_with_names_guids_ports_and_parallel_cables():
    fabric = leaf_spine(3, 2, 2, parallel_links=2)
    back = import_fabric("ibsim", export_fabric(fabric, "ibsim"))
    assert back.node_names == fabric.node_names
    synthetic = [0xFAB0_0000_0000_0000 + ((i + 1) << 8) for i in range(fabric.num_nodes)]
    assert back.node_guid.tolist() == synthetic
    assert sorted(back.link_names) == sorted(fabric.link_names)
    assert (back.node_lid == np.arange(1, fabric.num_nodes + 1)).all()  # none written: assigned afresh


def test_records_come_in_the_order_asked_for_and_keep_their_guids():
    fabric = fat_tree(4)
    order = np.random.default_rng(0).permutation(fabric.num_nodes)
    text = export_ibsim(fabric, order=order)
    described = [line.split('# "')[1][:-1] for line in text.splitlines() if line.startswith(("Switch", "Ca"))]
    assert described == [fabric.node_names[i] for i in order.tolist()]
    back = import_fabric("ibsim", text)
    for name in ("core-3", "pod2-edge1-h0"):
        synthetic = 0xFAB0_0000_0000_0000 + ((fabric.node_index(name) + 1) << 8)
        assert int(back.node_guid[back.node_index(name)]) == synthetic


def test_a_down_link_is_not_cabled_in_ibsim():
    fabric = leaf_spine(2, 1, 1)
    fabric.link_state[fabric.link_index("spine-0/p1<->leaf-0/p2")] = LinkState.DOWN
    text = export_ibsim(fabric)
    assert '"S-fab0000000000500"[1]' not in text and '"S-fab0000000000500"[2]' in text


def test_what_ibsim_cannot_take_is_refused_naming_it():
    fabric = leaf_spine(1, 1, 1)
    fabric.node_radix[fabric.node_index("leaf-0")] = 300
    with pytest.raises(
        InvalidArgument, match=r"nodes\[1\]\.radix: leaf-0 has 300 ports; ibsim takes at most 255"
    ):
        export_ibsim(fabric)
    with pytest.raises(InvalidArgument, match="order: must be a permutation"):
        export_ibsim(leaf_spine(1, 1, 1), order=np.array([0, 0, 1]))


def mixed_rate_fabric() -> Fabric:
    """A leaf-spine with parallel cables at 4xQDR (40 Gb/s) and 4xDDR (20 Gb/s), the rates of the
    measured failure, a few other rates ibsim 0.10 takes (1xSDR, 4xFDR, 4xEDR, 4xHDR, 12xQDR), and a
    host whose name holds `=` (ibsim reads `<letter>=<value>` on a port line as a port option)."""
    fabric = leaf_spine(4, 2, 3, parallel_links=2, link_speed_gbps=40.0)
    uplinks = np.flatnonzero(fabric.node_kind[fabric.link_b] == NodeKind.SWITCH)
    fabric.link_rate_bps[uplinks[::2]] = 20_000_000_000
    for link, gbps in enumerate((2.5, 56.25, 100.0, 200.0, 120.0)):
        fabric.link_rate_bps[link] = round(gbps * 1e9)
    doc = json.loads(export_fabric(fabric, "json"))
    renamed = {"host-5": "rack=1 s=9 w=x"}
    for node in doc["nodes"]:
        node["name"] = renamed.get(node["name"], node["name"])
    for link in doc["links"]:
        link["a"], link["b"] = renamed.get(link["a"], link["a"]), renamed.get(link["b"], link["b"])
    return import_fabric("json", json.dumps(doc))


def rates_by_link(fabric: Fabric) -> dict[str, int]:
    return dict(zip(fabric.link_names, fabric.link_rate_bps.tolist(), strict=True))


def test_every_port_line_carries_its_links_width_and_speed_and_the_import_gives_back_the_rates():
    fabric = mixed_rate_fabric()
    text = export_ibsim(fabric)
    back = import_fabric("ibsim", text)
    assert rates_by_link(back) == rates_by_link(fabric)
    assert back.node_names == fabric.node_names
    ports = [line for line in text.splitlines() if line.startswith("[")]
    assert len(ports) == 2 * fabric.num_links
    assert all(re.search(r" lid 0 (1|4|12)x(SDR|DDR|QDR|FDR|EDR|HDR)$", line) for line in ports), ports


def test_the_port_lines_are_written_as_ibsim_parses_them():
    """ibsim 0.10 (sim_net.c) takes the width x speed from `lid <n> <w>x<speed>` after the last
    quote of a port line, and a CA port's own LID from the first `lid ` after the peer."""
    text = export_ibsim(leaf_spine(1, 1, 1, link_speed_gbps=40.0, host_link_speed_gbps=20.0))
    records = [r.replace("\t", " ") for r in text.split("\n\n")[1:]]
    assert records[0].splitlines()[-1] == '[1] "S-fab0000000000200"[1] # lid 0 lmc 0 "leaf-0" lid 0 4xDDR'
    assert records[1].splitlines()[-2:] == [
        '[1] "H-fab0000000000100"[1] # "host-0" lid 0 4xDDR',
        '[2] "S-fab0000000000300"[1] # "spine-0" lid 0 4xQDR',
    ]


def test_a_peer_whose_name_holds_an_equals_sign_is_named_by_its_id_on_port_lines():
    fabric = mixed_rate_fabric()
    text = export_ibsim(fabric)
    after_peer = [line.split('"]', 1)[-1] for line in text.splitlines() if line.startswith("[")]
    assert not any("=" in rest for rest in after_peer)
    leaf = fabric.node_names[fabric.link_a[fabric.link_b == fabric.node_index("rack=1 s=9 w=x")][0]]
    assert f'# "{leaf}" lid 0' in text
    assert '# lid 0 lmc 0 "rack' not in text and '# "H-fab0000000000600" lid 0 4xQDR' in text
    assert 'Ca\t1 "H-fab0000000000600"\t# "rack=1 s=9 w=x"' in text  # its own record keeps the name


def test_a_rate_that_is_no_infiniband_width_x_speed_is_refused_naming_the_link():
    fabric = leaf_spine(2, 1, 1)
    link = fabric.link_index("spine-0/p2<->leaf-1/p2")
    fabric.link_rate_bps[link] = 123_000_000_000
    with pytest.raises(
        InvalidArgument,
        match=rf"links\[{link}\]: spine-0/p2<->leaf-1/p2 runs at 123 Gb/s, which is no InfiniBand width x",
    ):
        export_ibsim(fabric)


def test_rates_beyond_ibsim_0_10_are_written_as_they_are_and_the_file_says_what_ibsim_0_10_does():
    text = export_ibsim(leaf_spine(1, 1, 1, link_speed_gbps=800.0, host_link_speed_gbps=400.0))
    assert '"leaf-0" lid 0 4xNDR' in text and '"spine-0" lid 0 4xXDR' in text
    notes = [line for line in text.splitlines() if line.startswith("#")]
    assert any("4xNDR" in line and "4xXDR" in line and "SDR" in line for line in notes), notes
    hdr = export_ibsim(leaf_spine(1, 1, 1, link_speed_gbps=200.0))
    assert [line for line in hdr.splitlines() if line.startswith("#")] == [
        "# ibsim net file written by FabricTwin"
    ]
