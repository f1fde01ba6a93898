"""``avoidPolicies``: pods of one policy kept away from nodes running pods of another.

The residents store itself, the policy field's validation, and through the real HTTP app with
the pod watch against kmock: a batch pod scores a node lower for each latency-sensitive pod on
it, whatever its own scoreWeight, an online pod does not, deleted and finished pods stop
counting, a change of the policies in force reclassifies the pods known, and the count never
filters (maxLevel ignores it); on the Volcano path, from the tasks each NodeInfo lists.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from extender.app import RESIDENTS
from extender.config import ExtenderConfig, SourceConfig
from extender.residents import Residents
from mco.labelselector import LabelSelector
from mco.policy import DEFAULT_POLICIES, WORKLOAD_CLASS_LABEL, Policy, parse_policies, to_spec
from reporter.schema import ReportConfig
from testkit import bodies
from tests.extender.conftest import cluster_report, entry, wait_for, write_reports
from tests.extender.test_pod_watch import PODS, URL, pod, watch_config

ONLINE = {WORKLOAD_CLASS_LABEL: "online"}
BATCH = {WORKLOAD_CLASS_LABEL: "batch"}


def policies(
    per_pod: float, *, batch_max_level: float | None = None, weight: float = 1.0
) -> list[Policy]:
    return [
        Policy("online", LabelSelector(match_labels=ONLINE), reservation_per_pod=0.0),
        Policy(
            "batch",
            LabelSelector(match_labels=BATCH),
            max_level=batch_max_level,
            score_weight=weight,
            reservation_per_pod=0.0,
            avoid_policies=("online",),
            avoid_per_pod=per_pod,
        ),
        Policy("default", reservation_per_pod=0.0),
    ]


def write(path: Path, per_pod: float, generation: int, **kw: Any) -> None:
    report = cluster_report({"a": entry(0.2), "b": entry(0.2), "c": entry(0.2)})
    report.status.config = ReportConfig("30s", 50.0, policies(per_pod, **kw), generation)
    write_reports(path, [report])


# -- the store ------------------------------------------------------------------------------


def test_residents_count_by_policy_and_forget() -> None:
    r = Residents(lambda labels: labels.get("class", "default"), max_pods=3)
    r.put("p1", "a", {"class": "online"})
    r.put("p2", "a", {"class": "online"})
    r.put("p3", "b", {"class": "batch"})
    assert r.count("a", ["online"]) == 2 and r.count("b", ["online"]) == 0
    assert r.count("b", ["online", "batch"]) == 1 and r.count("zzz", ["online"]) == 0
    assert r.nodes_with(["online"]) == {"a"}
    r.put("p2", "c", {"class": "online"})  # the same pod seen elsewhere moves
    assert r.count("a", ["online"]) == 1 and r.count("c", ["online"]) == 1
    r.put("p4", "c", {"class": "online"})  # over the bound: the oldest (p1) goes
    assert len(r) == 3 and r.count("a", ["online"]) == 0
    r.remove("p4")
    r.remove("p4")  # twice is fine
    assert r.nodes_with(["online"]) == {"c"}


def test_reclassify_follows_a_new_classification() -> None:
    rule = {"online": "online"}
    r = Residents(lambda labels: rule.get(labels.get("class", ""), "default"))
    r.put("p1", "a", {"class": "online"})
    r.put("p2", "a", {"class": "web"})
    assert r.count("a", ["online"]) == 1
    rule["web"] = "online"
    r.reclassify()
    assert r.count("a", ["online"]) == 2 and len(r) == 2


# -- the policy field -----------------------------------------------------------------------


def test_avoid_policies_must_name_policies_of_the_list() -> None:
    raw = to_spec(policies(0.2))
    problems: list[str] = []
    assert parse_policies(raw, "spec.policies", problems) == tuple(policies(0.2))
    assert problems == []
    raw[1]["avoidPolicies"] = ["onlin"]
    raw[1]["avoidPerPod"] = 1.5
    assert parse_policies(raw, "spec.policies", problems) == ()
    assert problems == [
        "spec.policies[1].avoidPerPod: must be within [0, 1], got 1.5",
        "spec.policies[1].avoidPolicies: no policy is named 'onlin'",
    ]
    problems.clear()
    raw[1].update(avoidPolicies="online", avoidPerPod=0.1)
    assert parse_policies(raw, "spec.policies", problems) == ()
    assert problems == [
        "spec.policies[1].avoidPolicies: expected a list of at most 16 policy names"
    ]


def test_the_shipped_batch_policy_keeps_away_from_latency_sensitive_pods() -> None:
    batch = next(p for p in DEFAULT_POLICIES if p.name == "batch")
    assert batch.avoid_policies == ("latency-sensitive",) and batch.avoid_per_pod > 0
    best_effort = next(p for p in DEFAULT_POLICIES if p.name == "best-effort")
    assert best_effort.avoid_policies == ("latency-sensitive",)
    problems: list[str] = []
    assert parse_policies(to_spec(DEFAULT_POLICIES), "p", problems) == DEFAULT_POLICIES
    assert problems == []


# -- through the HTTP app, fed by the pod watch ---------------------------------------------


def labelled(name: str, node: str, labels: dict[str, str], **kw: Any) -> dict[str, Any]:
    p = pod(name, node, placed=time.time() - 600, **kw)  # long placed: no reservation
    p["metadata"]["labels"] = labels
    return p


async def scores(client: Any, labels: dict[str, str]) -> dict[str, int]:
    body = bodies.kube_args(["a", "b", "c"], labels=labels)
    raw = await (await client.post("/scheduler/prioritize", data=body)).read()
    return {h["Host"]: h["Score"] for h in json.loads(raw)}


async def test_batch_pods_score_nodes_with_online_pods_lower(
    kmock: Any, kubeconfig: Path, tmp_path: Path, serve: Any
) -> None:
    report = tmp_path / "report.json"
    write(report, 0.2, 1, weight=0.0)  # interference does not count for these batch pods ...
    for i, node in enumerate(["a", "a", "b"]):
        kmock.objects[PODS, "shop", f"web{i}"] = labelled(f"web{i}", node, ONLINE)
    kmock.objects[PODS, "shop", "job"] = labelled("job", "c", BATCH)
    client = await serve(watch_config(report, kubeconfig))
    residents = client.server.app[RESIDENTS]
    await wait_for(lambda: len(residents) == 4, what="the pod list")
    # ... so every node scores the neutral 50, and each online pod takes 20 off it:
    # a 10, b 30, c 50, on kube's 0-10.
    assert await scores(client, BATCH) == {"a": 1, "b": 3, "c": 5}
    assert await scores(client, ONLINE) == {"a": 8, "b": 8, "c": 8}  # online pods unaffected
    assert await scores(client, {}) == {"a": 8, "b": 8, "c": 8}

    # A deleted online pod, and a finished one, count no more.
    await kmock.delete(f"{URL}/web0")
    await wait_for(lambda: len(residents) == 3, what="the DELETED pod")
    await kmock.post(URL, json=labelled("web9", "c", ONLINE, phase="Succeeded"))
    await kmock.post(URL, json=labelled("web8", "c", ONLINE))
    await wait_for(lambda: residents.count("c", ["online"]) == 1, what="the ADDED pods")
    assert await scores(client, BATCH) == {"a": 3, "b": 3, "c": 3}

    # The explanation says why (the decisions ring keeps the message of each verdict).
    body = {"pod": {"metadata": {"name": "x", "namespace": "shop", "labels": BATCH}},
            "nodes": ["a"]}  # fmt: skip
    explained = json.loads(await (await client.post("/v1/explain", json=body)).read())
    assert "score - 20 for pods of online on the node (avoidPolicies)" in json.dumps(explained)
    assert explained["nodes"][0]["explanation"]["level"]["avoided"] == pytest.approx(0.2)


async def test_the_count_steers_but_never_filters_and_follows_the_config(
    kmock: Any, kubeconfig: Path, tmp_path: Path, serve: Any
) -> None:
    report = tmp_path / "report.json"
    write(report, 0.3, 1, batch_max_level=0.3)
    for i in range(3):
        kmock.objects[PODS, "shop", f"web{i}"] = labelled(f"web{i}", "a", ONLINE)
    client = await serve(watch_config(report, kubeconfig))
    residents = client.server.app[RESIDENTS]
    await wait_for(lambda: len(residents) == 3, what="the pod list")
    # 3 x 30 off a's score 80, which is not filtered (its level 0.2 is within maxLevel 0.3).
    raw = await (
        await client.post("/scheduler/filter", data=bodies.kube_args(["a", "b"], labels=BATCH))
    ).read()
    assert json.loads(raw)["NodeNames"] == ["a", "b"]
    assert await scores(client, BATCH) == {"a": 0, "b": 8, "c": 8}

    # A new config in force (avoidPerPod 0.1: 80 - 30) applies to the pods already known.
    write(report, 0.1, 2, batch_max_level=0.3)
    await eventually_scores(client, BATCH, {"a": 5, "b": 8, "c": 8})


async def eventually_scores(client: Any, labels: dict[str, str], want: dict[str, int]) -> None:
    deadline = time.monotonic() + 10
    while (got := await scores(client, labels)) != want:
        if time.monotonic() > deadline:
            pytest.fail(f"scores never became {want}: {got}")
        await asyncio.sleep(0.05)


# -- the Volcano path: each NodeInfo lists its node's tasks ----------------------------------


def volcano_node(name: str, online: int, uid_base: int = 0, status: int = 32) -> Any:
    """A NodeInfo with 30 other running tasks plus ``online`` latency-sensitive ones."""
    info = bodies.node_info(name, tasks=30)
    for i in range(online):
        p = bodies.pod(f"web-{name}-{i}", "shop", node_name=name, phase="Running", labels=ONLINE)
        p["metadata"]["uid"] = f"uid-{name}-{uid_base + i}"
        info["Tasks"][f"shop/web-{name}-{i}"] = bodies.task_info(p, status=status, node_name=name)
    return info


async def volcano_scores(client: Any, online: dict[str, int]) -> dict[str, float]:
    task = bodies.task_info(bodies.pod("job-0", "team-a", labels=BATCH))
    nodes = [volcano_node(n, k) for n, k in online.items()]
    body = bodies.go_json({"task": task, "nodes": nodes})
    raw = await (await client.post("/volcano/prioritize", data=body)).read()
    scores: dict[str, float] = json.loads(raw)["nodeScore"]
    return scores


async def test_volcano_node_infos_tell_the_pods_on_each_node(tmp_path: Path, serve: Any) -> None:
    report = tmp_path / "report.json"
    write(report, 0.2, 1, weight=0.0)  # neutral 50 for batch pods, 20 off per online pod
    client = await serve(
        ExtenderConfig(source=SourceConfig(report_file=str(report), poll_interval=0.05))
    )
    residents = client.server.app[RESIDENTS]
    assert await volcano_scores(client, {"a": 2, "b": 1, "c": 0}) == {
        "a": 10.0,
        "b": 30.0,
        "c": 50.0,
    }
    assert residents.count("a", ["online"]) == 2
    # The next NodeInfos no longer list a's online pods: they left the node.
    assert await volcano_scores(client, {"a": 0, "b": 1, "c": 0}) == {
        "a": 50.0,
        "b": 30.0,
        "c": 50.0,
    }
    # A predicate call's NodeInfo counts the same way.
    task = bodies.task_info(bodies.pod("job-1", "team-a", labels=BATCH))
    body = bodies.go_json({"task": task, "node": volcano_node("c", 3, uid_base=10, status=16)})
    result = json.loads(await (await client.post("/volcano/predicate", data=body)).read())
    assert not result.get("status") and residents.count("c", ["online"]) == 3
