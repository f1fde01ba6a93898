"""Workload profiles from real per-pod series through the real reporter: the synthetic fleet's
``pods`` node (testkit/fleet.py: the cgroup collector's per-pod series) and kube-state-metrics'
``kube_pod_info`` with the pods' owners, scraped by a real Prometheus evaluating the generated
rules, and ``mco-reporter --once`` writing the report file twice (the second run going on from
the profiles the first published)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from reporter import culprits
from rulegen.model import DetectionRuleConfig
from rulegen.render import render_rules
from scripts.procs import Managed, Prometheus, ScrapeTarget, free_port, running, wait_until

ROOT = Path(__file__).resolve().parents[2]
NODE = "node-00000"
# The fleet's pods node: "victim" stalls on I/O at no limit of its own while "throttled" (at
# its own write limit: no victim, but it fills the disk, 1 MiB/s) does far more I/O than any
# other pod. Three of its pods' owners, as kube-state-metrics labels them:
PODS = (
    ("victim", "shop", "web-5d8f7b9c4-x2k8p", "ReplicaSet", "web-5d8f7b9c4"),
    ("throttled", "batch", "etl-28930150-q7w2z", "Job", "etl-28930150"),
    ("ops", "batch", "scan-0", "StatefulSet", "scan"),
)


def _kube_pod_info() -> str:
    lines = ["# TYPE kube_pod_info gauge"]
    for uid, namespace, pod, kind, owner in PODS:
        lines.append(
            f'kube_pod_info{{namespace="{namespace}",pod="{pod}",uid="{uid}",node="{NODE}",'
            f'created_by_kind="{kind}",created_by_name="{owner}"}} 1'
        )
    return "\n".join(lines) + "\n"


def _report(out: Path) -> dict[str, Any]:
    doc = json.loads(out.read_text())
    items = doc.get("items", [doc])
    cluster = next(i for i in items if i["metadata"]["name"] == "cluster")
    status: dict[str, Any] = cluster["status"]
    return status


@pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus not installed")
def test_the_real_reporter_learns_workloads_from_real_per_pod_series(tmp_path: Path) -> None:
    config = DetectionRuleConfig.default()
    rules = tmp_path / "rules.yaml"
    rules.write_text(render_rules(config, generation=0))
    fleet_port, ksm_port = free_port(), free_port()
    fleet = Managed(
        [sys.executable, "-m", "testkit.fleet", f"--port={fleet_port}", "--nodes=1",
         "--profiles=pods"],
        name="fleet", log_path=tmp_path / "fleet.log", cwd=ROOT,
    )  # fmt: skip
    ksm_dir = tmp_path / "ksm"
    ksm_dir.mkdir()
    (ksm_dir / "metrics").write_text(_kube_pod_info())
    ksm = Managed(
        [sys.executable, "-m", "http.server", str(ksm_port), "--bind=127.0.0.1",
         f"--directory={ksm_dir}"],
        name="kube-state-metrics", log_path=tmp_path / "ksm.log",
    )  # fmt: skip
    prom = Prometheus(
        tmp_path / "prom",
        targets=[
            ScrapeTarget("mco-fleet", f"127.0.0.1:{fleet_port}"),
            ScrapeTarget("kube-state-metrics", f"127.0.0.1:{ksm_port}"),
        ],
        rule_files=[rules],
    )
    query = culprits.query(config)
    with running(fleet, ksm):
        fleet.wait_http(f"http://127.0.0.1:{fleet_port}/metrics")
        ksm.wait_http(f"http://127.0.0.1:{ksm_port}/metrics")
        with running(prom):

            def named() -> bool:
                rows = prom.query(query)
                return {r["metric"].get("created_by_name") for r in rows} >= {
                    "web-5d8f7b9c4", "etl-28930150"
                }  # fmt: skip

            wait_until(named, timeout=90, what="the victims and aggressors with their owners")
            out = tmp_path / "report.json"
            argv = [sys.executable, "-m", "reporter", "--once", f"--output={out}",
                    f"--prometheus-url={prom.url}", "--web.listen-address="]  # fmt: skip
            for _ in range(2):
                done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60)
                assert done.returncode == 0, done.stderr
    status = _report(out)
    entry = status["nodes"][NODE]
    # Every named pod that kube-state-metrics lists carries its workload; the fleet's other
    # pods (no kube_pod_info) carry none and teach nothing.
    workloads = {p["podUid"]: p.get("workload", "") for p in entry["victims"] + entry["aggressors"]}
    assert workloads["victim"] == "shop/Deployment/web"  # the ReplicaSet's Deployment
    assert workloads["throttled"] == "batch/CronJob/etl"  # the Job's CronJob
    assert all(w == "" for uid, w in workloads.items() if uid not in {u for u, *_ in PODS})
    profiles = {p["workload"]: p for p in status["profiles"]}
    # Only workloads the lists named are learned (the fleet's unnamed pods teach nothing).
    assert set(profiles) == {w for w in workloads.values() if w}
    assert {"shop/Deployment/web", "batch/CronJob/etl"} <= set(profiles)
    # Every listed pod of a known workload taught its workload that resource in that role, in
    # this run and maybe the first (the fleet's stalls still ramp up then, so a pod's lists can
    # differ between the two runs).
    for role, pods in (("victim", entry["victims"]), ("aggressor", entry["aggressors"])):
        for p in pods:
            if p.get("workload"):
                learned = profiles[p["workload"]]["resources"][p["resource"]]
                assert 0 < learned[role] <= 1, (role, p)
                assert 1 <= learned[f"{role}Count"] <= 2.05, (role, p)
    # An aggressor is blamed by its share of the usage named on the node: etl (throttled at its
    # own write limit, yet the node's largest writer) takes nearly all of the node's I/O.
    io = {p["podUid"]: p["value"] for p in entry["aggressors"] if p["resource"] == "io"}
    share = io["throttled"] / sum(io.values())
    assert share > 0.8
    etl = profiles["batch/CronJob/etl"]["resources"]["io"]
    assert etl["aggressor"] == pytest.approx(share, abs=0.05)
    assert "victim" not in etl  # a pod at its own limit is no victim (reporter.culprits)
    # The node's largest writer in both runs: the second went on from the first's profiles.
    assert etl["aggressorCount"] == pytest.approx(2.0, abs=0.05)
