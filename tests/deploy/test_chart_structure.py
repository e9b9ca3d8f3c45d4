"""What matters in the rendered chart: ports, gRPC probes, the headless simulator address, secrets by
reference, replicas and autoscaling, shutdown timing, and pods that run non-root on a read-only root."""

from __future__ import annotations

import math

import pytest

from services.orchestrator.__main__ import SERVICE_NAME as SCENARIO_SERVICE
from services.simulator.__main__ import SERVICE_NAME as SIMULATION_SERVICE
from services.telemetry.__main__ import SERVICE_NAME as TELEMETRY_SERVICE
from services.topology.__main__ import SERVICE_NAME as TOPOLOGY_SERVICE
from tests.deploy.conftest import COMPONENTS, NAMESPACE, RELEASE

PORTS = {"topology": 50051, "simulator": 50052, "telemetry": 50053, "orchestrator": 50054}
HEALTH_NAMES = {
    "topology": TOPOLOGY_SERVICE,
    "simulator": SIMULATION_SERVICE,
    "telemetry": TELEMETRY_SERVICE,
    "orchestrator": SCENARIO_SERVICE,
}
HEADLESS = f"{RELEASE}-fabrictwin-simulator-headless"


def fqdn(component: str) -> str:
    return f"{RELEASE}-fabrictwin-{component}.{NAMESPACE}.svc.cluster.local:{PORTS[component]}"


def pod_spec(rendered, component: str) -> dict:
    return rendered.deployment(component)["spec"]["template"]["spec"]


@pytest.mark.parametrize("component", COMPONENTS)
def test_each_service_is_a_deployment_behind_a_service_on_its_port(render, component):
    rendered = render()
    deployment, service = rendered.deployment(component), rendered.service(component)
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert service["spec"]["selector"].items() <= pod_labels.items()
    container = rendered.container(component)
    assert container["command"] == ["python", "-m", f"services.{component}"]
    assert {"name": "grpc", "containerPort": PORTS[component], "protocol": "TCP"} in container["ports"]
    grpc_port = next(p for p in service["spec"]["ports"] if p["name"] == "grpc")
    assert (grpc_port["port"], grpc_port["targetPort"]) == (PORTS[component], "grpc")
    assert rendered.env(component)["FABRICTWIN_PORT"] == str(PORTS[component])
    assert rendered.env(component)["FABRICTWIN_HOST"] == "0.0.0.0"


@pytest.mark.parametrize("component", COMPONENTS)
def test_probes_ask_grpc_health_about_the_services_own_name(render, component):
    container = render().container(component)
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["grpc"] == {"port": PORTS[component], "service": HEALTH_NAMES[component]}


def test_the_orchestrator_reaches_every_simulator_replica_through_the_headless_dns_name(render):
    rendered = render()
    address = rendered.env("orchestrator")["FABRICTWIN_SIMULATOR_ADDRESSES"]
    assert address == f"dns:///{HEADLESS}.{NAMESPACE}.svc.cluster.local:50052"
    headless = rendered.named("Service", HEADLESS)["spec"]
    assert headless["clusterIP"] == "None"
    assert headless["publishNotReadyAddresses"] is False  # draining replicas leave the DNS answer
    simulator_pods = rendered.deployment("simulator")["spec"]["template"]["metadata"]["labels"]
    assert headless["selector"].items() <= simulator_pods.items()
    assert [(p["port"], p["targetPort"]) for p in headless["ports"]] == [(50052, "grpc")]


def test_peers_address_each_other_by_service_name(render):
    rendered = render()
    assert rendered.env("simulator")["FABRICTWIN_TOPOLOGY_ADDRESS"] == fqdn("topology")
    assert rendered.env("simulator")["FABRICTWIN_TELEMETRY_ADDRESS"] == fqdn("telemetry")
    assert rendered.env("telemetry")["FABRICTWIN_TOPOLOGY_ADDRESS"] == fqdn("topology")
    assert rendered.env("orchestrator")["FABRICTWIN_TOPOLOGY_ADDRESS"] == fqdn("topology")
    assert rendered.env("orchestrator")["FABRICTWIN_TELEMETRY_ADDRESS"] == fqdn("telemetry")


def volume(rendered, component: str, name: str) -> dict:
    (found,) = [v for v in pod_spec(rendered, component)["volumes"] if v["name"] == name]
    return found


def mount(rendered, component: str, name: str) -> dict:
    (found,) = [m for m in rendered.container(component)["volumeMounts"] if m["name"] == name]
    return found


def test_the_database_url_comes_from_a_secret_and_the_token_from_a_mounted_secret_file(render):
    rendered = render({"auth": {"existingSecret": "fabrictwin-token", "key": "bearer"}})
    for component in COMPONENTS:
        env = rendered.env(component)
        # The token is a file in the pod, never a variable (`kubectl describe`, /proc/<pid>/environ).
        assert "FABRICTWIN_AUTH_TOKEN" not in env
        assert env["FABRICTWIN_AUTH_TOKEN_FILE"] == "/etc/fabrictwin/auth/token"
        assert mount(rendered, component, "auth") == {
            "name": "auth",
            "mountPath": "/etc/fabrictwin/auth",
            "readOnly": True,
        }
        secret = volume(rendered, component, "auth")["secret"]
        assert secret["secretName"] == "fabrictwin-token"
        assert secret["items"] == [{"key": "bearer", "path": "token"}]
        assert secret["defaultMode"] == 0o440
        if component == "simulator":
            assert "FABRICTWIN_DATABASE_URL" not in env  # simulations live in memory
        else:
            assert env["FABRICTWIN_DATABASE_URL"] == {"secretKeyRef": {"name": "fabrictwin-db", "key": "url"}}
        assert not any("postgresql://" in str(value) for value in env.values())
    assert rendered.of_kind("Secret") == []  # the chart makes no Secret of its own


def test_a_read_only_token_is_a_second_file_from_the_same_secret(render):
    rendered = render({"auth": {"existingSecret": "fabrictwin-token", "readOnlyKey": "viewer"}})
    for component in COMPONENTS:
        assert (
            rendered.env(component)["FABRICTWIN_READ_ONLY_TOKEN_FILE"]
            == "/etc/fabrictwin/auth/read-only-token"
        )
        assert volume(rendered, component, "auth")["secret"]["items"] == [
            {"key": "token", "path": "token"},
            {"key": "viewer", "path": "read-only-token"},
        ]


def test_without_a_token_secret_no_service_asks_for_one(render):
    rendered = render()
    for component in COMPONENTS:
        assert not any("TOKEN" in name for name in rendered.env(component))
        assert "auth" not in [v["name"] for v in pod_spec(rendered, component)["volumes"]]


def test_the_chart_refuses_to_render_without_a_database(render, helm):
    with pytest.raises(helm.HelmError, match=r"database\.existingSecret"):
        render(with_database=False)


def test_the_chart_refuses_two_databases(render, helm):
    with pytest.raises(helm.HelmError, match="not both"):
        render({"postgresql": {"dev": True}})


def test_the_simulator_runs_the_configured_replicas_under_a_disruption_budget(render):
    assert render().deployment("simulator")["spec"]["replicas"] == 2
    rendered = render({"simulator": {"replicas": 6}})
    assert rendered.deployment("simulator")["spec"]["replicas"] == 6
    assert rendered.of_kind("HorizontalPodAutoscaler") == []
    (budget,) = rendered.of_kind("PodDisruptionBudget")
    assert budget["spec"]["maxUnavailable"] == 1
    pods = rendered.deployment("simulator")["spec"]["template"]["metadata"]["labels"]
    assert budget["spec"]["selector"]["matchLabels"].items() <= pods.items()


def test_with_autoscaling_the_hpa_owns_the_simulator_replica_count(render):
    rendered = render({"simulator": {"autoscaling": {"enabled": True, "minReplicas": 3, "maxReplicas": 12}}})
    assert "replicas" not in rendered.deployment("simulator")["spec"]  # an upgrade must not reset it
    (hpa,) = rendered.of_kind("HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": rendered.deployment("simulator")["metadata"]["name"],
    }
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (3, 12)


def test_topology_and_orchestrator_are_single_replicas_replaced_not_rolled(render):
    rendered = render()
    for component in ("topology", "orchestrator"):
        spec = rendered.deployment(component)["spec"]
        assert (spec["replicas"], spec["strategy"]["type"]) == (1, "Recreate")
    assert rendered.deployment("telemetry")["spec"]["strategy"]["type"] == "RollingUpdate"


@pytest.mark.parametrize(("drain", "grace"), [(5, 25), (2.5, 7.25), (0, 30)])
def test_the_kubelet_waits_longer_than_drain_plus_grace(render, drain, grace):
    rendered = render({"shutdown": {"drainSeconds": drain, "graceSeconds": grace}})
    for component in COMPONENTS:
        env = rendered.env(component)
        assert float(env["FABRICTWIN_DRAIN_SECONDS"]) == drain
        assert float(env["FABRICTWIN_GRACE_SECONDS"]) == grace
        period = pod_spec(rendered, component)["terminationGracePeriodSeconds"]
        assert period > drain + grace
        assert period == math.ceil(drain) + math.ceil(grace) + 10


def test_services_drain_before_they_close_by_default(render):
    env = render().env("simulator")
    assert float(env["FABRICTWIN_DRAIN_SECONDS"]) > 0


def test_a_draining_service_outlasts_its_liveness_window(render):
    rendered = render()
    liveness = rendered.container("simulator")["livenessProbe"]
    drain = float(rendered.env("simulator")["FABRICTWIN_DRAIN_SECONDS"])
    assert liveness["periodSeconds"] * liveness["failureThreshold"] > drain


def test_the_chart_refuses_a_liveness_window_shorter_than_the_drain(render, helm):
    with pytest.raises(helm.HelmError, match="drainSeconds"):
        render({"shutdown": {"drainSeconds": 30}})


@pytest.mark.parametrize("component", COMPONENTS)
def test_pods_run_non_root_on_a_read_only_root_with_scratch_volumes(render, component):
    rendered = render()
    spec = pod_spec(rendered, component)
    container = rendered.container(component)
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] != 0
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["enableServiceLinks"] is False  # no injected FABRICTWIN_*_PORT=tcp://... variables
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    writable = ["/tmp", rendered.env(component)["NUMBA_CACHE_DIR"]]
    for path in writable:
        assert "emptyDir" in volumes[mounts[path]], path
    assert container["resources"]["requests"] and container["resources"]["limits"]


def test_resources_come_from_values(render):
    resources = {"requests": {"cpu": "8", "memory": "16Gi"}, "limits": {"cpu": "8", "memory": "16Gi"}}
    rendered = render({"simulator": {"resources": resources, "workers": 8}})
    assert rendered.container("simulator")["resources"] == resources
    assert rendered.env("simulator")["FABRICTWIN_WORKERS"] == "8"


def test_metrics_are_served_announced_and_selected_once_per_pod(render):
    rendered = render({"metrics": {"port": 9464, "serviceMonitor": {"enabled": True}}})
    for component in COMPONENTS:
        annotations = rendered.deployment(component)["spec"]["template"]["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true"
        assert annotations["prometheus.io/port"] == "9464"
        assert rendered.env(component)["FABRICTWIN_METRICS_PORT"] == "9464"
        metrics_port = {"name": "metrics", "containerPort": 9464, "protocol": "TCP"}
        assert metrics_port in rendered.container(component)["ports"]
    (monitor,) = rendered.of_kind("ServiceMonitor")
    wanted = monitor["spec"]["selector"]["matchLabels"].items()
    services = rendered.of_kind("Service")
    selected = [s["metadata"]["name"] for s in services if wanted <= s["metadata"]["labels"].items()]
    assert sorted(selected) == sorted(f"{RELEASE}-fabrictwin-{c}" for c in COMPONENTS)  # not the headless one
    assert all("metrics" in [p["name"] for p in rendered.service(c)["spec"]["ports"]] for c in COMPONENTS)


def test_without_metrics_no_port_is_opened(render):
    rendered = render({"metrics": {"enabled": False}})
    assert all("FABRICTWIN_METRICS_PORT" not in rendered.env(c) for c in COMPONENTS)
    assert all([p["name"] for p in rendered.container(c)["ports"]] == ["grpc"] for c in COMPONENTS)


TLS_ON = {"tls": {"enabled": True, "existingSecret": "fabrictwin-tls", "clientCA": True}}
CALLERS = {"simulator": 2, "telemetry": 1, "orchestrator": 3}  # component -> how many peers it calls


@pytest.mark.parametrize("component", COMPONENTS)
def test_tls_serves_every_service_from_the_mounted_secret_and_probes_it_over_tcp(render, component):
    rendered = render(TLS_ON)
    env = rendered.env(component)
    tls = mount(rendered, component, "tls")
    assert tls["readOnly"] is True
    for variable, file in [("TLS_CERT", "tls.crt"), ("TLS_KEY", "tls.key"), ("TLS_CLIENT_CA", "ca.crt")]:
        assert env[f"FABRICTWIN_{variable}"] == f"{tls['mountPath']}/{file}"
    assert volume(rendered, component, "tls")["secret"]["secretName"] == "fabrictwin-tls"
    # The kubelet's gRPC probe speaks plaintext: a TLS listener is checked for accepting connections.
    assert rendered.container(component)["readinessProbe"]["tcpSocket"] == {"port": "grpc"}


@pytest.mark.parametrize("component", CALLERS)
def test_services_call_their_tls_peers_with_the_ca_and_their_own_certificate(render, component):
    env = render(TLS_ON).env(component)
    assert env["FABRICTWIN_PEER_TLS_CA"] == "/etc/fabrictwin/tls/ca.crt"
    assert (env["FABRICTWIN_PEER_TLS_CERT"], env["FABRICTWIN_PEER_TLS_KEY"]) == (
        "/etc/fabrictwin/tls/tls.crt",
        "/etc/fabrictwin/tls/tls.key",
    )
    without_client_ca = render({"tls": {**TLS_ON["tls"], "clientCA": False}}).env(component)
    assert without_client_ca["FABRICTWIN_PEER_TLS_CA"] == "/etc/fabrictwin/tls/ca.crt"
    assert "FABRICTWIN_PEER_TLS_CERT" not in without_client_ca


def test_the_topology_service_calls_no_peer(render):
    assert not any(name.startswith("FABRICTWIN_PEER_TLS") for name in render(TLS_ON).env("topology"))


def test_tls_on_the_orchestrator_alone_leaves_the_services_behind_it_plaintext(render):
    rendered = render({"tls": {**TLS_ON["tls"], "services": ["orchestrator"]}})
    assert rendered.container("orchestrator")["readinessProbe"]["tcpSocket"] == {"port": "grpc"}
    assert not any(name.startswith("FABRICTWIN_PEER_TLS") for name in rendered.env("orchestrator"))
    for component in ("topology", "simulator", "telemetry"):
        assert not any(
            name.startswith(("FABRICTWIN_TLS", "FABRICTWIN_PEER_TLS")) for name in rendered.env(component)
        )
        assert "tls" not in [v["name"] for v in pod_spec(rendered, component)["volumes"]]
        assert "grpc" in rendered.container(component)["readinessProbe"]


def test_tls_on_some_of_the_services_the_same_peers_call_is_refused(render, helm):
    with pytest.raises(helm.HelmError, match="topology, simulator and telemetry"):
        render({"tls": {"enabled": True, "existingSecret": "t", "services": ["orchestrator", "topology"]}})


def test_tls_without_a_secret_is_refused(render, helm):
    with pytest.raises(helm.HelmError, match=r"tls\.existingSecret"):
        render({"tls": {"enabled": True}})


def test_extra_settings_reach_the_service_but_may_not_override_the_charts(render, helm):
    rendered = render({"telemetry": {"env": {"FABRICTWIN_INGEST_PARALLELISM": 4}}})
    assert rendered.env("telemetry")["FABRICTWIN_INGEST_PARALLELISM"] == "4"
    with pytest.raises(helm.HelmError, match=r"simulator\.env\.FABRICTWIN_PORT is set by the chart"):
        render({"simulator": {"env": {"FABRICTWIN_PORT": 1}}})


def test_the_dev_database_is_one_replica_marked_not_for_production(render):
    rendered = render({"database": {"existingSecret": ""}, "postgresql": {"dev": True}})
    (statefulset,) = rendered.of_kind("StatefulSet")
    assert statefulset["spec"]["replicas"] == 1
    assert "not-for-production" in " ".join(statefulset["metadata"]["annotations"])
    (secret,) = rendered.of_kind("Secret")
    url = secret["stringData"]["url"]
    host = f"{RELEASE}-fabrictwin-postgresql.{NAMESPACE}.svc.cluster.local:5432"
    assert url == f"postgresql://fabrictwin:{secret['stringData']['password']}@{host}/fabrictwin"
    assert len(secret["stringData"]["password"]) == 32
    reference = {"secretKeyRef": {"name": secret["metadata"]["name"], "key": "url"}}
    assert all(rendered.env(c)["FABRICTWIN_DATABASE_URL"] == reference for c in ("topology", "telemetry"))
    assert "not for production" in rendered.notes.lower()


def test_notes_tell_how_to_port_forward_and_check_health(render):
    notes = render({"auth": {"existingSecret": "fabrictwin-token"}}).notes
    for component in COMPONENTS:
        port = PORTS[component]
        forward = f"port-forward svc/{RELEASE}-fabrictwin-{component} {port}:{port}"
        assert f"kubectl -n {NAMESPACE} {forward}" in notes
    assert "fabrictwin health" in notes
    assert "get secret fabrictwin-token" in notes and "FABRICTWIN_TOKEN" in notes


def test_notes_no_longer_warn_against_several_simulator_replicas(render):
    # The orchestrator follows each simulation on its replica (tests/deploy/
    # test_simulator_replicas_behind_one_name.py), so two replicas are a supported default.
    assert "replicas=1" not in render().notes
    assert "simulator replicas behind" in render().notes
