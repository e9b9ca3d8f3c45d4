"""The `ibsim` export: a net file ibsim reads (tests/lab runs it), and the twin reads back."""

from __future__ import annotations

import numpy as np
import pytest

from services.common.errors import InvalidArgument
from services.topology.fabric import LinkState
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
