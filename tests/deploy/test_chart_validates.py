"""The chart lints clean and every manifest it renders is valid Kubernetes, for the oldest and newest
versions it supports, with every option off and on."""

from __future__ import annotations

import copy

import pytest

from tests.deploy.conftest import CHART, DATABASE

kubernetes_validate = pytest.importorskip(
    "kubernetes_validate", reason="kubernetes-validate (the dev extra) is not installed: run `make venv`"
)

OLDEST = "1.27.0"  # Chart.yaml's kubeVersion: gRPC probes are GA from 1.27
NEWEST = kubernetes_validate.utils.latest_version()

VALUE_SETS = {
    "defaults": {},
    "everything-on": {
        "auth": {"existingSecret": "fabrictwin-token"},
        "tls": {"enabled": True, "existingSecret": "fabrictwin-tls", "clientCA": True},
        "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}}},
        "simulator": {"autoscaling": {"enabled": True}, "nodeSelector": {"gpu": "none"}},
        "telemetry": {"replicas": 3, "env": {"FABRICTWIN_INGEST_PARALLELISM": 4}},
        "imagePullSecrets": [{"name": "registry"}],
        "mirror": {
            "enabled": True,
            "config": 'fabric = "pod1"\nsource = "pod1-live"\n[lldp]\ndirectory = "/lldp"\n',
            "extraVolumes": [{"name": "ssh", "secret": {"secretName": "mirror-ssh"}}],
            "extraVolumeMounts": [{"name": "ssh", "mountPath": "/tmp/.ssh", "readOnly": True}],
        },
    },
    "dev-database-everything-off": {
        "database": {"existingSecret": ""},
        "postgresql": {"dev": True, "persistence": {"enabled": False}},
        "metrics": {"enabled": False},
        "serviceAccount": {"create": False},
        "simulator": {"podDisruptionBudget": {"enabled": False}, "spreadOverNodes": False},
    },
    "dev-database-persistent": {
        "database": {"existingSecret": ""},
        "postgresql": {"dev": True, "persistence": {"storageClass": "fast"}},
    },
}
CUSTOM_RESOURCES = {"ServiceMonitor"}  # the Prometheus Operator's CRD: no schema in Kubernetes' OpenAPI


def test_helm_lint_reports_no_warnings_or_errors_on_the_oldest_supported_kubernetes(helm):
    report = helm.lint(str(CHART), DATABASE, strict=True, kube_version=f"v{OLDEST}")
    problems = [m for m in report["messages"] if m["severity"] >= 2]  # 2 warning, 3 error
    assert report["errors"] == [] and problems == []
    assert report["total_charts_linted"] == 1


def test_helm_lint_reports_values_that_break_the_values_schema(helm):
    report = helm.lint(str(CHART), {**DATABASE, "simulator": {"replicas": "two"}}, strict=True)
    assert any("/simulator/replicas" in m["error"] for m in report["messages"] if m["severity"] == 3)


@pytest.mark.parametrize("kube_version", [OLDEST, NEWEST])
@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_every_rendered_manifest_is_valid_kubernetes(render, value_set, kube_version):
    rendered = render(VALUE_SETS[value_set])
    validated = set()
    for manifest in rendered.manifests:
        name = f"{manifest['kind']}/{manifest['metadata']['name']}"
        try:
            # strict: unknown fields are errors too, so a misspelt key cannot pass as ignored
            kubernetes_validate.validate(manifest, kube_version, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            assert manifest["kind"] in CUSTOM_RESOURCES, f"{name}: no schema in Kubernetes {kube_version}"
            continue
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(str(p) for p in exc.path)
            pytest.fail(f"{name} is not valid Kubernetes {kube_version}: {path}: {exc.message}")
        validated.add(manifest["kind"])
    assert {"Deployment", "Service"} <= validated


def test_the_schema_check_catches_a_misspelt_probe_field(render):
    deployment = copy.deepcopy(render().deployment("simulator"))
    probe = deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]
    probe["grpc"]["serivce"] = probe["grpc"].pop("service")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, OLDEST, strict=True)


def test_the_values_schema_refuses_a_simulator_without_replicas(render, helm):
    with pytest.raises(helm.HelmError, match="replicas"):
        render({"simulator": {"replicas": 0}})


def test_the_values_schema_refuses_an_unknown_setting_of_a_service(render, helm):
    with pytest.raises(helm.HelmError, match="replica"):
        render({"topology": {"replica": 3}})
