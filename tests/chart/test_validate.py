"""Every rendered object is one the API server (and the Prometheus Operator) would accept."""

from __future__ import annotations

import subprocess
from pathlib import Path

import jsonschema  # type: ignore[import-untyped]
import kubernetes_validate
import pytest
import yaml

from rulegen.model import DetectionRuleConfig, config_from_object
from tests.chart.helm import SCENARIOS, crds, merge, render, render_scenario, scenario_values
from tests.chart.operator import scrape_config
from tests.rulegen.crd_validation import api_server_errors

# The chart's kubeVersion floor and the newest schemas kubernetes-validate ships.
KUBE_VERSIONS = ("1.25.0", kubernetes_validate.utils.latest_version())
OUR_KINDS = {"DetectionRuleConfig", "NodeInterferenceReport"}
OPERATOR_KINDS = {"ServiceMonitor", "PrometheusRule"}

# The part of monitoring.coreos.com/v1 ServiceMonitor the chart writes (prometheus-operator's
# API reference); anything else would be a typo the operator silently drops.
_RELABEL = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "action": {
            "enum": [
                "replace",
                "keep",
                "drop",
                "labelmap",
                "labeldrop",
                "labelkeep",
                "hashmod",
                "lowercase",
                "uppercase",
                "keepequal",
                "dropequal",
            ]
        },
        "sourceLabels": {"type": "array", "items": {"type": "string"}},
        "separator": {"type": "string"},
        "targetLabel": {"type": "string"},
        "regex": {"type": "string"},
        "modulus": {"type": "integer"},
        "replacement": {"type": "string"},
    },
}
_DURATION = {
    "type": "string",
    # prometheus-operator's Duration pattern
    "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?"
    r"(([0-9]+)s)?(([0-9]+)ms)?)$",
}
SERVICE_MONITOR_SPEC = {
    "type": "object",
    "additionalProperties": False,
    "required": ["selector", "endpoints"],
    "properties": {
        "jobLabel": {"type": "string"},
        "selector": {"type": "object", "properties": {"matchLabels": {"type": "object"}}},
        "namespaceSelector": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"any": {"type": "boolean"}, "matchNames": {"type": "array"}},
        },
        "endpoints": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "port": {"type": "string"},
                    "path": {"type": "string"},
                    "scheme": {"enum": ["http", "https"]},
                    "interval": _DURATION,
                    "scrapeTimeout": _DURATION,
                    "honorLabels": {"type": "boolean"},
                    "tlsConfig": {"type": "object"},
                    "relabelings": {"type": "array", "items": _RELABEL},
                    "metricRelabelings": {"type": "array", "items": _RELABEL},
                },
            },
        },
    },
}


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


def test_tls_and_options_validate_too() -> None:
    """The optional branches (TLS, SYS_ADMIN, resctrl, kata-deploy) render valid objects."""
    values = merge(
        scenario_values("full"),
        {
            "exporter": {
                "tls": {"enabled": True, "secretName": "exporter-tls", "clientAuth": True},
                "capabilities": {"sysAdmin": True},
                "hostMounts": {"debugfs": True, "resctrl": True},
                "kernelHeaders": {"source": "/usr/src/linux-headers"},
                "collectors": {"perf_llc": False, "biolatency": True},
                "collectorOptions": {"kata.shim-paths": "/opt/kata/bin/containerd-shim-kata-v2"},
                "hostNetwork": True,
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
        },
    )
    rendered = render(values)
    for obj in rendered.objects:
        if obj["kind"] not in OUR_KINDS | OPERATOR_KINDS:
            kubernetes_validate.validate(obj, KUBE_VERSIONS[-1], strict=True)
    assert rendered.one("Secret", "-extender-tls")["type"] == "kubernetes.io/tls"


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
        jsonschema.validate(monitor["spec"], SERVICE_MONITOR_SPEC)
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
