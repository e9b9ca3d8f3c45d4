"""The chart ships the telemetry dashboard as a ConfigMap Grafana's dashboard sidecar imports: off by
default, labelled as configured, holding the chart's dashboard JSON unchanged, every panel on the
PostgreSQL data source the dashboard's DS variable picks."""

from __future__ import annotations

import json

import pytest

from tests.deploy.conftest import CHART, DATABASE, NAMESPACE, RELEASE

DASHBOARD_FILE = CHART / "dashboards" / "fabrictwin.json"
ON = {"grafana": {"dashboard": {"enabled": True}}}
POSTGRES = "grafana-postgresql-datasource"


def dashboard_configmaps(rendered) -> list[dict]:
    return [
        m
        for m in rendered.of_kind("ConfigMap")
        if m["metadata"]["labels"].get("app.kubernetes.io/component") == "dashboard"
    ]


def test_the_dashboard_is_off_by_default(render):
    assert dashboard_configmaps(render()) == []


def test_the_dashboard_configmap_carries_the_sidecars_default_label_and_the_charts_json(render):
    (configmap,) = dashboard_configmaps(render(ON))
    assert configmap["metadata"]["name"] == f"{RELEASE}-fabrictwin-dashboard"
    assert configmap["metadata"]["namespace"] == NAMESPACE
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    (key,) = configmap["data"]
    assert key.endswith(".json")  # the sidecar writes each key as a file; Grafana loads *.json
    shipped = json.loads(configmap["data"][key])
    assert shipped == json.loads(DASHBOARD_FILE.read_text())
    # kubectl apply keeps the whole object in an annotation limited to 256 KiB.
    assert len(configmap["data"][key].encode()) < 200_000


def test_label_namespace_and_annotations_are_configurable(render):
    values = {
        "grafana": {
            "dashboard": {
                "enabled": True,
                "label": "example.com/dashboard",
                "labelValue": "fabric",
                "namespace": "monitoring",
                "annotations": {"grafana_folder": "FabricTwin"},
            }
        }
    }
    (configmap,) = dashboard_configmaps(render(values))
    assert configmap["metadata"]["labels"]["example.com/dashboard"] == "fabric"
    assert "grafana_dashboard" not in configmap["metadata"]["labels"]
    assert configmap["metadata"]["namespace"] == "monitoring"
    assert configmap["metadata"]["annotations"] == {"grafana_folder": "FabricTwin"}


@pytest.mark.parametrize(
    ("dashboard", "complaint"),
    [
        ({"labelValue": "not a label value!"}, "/grafana/dashboard/labelValue"),
        ({"label": ""}, "/grafana/dashboard/label'"),
        ({"enable": True}, "'enable' not allowed"),
    ],
)
def test_the_schema_refuses_a_label_kubernetes_would_refuse_and_unknown_settings(
    render, helm, dashboard, complaint
):
    with pytest.raises(helm.HelmError, match=complaint):
        render({"grafana": {"dashboard": {"enabled": True, **dashboard}}})


def test_the_chart_with_the_dashboard_lints_clean(helm):
    report = helm.lint(str(CHART), {**DATABASE, **ON}, strict=True)
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert report["errors"] == [] and problems == []


def test_the_dashboard_configmap_is_valid_kubernetes(render):
    kubernetes_validate = pytest.importorskip(
        "kubernetes_validate", reason="kubernetes-validate (the dev extra) is not installed: run `make venv`"
    )
    (configmap,) = dashboard_configmaps(render(ON))
    kubernetes_validate.validate(configmap, kubernetes_validate.utils.latest_version(), strict=True)


def test_every_panel_and_query_variable_uses_the_postgresql_data_source_the_ds_variable_picks():
    dashboard = json.loads(DASHBOARD_FILE.read_text())
    assert dashboard["schemaVersion"] >= 39  # Grafana 10.4 / 11
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["DS"]["type"] == "datasource" and variables["DS"]["query"] == POSTGRES
    assert variables["source"]["type"] == "query"
    assert variables["source"]["datasource"] == {"type": POSTGRES, "uid": "${DS}"}
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        assert panel["datasource"] == {"type": POSTGRES, "uid": "${DS}"}, panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"]
            assert target["rawQuery"] and target["editorMode"] == "code" and target["rawSql"].strip()
            assert target["format"] in ("time_series", "table")
    titles = " | ".join(panel["title"] for panel in dashboard["panels"])
    for wanted in ("skew", "hot links", "Loss", "bit error rate", "Ingest rate"):
        assert wanted in titles
