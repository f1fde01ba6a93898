"""scripts/kind-e2e.sh and its workflow cannot run here (no container engine); what can be
checked is checked: the shell is clean, and what the script installs is rendered with the chart
(its own values, evaluated by bash) and holds every object, label, key and path it waits on."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import requests
import yaml

from exporter.cli import build_parser as exporter_parser
from exporter.registry import specs
from reporter.taints import TAINT_KEY
from scripts.procs import Managed, free_port
from tests.chart.helm import ROOT, Rendered, crds, merge, render
from tests.exporter.conftest import samples_of

SCRIPT = ROOT / "scripts" / "kind-e2e.sh"
WORKFLOW = ROOT / ".github" / "workflows" / "kind-e2e.yaml"
TEXT = SCRIPT.read_text()
NAMESPACE = "mco"


@pytest.mark.skipif(
    shutil.which("shellcheck") is None,
    reason="shellcheck is not installed (scripts/setup-system.sh installs it: make system)",
)
@pytest.mark.parametrize("script", sorted((ROOT / "scripts").glob("*.sh")), ids=lambda p: p.name)
def test_shellcheck_clean(script: Path) -> None:
    result = subprocess.run(
        ["shellcheck", "--severity=info", str(script)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout


@cache
def install_arguments(image: str | None = None) -> list[str]:
    """``${mco_values[@]}`` as bash expands it: the script's defaults, or the given $IMAGE."""
    settings = TEXT[: TEXT.index("\nlog() {")]  # the variables block at the top
    assignments = [
        line
        for line in settings.splitlines()
        if re.match(r"[A-Za-z_]+=", line) and "$(" not in line
    ]
    start = TEXT.index("mco_values=(")
    array = TEXT[start : TEXT.index("\n)\n", start) + 3]
    program = "\n".join([f"here={ROOT}", *assignments, array, 'printf "%s\\0" "${mco_values[@]}"'])
    env = {"IMAGE": image} if image else {}
    result = subprocess.run(
        ["bash", "-euc", program], env=env, capture_output=True, text=True, check=True
    )
    return result.stdout.split("\0")[:-1]


def install_values() -> dict[str, Any]:
    """The values Helm gets from those arguments, layered in order as Helm layers them."""
    values: dict[str, Any] = {}
    args = list(install_arguments())
    while args:
        flag, value = args.pop(0), args.pop(0)
        if flag == "-f":
            values = merge(values, yaml.safe_load(Path(value).read_text()))
        else:
            assert flag == "--set", flag
            values = merge(values, helm.parse_set_string(value))
    return values


@cache
def installed() -> Rendered:
    # kube-prometheus-stack is installed first: the cluster serves monitoring.coreos.com/v1.
    return render(install_values(), release="mco", namespace=NAMESPACE, cluster=True)


def test_the_script_installs_the_full_scenario_with_the_release_it_created() -> None:
    args = install_arguments()
    files = [Path(args[i + 1]) for i, a in enumerate(args) if a == "-f"]
    assert files == [ROOT / "charts" / "mco" / "scenarios" / "full.yaml"]
    kps = re.search(r"^KPS_RELEASE=\$\{KPS_RELEASE:-([a-z-]+)\}", TEXT, re.M)
    assert kps and 'helm upgrade --install "$KPS_RELEASE" prometheus-community/' in TEXT
    assert "monitoring.prometheusRelease=" + kps[1] in args
    assert "--namespace mco " in TEXT
    labels = {o["metadata"]["labels"].get("release") for o in installed().of_kind("PrometheusRule")}
    assert labels == {kps[1]}
    assert installed().one("RuntimeClass", "kata-qemu")


def test_every_object_the_script_waits_on_is_installed() -> None:
    names = {(o["kind"].lower(), o["metadata"]["name"]) for o in installed().objects}
    used = re.findall(
        r"\b(daemonset|deployment|configmap|prometheusrule|detectionruleconfig)[/ ]"
        r"(mco-[a-z-]+|default)\b",
        TEXT,
    )
    assert len(used) >= 8
    for kind, name in used:
        assert (kind, name) in names, f"{kind}/{name}"
    for service, port in re.findall(r"port-forward svc/(mco-[a-z-]+) \d+:(\d+)", TEXT):
        spec = installed().one("Service", service)["spec"]
        assert int(port) in [p["port"] for p in spec["ports"]], service
    for key in re.findall(r"\.data\.([a-z-]+)\\\.yaml", TEXT):
        if "volcano-scheduler" in key:
            continue  # Volcano's own ConfigMap
        assert f"{key}.yaml" in installed().one("ConfigMap", "-volcano-scheduler")["data"]
    dashboards = set(re.findall(r"for uid in ([a-z -]+);", TEXT)[0].split())
    assert dashboards == {p.stem for p in (ROOT / "dashboards").glob("*.json")}


def test_the_log_selector_matches_every_mco_pod() -> None:
    (selector,) = set(re.findall(r"-l (app\.kubernetes\.io/[a-z-]+=[a-z-]+)", TEXT))
    key, value = selector.split("=")
    workloads = installed().of_kind("Deployment") + installed().of_kind("DaemonSet")
    assert len(workloads) >= 4
    for obj in workloads:
        assert obj["spec"]["template"]["metadata"]["labels"].get(key) == value, obj["metadata"]


def test_the_exporter_reads_the_per_node_procfs_the_script_prepares() -> None:
    (exporter,) = installed().one("DaemonSet", "-exporter")["spec"]["template"]["spec"][
        "containers"
    ]
    procfs = exporter_parser(specs()).parse_args(exporter["args"]).procfs
    assert re.search(rf"^KIND_PROCFS={re.escape(procfs)}$", TEXT, re.M), procfs
    # The view lives on the node under a host directory the chart mounts at the flag's path.
    node_dir = re.search(r"^\s+dir=(/\S+)$", TEXT, re.M)
    assert node_dir
    volumes = installed().one("DaemonSet", "-exporter")["spec"]["template"]["spec"]["volumes"]
    host_paths = {v["name"]: v["hostPath"]["path"] for v in volumes if "hostPath" in v}
    mapped = [
        host_paths[m["name"]] + procfs.removeprefix(m["mountPath"])
        for m in exporter["volumeMounts"]
        if procfs.startswith(m["mountPath"] + "/") and m["name"] in host_paths
    ]
    assert mapped == [node_dir[1]]
    # Its links point at the node's /proc and /sys as the exporter sees them.
    mounts = {m["mountPath"]: host_paths.get(m["name"]) for m in exporter["volumeMounts"]}
    assert mounts["/host/proc"] == "/proc" and mounts["/host/sys"] == "/sys"
    assert '"/host/proc/$name"' in TEXT and '"/host/sys/fs/cgroup/$resource.pressure"' in TEXT


def test_the_hard_constraint_the_script_lowers_is_in_the_crd_and_the_config() -> None:
    patch = re.search(r"patch detectionruleconfig default --type merge \\\n\s+-p '(.+)'", TEXT)
    assert patch
    body = yaml.safe_load(patch[1])
    schema = crds()["DetectionRuleConfig"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    node, config = schema, installed().one("DetectionRuleConfig")
    path = []
    while isinstance(body, dict):
        ((key, body),) = body.items()
        path.append(key)
        node = node["properties"][key]
        config = config[key]
    assert path == ["spec", "hardConstraints", "psiIOSomeMax"]
    assert node["type"] == "number" and body < config


def test_the_taint_the_script_waits_for_is_the_one_the_installed_reporter_keeps() -> None:
    deployments = installed().of_kind("Deployment")
    (reporter,) = [d for d in deployments if d["metadata"]["name"].endswith("reporter")]
    args = reporter["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--taint-nodes" in args
    rules = [r for o in installed().of_kind("ClusterRole") for r in o.get("rules", [])]
    assert any("nodes" in r.get("resources", []) and "patch" in r["verbs"] for r in rules)
    # The key the script reads is the one the reporter writes (reporter/taints.py).
    assert f'@.key=="{TAINT_KEY}"' in TEXT


def test_the_kata_pod_asks_for_a_class_the_chart_confines_to_kata_nodes() -> None:
    (runtime_class,) = set(re.findall(r"runtimeClassName: (kata-[a-z]+)", TEXT))
    rc = installed().one("RuntimeClass", runtime_class)
    assert rc["scheduling"]["nodeSelector"] == {"katacontainers.io/kata-runtime": "true"}
    assert "kata.deploy" not in TEXT  # Kata is not installed: the pod must stay Pending


def test_the_workflow_builds_the_image_the_script_loads_and_runs_the_script() -> None:
    workflow = yaml.safe_load(WORKFLOW.read_text())
    triggers = workflow.get("on", workflow.get(True))
    assert {"push", "pull_request"} <= set(triggers)
    (job,) = workflow["jobs"].values()
    image = job["env"]["IMAGE"]
    steps = {step.get("name", step.get("uses")): step for step in job["steps"]}
    assert 'docker build -t "$IMAGE" .' in steps["Build the image"]["run"]
    e2e = steps["End-to-end on kind"]
    assert e2e["run"] == "scripts/kind-e2e.sh" and e2e["env"]["BUILD"] == "0"
    # The script splits $IMAGE into the chart's image values: the built image is what runs.
    args = install_arguments(image)
    sets = [args[i + 1] for i, a in enumerate(args) if a == "--set"]
    parts = {k: v for k, _, v in (s.partition("=") for s in sets) if k.startswith("image.")}
    assert f"{parts['image.registry']}/{parts['image.repository']}:{parts['image.tag']}" == image
    assert parts["image.pullPolicy"] == "Never"
    assert SCRIPT.stat().st_mode & 0o111
    minutes = job["timeout-minutes"]
    timeouts = re.findall(r"eventually (\d+) ", TEXT)
    assert sum(map(int, timeouts)) < minutes * 60


def test_the_scripts_values_pass_helm_lint_strict_with_no_finding() -> None:
    report = helm.lint(ROOT / "charts" / "mco", install_values(), strict=True)
    assert report["errors"] == [] and report["messages"] == [], report


@pytest.mark.slow
def test_the_per_node_procfs_view_feeds_the_real_exporter(tmp_path: Path) -> None:
    """The script's own node-side snippet, run here with its paths mapped to this machine: the
    real exporter reads PSI from the linked cgroup files and every other signal from /proc."""
    snippet = re.search(r"docker exec \"\$node\" sh -euc '\n(.*?)\n  '\n", TEXT, re.S)
    assert snippet
    cgroup = tmp_path / "cgroup"  # stands in for the node container's cgroup
    cgroup.mkdir()
    totals = {"cpu": 1_000_000, "io": 2_500_000, "memory": 500_000}
    for resource, total in totals.items():
        (cgroup / f"{resource}.pressure").write_text(
            f"some avg10=1.00 avg60=1.00 avg300=1.00 total={total}\n"
            f"full avg10=0.00 avg60=0.00 avg300=0.00 total={total // 2}\n"
        )
    view = tmp_path / "view"
    script = (
        snippet[1]
        .replace("/opt/mco-kind/proc", str(view))
        .replace("/host/proc/", "/proc/")
        .replace("/host/sys/fs/cgroup/", f"{cgroup}/")
        .replace("/sys/fs/cgroup/", f"{cgroup}/")
    )
    subprocess.run(["sh", "-euc", script], check=True, timeout=60)
    assert (view / "pressure" / "io").resolve() == cgroup / "io.pressure"
    port = free_port()
    exporter = Managed(
        [
            sys.executable,
            "-m",
            "exporter",
            f"--web.listen-address=127.0.0.1:{port}",
            f"--path.procfs={view}",
        ],
        name="mco-exporter",
        log_path=tmp_path / "exporter.log",
    )
    exporter.start()
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        exporter.wait_http(url, timeout=30)
        samples = samples_of(requests.get(url, timeout=10).text)
    finally:
        exporter.stop()
    assert samples[("mco_pressure_available", frozenset())] == 1
    for resource, total in totals.items():
        key = frozenset({("resource", resource), ("kind", "some")})
        assert samples[("mco_pressure_stalled_seconds_total", key)] == total / 1e6
    mem_total = next(
        int(line.split()[1]) * 1024
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("MemTotal:")
    )
    assert samples[("mco_memory_total_bytes", frozenset())] == mem_total
    success = {
        dict(labels)["collector"]: value
        for (name, labels), value in samples.items()
        if name == "mco_exporter_collector_success"
    }
    sources = {"meminfo": "meminfo", "vmstat": "vmstat", "cpu": "stat", "schedstat": "schedstat"}
    sources["softirqs"] = "softirqs"
    read = [c for c, source in sources.items() if Path("/proc", source).exists()]
    assert len(read) >= 3
    for collector in ["pressure", *read]:
        assert success[collector] == 1, collector
