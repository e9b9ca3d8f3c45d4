"""Port groups: `group:uplinks` and friends resolve against the links of the source's fabric, for
ports named as live counters name them (`leaf-0/p3`) and as simulated runs do (`leaf-0->spine-1`)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from services.common.errors import InvalidArgument, NotFound
from services.common.resources import new_id
from services.telemetry.groups import FabricLinks, group_members
from services.telemetry.store import SourceKind, SourceRecord, TelemetryStore

# Two leaves, two spines, one host per leaf: leaf-i port 1 to the host, ports 2 and 3 up to the spines.
LINKS = FabricLinks(
    fabric="fabrics/ls",
    version=123,
    node_a=["host-0", "host-1", "leaf-0", "leaf-0", "leaf-1", "leaf-1"],
    port_a=[1, 1, 2, 3, 2, 3],
    tier_a=[0, 0, 1, 1, 1, 1],
    node_b=["leaf-0", "leaf-1", "spine-0", "spine-1", "spine-0", "spine-1"],
    port_b=[1, 1, 1, 1, 2, 2],
    tier_b=[1, 1, 2, 2, 2, 2],
)
LIVE_PORTS = ["host-0/p1", "leaf-0/p1", "leaf-0/p2", "leaf-0/p3", "spine-0/p1", "spine-1/p2", "mystery/p9"]
CHANNELS = ["host-1->leaf-1", "leaf-1->host-1", "leaf-1->spine-0", "spine-0->leaf-1", "leaf-0->spine-1"]


@pytest.mark.parametrize(
    ("group", "expected"),
    [
        ("group:uplinks", ["leaf-0/p2", "leaf-0/p3"]),
        ("group:downlinks", ["spine-0/p1", "spine-1/p2"]),
        ("group:switch-links", ["leaf-0/p2", "leaf-0/p3", "spine-0/p1", "spine-1/p2"]),
        ("group:host-links", ["host-0/p1", "leaf-0/p1"]),
        ("group:tier:0->1", ["host-0/p1"]),
        ("group:tier:2->1", ["spine-0/p1", "spine-1/p2"]),
    ],
)
def test_groups_select_live_ports_by_the_tiers_at_both_ends(group, expected):
    members = group_members(group, "ports.patterns[0]", LIVE_PORTS, LINKS)
    assert [name for name, member in zip(LIVE_PORTS, members, strict=True) if member] == expected


def test_groups_select_simulated_channels_by_direction():
    members = group_members("group:uplinks", "ports.patterns[0]", CHANNELS, LINKS)
    assert [name for name, member in zip(CHANNELS, members, strict=True) if member] == [
        "leaf-1->spine-0",
        "leaf-0->spine-1",
    ]


def test_an_unknown_group_is_refused_naming_the_pattern():
    with pytest.raises(InvalidArgument, match=r"^ports\.patterns\[2\]: unknown group 'group:spines'"):
        group_members("group:spines", "ports.patterns[2]", LIVE_PORTS, LINKS)


@pytest.fixture
def fabric_source(store: TelemetryStore):
    source_id = new_id("pod")
    store.create_source(SourceRecord(source_id, SourceKind.LIVE, fabric="fabrics/ls"))
    names = LIVE_PORTS
    utilisation = np.linspace(0.1, 0.9, len(names))
    store.ingest(
        source_id,
        names,
        np.arange(len(names)),
        np.zeros(len(names), dtype=np.int64),
        {"utilisation": utilisation},
    )
    yield source_id
    store.delete_source(source_id)


def test_a_group_query_needs_the_fabric_links_bound_first(store: TelemetryStore, fabric_source: str):
    with pytest.raises(InvalidArgument, match="not loaded yet"):
        store.query_series(fabric_source, "utilisation", port_patterns=["group:uplinks"])
    assert store.bind_fabric(fabric_source, LINKS).fabric_version == 123
    page = store.query_series(fabric_source, "utilisation", port_patterns=["group:uplinks", "host-*"])
    assert [s.port for s in page.series] == ["host-0/p1", "leaf-0/p2", "leaf-0/p3"]
    top = store.top_links(fabric_source, "utilisation", port_patterns=["group:downlinks"]).ports
    assert [p.port for p in top] == ["spine-1/p2", "spine-0/p1"]


def test_a_bound_source_keeps_its_fabric_version(store: TelemetryStore, fabric_source: str):
    store.bind_fabric(fabric_source, LINKS)
    newer = dataclasses.replace(LINKS, version=456)
    assert store.bind_fabric(fabric_source, newer).fabric_version == 123


def test_exact_names_must_be_ports_of_the_source(store: TelemetryStore, fabric_source: str):
    with pytest.raises(NotFound, match=r"ports\.patterns\[1\]: .* has no port 'leaf-9/p1'"):
        store.query_series(fabric_source, "utilisation", port_patterns=["leaf-0/p1", "leaf-9/p1"])
    assert store.query_series(fabric_source, "utilisation", port_patterns=["leaf-9/*"]).series == []
