"""LLDP neighbour tables (`lldpcli -f json show neighbors`, one document per node) -> Fabric."""

from __future__ import annotations

import io
import json
import tarfile

import pytest

from services.common.errors import InvalidArgument
from services.topology.fabric import NodeKind
from services.topology.formats import import_fabric
from services.topology.formats.lldp import documents_from_archive, import_lldp, neighbour_documents
from services.topology.generators import leaf_spine

SWITCH = [{"type": "Bridge", "enabled": False}, {"type": "Router", "enabled": True}]


def neighbour(system, port, *, capability=None, mgmt_ip=None, port_id_type="ifname", descr=None):
    """One `interface` entry as lldpcli prints it."""
    chassis = {"id": {"type": "mac", "value": f"02:00:00:00:00:{abs(hash(system)) % 256:02x}"}}
    if capability is not None:
        chassis["capability"] = capability
    if mgmt_ip is not None:
        chassis["mgmt-ip"] = mgmt_ip
    port_value = port if port_id_type == "ifname" else "aa:bb:cc:dd:ee:ff"
    return {
        "via": "LLDP",
        "rid": "1",
        "age": "0 day, 00:00:10",
        "chassis": {system: chassis},
        "port": {"id": {"type": port_id_type, "value": port_value}, "descr": descr or port, "ttl": "120"},
    }


def document(*entries):
    """entries: (local ifname, neighbour entry); one entry prints as an object, several as a list."""
    if len(entries) == 1:
        interface = {entries[0][0]: entries[0][1]}
    else:
        interface = [{name: entry} for name, entry in entries]
    return json.dumps({"lldp": {"interface": interface}}, indent=2)


def two_leaf_lab():
    """leaf0 (swp1 h0, swp3 spine0), spine0 (swp1 leaf0), h0 (eth0 leaf0), as lldpd prints them."""
    return [
        (
            "leaf0.json",
            document(
                ("swp1", neighbour("h0", "eth0", capability={"type": "Station", "enabled": True})),
                ("swp3", neighbour("spine0", "swp1", capability=SWITCH, mgmt_ip=["10.0.0.1", "fe80::1"])),
            ),
        ),
        ("spine0.json", document(("swp1", neighbour("leaf0", "swp3", capability=SWITCH)))),
        ("h0.json", document(("eth0", neighbour("leaf0", "swp1", capability=SWITCH, mgmt_ip="10.1.0.1")))),
    ]


def test_both_shapes_lldpcli_prints_make_one_fabric_with_kinds_ports_and_interface_names():
    fabric = import_lldp(two_leaf_lab())
    kinds = {name: NodeKind(int(k)).name for name, k in zip(fabric.node_names, fabric.node_kind, strict=True)}
    assert kinds == {"leaf0": "SWITCH", "spine0": "SWITCH", "h0": "HOST"}
    assert sorted(fabric.link_names) == ["leaf0/p1<->h0/p1", "spine0/p1<->leaf0/p3"]
    ends = dict(zip(fabric.link_names, zip(*fabric.link_port_names, strict=True), strict=True))
    assert ends["spine0/p1<->leaf0/p3"] == ("swp1", "swp3")
    assert ends["leaf0/p1<->h0/p1"] == ("swp1", "eth0")
    assert fabric.import_notes == []
    tiers = dict(zip(fabric.node_names, fabric.node_tier.tolist(), strict=True))
    assert tiers == {"h0": 0, "leaf0": 1, "spine0": 2}


def test_a_hosts_ipv4_comes_from_its_management_address_switches_get_none():
    fabric = import_lldp(
        [
            ("leaf0.json", document(("swp1", neighbour("h0", "eth0", mgmt_ip=["fe80::2", "10.1.0.2"])))),
            (
                "h0.json",
                document(("eth0", neighbour("leaf0", "swp1", capability=SWITCH, mgmt_ip="10.9.9.9"))),
            ),
        ]
    )
    ips = dict(zip(fabric.node_names, fabric.node_ip.tolist(), strict=True))
    assert ips == {"leaf0": 0, "h0": (10 << 24) | (1 << 16) | 2}


def test_show_chassis_in_the_same_document_names_the_node_whatever_the_file_is_called():
    chassis = json.dumps({"local-chassis": {"chassis": {"spine0": {"id": {"type": "mac", "value": "x"},
                                                                    "capability": SWITCH}}}})  # fmt: skip
    leaf = document(("swp3", neighbour("spine0", "swp1", capability=SWITCH)))
    spine = chassis + "\n" + document(("swp1", neighbour("leaf0", "swp3")))
    fabric = import_lldp([("leaf0.json", leaf), ("10.0.0.7.json", spine)])
    assert sorted(fabric.node_names) == ["leaf0", "spine0"]
    kinds = dict(zip(fabric.node_names, fabric.node_kind.tolist(), strict=True))
    assert kinds["spine0"] == NodeKind.SWITCH


def test_a_generated_leaf_spine_with_parallel_cables_round_trips_through_its_neighbour_tables():
    fabric = leaf_spine(4, 2, 3, parallel_links=2)
    again = import_lldp(neighbour_documents(fabric))
    assert again.num_links == fabric.num_links == 4 * 3 + 4 * 2 * 2
    assert sorted(again.link_names) == sorted(fabric.link_names)
    assert again.num_hosts == fabric.num_hosts and again.num_switches == fabric.num_switches


def test_ports_number_by_their_trailing_number_or_in_natural_order():
    fabric = import_lldp(
        [
            (
                "sw.json",
                document(("Ethernet10", neighbour("a", "eth0")), ("Ethernet2", neighbour("b", "eth0"))),
            ),
            ("a.json", document(("eth0", neighbour("sw", "Ethernet10", capability=SWITCH)))),
            ("b.json", document(("eth0", neighbour("sw", "Ethernet2", capability=SWITCH)))),
        ]
    )
    assert sorted(fabric.link_names) == ["sw/p10<->a/p1", "sw/p2<->b/p1"]
    assert fabric.node_radix.tolist()[fabric.node_names.index("sw")] == 10


def test_a_neighbour_port_given_by_mac_pairs_through_the_peers_own_entry():
    docs = [
        ("leaf0.json", document(("swp3", neighbour("spine0", "swp1", port_id_type="mac", descr="uplink")))),
        ("spine0.json", document(("swp1", neighbour("leaf0", "swp3", capability=SWITCH)))),
    ]
    fabric = import_lldp(docs)
    assert fabric.num_links == 1 and fabric.import_notes == []
    assert sorted(fabric.link_port_names[0] + fabric.link_port_names[1]) == ["swp1", "swp3"]


def test_a_link_seen_from_one_end_only_is_imported_and_reported():
    docs = two_leaf_lab()
    docs[2] = ("h0.json", json.dumps({"lldp": {}}))  # h0's lldpd has not heard leaf0 yet
    fabric = import_lldp(docs)
    assert fabric.num_links == 2
    assert fabric.import_notes == [
        "one-sided link leaf0:swp1 <-> h0:eth0: only document 'leaf0.json' lists it"
    ]


def test_ends_that_disagree_are_refused_naming_both_documents_and_ports():
    docs = [
        ("a.json", document(("swp1", neighbour("b", "swp1", capability=SWITCH)))),
        ("b.json", document(("swp1", neighbour("c", "swp9", capability=SWITCH)))),
        ("c.json", document(("swp9", neighbour("b", "swp1", capability=SWITCH)))),
    ]
    with pytest.raises(InvalidArgument) as caught:
        import_lldp(docs)
    message = str(caught.value)
    assert "'a.json'" in message and "'b.json'" in message
    assert "a:swp1 says its neighbour is b:swp1" in message and "b:swp1 sees c:swp9" in message


@pytest.mark.parametrize(
    ("docs", "expected"),
    [
        ([("leaf0.json", document(("swp1", neighbour("ghost", "eth0"))))], "'ghost':eth0, which no document"),
        (
            [("leaf0.json", '{"lldp": {"interface": {"swp1": '), ("h0.json", "{}")],
            "documents['leaf0.json']: line 1",
        ),
        ([("leaf0.json", '{"lldp": {}}'), ("x/leaf0.json", '{"lldp": {}}')], "as does document 'leaf0.json'"),
        ([("leaf0.json", "[1, 2]")], "expected a JSON object"),
        ([("leaf0.json", '{"neighbors": 1}')], "has no `lldp` key"),
        ([("leaf0.json", "")], "is empty"),
        ([("leaf0.json", "[" * 100_000)], "documents['leaf0.json']"),
        ([], "give one LLDP document per node"),
    ],
)
def test_bad_documents_are_refused_naming_the_document(docs, expected):
    with pytest.raises(InvalidArgument) as caught:
        import_lldp(docs)
    assert expected in str(caught.value)


def test_two_neighbours_on_one_interface_are_not_a_cable():
    hub = [{"swp1": neighbour("a", "eth0")}, {"swp1": neighbour("b", "eth0")}]
    docs = [("sw.json", json.dumps({"lldp": {"interface": hub}})), ("a.json", "{}"), ("b.json", "{}")]
    docs = [(name, text if name == "sw.json" else '{"lldp": {}}') for name, text in docs]
    with pytest.raises(InvalidArgument, match="interface swp1 of sw lists two neighbours"):
        import_lldp(docs)


def test_port_speeds_set_link_rates_the_slower_end_winning():
    fabric = import_lldp(
        two_leaf_lab(),
        default_link_speed_gbps=25,
        port_speeds_gbps={"leaf0/swp3": 100.0, "spine0/swp1": 40.0},
    )
    rates = dict(zip(fabric.link_names, (fabric.link_rate_bps / 1e9).tolist(), strict=True))
    assert rates == {"spine0/p1<->leaf0/p3": 40.0, "leaf0/p1<->h0/p1": 25.0}
    with pytest.raises(InvalidArgument, match=r"port_speeds_gbps\['leaf0/swp3'\]"):
        import_lldp(two_leaf_lab(), port_speeds_gbps={"leaf0/swp3": float("nan")})


def _tar(members, mode="w:gz"):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode) as tar:
        for name, text in members:
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_a_tar_archive_of_node_files_imports_like_the_documents():
    archive = _tar([(f"lldp/{name}", text) for name, text in two_leaf_lab()] + [("lldp/README", "x")])
    assert [name for name, _ in documents_from_archive(archive)] == ["lldp/leaf0.json", "lldp/spine0.json",
                                                                    "lldp/h0.json"]  # fmt: skip
    fabric = import_fabric("lldp", "", archive=archive)
    assert sorted(fabric.node_names) == ["h0", "leaf0", "spine0"]
    with pytest.raises(InvalidArgument, match="archive: not a readable tar archive"):
        import_fabric("lldp", "", archive=b"not a tar")
    with pytest.raises(InvalidArgument, match=r"archive: holds no \*\.json file"):
        import_fabric("lldp", "", archive=_tar([("x.txt", "1")]))


def test_lldp_takes_documents_not_content_and_other_formats_take_content_only():
    with pytest.raises(InvalidArgument, match="content: lldp is one document per node"):
        import_fabric("lldp", "{}")
    with pytest.raises(InvalidArgument, match="documents: applies to lldp only"):
        import_fabric("json", "{}", documents=[("a", "{}")])
    with pytest.raises(InvalidArgument, match="'lldp' can be imported but not exported"):
        from services.topology.formats import export_fabric

        export_fabric(leaf_spine(1, 1, 1), "lldp")
