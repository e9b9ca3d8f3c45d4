"""The optional live-fabric mirror in the chart: the CLI's `mirror` command over a ConfigMap."""

from __future__ import annotations

import pytest
from fabrictwin.mirror_config import parse_mirror_config

from tests.deploy.conftest import NAMESPACE, RELEASE

CONFIG = """fabric = "pod1"
source = "pod1-live"
interval_s = 10

[lldp]
command = "ssh {node} lldpcli -f json show neighbors"
nodes = ["leaf0", "spine0"]

[[targets]]
nodes = ["leaf0", "spine0"]
url = "http://{node}:9100/metrics"
"""


def test_the_mirror_is_off_by_default(render):
    rendered = render()
    names = [m["metadata"]["name"] for m in rendered.manifests]
    assert f"{RELEASE}-fabrictwin-mirror" not in names


def test_the_mirror_runs_the_cli_on_its_configmap_against_the_services(render):
    rendered = render({"mirror": {"enabled": True, "config": CONFIG}, "auth": {"existingSecret": "tok"}})
    config_map = rendered.named("ConfigMap", f"{RELEASE}-fabrictwin-mirror")
    assert parse_mirror_config(config_map["data"]["mirror.toml"]).lldp.nodes == ("leaf0", "spine0")
    deployment = rendered.deployment("mirror")
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"]["type"] == "Recreate"
    container = rendered.container("mirror")
    assert container["command"] == ["fabrictwin", "mirror", "--config", "/etc/fabrictwin/mirror/mirror.toml"]
    env = rendered.env("mirror")
    domain = f"{NAMESPACE}.svc.cluster.local"
    assert env["FABRICTWIN_TOPOLOGY_ADDRESS"] == f"{RELEASE}-fabrictwin-topology.{domain}:50051"
    assert env["FABRICTWIN_TELEMETRY_ADDRESS"] == f"{RELEASE}-fabrictwin-telemetry.{domain}:50053"
    assert "FABRICTWIN_TOKEN" not in env  # the token is a mounted file, not a variable
    assert env["FABRICTWIN_TOKEN_FILE"] == "/etc/fabrictwin/auth/token"
    (auth,) = [v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == "auth"]
    assert auth["secret"]["secretName"] == "tok"
    assert auth["secret"]["items"] == [{"key": "token", "path": "token"}]
    # A changed configuration rolls the pod.
    other = render({"mirror": {"enabled": True, "config": CONFIG + "timeout_s = 5\n"}}).deployment("mirror")
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert (
        other["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
        != annotations["checksum/config"]
    )


def test_an_enabled_mirror_without_a_configuration_is_refused(render):
    with pytest.raises(Exception, match=r"mirror\.enabled needs mirror\.config"):
        render({"mirror": {"enabled": True}})


def test_the_mirror_talks_tls_to_services_that_serve_it(render):
    tls = {"enabled": True, "existingSecret": "fabrictwin-tls", "clientCA": True}
    rendered = render({"mirror": {"enabled": True, "config": CONFIG}, "tls": tls})
    command = rendered.container("mirror")["command"]
    assert command == [
        "fabrictwin",
        "--tls-ca",
        "/etc/fabrictwin/tls/ca.crt",
        "--tls-cert",
        "/etc/fabrictwin/tls/tls.crt",
        "--tls-key",
        "/etc/fabrictwin/tls/tls.key",
        "mirror",
        "--config",
        "/etc/fabrictwin/mirror/mirror.toml",
    ]
    mounts = {m["name"]: m["mountPath"] for m in rendered.container("mirror")["volumeMounts"]}
    assert mounts["tls"] == "/etc/fabrictwin/tls"
