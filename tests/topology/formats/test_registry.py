"""The two entry points the servicer calls: import_fabric and export_fabric."""

from __future__ import annotations

import pytest

from services.common.errors import InvalidArgument
from services.topology.formats import EXPORT_FORMATS, IMPORT_FORMATS, export_fabric, import_fabric
from services.topology.generators import fat_tree


def test_the_formats_are_those_of_the_proto_enum():
    from fabrictwin.v1 import topology_pb2

    names = {
        name.removeprefix("TOPOLOGY_FORMAT_").lower()
        for name in topology_pb2.TopologyFormat.keys()  # noqa: SIM118 (a protobuf enum wrapper)
        if name not in ("TOPOLOGY_FORMAT_UNSPECIFIED", "TOPOLOGY_FORMAT_OPENSM_LFTS")
    }
    assert set(EXPORT_FORMATS) == names - {"lldp"}  # LLDP tables are read from live nodes only
    assert set(IMPORT_FORMATS) == names - {"node_link_json"}


@pytest.mark.parametrize("format", ["ibnetdiscover", "json", "ns3_hpcc"])
def test_every_importable_format_reads_back_what_it_exports(format):
    fabric = fat_tree(4)
    back = import_fabric(format, export_fabric(fabric, format))
    assert (back.num_hosts, back.num_switches, back.num_links) == (16, 20, 48)


def test_node_link_json_is_export_only():
    with pytest.raises(InvalidArgument) as error:
        import_fabric("node_link_json", "{}")
    assert error.value.field == "format"
    assert "exported but not imported" in error.value.problem


@pytest.mark.parametrize(
    "call", [lambda: import_fabric("yaml", ""), lambda: export_fabric(fat_tree(2), "yaml")]
)
def test_an_unknown_format_is_refused_naming_the_field(call):
    with pytest.raises(InvalidArgument) as error:
        call()
    assert error.value.field == "format"
    assert "unknown topology format 'yaml'" in error.value.problem


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"default_link_speed_gbps": 0}, "default_link_speed_gbps"),
        ({"default_link_speed_gbps": float("nan")}, "default_link_speed_gbps"),
        ({"default_link_latency_ns": -1}, "default_link_latency_ns"),
        ({"default_link_latency_ns": 1.5}, "default_link_latency_ns"),
    ],
)
def test_bad_defaults_are_refused_naming_the_parameter(kwargs, field):
    with pytest.raises(InvalidArgument) as error:
        import_fabric("ns3_hpcc", "2 0 1\n0 1 1Gbps 1ns 0\n", **kwargs)
    assert error.value.field == field


def test_text_must_be_text():
    with pytest.raises(InvalidArgument, match="text"):
        import_fabric("json", b"{}")  # type: ignore[arg-type]


def test_an_ibnetdiscover_export_of_a_rate_infiniband_cannot_name_is_refused_naming_the_link():
    fabric = fat_tree(2, link_speed_gbps=123.0)
    with pytest.raises(InvalidArgument) as error:
        export_fabric(fabric, "ibnetdiscover")
    assert error.value.field == "links[0]"
    assert "123 Gb/s" in error.value.problem
