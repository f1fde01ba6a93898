"""Prometheus Operator objects never vanish silently, and carry the kube-prometheus-stack release.

Offline (``helm template``) Helm cannot know what the cluster serves: every enabled
ServiceMonitor, PrometheusRule and the rulegen controller are rendered. Against a cluster
(``cluster=True``: Helm's discovered API set) that does not serve monitoring.coreos.com/v1, the
render fails and names each value that turns an object off.
"""

from __future__ import annotations

import re
from typing import Any

import helm_python as helm
import pytest

from tests.chart.helm import (
    CHART,
    MONITORING_API,
    PROMETHEUS_RELEASE,
    SCENARIOS,
    merge,
    render,
    render_scenario,
    scenario_file,
    scenario_values,
)

OPERATOR_KINDS = {"ServiceMonitor", "PrometheusRule"}
WITH_MONITORING = [s for s in SCENARIOS if s != "kata-only"]


def _names(values: dict[str, Any], **kwargs: Any) -> set[str]:
    return {f"{o['kind']}/{o['metadata']['name']}" for o in render(values, **kwargs).objects}


def _render_error(values: dict[str, Any], **kwargs: Any) -> str:
    with pytest.raises(helm.HelmError) as error:
        render(values, **kwargs)
    return str(error.value)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_offline_render_keeps_every_operator_object(scenario: str) -> None:
    values = scenario_values(scenario)
    offline = _names(values, monitoring=False)
    assert offline == _names(values, monitoring=True)
    assert offline == _names(values, monitoring=True, cluster=True)
    if scenario != "kata-only":
        assert {"ServiceMonitor/mco-exporter", "PrometheusRule/mco-rules"} <= offline
        assert "Deployment/mco-rulegen" in offline


@pytest.mark.parametrize("scenario", WITH_MONITORING)
def test_a_cluster_without_the_api_fails_naming_it_and_every_value(scenario: str) -> None:
    values = scenario_values(scenario)
    message = _render_error(values, monitoring=False, cluster=True)
    assert MONITORING_API in message
    named = set(re.findall(r"\(([a-z]+(?:\.[a-zA-Z]+)+)\)", message))
    expected = {"exporter.serviceMonitor.enabled", "rules.enabled", "rulegen.enabled"}
    expected |= {"reporter.serviceMonitor.enabled", "rulegen.serviceMonitor.enabled"}
    if scenario != "collect-analyze":
        expected.add("extender.serviceMonitor.enabled")
    assert named == expected
    # Following the message's advice renders, with no operator object and no controller.
    off: dict[str, Any] = {}
    for path in named:
        node = off
        *parents, leaf = path.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = False
    rendered = render(merge(values, off), monitoring=False, cluster=True)
    assert not rendered.kinds() & OPERATOR_KINDS
    assert not any(o["metadata"]["name"].endswith("-rulegen") for o in rendered.objects)
    assert rendered.one("DaemonSet", "-exporter")


def test_the_message_lists_only_what_is_enabled() -> None:
    values = merge(
        scenario_values("collect-analyze"),
        {"rules": {"enabled": False}, "reporter": {"serviceMonitor": {"enabled": False}}},
    )
    message = _render_error(values, monitoring=False, cluster=True)
    assert "exporter.serviceMonitor.enabled" in message and "rulegen.enabled" in message
    assert "rules.enabled" not in message.replace("rulegen", "")
    assert "reporter.serviceMonitor.enabled" not in message


def test_kata_only_installs_on_a_cluster_without_the_api() -> None:
    rendered = render_scenario("kata-only", monitoring=False, cluster=True)
    assert "RuntimeClass" in rendered.kinds()


@pytest.mark.parametrize("scenario", WITH_MONITORING)
def test_scenarios_require_the_prometheus_release(scenario: str) -> None:
    message = _render_error(scenario_file(scenario))
    assert "monitoring.prometheusRelease is empty" in message
    assert "--set monitoring.prometheusRelease=" in message
    # The scenario file's own header shows the flag.
    text = (CHART / "scenarios" / f"{scenario}.yaml").read_text()
    assert "--set monitoring.prometheusRelease=" in text


@pytest.mark.parametrize("doc", ["docs/helm.md", "docs/user-guide.md", "charts/mco/README.md"])
def test_documented_install_commands_give_the_release(doc: str) -> None:
    text = (CHART.parents[1] / doc).read_text().replace("\\\n", " ")
    commands = [c for c in re.findall(r"helm install [^\n]+", text) if "scenarios/" in c]
    assert commands, doc
    for command in commands:
        (scenario,) = re.findall(r"scenarios/([a-z-]+)\.yaml", command)
        if scenario in WITH_MONITORING:
            assert "--set monitoring.prometheusRelease=" in command, command


def test_kata_only_needs_no_prometheus_release() -> None:
    assert render(scenario_file("kata-only")).objects


@pytest.mark.parametrize("release", ["kps", "monitoring-stack"])
def test_the_release_labels_every_operator_object_and_the_controller(release: str) -> None:
    values = merge(scenario_file("full"), {"monitoring": {"prometheusRelease": release}})
    rendered = render(values)
    operator_objects = [o for o in rendered.objects if o["kind"] in OPERATOR_KINDS]
    assert len(operator_objects) == 5
    for obj in operator_objects:
        assert obj["metadata"]["labels"]["release"] == release, obj["metadata"]["name"]
    (container,) = rendered.one("Deployment", "-rulegen")["spec"]["template"]["spec"]["containers"]
    assert f"--prometheusrule-label=release={release}" in container["args"]
    assert f'the kube-prometheus-stack release "{release}" selects them' in rendered.notes


def test_additional_labels_join_the_release_and_may_not_contradict_it() -> None:
    values = merge(
        scenario_values("collect-analyze"),
        {"monitoring": {"additionalLabels": {"team": "obs"}}},
    )
    labels = render(values).one("PrometheusRule")["metadata"]["labels"]
    assert labels["team"] == "obs" and labels["release"] == PROMETHEUS_RELEASE
    same = merge(values, {"monitoring": {"additionalLabels": {"release": PROMETHEUS_RELEASE}}})
    assert render(same).one("PrometheusRule")["metadata"]["labels"]["release"] == (
        PROMETHEUS_RELEASE
    )
    other = merge(values, {"monitoring": {"additionalLabels": {"release": "other"}}})
    assert "disagree" in _render_error(other)


def test_without_the_requirement_additional_labels_alone_still_work() -> None:
    values = merge(
        scenario_file("collect-analyze"),
        {"monitoring": {"requirePrometheusRelease": False, "additionalLabels": {"prom": "main"}}},
    )
    rendered = render(values)
    for obj in rendered.objects:
        if obj["kind"] in OPERATOR_KINDS:
            assert obj["metadata"]["labels"]["prom"] == "main"
            assert "release" not in obj["metadata"]["labels"]
