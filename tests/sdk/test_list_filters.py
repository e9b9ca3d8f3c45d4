"""List filters and orders (AIP-160/132) through REAL servers (port 0, SQLite), the SDK and the CLI."""

from __future__ import annotations

import json

import pytest
from fabrictwin import Client, InvalidArgumentError
from fabrictwin.cli import main

from services.telemetry.__main__ import build as build_telemetry
from services.topology.__main__ import build as build_topology

from .conftest import BackgroundServer, config


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    base = tmp_path_factory.mktemp("lists")
    with (
        BackgroundServer(build_topology, config("topology", str(base / "f"))) as topology,
        BackgroundServer(build_telemetry, config("telemetry", str(base / "t"))) as telemetry,
    ):
        with Client(topology=topology.address, telemetry=telemetry.address, timeout=60) as client:
            for i, site in enumerate(["a", "b", "a", "c", "a"]):
                client.fabrics.create_leaf_spine(2, 2, 2, fabric_id=f"ls-{i}", labels={"site": site})
            client.telemetry.create_source("live-1", kind="live")
            client.telemetry.create_source("sim-1", kind="simulated")
        yield topology, telemetry


def test_a_filter_pages_and_orders_on_the_server(servers) -> None:
    topology, telemetry = servers
    with Client(topology=topology.address, telemetry=telemetry.address, timeout=60) as client:
        site_a = [f.name for f in client.fabrics.list(filter='labels.site = "a"', page_size=2)]
        assert site_a == ["fabrics/ls-0", "fabrics/ls-2", "fabrics/ls-4"]  # three pages of at most 2
        newest = [f.name for f in client.fabrics.list(order_by="create_time desc, name")]
        assert newest[0] == "fabrics/ls-4" and newest[-1] == "fabrics/ls-0"
        not_a = [f.name for f in client.fabrics.list(filter="NOT labels.site = a", order_by="name desc")]
        assert not_a == ["fabrics/ls-3", "fabrics/ls-1"]
        assert [s.name for s in client.telemetry.list_sources(filter="kind = SIMULATED")] == ["sources/sim-1"]
        with pytest.raises(InvalidArgumentError, match=r"filter.*no field 'site'"):
            list(client.fabrics.list(filter="site = a"))


def test_the_cli_takes_filter_order_and_limit(servers, capsys) -> None:
    topology, _ = servers
    argv = [f"--topology={topology.address}", "fabric", "list"]
    assert main([*argv, "--filter", 'labels.site = "a"', "--order-by", "name desc", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [f["name"] for f in shown] == ["fabrics/ls-4", "fabrics/ls-2", "fabrics/ls-0"]
    assert main([*argv, "--limit", "2"]) == 0
    captured = capsys.readouterr()
    assert captured.out.count("ls-") == 2 and "--limit 0 for all" in captured.err
    assert main([*argv, "--filter", "site = a"]) == 1
    assert "no field 'site'" in capsys.readouterr().err


def test_output_formats_wide_json_and_yaml(servers, capsys) -> None:
    import yaml

    topology, telemetry = servers
    argv = [f"--topology={topology.address}", f"--telemetry={telemetry.address}"]
    assert main([*argv, "fabric", "list", "--filter", 'labels.site = "c"']) == 0
    table = capsys.readouterr().out
    assert main([*argv, "-o", "wide", "fabric", "list", "--filter", 'labels.site = "c"']) == 0
    wide = capsys.readouterr().out
    assert "LABELS" not in table and "LABELS" in wide and "site=c" in wide  # the wide columns
    assert main([*argv, "--json", "fabric", "list"]) == 0
    as_json = json.loads(capsys.readouterr().out)
    assert main([*argv, "-o", "json", "fabric", "list"]) == 0
    assert json.loads(capsys.readouterr().out) == as_json
    assert main([*argv, "-o", "yaml", "fabric", "list"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == as_json  # the same document, as YAML
    assert main([*argv, "-o", "yaml", "telemetry", "sources", "--limit", "1"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)[0]["name"].startswith("sources/")
    assert main([*argv, "-o", "wide", "telemetry", "sources"]) == 0
    assert "RETENTION" in capsys.readouterr().out
