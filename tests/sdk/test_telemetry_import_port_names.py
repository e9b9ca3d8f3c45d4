"""`fabrictwin telemetry import --format prometheus` names ports as the mirror does, against real topology
and telemetry services.

Reported: the one-shot import stored `X/swp51` where the fabric (and the mirror) say `X/p51`, and
`--port-name` did not apply to netdev ports. Here the fabric is imported from LLDP with SONiC-style
interface names (`Ethernet0`..: port numbers 1, 2, ... in natural order, since 0 is no port number),
so only the interface names the fabric keeps can say that `Ethernet1` is `leaf-0/p2`.
"""

from __future__ import annotations

import pytest
from fabrictwin import Client
from fabrictwin.cli import main
from fabrictwin.fabric_mirror import FabricMirror
from fabrictwin.mirror_config import parse_mirror_config

from services.topology.formats.lldp import neighbour_documents
from services.topology.generators import leaf_spine


@pytest.fixture
def client(services):
    with Client(topology=services["topology"], telemetry=services["telemetry"]) as client:
        documents = neighbour_documents(leaf_spine(2, 2, 2), port_name="Ethernet{index}")
        client.fabrics.import_lldp(documents, fabric_id="ls")
        for source in ("mirrored", "imported", "templated", "unbound"):
            client.telemetry.create_source(source, fabric="" if source == "unbound" else "ls")
        yield client


def scrape(sent: int) -> str:
    """leaf-0's node_exporter: its four fabric ports, its management port and its loopback."""
    lines = ["# TYPE node_network_transmit_bytes_total counter"]
    for device in ("Ethernet0", "Ethernet1", "Ethernet2", "Ethernet3", "eth0", "lo"):
        lines.append(f'node_network_transmit_bytes_total{{device="{device}"}} {sent}')
    return "\n".join(lines) + "\n"


def ports(client: Client, source: str) -> set[str]:
    return {series.port for series in client.telemetry.query_series(source, "tx_bytes")}


def cli(services, *argv: str) -> int:
    return main([f"--topology={services['topology']}", f"--telemetry={services['telemetry']}", *argv])


def test_the_one_shot_import_names_ports_exactly_as_the_mirror_does(services, client, tmp_path, capsys):
    text = tmp_path / "leaf-0.prom"
    mirror_toml = f'fabric = "ls"\nsource = "mirrored"\n[[targets]]\nnode = "leaf-0"\ncommand = "cat {text}"'
    mirror = FabricMirror(client, parse_mirror_config(mirror_toml))
    try:
        mirror.start()
        for sent in (1000, 5000):
            text.write_text(scrape(sent))
            mirror.poll()
    finally:
        mirror.close()
    for sent, at in ((1000, "1s"), (5000, "2s")):
        text.write_text(scrape(sent))
        argv = ["telemetry", "import", "--format", "prometheus", "--source", "imported", "--node", "leaf-0"]
        assert cli(services, *argv, "--time", at, str(text)) == 0
    err = capsys.readouterr().err
    assert ports(client, "mirrored") == {"leaf-0/p1", "leaf-0/p2", "leaf-0/p3", "leaf-0/p4"}
    assert ports(client, "imported") == ports(client, "mirrored")
    assert "fabrics/ls names no port for 2 interfaces of leaf-0, not stored: eth0, lo" in err


def test_the_sdks_one_shot_import_names_ports_as_the_mirror_given_the_fabrics_links(client):
    links = list(client.fabrics.links("ls"))
    client.telemetry.create_source("sdk-imported", fabric="ls")
    for sent, at in ((1000, 1_000_000_000), (5000, 2_000_000_000)):
        client.telemetry.import_text(
            "sdk-imported", scrape(sent), "prometheus", node="leaf-0", time_ns=at, fabric_links=links
        )
    assert ports(client, "sdk-imported") == {"leaf-0/p1", "leaf-0/p2", "leaf-0/p3", "leaf-0/p4"}


def test_port_name_applies_to_netdev_ports_port_being_the_number_their_name_ends_in(
    services, client, tmp_path
):
    text = tmp_path / "leaf-0.prom"
    text.write_text(scrape(1000))
    argv = ["telemetry", "import", "--format", "prometheus", "--node", "leaf-0", str(text)]
    assert cli(services, *argv, "--source", "templated", "--port-name", "{node}:{device}") == 0
    assert ports(client, "templated") == {f"leaf-0:{d}" for d in ("Ethernet0", "Ethernet1", "Ethernet2",
                                                                    "Ethernet3", "eth0", "lo")}  # fmt: skip
    # {port}: the number an interface's name ends in (interfaces without one, or 0, are no fabric port).
    assert cli(services, *argv, "--source", "unbound", "--port-name", "{node}/p{port}") == 0
    assert ports(client, "unbound") == {"leaf-0/p1", "leaf-0/p2", "leaf-0/p3"}


def test_without_a_fabric_or_a_node_the_default_names_stay(services, client, tmp_path):
    text = tmp_path / "leaf-0.prom"
    text.write_text(scrape(1000))
    argv = ["telemetry", "import", "--format", "prometheus", "--source", "unbound", str(text)]
    assert cli(services, *argv, "--node", "leaf-0") == 0
    assert "leaf-0/Ethernet1" in ports(client, "unbound")
    assert cli(services, *argv) == 0
    assert "Ethernet1" in ports(client, "unbound")


def test_two_devices_named_alike_by_a_template_are_refused(services, client, tmp_path, capsys):
    text = tmp_path / "leaf-0.prom"
    text.write_text(scrape(1000) + 'node_network_transmit_bytes_total{device="swp1"} 7\n')
    argv = ["telemetry", "import", "--format", "prometheus", "--source", "unbound", "--node", "leaf-0"]
    assert cli(services, *argv, "--port-name", "{node}/p{port}", str(text)) == 2
    err = capsys.readouterr().err
    assert "--port-name '{node}/p{port}' names two interfaces leaf-0/p1: Ethernet1 and swp1" in err
    assert ports(client, "unbound") == set()  # nothing stored
