"""``triggeredLevel``: a node whose detection is triggered counts as at least that level.

Through the real HTTP app (kube-scheduler filter and prioritize, Volcano predicate, explain):
a signal just past warn has index 0, so the node's level stays low although the detection
says it interferes; for a policy with a triggeredLevel that node is filtered by maxLevel and
scored as if its level were the floor, while a node with the same level and nothing triggered
is not, and a pod whose policy has none sees the level as reported.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from extender.config import ExtenderConfig, SourceConfig
from mco.labelselector import LabelSelector
from mco.policy import DEFAULT_POLICIES, WORKLOAD_CLASS_LABEL, Policy
from reporter.schema import DetectionState, ReportConfig
from testkit import bodies
from tests.extender.conftest import cluster_report, entry, write_reports

ONLINE = {WORKLOAD_CLASS_LABEL: "online"}
BATCH = {WORKLOAD_CLASS_LABEL: "batch"}
POLICIES = [
    Policy("online", LabelSelector(match_labels=ONLINE), max_level=0.3, triggered_level=0.5),
    Policy("batch", LabelSelector(match_labels=BATCH), triggered_level=0.5),
    Policy("default"),
]


def write(path: Path, policies: list[Policy], *, thrashing: bool = False) -> Path:
    quiet = entry(0.1)
    quiet.detections = {"io_congestion": DetectionState(0.1, False)}  # index, nothing past warn
    just_past_warn = entry(0.1)
    just_past_warn.detections = {
        "io_congestion": DetectionState(0.0, False),
        "memory_pressure": DetectionState(0.2, True),
    }
    nodes = {"a": just_past_warn, "b": quiet, "c": entry(0.6)}
    if thrashing:  # over a hard constraint (PSI memory full), and its level shows it
        nodes["d"] = entry(0.5, schedulable=False, reasons=["psi_memory_full"])
    report = cluster_report(nodes)
    report.status.config = ReportConfig("30s", 50.0, policies, 1)
    write_reports(path, [report])
    return path


@pytest.fixture
def report(tmp_path: Path) -> Path:
    return write(tmp_path / "report.json", POLICIES)


def config(path: Path) -> ExtenderConfig:
    return ExtenderConfig(source=SourceConfig(report_file=str(path), poll_interval=0.05))


async def post(client: Any, path: str, body: bytes) -> Any:
    response = await client.post(path, data=body)
    assert response.status == 200
    return json.loads(await response.read())


async def test_a_triggered_node_counts_as_the_floor(report: Path, serve: Any) -> None:
    client = await serve(config(report))
    names = ["a", "b", "c"]

    async def scores(labels: dict[str, str]) -> dict[str, int]:
        got = await post(client, "/scheduler/prioritize", bodies.kube_args(names, labels=labels))
        return {h["Host"]: h["Score"] for h in got}

    # batch: a is triggered at level 0.1 -> 0.5; b is not -> 0.1; c 0.6 stays above the floor.
    assert await scores(BATCH) == {"a": 5, "b": 9, "c": 4}
    assert await scores({}) == {"a": 9, "b": 9, "c": 4}  # no floor without the field

    filtered = await post(client, "/scheduler/filter", bodies.kube_args(names, labels=ONLINE))
    assert filtered["NodeNames"] == ["b"]
    why = (filtered["FailedAndUnresolvableNodes"] or {})["a"]  # the default reject code
    assert "interference level 0.5 (triggered: memory_pressure; triggeredLevel 0.5)" in why
    assert "above 0.3, the maxLevel of policy online" in why

    # Volcano's predicate judges the same way.
    task = bodies.task_info(bodies.pod("w", "team-a", labels=ONLINE))
    for name, passed in (("a", False), ("b", True)):
        body = bodies.go_json({"task": task, "node": bodies.node_info(name)})
        result = await post(client, "/volcano/predicate", body)
        assert (not result.get("status")) is passed, (name, result)

    pod = {"metadata": {"name": "x", "namespace": "shop", "labels": BATCH}}
    explained = await post(
        client, "/v1/explain", json.dumps({"pod": pod, "nodes": ["a", "b"]}).encode()
    )
    levels = {n["name"]: n["explanation"]["level"] for n in explained["nodes"]}
    assert levels["a"]["triggeredLevel"] == 0.5 and levels["a"]["used"] == 0.5
    assert levels["b"]["triggeredLevel"] is None and levels["b"]["used"] == 0.1


def test_shipped_policies_set_it_on_batch_only() -> None:
    """The placement benchmark at 20 nodes (docs/benchmarks.md, "placement"): batch pods kept
    off triggered nodes, with a larger reservation, and scored rather than filtered on nodes
    over a hard constraint, against the herding the filter caused."""
    shipped = {p.name: p for p in DEFAULT_POLICIES}
    batch = shipped["batch"]
    assert (batch.triggered_level, batch.reservation_per_pod) == (0.3, 0.2)
    assert batch.hard_constraints == "Ignore"
    assert all(p.triggered_level == 0 for name, p in shipped.items() if name != "batch")
    assert all(p.hard_constraints == "Enforce" for name, p in shipped.items() if name != "batch")


async def test_shipped_policies_keep_batch_off_a_just_triggered_node(
    tmp_path: Path, serve: Any
) -> None:
    report = write(tmp_path / "report.json", list(DEFAULT_POLICIES), thrashing=True)
    client = await serve(config(report))
    names = ["a", "b", "c", "d"]

    async def scores(cls: str) -> dict[str, int]:
        labels = {WORKLOAD_CLASS_LABEL: cls}
        got = await post(client, "/scheduler/prioritize", bodies.kube_args(names, labels=labels))
        return {h["Host"]: h["Score"] for h in got}

    # batch (weight 0.5): a, triggered at level 0.1, counts as 0.3 -> 60; b at 0.1 -> 70; d,
    # over a hard constraint, is scored by its level, not filtered.
    assert await scores("batch") == {"a": 6, "b": 7, "c": 5, "d": 5}
    batch = bodies.kube_args(names, labels={WORKLOAD_CLASS_LABEL: "batch"})
    assert (await post(client, "/scheduler/filter", batch))["NodeNames"] == names
    # Online pods see the level as reported (a triggered node below maxLevel stays theirs),
    # and the hard constraint still holds for them and for best-effort pods.
    online = bodies.kube_args(names, labels={WORKLOAD_CLASS_LABEL: "latency-sensitive"})
    assert (await post(client, "/scheduler/filter", online))["NodeNames"] == ["a", "b"]
    best_effort = bodies.kube_args(names, labels={WORKLOAD_CLASS_LABEL: "best-effort"})
    assert (await post(client, "/scheduler/filter", best_effort))["NodeNames"] == ["a", "b", "c"]
