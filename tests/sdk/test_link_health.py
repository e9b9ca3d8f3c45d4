"""Link health from counters, against REAL topology and telemetry servers (port 0, SQLite): the
estimate's closed form, the window, one routing version for every change, and bad input refused."""

from __future__ import annotations

import json

import pytest
from fabrictwin import Client, InvalidArgumentError
from fabrictwin.cli import main
from fabrictwin.link_health import assess, check_links
from fabrictwin.v1 import topology_pb2

from services.telemetry.__main__ import build as build_telemetry
from services.topology.__main__ import build as build_topology

from .conftest import BackgroundServer, config

S = 10**9
SAMPLES = 10  # one a second
BYTES = 10**9  # received per second at every port of the test's links


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    base = tmp_path_factory.mktemp("health")
    telemetry_config = config("telemetry", str(base / "t"), extra={"maintenance_interval_seconds": 0})
    with (
        BackgroundServer(build_topology, config("topology", str(base / "f"))) as topology,
        BackgroundServer(build_telemetry, telemetry_config) as telemetry,
    ):
        yield topology, telemetry


def client_of(servers) -> Client:
    topology, telemetry = servers
    return Client(topology=topology.address, telemetry=telemetry.address, timeout=60)


def ports_of(link: topology_pb2.Link) -> tuple[str, str]:
    return (
        f"{link.node_a.rsplit('/', 1)[-1]}/p{link.port_a}",
        f"{link.node_b.rsplit('/', 1)[-1]}/p{link.port_b}",
    )


def ingest(client: Client, source: str, rows: dict[str, list[dict[str, float]]]) -> None:
    """rows: port -> one dict of metric values per second."""
    ports = sorted(rows)
    index, times, columns = (
        [],
        [],
        {m: [] for m in ("rx_bytes", "symbol_errors", "rcv_errors", "link_downed")},
    )
    for i, port in enumerate(ports):
        for second, values in enumerate(rows[port]):
            index.append(i)
            times.append(second * S)
            for metric in columns:
                columns[metric].append(values.get(metric, 0.0))
    client.telemetry.ingest_columns(source, ports, index, times, columns)


def clean(**extra: float) -> dict[str, float]:
    return {"rx_bytes": BYTES, **extra}


@pytest.fixture(scope="module")
def fabric(servers):
    """A k=4 fat-tree with an hour of a live source over six of its switch links."""
    with client_of(servers) as client:
        client.fabrics.create_fat_tree(4, fabric_id="health-ft")
        links = [x for x in client.fabrics.links("health-ft", page_size=1000) if "-h" not in x.display_name]
        clean_link, erring, flapped, recovered, back, dark = links[:6]
        client.fabrics.set_link_states(
            "health-ft",
            [(recovered.index, "degraded", 1e-6), (back.index, "down", 0.0), (dark.index, "down", 0.0)],
        )
        client.telemetry.create_source("health-live", fabric="health-ft")
        rows: dict[str, list[dict[str, float]]] = {}
        for link in (clean_link, recovered, back):
            for port in ports_of(link):
                rows[port] = [clean() for _ in range(SAMPLES)]
        a, b = ports_of(erring)
        # 8 receive errors a second at one end, 2 symbol errors a second at the other; the first
        # second's burst of 1,000 errors is outside a 9 s window.
        rows[a] = [clean(rcv_errors=1000.0 if s == 0 else 8.0) for s in range(SAMPLES)]
        rows[b] = [clean(symbol_errors=2.0) for _ in range(SAMPLES)]
        a, b = ports_of(flapped)
        rows[a] = [clean(link_downed=1.0 if s == 5 else 0.0) for s in range(SAMPLES)]
        rows[b] = [clean() for _ in range(SAMPLES)]
        for port in ports_of(dark):
            rows[port] = [{"rx_bytes": 0.0} for _ in range(SAMPLES)]
        ingest(client, "health-live", rows)
        yield {
            "clean": clean_link,
            "erring": erring,
            "flapped": flapped,
            "recovered": recovered,
            "back": back,
            "dark": dark,
        }


def test_port_health_sums_the_window_and_estimates_the_ber(servers, fabric) -> None:
    with client_of(servers) as client:
        health = client.telemetry.port_health("health-live", window_ns=9 * S)
        # (newest - 9 s, newest]: the samples at 1 s .. 9 s, not the one at 0
        assert (health.time_range.start_ns, health.time_range.end_ns) == (1, (SAMPLES - 1) * S + 1)
        by_port = {p.port: p for p in health.ports}
        a, b = ports_of(fabric["erring"])
        assert by_port[a].rcv_errors == 8.0 * 9 and by_port[a].rx_bytes == BYTES * 9
        assert by_port[a].estimated_ber == pytest.approx(72 / (BYTES * 9 * 8), rel=1e-12)
        assert by_port[b].estimated_ber == pytest.approx(18 / (BYTES * 9 * 8), rel=1e-12)
        whole = {p.port: p for p in client.telemetry.port_health("health-live", start_ns=0, end_ns=0).ports}
        assert whole[a].rcv_errors == 1000.0 + 8.0 * 9  # the whole history when no window is given
        dark = ports_of(fabric["dark"])[0]
        assert (
            by_port[dark].rx_bytes == 0.0 and by_port[dark].estimated_ber != by_port[dark].estimated_ber
        )  # NaN


def test_verdicts_follow_the_counters(servers, fabric) -> None:
    with client_of(servers) as client:
        report = check_links(client, "health-live", window_ns=9 * S, ber_threshold=1e-10)
    verdicts = {v.index: v for v in report.verdicts}
    assert len(verdicts) == 6  # links without samples get none
    got = {name: (verdicts[link.index].current, verdicts[link.index].state) for name, link in fabric.items()}
    assert got == {
        "clean": ("UP", "UP"),
        "erring": ("UP", "DEGRADED"),
        "flapped": ("UP", "DOWN"),
        "recovered": ("DEGRADED", "UP"),
        "back": ("DOWN", "UP"),  # carried traffic, never dropped
        "dark": ("DOWN", "DOWN"),  # carried nothing: nothing says it is back
    }
    # The worse direction's rate: 72 receive errors over 72e9 bits.
    assert verdicts[fabric["erring"].index].bit_error_rate == pytest.approx(1e-9, rel=1e-12)
    assert {v.index for v in report.changes} == {
        fabric[n].index for n in ("erring", "flapped", "recovered", "back")
    }


def test_the_threshold_decides_degraded(servers, fabric) -> None:
    with client_of(servers) as client:
        report = check_links(client, "health-live", window_ns=9 * S, ber_threshold=2e-9)
    assert {v.index: v.state for v in report.verdicts}[fabric["erring"].index] == "UP"


def test_apply_sets_every_change_in_one_routing_version(servers, fabric) -> None:
    with client_of(servers) as client:
        client.fabrics.create_fat_tree(
            4, fabric_id="health-ft-copy"
        )  # the first test's fabric stays as it is
        before = client.fabrics.get("health-ft").routing_version
        report = check_links(client, "health-live", window_ns=9 * S, ber_threshold=1e-10, apply=True)
        assert report.applied is not None
        assert (
            report.applied.routing.routing_version
            == before + 1
            == client.fabrics.get("health-ft").routing_version
        )
        links = {x.index: x for x in client.fabrics.links("health-ft", page_size=1000)}
        assert links[fabric["erring"].index].state == topology_pb2.LINK_STATE_DEGRADED
        assert links[fabric["erring"].index].bit_error_rate == pytest.approx(1e-9, rel=1e-12)
        assert links[fabric["flapped"].index].state == topology_pb2.LINK_STATE_DOWN
        assert links[fabric["recovered"].index].state == topology_pb2.LINK_STATE_UP
        assert links[fabric["back"].index].state == topology_pb2.LINK_STATE_UP
        again = check_links(client, "health-live", window_ns=9 * S, ber_threshold=1e-10, apply=True)
        assert again.changes == [] and again.applied is None  # applied already: nothing to do
        assert client.fabrics.get("health-ft").routing_version == before + 1


@pytest.mark.parametrize("threshold", [0.0, 1.0, -1e-9, 2.0, float("nan")])
def test_a_threshold_outside_zero_one_is_refused_naming_it(threshold) -> None:
    with pytest.raises(InvalidArgumentError, match="ber_threshold"):
        assess([], [], ber_threshold=threshold)


def test_bad_windows_are_refused_naming_the_field(servers, fabric) -> None:
    with client_of(servers) as client:
        with pytest.raises(InvalidArgumentError, match="window_ns"):
            client.telemetry.port_health("health-live", window_ns=-1)
        with pytest.raises(InvalidArgumentError, match="window_ns"):
            client.telemetry.port_health("health-live", window_ns=S, start_ns=1)


def test_the_cli_lists_the_changes_and_applies_them(servers, fabric, capsys) -> None:
    topology, telemetry = servers
    argv = [f"--topology={topology.address}", f"--telemetry={telemetry.address}", "telemetry", "health"]
    assert main([*argv, "health-live", "--window", "9s", "--ber-threshold", "1e-10", "--all", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["fabric"] == "fabrics/health-ft" and len(shown["links"]) == 6
    assert (
        main([*argv, "health-live", "--window", "9s", "--ber-threshold", "7"]) == 2
    )  # refused before any call
    err = capsys.readouterr().err
    assert "ber_threshold" in err and "Traceback" not in err
