"""What the rendered objects say: labels Prometheus selects on, dashboards, Kata, HA."""

from __future__ import annotations

import json

import pytest

from tests.chart.helm import CHART, ROOT, render, render_scenario

RELEASE_LABEL = {"release": "kube-prometheus-stack"}


@pytest.mark.parametrize("scenario", ["full", "collect-analyze", "existing-volcano"])
def test_operator_objects_carry_additional_labels(scenario: str) -> None:
    rendered = render_scenario(scenario)
    for obj in rendered.of_kind("ServiceMonitor") + rendered.of_kind("PrometheusRule"):
        assert RELEASE_LABEL.items() <= obj["metadata"]["labels"].items(), obj["metadata"]["name"]


def test_exporter_service_monitor_scrapes_every_second_and_sets_node() -> None:
    monitor = render_scenario("full").one("ServiceMonitor", "-exporter")
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["interval"] == "1s"
    assert endpoint["scrapeTimeout"] == "1s"
    assert endpoint["relabelings"][0] == {
        "action": "replace",
        "sourceLabels": ["__meta_kubernetes_pod_node_name"],
        "targetLabel": "node",
    }
    extra = {"sourceLabels": ["__meta_kubernetes_pod_name"], "targetLabel": "pod"}
    tuned = render({"exporter": {"serviceMonitor": {"interval": "2s", "relabelings": [extra]}}})
    (endpoint,) = tuned.one("ServiceMonitor", "-exporter")["spec"]["endpoints"]
    assert endpoint["interval"] == "2s"
    assert endpoint["relabelings"][1] == extra


def test_job_label_is_stable_across_release_names() -> None:
    for release in ("mco", "team-a"):
        svc = render(release=release).one("Service", "-exporter")
        assert svc["metadata"]["labels"]["mco.io/job"] == "mco-exporter"


def test_dashboard_configmaps_hold_the_generated_dashboards() -> None:
    rendered = render_scenario("full", namespace="mco-system")
    maps = {
        m["metadata"]["name"]: m
        for m in rendered.of_kind("ConfigMap")
        if m["metadata"]["name"].startswith("mco-dashboard-")
    }
    generated = sorted((ROOT / "dashboards").glob("*.json"))
    assert generated, "dashboards/*.json missing: run make generate"
    assert len(maps) == len(generated)
    for path in generated:
        in_chart = (CHART / "dashboards" / path.name).read_text()
        assert in_chart == path.read_text(), f"charts/mco/dashboards/{path.name} differs"
        cm = maps[f"mco-dashboard-{path.stem.removeprefix('mco-')}"]
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert cm["metadata"]["annotations"]["grafana_folder"] == "MCO"
        assert cm["data"] == {path.name: path.read_text()}
        json.loads(cm["data"][path.name])


def test_dashboards_can_go_to_grafanas_namespace_with_its_label() -> None:
    values = {
        "dashboards": {
            "namespace": "monitoring",
            "labelKey": "dash",
            "labelValue": "yes",
            "folder": "Sched",
        }
    }
    for cm in render(values).of_kind("ConfigMap"):
        if cm["metadata"]["name"].startswith("mco-dashboard-"):
            assert cm["metadata"]["namespace"] == "monitoring"
            assert cm["metadata"]["labels"]["dash"] == "yes"
            assert cm["metadata"]["annotations"]["grafana_folder"] == "Sched"


def test_kata_runtime_classes_select_kata_nodes_and_carry_overhead() -> None:
    classes = render_scenario("kata-only").of_kind("RuntimeClass")
    assert {c["metadata"]["name"] for c in classes} >= {"kata-qemu", "kata-clh"}
    for rc in classes:
        assert rc["handler"] == rc["metadata"]["name"]
        assert rc["scheduling"]["nodeSelector"] == {"katacontainers.io/kata-runtime": "true"}
        assert set(rc["overhead"]["podFixed"]) == {"cpu", "memory"}


def test_kata_deploy_follows_its_node_selector_and_image() -> None:
    values = {
        "kata": {
            "deploy": {
                "enabled": True,
                "nodeSelector": {"mco.io/kata": "true"},
                "image": {"tag": "3.99.0"},
            }
        }
    }
    ds = render(values).one("DaemonSet", "-kata-deploy")
    pod = ds["spec"]["template"]["spec"]
    # Helm merges maps with the defaults: the OS selector stays.
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux", "mco.io/kata": "true"}
    assert pod["containers"][0]["image"] == "quay.io/kata-containers/kata-deploy:3.99.0"
    assert pod["serviceAccountName"] == "mco-kata-deploy"


@pytest.mark.parametrize("component", ["reporter", "rulegen", "extender"])
def test_controllers_run_two_replicas_with_a_budget(component: str) -> None:
    rendered = render_scenario("full")
    deployment = rendered.one("Deployment", f"-{component}")
    assert deployment["spec"]["replicas"] == 2
    pdb = rendered.one("PodDisruptionBudget", f"-{component}")
    assert pdb["spec"]["selector"] == deployment["spec"]["selector"]
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == f"mco-{component}"
    anti = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"


def test_image_digest_wins_and_names_fit() -> None:
    digest = "sha256:" + "a" * 64
    rendered = render(
        {"image": {"digest": digest}}, release="a-rather-long-release-name-for-a-cluster"
    )
    images = {c["image"] for _, c in rendered.containers()}
    assert images == {f"ghcr.io/mco-io/mco@{digest}"}
    for obj in rendered.objects:
        name = obj["metadata"]["name"]
        # Services (and the label values below) are DNS labels; other names DNS subdomains.
        assert len(name) <= (63 if obj["kind"] == "Service" else 253), name
        for value in obj["metadata"].get("labels", {}).values():
            assert len(value) <= 63, value
