"""GUIDs in every export of a generated fabric (which has none: node_guid 0): distinct, non-zero, the
same in the topology exports and the OpenSM LFT dump, and the ones routing orders by."""

from __future__ import annotations

import re

import numpy as np
import pytest

from services.common.errors import InvalidArgument
from services.topology.fabric import Fabric, NodeKind
from services.topology.formats import export_fabric
from services.topology.formats.ibnetdiscover_export import export_guids
from services.topology.generators import fat_tree, leaf_spine
from services.topology.lfts_dump import parse_lfts_dump, resolve_lfts, write_lfts_dump
from services.topology.routing import engine_named
from services.topology.routing.balance import node_guid_keys
from services.topology.superpod import superpod

GENERATED = {
    "leaf-spine-parallel": lambda: leaf_spine(3, 2, 2, parallel_links=2),
    "fat-tree-4": lambda: fat_tree(4),
    "superpod": lambda: superpod(1, nodes_per_su=4, gpus_per_node=4),
}
# switchguid=0x.., caguid=0x.., guid 0x.., portguid 0x.., "S-<guid>", "H-<guid>", (<port guid>)
_GUID = re.compile(r'(?:guid[= ]0x|"[SH]-|\]\()([0-9a-fA-F]+)')


def lft_dump(fabric: Fabric) -> str:
    return write_lfts_dump(fabric, engine_named("minhop").compute(fabric).lft_ports)


def exports(fabric: Fabric) -> dict[str, str]:
    return {
        "ibnetdiscover": export_fabric(fabric, "ibnetdiscover"),
        "ibsim": export_fabric(fabric, "ibsim"),
        "opensm_lfts": lft_dump(fabric),
    }


@pytest.mark.parametrize("name", GENERATED)
def test_no_export_of_a_generated_fabric_writes_a_zero_guid(name):
    fabric = GENERATED[name]()
    assert not fabric.node_guid.any()
    for format, text in exports(fabric).items():
        guids = [int(g, 16) for g in _GUID.findall(text)]
        assert len(guids) >= fabric.num_nodes, format
        zero = [line for line in text.splitlines() if re.search(r"0x0+\b", line)]
        assert 0 not in guids, (format, zero[:3])


@pytest.mark.parametrize("name", GENERATED)
def test_the_lft_dump_names_switches_and_ca_ports_by_the_guids_the_topology_exports_write(name):
    fabric = GENERATED[name]()
    guid = export_guids(fabric)
    assert len(set(guid.tolist())) == fabric.num_nodes
    topology = export_fabric(fabric, "ibnetdiscover")
    dump = lft_dump(fabric)
    for node in np.flatnonzero(fabric.node_kind == NodeKind.SWITCH).tolist():
        g = int(guid[node])
        assert f"switchguid={g:#x}({g:x})" in topology
        assert f"guid 0x{g:016x} ('{fabric.node_names[node]}'):" in dump
    for node in fabric.host_nodes.tolist():
        port_guid = int(guid[node]) + 1  # generated hosts are cabled on port 1; port GUID = GUID + port
        assert f"[1]({port_guid:x})" in topology
        assert f"# Channel Adapter portguid 0x{port_guid:016x}: '{fabric.node_names[node]}'" in dump


def test_a_cas_portguid_in_the_dump_is_that_of_its_lowest_cabled_port():
    fabric = leaf_spine(1, 1, 2)
    host = fabric.node_index("host-1")
    fabric.link_port_b[fabric.link_b == host] = 2
    fabric.node_radix[host] = 2
    g = int(export_guids(fabric)[host])
    assert f"portguid 0x{g + 2:016x}: 'host-1'" in lft_dump(fabric)
    assert f"[2]({g + 2:x})" in export_fabric(fabric, "ibnetdiscover")


@pytest.mark.parametrize("name", GENERATED)
def test_a_generated_fabrics_lft_dump_resolves_by_guid_to_the_same_tables(name):
    fabric = GENERATED[name]()
    routes = engine_named("minhop").compute(fabric)
    text = write_lfts_dump(fabric, routes.lft_ports)
    # Swap the LIDs in two switch headers: only the GUIDs still say which switch a table is.
    first, second = re.findall(r"of switch Lid (\d+) guid", text)[:2]
    text = text.replace(f"of switch Lid {first} guid", "of switch Lid X guid", 1)
    text = text.replace(f"of switch Lid {second} guid", f"of switch Lid {first} guid", 1)
    text = text.replace("of switch Lid X guid", f"of switch Lid {second} guid", 1)
    switches, ports = resolve_lfts(fabric, parse_lfts_dump(text))
    assert switches.tolist() == np.flatnonzero(fabric.node_kind == NodeKind.SWITCH).tolist()
    for row, node in enumerate(switches.tolist()):
        assert ports[row].tolist() == routes.lft_ports(node).tolist(), fabric.node_names[node]


@pytest.mark.parametrize("name", GENERATED)
def test_the_export_guids_are_the_ones_routing_orders_by_so_assigning_them_changes_no_route(name):
    fabric = GENERATED[name]()
    assert node_guid_keys(fabric).tolist() == export_guids(fabric).tolist()
    with_guids = GENERATED[name]()
    with_guids.node_guid[:] = export_guids(fabric)
    for engine in ("minhop", "updn", "ftree"):
        ours, theirs = engine_named(engine).compute(fabric), engine_named(engine).compute(with_guids)
        for node in np.flatnonzero(fabric.node_kind == NodeKind.SWITCH).tolist():
            assert ours.lft_ports(node).tolist() == theirs.lft_ports(node).tolist(), (engine, node)


def test_an_lft_dump_of_nodes_sharing_a_guid_is_refused_as_the_topology_exports_refuse_it():
    fabric = leaf_spine(2, 1, 1)
    fabric.node_guid[fabric.node_index("leaf-1")] = export_guids(fabric)[fabric.node_index("leaf-0")]
    for write in (lambda: export_fabric(fabric, "ibnetdiscover"), lambda: lft_dump(fabric)):
        with pytest.raises(InvalidArgument, match=r"node_guid\[\d\]: .* share GUID 0xfab0000000000300"):
            write()
