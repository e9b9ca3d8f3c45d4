"""LLDP documents as operators have them: real lldpd output, in either JSON form, under any file name.

`lldpd_captures/` holds what lldpd 1.0.16 (Debian 12) printed for a two-node fabric built in network
namespaces as tests/lab does (leaf0's `swp3` cabled to spine0's `swp1`, port IDs ifnames): per node,
`lldpcli -f json show chassis|neighbors|interfaces` (`NODE.WHAT.json`) and the same with `-f json0`
(`NODE.WHAT.json0`, the form that keeps every list and writes names as `"name"` keys; lldpd built
with --enable-json0 prints it for `-f json` too). `show neighbors` never names the local node
(lldpd's display.c writes only the neighbours' chassis there); `show chassis` does, and so does
`show interfaces` (the local ports, each with the local chassis and a `status` instead of `via`).
"""

from __future__ import annotations

import io
import json
import pathlib
import tarfile

import pytest
from fabrictwin.lldp import read_cabling, read_documents

from services.common.errors import InvalidArgument
from services.topology.fabric import NodeKind
from services.topology.formats import import_fabric
from services.topology.formats.lldp import import_lldp

CAPTURES = pathlib.Path(__file__).parent / "lldpd_captures"


def captured(node: str, what: str, form: str = "json") -> str:
    return (CAPTURES / f"{node}.{what}.{form}").read_text()


def both(form: str = "json", *whats: str) -> dict[str, str]:
    """node -> the concatenated outputs of `whats` (as `lldpcli A; lldpcli B` prints them)."""
    return {node: "".join(captured(node, what, form) for what in whats) for node in ("leaf0", "spine0")}


def assert_the_captured_fabric(fabric) -> None:
    assert sorted(fabric.node_names) == ["leaf0", "spine0"]
    assert fabric.num_links == 1
    ends = sorted(fabric.link_names[0].split("<->"))
    assert ends == ["leaf0/p3", "spine0/p1"]
    assert sorted([fabric.link_port_names[0][0], fabric.link_port_names[1][0]]) == ["swp1", "swp3"]
    assert fabric.node_kind.tolist() == [NodeKind.SWITCH, NodeKind.SWITCH]  # both advertise Router


@pytest.mark.parametrize(
    "name",
    [
        "lldp.{node}.json",
        "{node}.json",
        "{node}",
        "lldp-{node}.json",
        "{node}.lldp.json",
        "dumps/lldp.{node}.json",
    ],
)
def test_show_neighbors_alone_is_named_by_its_file_with_an_lldp_word_and_json_dropped(name):
    documents = both("json", "neighbors")
    assert_the_captured_fabric(import_lldp([(name.format(node=n), text) for n, text in documents.items()]))


@pytest.mark.parametrize(
    ("form", "whats"),
    [
        ("json", ("chassis", "neighbors")),
        ("json", ("neighbors", "chassis")),
        ("json0", ("chassis", "neighbors")),
        ("json", ("interfaces", "neighbors")),
        ("json", ("neighbors", "interfaces")),
        ("json0", ("interfaces", "neighbors")),
    ],
)
def test_a_document_that_names_its_node_is_read_whatever_the_file_is_called(form, whats):
    documents = both(form, *whats)
    named = [("10.0.0.7.json", documents["leaf0"]), ("switch-b.json", documents["spine0"])]
    assert_the_captured_fabric(import_lldp(named))


def test_show_chassis_merged_into_one_object_names_the_node():
    documents = {}
    for node, text in both("json", "neighbors").items():
        merged = json.loads(text) | json.loads(captured(node, "chassis"))
        documents[f"{node}-2024-06-01.json"] = json.dumps(merged)
    assert_the_captured_fabric(import_lldp(list(documents.items())))


def test_json0_neighbour_tables_read_as_json_ones():
    documents = [(f"lldp.{node}.json", text) for node, text in both("json0", "neighbors").items()]
    assert_the_captured_fabric(import_lldp(documents))
    # What `lldpcli -f json0 show neighbors` prints on a node that has heard no one yet.
    cabling = read_cabling([("leaf0", captured("leaf0", "neighbors", "json0")), ("spine0", '{"lldp": [{}]}')])
    assert cabling.notes == ["one-sided link leaf0:swp3 <-> spine0:swp1: only document 'leaf0' lists it"]


def test_a_file_name_the_neighbours_use_as_it_is_is_kept_whole():
    leaf = captured("leaf0", "neighbors").replace('"spine0"', '"lldp-relay"')
    spine = captured("spine0", "neighbors")
    cabling = read_cabling([("leaf0.json", leaf), ("lldp-relay.json", spine)])
    assert cabling.nodes == ["leaf0", "lldp-relay"]


def test_a_document_that_does_not_name_its_node_nor_is_named_after_it_says_how_to_fix_it():
    documents = both("json", "neighbors")
    with pytest.raises(InvalidArgument) as caught:
        import_lldp([("leaf0.json", documents["leaf0"]), ("10.0.0.7.json", documents["spine0"])])
    message = str(caught.value)
    assert "leaf0:swp3 sees 'spine0':swp1, which no document describes" in message
    assert "Document '10.0.0.7.json' does not say which node it is" in message
    assert "add `lldpcli -f json show chassis` output to it" in message
    assert "or name the file after its node ('spine0.json')" in message
    with pytest.raises(InvalidArgument, match="names no node: add `lldpcli -f json show chassis` output"):
        import_lldp([(".json", documents["leaf0"])])


def test_a_document_naming_two_nodes_itself_or_holding_no_neighbour_table_is_refused():
    two = captured("leaf0", "chassis") + captured("spine0", "interfaces") + captured("leaf0", "neighbors")
    with pytest.raises(
        InvalidArgument, match=r"documents\['x.json'\]: names two nodes itself: 'leaf0' and 'spine0'"
    ):
        import_lldp([("x.json", two)])
    with pytest.raises(InvalidArgument, match="holds `show interfaces` output but no `show neighbors`"):
        import_lldp([("leaf0.json", captured("leaf0", "interfaces"))])


def _tar(documents: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, text in documents.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_a_directory_or_archive_of_lldp_node_files_imports(tmp_path):
    for node, text in both("json", "neighbors").items():
        (tmp_path / f"lldp.{node}.json").write_text(text)
    assert_the_captured_fabric(import_lldp(read_documents(str(tmp_path))))
    archive = _tar({f"lldp/lldp.{n}.json": text for n, text in both("json", "neighbors").items()})
    assert_the_captured_fabric(import_fabric("lldp", "", archive=archive))
