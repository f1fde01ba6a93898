"""Each scenario installs what it promises and nothing it rules out."""

from __future__ import annotations

import re

import pytest

from tests.chart.helm import (
    PROMETHEUS_RELEASE,
    SCENARIOS,
    merge,
    render,
    render_scenario,
    scenario_values,
)

DASHBOARDS = {
    "ConfigMap/mco-dashboard-cluster-overview",
    "ConfigMap/mco-dashboard-node-detail",
    "ConfigMap/mco-dashboard-pipeline-health",
}
KATA_CLASSES = {f"RuntimeClass/kata-{h}" for h in ("qemu", "clh", "fc", "dragonball")}
EXPORTER = {"DaemonSet/mco-exporter", "Service/mco-exporter", "ServiceMonitor/mco-exporter"}
RULES = {"PrometheusRule/mco-rules", "DetectionRuleConfig/default"}
REPORTER = {
    "Deployment/mco-reporter",
    "ServiceAccount/mco-reporter",
    "ClusterRole/mco-reporter",
    "Role/mco-reporter",
    "PodDisruptionBudget/mco-reporter",
    "ServiceMonitor/mco-reporter",
}
RULEGEN = {"Deployment/mco-rulegen", "ClusterRole/mco-rulegen", "Role/mco-rulegen"}
EXTENDER = {
    "Deployment/mco-extender",
    "Service/mco-extender",
    "ClusterRole/mco-extender",
    "PodDisruptionBudget/mco-extender",
    "ServiceMonitor/mco-extender",
}
VOLCANO = {"ConfigMap/mco-volcano-scheduler"}
KUBE_SCHEDULER = {"ConfigMap/mco-kube-scheduler"}
KATA_DEPLOY = {"DaemonSet/mco-kata-deploy", "ClusterRole/mco-kata-deploy"}

EXPECTED: dict[str, tuple[set[str], set[str]]] = {
    # scenario: (must be installed, must not be installed)
    "full": (
        EXPORTER
        | RULES
        | REPORTER
        | RULEGEN
        | EXTENDER
        | VOLCANO
        | KUBE_SCHEDULER
        | DASHBOARDS
        | KATA_CLASSES,
        KATA_DEPLOY,
    ),
    "kata-only": (
        KATA_CLASSES | KATA_DEPLOY,
        EXPORTER | RULES | REPORTER | RULEGEN | EXTENDER | VOLCANO | KUBE_SCHEDULER | DASHBOARDS,
    ),
    "collect-analyze": (
        EXPORTER | RULES | REPORTER | RULEGEN | DASHBOARDS,
        EXTENDER | VOLCANO | KUBE_SCHEDULER | KATA_CLASSES | KATA_DEPLOY,
    ),
    "existing-volcano": (
        EXPORTER | RULES | REPORTER | RULEGEN | EXTENDER | VOLCANO | DASHBOARDS,
        KUBE_SCHEDULER | KATA_CLASSES | KATA_DEPLOY,
    ),
}


def installed(scenario: str, **overrides: object) -> set[str]:
    values = merge(scenario_values(scenario), dict(overrides))
    return {f"{o['kind']}/{o['metadata']['name']}" for o in render(values).objects}


def test_every_scenario_has_expectations() -> None:
    assert set(EXPECTED) == set(SCENARIOS)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario_installs_what_it_promises(scenario: str) -> None:
    present, absent = EXPECTED[scenario]
    objects = installed(scenario)
    assert present <= objects, f"missing: {sorted(present - objects)}"
    assert not (absent & objects), f"unexpected: {sorted(absent & objects)}"


def test_kata_deploy_is_opt_in_for_full() -> None:
    assert installed("full", kata={"deploy": {"enabled": True}}) >= KATA_DEPLOY


def test_kata_only_installs_no_workload_besides_kata_deploy() -> None:
    objects = render_scenario("kata-only").objects
    workloads = {o["metadata"]["name"] for o in objects if o["kind"] in ("Deployment", "DaemonSet")}
    assert workloads == {"mco-kata-deploy"}


def test_defaults_are_full_without_kernel_events_or_its_release_requirement() -> None:
    """values.yaml alone installs what the full scenario does, but keeps the exporter
    least-privileged: full adds only the kernel-event collectors (and requires the release)."""
    full = render_scenario("full")
    release = {"monitoring": {"prometheusRelease": PROMETHEUS_RELEASE}}
    default = render(release)
    assert sorted(map(str, full.objects)) != sorted(map(str, default.objects))
    kernel_events = render(merge(release, {"exporter": {"kernelEvents": {"enabled": True}}}))
    assert sorted(map(str, full.objects)) == sorted(map(str, kernel_events.objects))


@pytest.mark.parametrize("component", ["exporter", "reporter", "rulegen", "extender"])
def test_each_component_can_be_turned_off_alone(component: str) -> None:
    on = installed("full")
    off = installed("full", **{component: {"enabled": False}})
    removed = on - off
    # The scheduler ConfigMaps point at the extender's Service: they go with it.
    follows = VOLCANO | KUBE_SCHEDULER if component == "extender" else set()
    assert removed, component
    assert all(component in name for name in removed - follows), sorted(removed)


MONITORING_NOTE = "monitoring.prometheusRelease is empty"


def test_kata_only_notes_list_no_monitoring() -> None:
    notes = render_scenario("kata-only").notes
    installed_part = notes.split("Installed:", 1)[1]
    assert MONITORING_NOTE not in notes
    assert "ServiceMonitor" not in installed_part and "PrometheusRule" not in installed_part
    assert "RuntimeClasses: kata-qemu" in installed_part


@pytest.mark.parametrize(
    ("exporter", "rules", "noted"),
    [(True, True, True), (True, False, True), (False, True, True), (False, False, False)],
)
def test_release_label_note_follows_the_operator_objects(
    exporter: bool, rules: bool, noted: bool
) -> None:
    # values.yaml alone: no release required, so the chart renders and NOTES warns instead.
    values = {
        "exporter": {"enabled": exporter},
        "rules": {"enabled": rules},
        "rulegen": {"enabled": False},
        "reporter": {"serviceMonitor": {"enabled": False}},
        "extender": {"serviceMonitor": {"enabled": False}},
    }
    rendered = render(values)
    operator_objects = {"ServiceMonitor/mco-exporter", "PrometheusRule/mco-rules"} & {
        f"{o['kind']}/{o['metadata']['name']}" for o in rendered.objects
    }
    assert bool(operator_objects) == noted
    assert (MONITORING_NOTE in rendered.notes) == noted
    # With the release label set, the note is never needed: NOTES names the release instead.
    notes = render_scenario("collect-analyze").notes
    assert MONITORING_NOTE not in notes
    assert f'the kube-prometheus-stack release "{PROMETHEUS_RELEASE}" selects them' in notes
    labelled = render({**values, "monitoring": {"additionalLabels": {"team": "obs"}}})
    assert MONITORING_NOTE not in labelled.notes


@pytest.mark.parametrize("release", ["mco", "volcano-join"])
def test_existing_volcano_notes_name_the_rendered_config_map_and_key(release: str) -> None:
    rendered = render_scenario("existing-volcano", release=release)
    config_map = rendered.one("ConfigMap", "-volcano-scheduler")
    name, namespace = config_map["metadata"]["name"], config_map["metadata"]["namespace"]
    assert name.startswith(release)
    command = re.search(
        r"kubectl -n (\S+) get configmap (\S+) \\\s+-o jsonpath='\{\.data\.((?:\\.|[^}\\])+)\}'",
        rendered.notes,
    )
    assert command, rendered.notes
    assert (command[1], command[2]) == (namespace, name)
    key = command[3].replace("\\.", ".")
    assert key in config_map["data"], (
        f"NOTES points at key {key}, not in {sorted(config_map['data'])}"
    )
    # "Key volcano-scheduler.conf of the same ConfigMap is a whole example config."
    whole = re.search(r"Key (\S+) of the same ConfigMap", rendered.notes)
    assert whole and whole[1] in config_map["data"]
