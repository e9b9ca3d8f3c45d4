"""LLDP documents saved as `lldp.<node>.json` (or named anything, when they name their node) through the
SDK, the CLI and the mirror, against real topology and telemetry services.

Reported: `lldp.<node>.json` files were refused (the node was the file name, `lldp.leaf-0`, so every
neighbour seeing `leaf-0` was "described by no document"), and the error did not say how to fix it.
"""

from __future__ import annotations

import io
import json
import pathlib
import tarfile

import pytest
from fabrictwin import Client
from fabrictwin.cli import main
from fabrictwin.errors import InvalidArgumentError
from fabrictwin.fabric_mirror import FabricMirror
from fabrictwin.mirror_config import parse_mirror_config

from services.topology.formats.lldp import neighbour_documents
from services.topology.generators import leaf_spine


@pytest.fixture
def client(services):
    with Client(topology=services["topology"], telemetry=services["telemetry"]) as client:
        yield client


def write_tables(directory: pathlib.Path, name: str = "lldp.{node}.json", fabric=None) -> dict[str, str]:
    """The neighbour tables of a 2-leaf, 2-spine, 4-host fabric as files named `name`; node -> text."""
    directory.mkdir(exist_ok=True)
    for old in directory.glob("*.json"):
        old.unlink()
    tables = {}
    for document, text in neighbour_documents(fabric or leaf_spine(2, 2, 2)):
        node = document.removesuffix(".json")
        (directory / name.format(node=node)).write_text(text)
        tables[node] = text
    return tables


def test_the_sdk_imports_a_directory_of_lldp_node_files(client, tmp_path):
    write_tables(tmp_path / "lldp")
    fabric = client.fabrics.import_lldp(str(tmp_path / "lldp"), fabric_id="ls")
    assert (fabric.switch_count, fabric.host_count, fabric.link_count) == (4, 4, 8)
    names = {link.display_name for link in client.fabrics.links("ls")}
    assert "spine-0/p1<->leaf-0/p3" in names


def test_the_cli_imports_a_directory_or_a_tar_of_lldp_node_files(services, tmp_path, capsys):
    tables = write_tables(tmp_path / "lldp")
    archive = tmp_path / "lldp.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for node, text in tables.items():
            data = text.encode()
            member = tarfile.TarInfo(f"lldp/lldp.{node}.json")
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
    for source, fabric_id in ((tmp_path / "lldp", "from-dir"), (archive, "from-tar")):
        argv = [f"--topology={services['topology']}", "fabric", "import", str(source), "--format", "lldp"]
        assert main([*argv, "--id", fabric_id, "--json"]) == 0, capsys.readouterr().err
        assert json.loads(capsys.readouterr().out)["link_count"] == 8


def test_a_file_that_neither_names_its_node_nor_is_named_after_it_is_one_clear_error(
    services, tmp_path, capsys
):
    write_tables(tmp_path / "lldp", name="{node}.json")
    (tmp_path / "lldp" / "leaf-0.json").rename(tmp_path / "lldp" / "10.0.0.7.json")
    assert (
        main(
            [
                f"--topology={services['topology']}",
                "fabric",
                "import",
                str(tmp_path / "lldp"),
                "--format=lldp",
            ]
        )
        == 1
    )
    err = capsys.readouterr().err
    assert "sees 'leaf-0'" in err and "which no document describes" in err
    assert "Document '10.0.0.7.json' does not say which node it is" in err
    assert "add `lldpcli -f json show chassis` output to it" in err
    assert "or name the file after its node ('leaf-0.json')" in err


def mirror_text(lldp_dir: pathlib.Path) -> str:
    # One command target that prints nothing: the tests here are about the cabling.
    return f"""
fabric = "ls"
source = "ls-live"
interval_s = 1

[lldp]
directory = "{lldp_dir}"
interval_s = 3600

[[targets]]
node = "leaf-0"
command = "true"
"""


def test_the_mirror_imports_the_cabling_from_lldp_node_files(client, tmp_path):
    write_tables(tmp_path / "lldp")
    mirror = FabricMirror(client, parse_mirror_config(mirror_text(tmp_path / "lldp")))
    try:
        assert mirror.start()[0] == "imported fabrics/ls from LLDP: 4 switches, 4 hosts, 8 links"
        assert mirror.refresh_cabling().error == ""
    finally:
        mirror.close()


def test_the_mirror_sees_a_neighbour_vanish_from_lldp_node_files(client, tmp_path):
    tables = write_tables(tmp_path / "lldp")
    mirror = FabricMirror(client, parse_mirror_config(mirror_text(tmp_path / "lldp")))
    try:
        mirror.start()
        for node, peer in (("leaf-0", "spine-1"), ("spine-1", "leaf-0")):  # both ends stop hearing
            table = json.loads(tables[node])
            entries = table["lldp"]["interface"]
            table["lldp"]["interface"] = [e for e in entries if peer not in next(iter(e.values()))["chassis"]]
            (tmp_path / "lldp" / f"lldp.{node}.json").write_text(json.dumps(table))
        report = mirror.refresh_cabling()
        assert report.removed == ["leaf-0:swp4 <-> spine-1:swp1"]
        assert [(c.link, c.state) for c in report.link_changes] == [("spine-1/p1<->leaf-0/p4", "DOWN")]
    finally:
        mirror.close()


def test_an_sdk_pair_with_no_name_and_no_chassis_says_how_to_name_it(client):
    documents = [("", neighbour_documents(leaf_spine(1, 1, 1))[0][1])]
    with pytest.raises(InvalidArgumentError, match="names no node: add `lldpcli -f json show chassis`"):
        client.fabrics.import_lldp(documents, fabric_id="x")
