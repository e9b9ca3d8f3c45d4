import numpy as np
import pytest

from services.common.errors import InvalidArgument
from services.topology.cabling import assemble
from services.topology.fabric import LinkState, NodeKind
from services.topology.generators import fat_tree, leaf_spine
from services.topology.lfts_dump import parse_lfts_dump, resolve_lfts, write_lfts_dump
from services.topology.routing import engine_named
from services.topology.superpod import superpod

# Written by OpenSM 3.3 (osm_dump.c) for a two-switch subnet: note the highest LID, not the number
# of entries, after "lids dumped", and entries toward the switches themselves.
OPENSM_DUMP = """\
Unicast lids [0-6] of switch Lid 5 guid 0x0002c90300000005 ('leaf-0'):
0x0001 001 # Channel Adapter portguid 0x0002c90300000101: 'host-0'
0x0002 002 # Channel Adapter portguid 0x0002c90300000102: 'host-1'
0x0003 003 # Channel Adapter portguid 0x0002c90300000103: 'host-2'
0x0004 003 # Channel Adapter portguid 0x0002c90300000104: 'host-3'
0x0005 000 # Switch portguid 0x0002c90300000005: 'leaf-0'
0x0006 003 # Switch portguid 0x0002c90300000006: 'leaf-1'
6 lids dumped

Unicast lids [0-6] of switch Lid 6 guid 0x0002c90300000006 ('leaf-1'):
0x0001 003 # Channel Adapter portguid 0x0002c90300000101: 'host-0'
0x0002 003 # Channel Adapter portguid 0x0002c90300000102: 'host-1'
0x0003 001 # Channel Adapter portguid 0x0002c90300000103: 'host-2'
0x0004 002 # Channel Adapter portguid 0x0002c90300000104: 'host-3'
0x0005 003 # Switch portguid 0x0002c90300000005: 'leaf-0'
0x0006 000 # Switch portguid 0x0002c90300000006: 'leaf-1'
6 lids dumped
"""


def two_leaves():
    """host-0, host-1 on leaf-0 (ports 1, 2); host-2, host-3 on leaf-1; leaf-0 p3 <-> leaf-1 p3."""
    tier = np.array([0, 0, 0, 0, 1, 1])
    names = ["host-0", "host-1", "host-2", "host-3", "leaf-0", "leaf-1"]
    links = (
        np.array([4, 4, 5, 5, 4]),
        np.array([1, 2, 1, 2, 3]),
        np.array([0, 1, 2, 3, 5]),
        np.array([1, 1, 1, 1, 3]),
    )
    fabric = assemble(
        tier=tier,
        names=names,
        radix=np.array([1, 1, 1, 1, 4, 4]),
        group=np.full(6, -1),
        host_ip=np.arange(4) + 1,
        links=links,
        link_rate_bps=np.full(5, 400_000_000_000),
        latency_ns=500,
    )
    fabric.node_guid[:] = [
        0x2C90300000101,
        0x2C90300000102,
        0x2C90300000103,
        0x2C90300000104,
        0x2C90300000005,
        0x2C90300000006,
    ]
    return fabric


def test_an_opensm_dump_loads_into_the_lfts_it_lists():
    fabric = two_leaves()
    switches, ports = resolve_lfts(fabric, parse_lfts_dump(OPENSM_DUMP))
    assert [fabric.node_names[s] for s in switches] == ["leaf-0", "leaf-1"]
    assert ports.tolist() == [[1, 2, 3, 3], [3, 3, 1, 2]]
    routes = engine_named("file", lfts_dump=OPENSM_DUMP).compute(fabric)
    assert routes.unreachable_pairs == 0
    assert routes.group(fabric, fabric.node_index("leaf-0"), 3).tolist() == [2 * 4]  # link 4 a->b


@pytest.mark.parametrize(
    "fabric",
    [
        fat_tree(4),
        fat_tree(8),
        leaf_spine(3, 2, 3, parallel_links=2),
        superpod(1, nodes_per_su=4, gpus_per_node=4),
    ],
)
def test_minhop_tables_dumped_and_loaded_by_the_file_engine_are_identical(fabric):
    minhop = engine_named("minhop").compute(fabric)
    text = write_lfts_dump(fabric, minhop.lft_ports)
    loaded = engine_named("file", lfts_dump=text).compute(fabric)
    switches = np.flatnonzero(fabric.node_kind == NodeKind.SWITCH)
    for node in switches.tolist():
        np.testing.assert_array_equal(loaded.lft_ports(node), minhop.lft_ports(node))
    assert loaded.unreachable_pairs == 0
    assert write_lfts_dump(fabric, loaded.lft_ports) == text


def test_the_writer_follows_opensms_format_strings():
    fabric = fat_tree(2)
    text = write_lfts_dump(fabric, engine_named("minhop").compute(fabric).lft_ports)
    lines = text.splitlines()
    # GUIDs as the topology exports write them: synthetic where the fabric has none; CA port = GUID + 1
    assert lines[0] == "Unicast lids [0-7] of switch Lid 3 guid 0xfab0000000000300 ('pod0-edge0'):"
    assert lines[1] == "0x0001 001 # Channel Adapter portguid 0xfab0000000000101: 'pod0-edge0-h0'"
    assert lines[3] == "0x0003 000 # Switch portguid 0xfab0000000000300: 'pod0-edge0'"
    assert lines[4] == "7 lids dumped"


def test_file_routes_do_not_route_around_a_down_link_and_say_what_became_unreachable():
    fabric = fat_tree(4)
    text = write_lfts_dump(fabric, engine_named("minhop").compute(fabric).lft_ports)
    fabric.link_state[fabric.link_index("pod0-agg0/p1<->pod0-edge0/p3")] = LinkState.DOWN
    routes = engine_named("file", lfts_dump=text).compute(fabric)
    assert routes.unreachable_pairs > 0
    assert (
        routes.unreachable_pairs
        == engine_named("file", lfts_dump=text).reroute(fabric, routes).unreachable_pairs
    )


@pytest.mark.parametrize(
    ("text", "line", "problem"),
    [
        ("0x0001 001 # x\n", 1, "before any"),
        ("Unicast lids [0-6] of switch Lid 5 guid 0x5 ('a'):\nbogus line\n", 2, "expected"),
        ("Unicast lids of switch\n", 1, "expected"),
        ("Multicast mlids [0xc000-0xc001] of switch Lid 5\n", 1, "multicast"),
        (OPENSM_DUMP.replace("0x0004 002 #", "0x0009 002 #"), 14, "no node has LID 9"),
        (OPENSM_DUMP.replace("0x0003 003 # Channel", "0x0003 007 # Channel"), 4, "port 7"),
        (
            OPENSM_DUMP.replace("Lid 6 guid 0x0002c90300000006", "Lid 9 guid 0x0002c90300000099"),
            10,
            "no switch",
        ),
        (
            OPENSM_DUMP.replace("Lid 6 guid 0x0002c90300000006", "Lid 5 guid 0x0002c90300000005"),
            10,
            "second table",
        ),
    ],
)
def test_a_bad_dump_is_refused_naming_the_line(text, line, problem):
    with pytest.raises(InvalidArgument) as err:
        engine_named("file", lfts_dump=text).compute(two_leaves())
    assert err.value.field == f"lfts_dump line {line}"
    assert problem in err.value.problem


def test_text_that_is_not_a_dump_at_all_is_refused():
    with pytest.raises(InvalidArgument, match=r"not an opensm-lfts\.dump"):
        parse_lfts_dump("\n# nothing here\n")
