"""Learned workload profiles as a per-node term (``extender.profiles``): the harm predicted to a
pod from the residents' profiles floors the level (so it counts toward maxLevel), the harm it
is predicted to cause them comes off the score, each weighed by its confidence; without
history the labels and shipped policies decide. Through the Judge, and through the real HTTP
app with the pod watch against kmock: filter, prioritize, /v1/explain and ``kubectl mco why``."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest

from extender.app import RESIDENTS
from extender.config import VerdictConfig
from extender.judge import Judge
from extender.profiles import Profiles, confidence
from extender.reports import ReportStore
from extender.residents import Residents
from extender.verdict import PodFacts, Reason, pod_facts
from kubectl_mco.render import why_text
from mco.policy import DEFAULT_POLICIES, WORKLOAD_CLASS_LABEL
from reporter.schema import ResourceProfile, WorkloadProfile
from tests.extender.conftest import cluster_report, entry, wait_for, write_reports
from tests.extender.test_pod_watch import PODS, pod, watch_config

T0 = 1_800_000_000.0
ONLINE = DEFAULT_POLICIES[0]  # latency-sensitive: maxLevel 0.3
# The catch-all policy with its label segregation off (avoidFilter would reject a node with a
# latency-sensitive pod outright, avoidPerPod take 5 off it): this file judges the profile
# terms alone; tests/extender/test_segregation.py judges the segregation.
DEFAULT = msgspec.structs.replace(DEFAULT_POLICIES[-1], avoid_filter=False, avoid_per_pod=0.0)
ETL = "shop/Deployment/etl"
CACHE = "shop/StatefulSet/cache"


def profiles(etl_count: float = 90.0) -> list[WorkloadProfile]:
    return [
        WorkloadProfile(
            ETL, etl_count, "2027-01-15T08:00:00.000Z",
            {"llc": ResourceProfile(aggressor=0.8, aggressor_count=etl_count)},
        ),
        WorkloadProfile(
            CACHE, 10.0, "2027-01-15T08:00:00.000Z",
            {"memory": ResourceProfile(victim=0.5, victim_count=10.0)},
        ),
    ]  # fmt: skip


def judge_with(published: list[WorkloadProfile], weight: float = 0.5) -> Judge:
    store = ReportStore()
    report = cluster_report({n: entry(0.05, now=T0) for n in "abc"}, heartbeat=T0)
    report.status.profiles = published
    store.replace_all([report])
    judge = Judge(store, VerdictConfig())
    judge.residents = Residents(lambda labels: judge.policy_for(labels).name)
    judge.residents.put("etl-1", "a", {}, ETL)
    judge.residents.put("cache-0", "b", {}, CACHE)
    judge.profiles = Profiles(store, weight)
    return judge


def facts(policy: Any, workload: str = "") -> PodFacts:
    return pod_facts(None, VerdictConfig(), policy)._replace(workload=workload)


def test_an_online_pod_is_kept_off_the_node_of_a_learned_polluter() -> None:
    judge = judge_with(profiles())
    a, b, c = judge.verdicts(["a", "b", "c"], facts(ONLINE), T0 + 1)
    # An online pod without history is taken as fully sensitive (its policy has a maxLevel):
    # etl pollutes the cache at 0.8 with confidence 90/100, times the weight 0.5: 0.36 > 0.3.
    assert (a.passed, a.reason) == (False, Reason.MAX_LEVEL)
    assert "predicted from the residents' profiles: 0.36" in a.message
    assert (b.passed, b.score) == (True, 95.0) and (c.passed, c.score) == (True, 95.0)
    # Less evidence, less weight: 10 samples count half (0.5 x 0.8 x 0.5 = 0.2 <= 0.3), and
    # the prediction floors the measured 0.05 instead.
    a = judge_with(profiles(etl_count=10.0)).verdicts(["a"], facts(ONLINE), T0 + 1)[0]
    assert confidence(10.0) == 0.5
    assert (a.passed, a.reason, a.score) == (True, Reason.OK, 80.0)


def test_a_learned_polluter_scores_the_nodes_of_its_victims_lower() -> None:
    judge = judge_with(profiles())
    a, b, c = judge.verdicts(["a", "b", "c"], facts(DEFAULT, ETL), T0 + 1)
    # On b, cache suffered on memory (0.5, confidence 0.5; the default policy's default
    # sensitivity 0 for the rest): its llc sensitivity is taken as its learned memory one,
    # 0.25; etl's llc intensity 0.72; x weight 0.5 = 0.09, 9 off the score.
    assert b.score == pytest.approx(86.0)
    assert "harm predicted to the residents" in b.message
    assert a.score == c.score == 95.0  # its own pods do not suffer from it; c is empty
    # Next to a latency-sensitive pod, which counts as fully sensitive without history:
    assert judge.residents is not None
    judge.residents.put("web-0", "c", {WORKLOAD_CLASS_LABEL: "latency-sensitive"}, "shop/Pod/web")
    c = judge.verdicts(["c"], facts(DEFAULT, ETL), T0 + 1)[0]
    assert c.score == pytest.approx(95.0 - 100 * 0.5 * 0.72)


def test_without_history_the_labels_and_policies_decide() -> None:
    judge = judge_with(profiles())
    # A default-policy pod of no known workload: nothing predicted either way.
    verdicts = judge.verdicts(["a", "b", "c"], facts(DEFAULT, "shop/Deployment/new"), T0 + 1)
    assert [(v.passed, v.score) for v in verdicts] == [(True, 95.0)] * 3
    assert judge.terms("a", DEFAULT, T0 + 1, facts(DEFAULT)).predicted == 0.0
    # No profiles published: an online pod is judged by the level alone.
    plain = judge_with([]).verdicts(["a", "b", "c"], facts(ONLINE), T0 + 1)
    assert [(v.passed, v.score) for v in plain] == [(True, 95.0)] * 3
    # A departed polluter stops counting.
    assert judge.residents is not None
    judge.residents.remove("etl-1")
    assert judge.verdicts(["a"], facts(ONLINE), T0 + 1)[0].passed


def test_the_weight_is_bounded() -> None:
    with pytest.raises(ValueError, match="0-1"):
        Profiles(ReportStore(), 1.5)


# -- through the app ------------------------------------------------------------------------


def owned(name: str, node: str, kind: str, owner: str, labels: dict[str, str]) -> dict[str, Any]:
    p = pod(name, node, placed=time.time() - 600)
    p["metadata"]["labels"] = labels
    p["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": kind, "name": owner, "uid": "u", "controller": True}
    ]
    return p


def kube_args(names: list[str], labels: dict[str, str], owner: tuple[str, str] | None) -> bytes:
    meta: dict[str, Any] = {"name": "new-0", "namespace": "shop", "labels": labels}
    if owner is not None:
        meta["ownerReferences"] = [{"kind": owner[0], "name": owner[1], "controller": True}]
    return json.dumps({"Pod": {"metadata": meta, "spec": {}}, "NodeNames": names}).encode()


async def test_the_app_learns_residents_workloads_and_explains_the_terms(
    kmock: Any, kubeconfig: Path, tmp_path: Path, serve: Any
) -> None:
    report = cluster_report({n: entry(0.05) for n in "abc"}, heartbeat=time.time())
    report.status.profiles = profiles()
    path = tmp_path / "report.json"
    write_reports(path, [report])
    # etl's pods come from a ReplicaSet of its Deployment: the same key the reporter learned.
    kmock.objects[PODS, "shop", "etl-5d8f7b9c4-x2k8p"] = owned(
        "etl-5d8f7b9c4-x2k8p", "a", "ReplicaSet", "etl-5d8f7b9c4", {}
    )
    online = {WORKLOAD_CLASS_LABEL: "latency-sensitive"}
    # cache carries no class label: a latency-sensitive one would keep etl's pods off b by the
    # shipped segregation (avoidFilter) before any profile counted.
    kmock.objects[PODS, "shop", "cache-0"] = owned("cache-0", "b", "StatefulSet", "cache", {})
    client = await serve(watch_config(path, kubeconfig))
    residents = client.server.app[RESIDENTS]
    await wait_for(lambda: len(residents) == 2, what="the pod list")
    # A new etl pod scores b, where cache runs, lower: cache's memory sensitivity 0.5 at
    # confidence 0.5 blended with 0 (its policy, the catch-all, has no maxLevel) = 0.25, x etl's
    # llc 0.72 x 0.5 = 0.09 off 95: kube's 9 against 10.
    args = kube_args(["a", "b", "c"], {}, ("ReplicaSet", "etl-7c9f4d8b6"))
    raw = await (await client.post("/scheduler/prioritize", data=args)).read()
    assert {h["Host"]: h["Score"] for h in json.loads(raw)} == {"a": 10, "b": 9, "c": 10}
    args = kube_args(["a", "b"], online, None)
    answer = json.loads(await (await client.post("/scheduler/filter", data=args)).read())
    assert answer["NodeNames"] == ["b"]
    assert "predicted from the residents' profiles" in answer["FailedAndUnresolvableNodes"]["a"]
    body = {
        "pod": {"metadata": {"name": "web-0", "namespace": "shop", "labels": online}},
        "nodes": ["a", "b"],
    }
    explained = json.loads(await (await client.post("/v1/explain", json=body)).read())
    a, b = explained["nodes"]
    assert a["explanation"]["profile"]["predicted"] == pytest.approx(0.36)
    assert a["explanation"]["profile"]["parts"] == [
        {"workload": ETL, "pods": 1, "resource": "llc", "role": "aggressor", "value": 0.72,
         "product": 0.72}
    ]  # fmt: skip
    assert a["explanation"]["level"]["used"] == pytest.approx(0.36)
    assert b["explanation"]["profile"]["parts"] == []
    text = "\n".join(why_text(explained, None))
    assert f"{ETL} x1 pollutes llc 0.72" in text and "predicted 0.36" in text
