"""The SDK's and the CLI's fabric jobs end to end against a REAL topology server (port 0, SQLite).

create (every generator), update, import and export (through the formats engine), compute routes
with each engine (file included, from an exported opensm-lfts.dump), link state changes, watching,
forwarding tables and paths, each from the SDK and from `fabrictwin fabric ... --json`.
"""

from __future__ import annotations

import io
import json
import threading

import pytest
from fabrictwin import Client, InvalidArgumentError, NotFoundError
from fabrictwin.cli import main
from fabrictwin.fabrics import FabricsApi
from fabrictwin.v1 import topology_pb2

from services.topology.__main__ import build

from .conftest import BackgroundServer, config


@pytest.fixture(scope="module")
def topology(tmp_path_factory):
    with BackgroundServer(build, config("topology", str(tmp_path_factory.mktemp("fabrics")))) as server:
        yield server


def client_of(server: BackgroundServer) -> Client:
    return Client(topology=server.address, timeout=60)


def cli(capsys, server: BackgroundServer, *argv: str) -> tuple[int, str, str]:
    code = main([f"--topology={server.address}", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_sdk_builds_updates_reroutes_and_watches_a_superpod(topology) -> None:
    with client_of(topology) as client:
        pod = client.fabrics.create_superpod(2, fabric_id="e2e-pod", labels={"site": "a"})
        assert (pod.host_count, pod.switch_count, pod.link_count) == (512, 24, 1024)
        events = client.fabrics.watch("e2e-pod")  # live once it returns
        updated = client.fabrics.update("e2e-pod", display_name="two SUs", routing_engine="ftree")
        assert updated.display_name == "two SUs" and dict(updated.labels) == {"site": "a"}
        assert updated.routing_engine == topology_pb2.ROUTING_ENGINE_FTREE and updated.routing_version == 2
        link = client.fabrics.links("e2e-pod", page_size=1000)
        uplink = next(x for x in link if x.display_name.startswith("spine-3/"))
        change = client.fabrics.set_link_state("e2e-pod", uplink.display_name, "down")
        assert change.link.state == topology_pb2.LINK_STATE_DOWN and change.routing.incremental
        kinds = [next(events).kind for _ in range(3)]
        assert kinds == [
            topology_pb2.FABRIC_EVENT_KIND_ROUTES_CHANGED,
            topology_pb2.FABRIC_EVENT_KIND_LINK_STATE_CHANGED,
            topology_pb2.FABRIC_EVENT_KIND_ROUTES_CHANGED,
        ]
        snapshot = client.fabrics.snapshot("e2e-pod")
        assert snapshot.routing_version == 3 and snapshot.route_encoding == 2
        client.fabrics.delete("e2e-pod")
        assert [e.kind for e in events] == [topology_pb2.FABRIC_EVENT_KIND_FABRIC_DELETED]


def test_the_sdk_moves_fabrics_and_tables_between_formats(topology) -> None:
    with client_of(topology) as client:
        client.fabrics.create_fat_tree(4, fabric_id="e2e-src")
        text = client.fabrics.export("e2e-src", "json")
        copy = client.fabrics.import_("json", text, fabric_id="e2e-copy", routing_engine="updn")
        assert (copy.host_count, copy.switch_count, copy.link_count) == (16, 20, 48)
        assert copy.imported_format == topology_pb2.TOPOLOGY_FORMAT_JSON
        dump = client.fabrics.export("e2e-src", "opensm_lfts")
        summary = client.fabrics.compute_routes("e2e-copy", routing_engine="file", lfts_dump=dump)
        assert summary.routing_engine == topology_pb2.ROUTING_ENGINE_FILE and summary.unreachable_pairs == 0
        assert client.fabrics.export("e2e-copy", "opensm_lfts") == dump
        with pytest.raises(InvalidArgumentError, match="lfts_dump line 1"):
            client.fabrics.compute_routes("e2e-copy", routing_engine="file", lfts_dump="not a dump\n")
        with pytest.raises(NotFoundError, match="no link"):
            client.fabrics.set_link_state("e2e-copy", "core-0/p9<->nowhere", "down")


def test_every_fabric_job_runs_from_the_cli_with_json(topology, capsys, tmp_path, monkeypatch) -> None:
    code, out, _ = cli(
        capsys, topology, "fabric", "create", "superpod", "--scalable-units", "1", "--id", "e2e-cli", "--json"
    )
    assert code == 0 and json.loads(out)["host_count"] == 256
    code, out, _ = cli(
        capsys,
        topology,
        "fabric",
        "update",
        "e2e-cli",
        "--display-name",
        "one SU",
        "--routing",
        "updn",
        "--json",
    )
    assert code == 0 and json.loads(out)["routing_engine"] == "ROUTING_ENGINE_UPDN"
    code, out, _ = cli(capsys, topology, "fabric", "route", "e2e-cli", "su0-rail3", "--json")
    table = json.loads(out)
    assert code == 0 and len(table["entries"]) == 256 and table["routing_version"] == "2"
    code, out, _ = cli(
        capsys, topology, "fabric", "paths", "e2e-cli", "su0-dgx00-gpu0", "su0-dgx05-gpu1", "--json"
    )
    # 4 spines between two rails, 8 parallel cables from each leaf to each spine: 4 x 8 x 8 paths
    assert code == 0 and int(json.loads(out)["total_paths"]) == 256
    dump = tmp_path / "opensm-lfts.dump"
    code, out, _ = cli(
        capsys, topology, "fabric", "export", "e2e-cli", "--format", "opensm_lfts", "-o", str(dump)
    )
    assert code == 0 and dump.read_text().startswith("Unicast lids [0-")
    code, out, _ = cli(
        capsys,
        topology,
        "fabric",
        "compute-routes",
        "e2e-cli",
        "--routing",
        "file",
        "--lfts-dump",
        str(dump),
        "--json",
    )
    assert code == 0 and json.loads(out)["routing_engine"] == "ROUTING_ENGINE_FILE"
    code, out, _ = cli(
        capsys, topology, "fabric", "compute-routes", "e2e-cli", "--routing", "minhop", "--json"
    )
    assert code == 0 and json.loads(out)["routing_version"] == "4"
    code, out, _ = cli(capsys, topology, "fabric", "export", "e2e-cli", "--format", "json")
    monkeypatch.setattr("sys.stdin", io.StringIO(out))
    code, out, _ = cli(
        capsys, topology, "fabric", "import", "-", "--format", "json", "--id", "e2e-cli-copy", "--json"
    )
    assert code == 0 and json.loads(out)["imported_format"] == "TOPOLOGY_FORMAT_JSON"
    code, out, _ = cli(capsys, topology, "fabric", "get", "e2e-cli-copy", "--json")
    assert code == 0 and json.loads(out)["link_count"] == 512
    code, out, _ = cli(
        capsys, topology, "fabric", "link-set", "5", "--fabric", "e2e-cli-copy", "--state", "down", "--json"
    )
    reply = json.loads(out)
    assert code == 0 and reply["link"]["state"] == "LINK_STATE_DOWN" and reply["routing"]["incremental"]
    code, out, _ = cli(capsys, topology, "fabric", "links", "e2e-cli-copy", "--state", "down", "--json")
    assert code == 0 and [link["index"] for link in json.loads(out)] == [5]


def test_the_cli_watch_prints_each_event_as_a_json_line_until_the_fabric_is_deleted(
    topology, capsys, monkeypatch
) -> None:
    with client_of(topology) as client:
        client.fabrics.create_leaf_spine(2, 2, 2, fabric_id="e2e-watched")
        subscribed = threading.Event()
        original = FabricsApi.watch

        def watch(self, name):  # the CLI's own watch, plus a signal that it is subscribed
            events = original(self, name)
            subscribed.set()
            return events

        monkeypatch.setattr(FabricsApi, "watch", watch)
        codes: list[int] = []
        watcher = threading.Thread(
            target=lambda: codes.append(
                main([f"--topology={topology.address}", "fabric", "watch", "e2e-watched", "--json"])
            )
        )
        watcher.start()
        assert subscribed.wait(30)
        client.fabrics.set_link_state("e2e-watched", 5, "degraded", bit_error_rate=1e-6)
        client.fabrics.delete("e2e-watched")
        watcher.join(30)
    assert codes == [0]
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["kind"] for line in lines] == [
        "FABRIC_EVENT_KIND_LINK_STATE_CHANGED",
        "FABRIC_EVENT_KIND_ROUTES_CHANGED",
        "FABRIC_EVENT_KIND_FABRIC_DELETED",
    ]
    assert lines[0]["link"]["bit_error_rate"] == 1e-6


def test_cli_fabric_errors_name_the_field_and_exit_one(topology, capsys) -> None:
    code, out, err = cli(capsys, topology, "fabric", "create", "superpod", "--scalable-units", "0")
    assert code == 1 and out == "" and "spec.superpod.scalable_units" in err and "(INVALID_ARGUMENT)" in err
    code, _, err = cli(capsys, topology, "fabric", "update", "nowhere", "--display-name", "x")
    assert code == 1 and "(NOT_FOUND)" in err
    code, _, err = cli(capsys, topology, "fabric", "update", "nowhere")
    assert code == 2 and "nothing to update" in err


def test_the_sdk_and_cli_say_which_engine_routed_from_which_roots_and_how_a_failure_rerouted(
    topology, capsys, tmp_path
) -> None:
    """A grown cluster imported for ftree is routed by minhop, as OpenSM would, and the CLI says why;
    updn's roots are given by GUID (a file, as OpenSM's root GUID file) and reported by name; a link
    down reroutes as a running subnet manager (only the entries it must move)."""
    from services.topology.formats import export_fabric
    from tests.real_like import cluster_like

    dump = tmp_path / "grown.json"
    dump.write_text(export_fabric(cluster_like(1), "json"))
    code, out, err = cli(
        capsys,
        topology,
        "fabric",
        "import",
        str(dump),
        "--format",
        "json",
        "--id",
        "e2e-grown",
        "--routing",
        "ftree",
    )
    assert code == 0 and "ftree->minhop" in out, out
    assert "ftree did not route this fabric; minhop did, as OpenSM falls back: ERR AB26" in err, err
    with client_of(topology) as client:
        spine = next(n for n in client.fabrics.nodes("e2e-grown") if n.display_name == "spine-0")
        roots = tmp_path / "roots.txt"
        roots.write_text(f"{spine.guid:#x}  # spine-0\n")
        code, out, err = cli(
            capsys,
            topology,
            "fabric",
            "compute-routes",
            "e2e-grown",
            "--routing",
            "updn",
            "--roots",
            f"@{roots}",
        )
        assert code == 0 and "roots (given): spine-0" in out, out
        fabric = client.fabrics.get("e2e-grown")
        assert list(fabric.routing_roots) == [f"{spine.guid:#018x}"]
        assert fabric.engine_used == topology_pb2.ROUTING_ENGINE_UPDN
        summary = client.fabrics.compute_routes("e2e-grown", detect_roots=True, reroute="fresh")
        assert summary.root_selection == topology_pb2.ROOT_SELECTION_DETECTED
        assert client.fabrics.get("e2e-grown").reroute == topology_pb2.REROUTE_MODE_FRESH
    code, out, _ = cli(capsys, topology, "fabric", "create", "fat-tree", "--k", "8", "--id", "e2e-k8")
    assert code == 0
    code, out, _ = cli(
        capsys,
        topology,
        "fabric",
        "link-set",
        "pod0-agg0/p1<->pod0-edge0/p5",
        "--fabric",
        "e2e-k8",
        "--state",
        "down",
    )
    assert code == 0 and "(incremental): 66 LFT entries changed on 33 switches" in out, out
    assert "most changed: pod0-edge0 31" in out, out
