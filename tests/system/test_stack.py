"""System tests: the four services as real subprocesses, driven through the SDK and the CLI."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import grpc
import pytest
from fabrictwin import Client, collective_job
from fabrictwin.demo import run_demo
from fabrictwin.errors import InvalidArgumentError, NotFoundError
from fabrictwin.v1 import common_pb2, scenario_pb2
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from services.stack import SERVICES, start_stack

pytestmark = pytest.mark.system


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    running = start_stack(tmp_path_factory.mktemp("stack"))
    try:
        running.wait_serving()
        yield running
    finally:
        codes = running.stop()
        # Graceful shutdown on SIGTERM is part of the contract: every service exits 0.
        assert codes == dict.fromkeys(SERVICES, 0), codes


@pytest.fixture(scope="module")
def client(stack):
    with Client(**{name: stack.address(name) for name in SERVICES}) as opened:
        yield opened


def test_all_four_services_report_serving(client):
    assert client.health() == dict.fromkeys(SERVICES, "SERVING")


@pytest.mark.parametrize("service", list(SERVICES))
def test_reflection_lists_each_service(stack, service):
    with grpc.insecure_channel(stack.address(service)) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        replies = stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
        names = {s.name for reply in replies for s in reply.list_services_response.service}
    assert SERVICES[service] in names
    assert "grpc.health.v1.Health" in names


def test_bad_input_gets_invalid_argument_and_the_service_keeps_serving(client):
    with pytest.raises(InvalidArgumentError, match="k"):
        client.fabrics.create_fat_tree(5)
    with pytest.raises(NotFoundError):
        client.fabrics.get("never-made")
    assert client.health()["topology"] == "SERVING"


def test_a_user_compares_ecmp_with_adaptive_routing_through_the_sdk(client):
    client.fabrics.create_fat_tree(4, fabric_id="sys-ft4")
    scenario = client.scenarios.create(
        "sys-ft4",
        [collective_job(ranks=16, size="64MiB", placement="scattered")],
        ["ecmp", "adaptive"],
        seed=5,
    )
    run = client.scenarios.wait_run(client.scenarios.run(scenario.name).name, timeout=120)
    assert run.state == common_pb2.JOB_STATE_SUCCEEDED, run.error.message
    comparison = client.scenarios.compare(run.name)
    ecmp, adaptive = comparison.rows
    assert adaptive.makespan_ns <= ecmp.makespan_ns
    assert adaptive.slowdown_vs_ideal == pytest.approx(1.0, abs=0.03)


def test_the_demo_shows_ecmp_pinning_and_even_spreading(client, tmp_path):
    lines: list[str] = []
    outcome = run_demo(client, tmp_path, say=lines.append)
    rows = {row.label: row for row in outcome["comparison"].rows}
    # Scattered ranks: four flows leave every edge switch; ECMP pins some onto one uplink.
    assert rows["ECMP"].makespan_ns > 1.5 * rows["ADAPTIVE"].makespan_ns
    assert rows["ECMP"].uplink_share_idle > 0.1
    assert rows["ADAPTIVE"].uplink_share_idle == 0
    assert [f.kind for f in outcome["diagnosis"].findings][:1] == [scenario_pb2.FINDING_KIND_ECMP_PINNING]
    for picture in (outcome["plot"], outcome["heatmap"]):
        assert pathlib.Path(picture).read_bytes().startswith(b"\x89PNG")
    assert any("faster than ECMP" in line for line in lines)
    packet = {row.label: row for row in outcome["packet_comparison"].rows}
    assert set(packet) == {"ECMP", "ADAPTIVE", "SPRAY", "FLOWLET"}
    assert packet["ADAPTIVE"].slowdown_vs_ideal == pytest.approx(1.0, abs=0.03)
    assert packet["ECMP"].makespan_ns > packet["ADAPTIVE"].makespan_ns


def test_the_cli_lists_fabrics_as_json(stack, client):
    env = {**os.environ, **stack.client_env}
    result = subprocess.run(
        [sys.executable, "-m", "fabrictwin.cli", "fabric", "list", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    names = {f["name"] for f in json.loads(result.stdout)}
    assert "fabrics/sys-ft4" in names


def test_the_cli_reports_a_server_error_without_a_traceback(stack):
    env = {**os.environ, **stack.client_env}
    result = subprocess.run(
        [sys.executable, "-m", "fabrictwin.cli", "fabric", "get", "never-made"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "never-made" in result.stderr
