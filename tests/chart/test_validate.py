"""Every rendered object is one the API server (and the Prometheus Operator) would accept."""

from __future__ import annotations

import copy
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

from rulegen.model import DetectionRuleConfig, config_from_object
from tests.chart.helm import (
    MONITORING_API,
    SCENARIOS,
    chart,
    crds,
    merge,
    render,
    render_scenario,
    scenario_values,
)
from tests.chart.operator import scrape_config
from tests.rulegen.crd_validation import api_server_errors

# The chart's kubeVersion floor and the newest schemas kubernetes-validate ships.
KUBE_VERSIONS = ("1.25.0", kubernetes_validate.utils.latest_version())
OUR_KINDS = {"DetectionRuleConfig", "NodeInterferenceReport"}
OPERATOR_KINDS = {"ServiceMonitor", "PrometheusRule"}

# The Prometheus Operator's own CRDs (tests/fixtures, vendored from prometheus-operator): the
# API server checks ServiceMonitors and PrometheusRules against these, unknown fields included.
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
OPERATOR_CRD_FILES = {
    "ServiceMonitor": "monitoring.coreos.com_servicemonitors.yaml",
    "PrometheusRule": "monitoring.coreos.com_prometheusrules.yaml",
}


@cache
def operator_crds() -> dict[str, dict[str, Any]]:
    out = {}
    for kind, name in OPERATOR_CRD_FILES.items():
        crd: dict[str, Any] = yaml.safe_load((FIXTURES / name).read_text())
        assert crd["spec"]["names"]["kind"] == kind
        out[kind] = crd
    return out


def operator_errors(obj: dict[str, Any]) -> list[str]:
    """Why the API server (with the operator's CRDs installed) would reject ``obj``."""
    assert obj["apiVersion"] == MONITORING_API, obj["apiVersion"]
    return api_server_errors(operator_crds()[obj["kind"]], obj, "v1")


def _promtool(args: list[str], text: str, tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    result = subprocess.run(
        ["promtool", *args, str(path)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("version", KUBE_VERSIONS)
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_builtin_kinds_validate_against_kubernetes_schemas(scenario: str, version: str) -> None:
    objects = render_scenario(scenario).objects
    checked = 0
    for obj in objects:
        if obj["kind"] in OUR_KINDS | OPERATOR_KINDS:
            continue
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(str(p) for p in exc.path)
            pytest.fail(
                f"{obj['kind']}/{obj['metadata']['name']} ({version}): {path}: {exc.message}"
            )
        checked += 1
    assert checked >= 8


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_operator_kinds_validate_against_the_operators_crds(scenario: str) -> None:
    rendered = render_scenario(scenario)
    checked = {kind: 0 for kind in OPERATOR_KINDS}
    for obj in rendered.objects:
        if obj["kind"] in OPERATOR_KINDS:
            assert operator_errors(obj) == [], f"{obj['kind']}/{obj['metadata']['name']}"
            checked[obj["kind"]] += 1
    expected = 0 if scenario == "kata-only" else 1
    assert all(n >= expected for n in checked.values()), checked
    if scenario == "kata-only":
        assert not any(checked.values()), checked


def test_operator_crds_reject_what_the_api_server_would() -> None:
    """The vendored schemas bite: typos, bad durations and unknown actions are refused."""
    rendered = render_scenario("full")
    monitor = rendered.one("ServiceMonitor", "-exporter")
    rule = rendered.one("PrometheusRule")
    assert operator_errors(monitor) == [] and operator_errors(rule) == []

    def broken(obj: dict[str, Any], edit: Any) -> list[str]:
        obj = copy.deepcopy(obj)
        edit(obj["spec"])
        return operator_errors(obj)

    endpoint = "endpoints"
    for edit in (
        lambda spec: spec[endpoint][0].update(intervall="1s"),
        lambda spec: spec[endpoint][0].update(interval="1 second"),
        lambda spec: spec[endpoint][0].update(scheme="tcp"),
        lambda spec: spec[endpoint][0]["relabelings"][0].update(action="rename"),
        lambda spec: spec[endpoint][0]["relabelings"][0].update(sourceLabels=["not-a-label"]),
        lambda spec: spec.pop("selector"),
    ):
        assert broken(monitor, edit), "ServiceMonitor edit was accepted"
    for edit in (
        lambda spec: spec["groups"][0].pop("name"),
        lambda spec: spec["groups"][0].update(interval="often"),
        lambda spec: spec["groups"][0]["rules"][0].update(recrod="x"),
        lambda spec: spec["groups"][0]["rules"][0].pop("expr"),
        lambda spec: spec.update(group=[]),
    ):
        assert broken(rule, edit), "PrometheusRule edit was accepted"


def test_tls_and_options_validate_too() -> None:
    """The optional branches (TLS, root with SYS_ADMIN, resctrl, kata-deploy, the second
    kube-scheduler with leader election and its TLS material) render valid objects."""
    values = merge(
        scenario_values("full"),
        {
            "exporter": {
                "tls": {"enabled": True, "secretName": "exporter-tls", "clientAuth": True},
                "kernelEvents": {"enabled": True},
                "capabilities": {"sysAdmin": True},
                "hostMounts": {"debugfs": True, "resctrl": True},
                "kernelHeaders": {"source": "/usr/src/linux-headers"},
                "collectors": {"perf_llc": False, "biolatency": True},
                "collectorOptions": {"kata.shim-paths": "/opt/kata/bin/containerd-shim-kata-v2"},
                "hostNetwork": True,
                "serviceMonitor": {
                    "tlsConfig": {
                        "ca": {"secret": {"name": "exporter-ca", "key": "ca.crt"}},
                        "serverName": "mco-exporter",
                    },
                    "relabelings": [{"action": "labeldrop", "regex": "pod"}],
                    "metricRelabelings": [
                        {"action": "drop", "sourceLabels": ["__name__"], "regex": "go_.*"}
                    ],
                },
            },
            "extender": {
                "tls": {
                    "enabled": True,
                    "create": True,
                    "cert": "C",
                    "key": "K",
                    "clientCA": "CA",
                    "clientAuth": True,
                }
            },
            "kata": {"deploy": {"enabled": True}},
            "scheduler": {
                "kubeScheduler": {
                    "deploy": {
                        "enabled": True,
                        "replicas": 2,
                        "image": {"digest": "sha256:" + "0" * 64},
                        "nodeSelector": {"node-role.kubernetes.io/control-plane": ""},
                        "tolerations": [
                            {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}
                        ],
                        "extraVolumes": [{"name": "ca", "secret": {"secretName": "mco-ca"}}],
                        "extraVolumeMounts": [
                            {"name": "ca", "mountPath": "/etc/kubernetes/mco-extender"}
                        ],
                    }
                }
            },
        },
    )
    rendered = render(values)
    assert rendered.one("Deployment", "-kube-scheduler")
    for obj in rendered.objects:
        if obj["kind"] in OPERATOR_KINDS:
            assert operator_errors(obj) == [], obj["metadata"]["name"]
        elif obj["kind"] not in OUR_KINDS:
            kubernetes_validate.validate(obj, KUBE_VERSIONS[-1], strict=True)
    assert rendered.one("Secret", "-extender-tls")["type"] == "kubernetes.io/tls"
    endpoint = rendered.one("ServiceMonitor", "-exporter")["spec"]["endpoints"][0]
    assert endpoint["scheme"] == "https" and endpoint["tlsConfig"]["serverName"] == "mco-exporter"


def test_crds_are_valid_and_both_present() -> None:
    found = crds()
    assert set(found) == OUR_KINDS, f"CRDs under charts/mco/crds: {sorted(found)}"
    for crd in found.values():
        kubernetes_validate.validate(crd, KUBE_VERSIONS[-1], strict=True)
        assert crd["spec"]["scope"] == "Cluster"
        assert crd["spec"]["group"] == "mco.io"


@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if s != "kata-only"])
def test_default_detection_rule_config_is_accepted_and_is_the_default(scenario: str) -> None:
    obj = render_scenario(scenario).one("DetectionRuleConfig")
    assert api_server_errors(crds()["DetectionRuleConfig"], obj) == []
    assert config_from_object(obj) == DetectionRuleConfig.default()


def test_detection_rule_config_overrides_merge_and_are_validated() -> None:
    tuned = render(
        {"detectionRuleConfig": {"spec": {"detections": {"cpuContention": {"weight": 0.5}}}}}
    )
    obj = tuned.one("DetectionRuleConfig")
    assert api_server_errors(crds()["DetectionRuleConfig"], obj) == []
    config = config_from_object(obj)
    assert config.weight("cpuContention") == 0.5
    assert config.threshold("psiIOSome") == DetectionRuleConfig.default().threshold("psiIOSome")

    bad = render(
        {
            "detectionRuleConfig": {
                "spec": {
                    "detections": {
                        "ioCongestion": {"signals": {"psiIOSome": {"warn": 0.5, "critical": 0.2}}}
                    }
                }
            }
        }
    ).one("DetectionRuleConfig")
    errors = api_server_errors(crds()["DetectionRuleConfig"], bad)
    assert errors, "warn above critical must be rejected by the CRD"


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["full", "collect-analyze"])
def test_prometheusrule_groups_pass_promtool(scenario: str, tmp_path: Path) -> None:
    rule = render_scenario(scenario).one("PrometheusRule")
    _promtool(
        ["check", "rules"],
        yaml.safe_dump({"groups": rule["spec"]["groups"]}),
        tmp_path,
        "rules.yaml",
    )
    checked_in = yaml.safe_load(
        (Path(__file__).parents[2] / "charts/mco/files/mco-rules.yaml").read_text()
    )
    assert rule["spec"]["groups"] == checked_in["groups"]


@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if s != "kata-only"])
def test_service_monitors_are_well_formed_and_promtool_accepts_them(
    scenario: str, tmp_path: Path
) -> None:
    rendered = render_scenario(scenario)
    monitors = rendered.of_kind("ServiceMonitor")
    assert monitors
    scrape_configs = []
    for monitor in monitors:
        assert operator_errors(monitor) == [], monitor["metadata"]["name"]
        # The Service the monitor selects must carry the labels it selects on and its jobLabel.
        services = [
            s
            for s in rendered.of_kind("Service")
            if monitor["spec"]["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()
        ]
        assert len(services) == 1, monitor["metadata"]["name"]
        labels = services[0]["metadata"]["labels"]
        assert monitor["spec"]["jobLabel"] in labels
        ports = {p["name"] for p in services[0]["spec"]["ports"]}
        assert {ep["port"] for ep in monitor["spec"]["endpoints"]} <= ports
        scrape_configs.append(scrape_config(monitor, labels, {"127.0.0.1:1": "node-a"}))
    config = {"global": {"scrape_interval": "15s"}, "scrape_configs": scrape_configs}
    _promtool(["check", "config"], yaml.safe_dump(config), tmp_path, "prometheus.yml")


def test_policies_in_values_replace_the_shipped_ones_and_are_validated() -> None:
    policies = [
        {"name": "online", "podSelector": {"matchLabels": {"tier": "online"}}, "maxLevel": 0.3},
        {"name": "default"},
    ]
    obj = render({"detectionRuleConfig": {"spec": {"policies": policies}}}).one(
        "DetectionRuleConfig"
    )
    assert api_server_errors(crds()["DetectionRuleConfig"], obj) == []
    assert [p.name for p in config_from_object(obj).policies] == ["online", "default"]
    bad = [{"name": "online", "hardConstraints": "Sometimes"}]
    with pytest.raises(helm.HelmValuesError, match="hardConstraints"):
        chart().validate_schema({"detectionRuleConfig": {"spec": {"policies": bad}}})
