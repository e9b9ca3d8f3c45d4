"""FabricTwin JSON: the documented example imports, and bad documents name the JSON path."""

from __future__ import annotations

import copy
import json
import pathlib
import re

import pytest

from services.common.errors import InvalidArgument
from services.topology.fabric import LinkState, NodeKind
from services.topology.formats import export_fabric, import_fabric

DOCS = pathlib.Path(__file__).resolve().parents[3] / "docs" / "topology-formats.md"

DOCUMENT = {
    "version": 1,
    "nodes": [
        {"name": "spine-0", "kind": "SWITCH"},
        {"name": "leaf-0", "kind": "SWITCH", "tier": 1, "radix": 4, "guid": "0x0002c90300a1b2c3", "lid": 7},
        {"name": "gpu-0", "kind": "HOST", "rail": 0, "group": 0, "ip": "10.0.0.1"},
        {"name": "gpu-1", "kind": "host", "guid": 42},
    ],
    "links": [
        {"a": "spine-0", "a_port": 1, "b": "leaf-0", "b_port": 4, "speed_gbps": 800},
        {"a": "leaf-0", "a_port": 1, "b": "gpu-0", "b_port": 1, "latency_ns": 50},
        {"a": "leaf-0", "a_port": 2, "b": "gpu-1", "b_port": 1, "state": "DEGRADED", "ber": 1e-9},
    ],
}


def _with(change) -> str:
    document = copy.deepcopy(DOCUMENT)
    change(document)
    return json.dumps(document)


def test_a_document_with_defaults_left_out_imports():
    fabric = import_fabric(
        "json", json.dumps(DOCUMENT), default_link_speed_gbps=200.0, default_link_latency_ns=9
    )
    assert fabric.node_kind.tolist() == [NodeKind.SWITCH, NodeKind.SWITCH, NodeKind.HOST, NodeKind.HOST]
    assert fabric.node_tier.tolist() == [2, 1, 0, 0]  # spine-0's tier inferred
    assert fabric.node_radix.tolist() == [1, 4, 1, 1]  # radix left out: the highest port used
    assert int(fabric.node_guid[1]) == 0x0002C90300A1B2C3 and int(fabric.node_guid[3]) == 42
    assert fabric.node_lid.tolist() == [8, 7, 9, 10]  # LIDs left out: fresh ones above the highest given
    assert fabric.link_rate_bps.tolist() == [800e9, 200e9, 200e9]
    assert fabric.link_latency_ns.tolist() == [9, 50, 9]
    assert fabric.link_state.tolist() == [LinkState.UP, LinkState.UP, LinkState.DEGRADED]
    assert fabric.link_names[0] == "spine-0/p1<->leaf-0/p4"


def test_the_example_in_the_docs_imports_and_is_what_export_writes():
    text = DOCS.read_text()
    example = re.search(r"```json\n(.*?)```", text, re.S).group(1)
    fabric = import_fabric("json", example)
    assert export_fabric(fabric, "json") == example


@pytest.mark.parametrize(
    ("change", "path", "expected"),
    [
        (lambda d: d["links"][2].update(speed_gbps=-1), "links[2].speed_gbps", "positive"),
        (lambda d: d["links"][1].update(speed_gbps="fast"), "links[1].speed_gbps", "must be a number"),
        (lambda d: d["links"][0].update(b="leaf-9"), "links[0].b", "must name a node"),
        (lambda d: d["links"][0].pop("a_port"), "links[0].a_port", "is required"),
        (lambda d: d["links"][1].update(a_port=5), "links[1].a_port", "leaf-0 has 4 ports"),
        (lambda d: d["links"][1].update(a_port=4), "links[1].a_port", "already used by links[0]"),
        (lambda d: d["links"][2].update(state="FLAKY"), "links[2].state", "UP, DOWN, DEGRADED"),
        (lambda d: d["links"][2].update(ber=2), "links[2].ber", "0..1"),
        (lambda d: d["links"][2].update(colour="red"), "links[2].colour", "unknown key"),
        (lambda d: d["nodes"][3].update(name="gpu-0"), "nodes[3].name", "also the name of nodes[2]"),
        (lambda d: d["nodes"][0].update(kind="ROUTER"), "nodes[0].kind", "HOST, SWITCH"),
        (lambda d: d["nodes"][2].update(tier=1), "nodes[2].tier", "0..0"),
        (lambda d: d["nodes"][1].update(guid="12"), "nodes[1].guid", "0x hex string"),
        (lambda d: d["nodes"][2].update(ip="10.0.0.300"), "nodes[2].ip", "dotted IPv4"),
        (lambda d: d["nodes"][1].update(lid=70000), "nodes[1].lid", "0..65535"),
        (lambda d: d["nodes"][1].update(radix=True), "nodes[1].radix", "whole number"),
        (lambda d: d.update(version=2), "version", "must be 1"),
        (lambda d: d.update(nodes=[]), "nodes", "non-empty"),
        (lambda d: d.update(extra=1), "extra", "unknown key"),
    ],
)
def test_a_bad_value_is_named_by_its_json_path(change, path, expected):
    with pytest.raises(InvalidArgument) as error:
        import_fabric("json", _with(change))
    assert error.value.field == path
    assert expected in error.value.problem


def test_text_that_is_not_json_names_the_line():
    with pytest.raises(InvalidArgument) as error:
        import_fabric("json", '{\n  "nodes": [\n    {"name": "a" "kind": "HOST"}\n  ]\n}')
    assert error.value.field == "line 3"
    assert "not JSON" in error.value.problem


def test_a_json_document_that_is_not_an_object_is_refused():
    with pytest.raises(InvalidArgument, match="must be a JSON object"):
        import_fabric("json", "[1, 2]")
