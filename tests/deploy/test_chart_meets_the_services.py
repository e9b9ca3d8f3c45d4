"""The chart against the code it deploys: every variable it sets is one the service reads, the services'
own config loader accepts the environment a pod gets (files from mounted Secrets included), and each
probe names a service the real server reports SERVING."""

from __future__ import annotations

import argparse
import dataclasses
import pathlib

import grpc
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.common.config import ServiceConfig, load_config
from services.common.peers import peer_auth
from services.orchestrator.__main__ import extra_flags as orchestrator_flags
from services.simulator.__main__ import extra_flags as simulator_flags
from services.simulator.__main__ import limits_of as simulator_limits_of
from services.telemetry.__main__ import extra_flags as telemetry_flags
from services.topology.__main__ import extra_flags as topology_flags
from tests.common.test_tls import OPENSSL, pki  # noqa: F401 - `pki` is a fixture
from tests.deploy.conftest import CHART, COMPONENTS, NAMESPACE, RELEASE
from tests.in_process import in_process_stack

EXTRA_FLAGS = {
    "topology": topology_flags,
    "simulator": simulator_flags,
    "telemetry": telemetry_flags,
    "orchestrator": orchestrator_flags,
}
FROM_SECRETS = {"FABRICTWIN_DATABASE_URL": "postgresql://fabrictwin:pw@db.example:5432/fabrictwin"}
# What the mounted Secrets hold, by path in the pod: stand-ins written to a directory of the test.
MOUNTED = {"/etc/fabrictwin/auth/token": "s3cret\n", "/etc/fabrictwin/auth/read-only-token": "viewer\n"}


def variables_read_by(component: str) -> set[str]:
    """FABRICTWIN_* names load_config reads for this service: ServiceConfig's fields and its own flags."""
    names = {f.name for f in dataclasses.fields(ServiceConfig)} - {"service", "extra"}
    if component in EXTRA_FLAGS:
        parser = argparse.ArgumentParser()
        EXTRA_FLAGS[component](parser)
        names |= {action.dest for action in parser._actions if action.dest != "help"}
    return {"FABRICTWIN_" + name.upper() for name in names}


def pod_environment(rendered, component: str, files: dict[str, pathlib.Path] | None = None) -> dict[str, str]:
    """The variables as the kubelet would set them, Secrets resolved to stand-ins and paths into
    mounted Secrets to the stand-in files in `files` (path in the pod -> file here)."""
    env = {}
    for name, value in rendered.env(component).items():
        if isinstance(value, dict):
            assert "secretKeyRef" in value, f"{component}: {name} comes from neither a value nor a Secret"
            value = FROM_SECRETS[name]
        env[name] = str((files or {}).get(value, value))
    return env


@pytest.fixture
def secret_files(tmp_path) -> dict[str, pathlib.Path]:
    files = {}
    for path, text in MOUNTED.items():
        files[path] = tmp_path / pathlib.PurePosixPath(path).name
        files[path].write_text(text)
    return files


@pytest.fixture(scope="module")
def everything_on(render):
    return render(
        {
            "auth": {"existingSecret": "fabrictwin-token"},
            "tls": {"enabled": True, "existingSecret": "fabrictwin-tls", "clientCA": True},
            "telemetry": {"env": {"FABRICTWIN_MAX_POINTS": 50_000}},
        }
    )


@pytest.mark.parametrize("component", COMPONENTS)
def test_every_fabrictwin_variable_the_chart_sets_is_one_the_service_reads(everything_on, component):
    set_by_chart = {name for name in everything_on.env(component) if name.startswith("FABRICTWIN_")}
    assert set_by_chart - variables_read_by(component) == set()


@pytest.mark.parametrize("component", COMPONENTS)
def test_the_service_accepts_the_environment_its_pod_gets(render, component, secret_files):
    rendered = render({"auth": {"existingSecret": "fabrictwin-token", "readOnlyKey": "viewer"}})
    env = pod_environment(rendered, component, secret_files)
    config = load_config(component, [], env=env, extra_flags=EXTRA_FLAGS.get(component))
    ports = {p["name"]: p["containerPort"] for p in rendered.container(component)["ports"]}
    assert (config.host, config.port, config.metrics_port) == ("0.0.0.0", ports["grpc"], ports["metrics"])
    assert (config.auth_token, config.read_only_token) == ("s3cret", "viewer")  # read from the files
    assert config.drain_seconds > 0
    assert config.log_format == "json"
    if component != "simulator":
        assert config.database_url.startswith("postgresql://")  # never the SQLite default
    if component == "orchestrator":
        headless = f"{RELEASE}-fabrictwin-simulator-headless.{NAMESPACE}.svc.cluster.local"
        assert config.simulator_addresses == f"dns:///{headless}:50052"


@pytest.mark.parametrize("component", COMPONENTS)
def test_tls_settings_reach_every_services_config(everything_on, component, secret_files):
    env = pod_environment(everything_on, component, secret_files)
    config = load_config(component, [], env=env, extra_flags=EXTRA_FLAGS.get(component))
    assert (config.tls_cert, config.tls_key, config.tls_client_ca) == (
        "/etc/fabrictwin/tls/tls.crt",
        "/etc/fabrictwin/tls/tls.key",
        "/etc/fabrictwin/tls/ca.crt",
    )


@pytest.mark.skipif(OPENSSL is None, reason="the openssl CLI is not installed; cannot make certificates")
@pytest.mark.parametrize("component", COMPONENTS)
def test_each_services_peer_settings_from_the_chart_make_a_working_peer_auth(
    everything_on,
    component,
    secret_files,
    pki,  # noqa: F811
):
    # The pod's TLS Secret, played by the test CA's files: what the service would call its peers with.
    files = {
        **secret_files,
        "/etc/fabrictwin/tls/tls.crt": pki.server_cert,
        "/etc/fabrictwin/tls/tls.key": pki.server_key,
        "/etc/fabrictwin/tls/ca.crt": pki.ca,
    }
    env = pod_environment(everything_on, component, files)
    auth = peer_auth(load_config(component, [], env=env, extra_flags=EXTRA_FLAGS.get(component)))
    assert auth.token == "s3cret"
    if component == "topology":  # calls no peer
        assert not auth.tls
    else:
        assert auth.root_certificates == pki.read("ca")
        assert auth.certificate_chain == pki.read("server_cert")  # mutual TLS: its own certificate


def test_a_services_own_settings_from_values_reach_its_config(everything_on, secret_files):
    env = pod_environment(everything_on, "telemetry", secret_files)
    config = load_config("telemetry", [], env=env, extra_flags=telemetry_flags)
    assert config.extra["max_points"] == 50_000


def chart_limits(component: str) -> list[str]:
    """The limit names values.yaml offers for a service (`<component>.limits`)."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    return list(values[component]["limits"])


@pytest.mark.parametrize("component", COMPONENTS)
def test_every_limit_the_chart_offers_reaches_the_services_config(render, component, secret_files):
    names = chart_limits(component)
    assert "maxMessageBytes" in names
    # A distinct value per limit, each above the smallest the service accepts.
    chosen = {name: 100_000 + 7 * i for i, name in enumerate(names)}
    rendered = render({component: {"limits": chosen}})
    env = pod_environment(rendered, component, secret_files)
    config = load_config(component, [], env=env, extra_flags=EXTRA_FLAGS.get(component))
    for name, value in chosen.items():
        key = "".join("_" + c.lower() if c.isupper() else c for c in name)
        read = config.max_message_bytes if key == "max_message_bytes" else config.extra[key]
        assert int(read) == value, f"{component}.limits.{name}"
    if component == "simulator":  # and admission control takes them
        limits = simulator_limits_of(config)
        assert (limits.max_flows, limits.max_events) == (chosen["maxFlows"], chosen["maxEvents"])


@pytest.mark.parametrize("component", COMPONENTS)
def test_limits_left_null_set_no_variable(render, component):
    rendered = render()
    keys = {
        "FABRICTWIN_" + "".join("_" + c if c.isupper() else c.upper() for c in n)
        for n in chart_limits(component)
    }
    assert keys & set(rendered.env(component)) == set()


def test_an_unknown_limit_is_refused_by_the_schema(render):
    with pytest.raises(Exception, match="maxFlowz"):
        render({"simulator": {"limits": {"maxFlowz": 5}}})


def test_a_limit_set_twice_is_refused(render):
    with pytest.raises(Exception, match="FABRICTWIN_MAX_FLOWS"):
        render({"simulator": {"limits": {"maxFlows": 5}, "env": {"FABRICTWIN_MAX_FLOWS": 6}}})


async def test_each_probe_names_a_service_the_real_server_reports_serving(render, tmp_path):
    rendered = render()
    async with in_process_stack(tmp_path) as stack:
        for component in COMPONENTS:
            probe = rendered.container(component)["readinessProbe"]["grpc"]
            async with grpc.aio.insecure_channel(stack.addresses[component]) as channel:
                reply = await health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(service=probe["service"]), timeout=5
                )
            assert reply.status == health_pb2.HealthCheckResponse.SERVING, component
