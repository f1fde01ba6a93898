"""Workload-class policies through the real HTTP app: each field of a policy changes a real
verdict on both schedulers' routes, the first matching policy applies, and the policies and
report settings in force follow the report's ``status.config`` (file mode here, the watch in
test_watch.py)."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from extender.app import STORE
from extender.config import UNSCHEDULABLE_AND_UNRESOLVABLE, VerdictConfig
from extender.policy import PolicySet
from extender.verdict import NodeFacts, NodeTerms, PodFacts, Reason, decide, weighted_score
from mco.labelselector import LabelSelector, Requirement
from mco.policy import DEFAULT_POLICIES, MAX_POLICIES, WORKLOAD_CLASS_LABEL, Policy
from reporter.schema import NodeEntry, NodeInterferenceReport, ReportConfig, Violation, encode
from testkit import bodies
from tests.extender.conftest import (
    cluster_report,
    entry,
    file_config,
    metric,
    wait_for,
    write_reports,
)

JSON = {"Content-Type": "application/json"}
ONLINE = {WORKLOAD_CLASS_LABEL: "latency-sensitive"}
POLICIES = [
    Policy("online", LabelSelector(match_labels=ONLINE), max_level=0.3),
    Policy(
        "scavenger",
        LabelSelector(match_expressions=[Requirement("tier", "In", ["scavenger", "spot"])]),
        hard_constraints="Ignore",
    ),
    Policy(
        "flat", LabelSelector(match_expressions=[Requirement("team", "Exists")]), score_weight=0
    ),
    Policy("steep", LabelSelector(match_labels={"steep": "yes"}), score_weight=2),
    Policy("default"),
]


def nodes() -> dict[str, NodeEntry]:
    return {
        "quiet": entry(0.1),
        "busy": entry(0.5),
        "blocked": entry(
            0.2, schedulable=False, violations=[Violation("psi_memory_full", 0.05, 0.0)]
        ),
    }


def report(
    config: ReportConfig | None, found: dict[str, NodeEntry] | None = None
) -> NodeInterferenceReport:
    obj = cluster_report(nodes() if found is None else found, heartbeat=time.time())
    obj.status.config = config
    return obj


def rewrite(path: Path, obj: NodeInterferenceReport, version: int) -> None:
    write_reports(path, [obj])
    os.utime(path, ns=(version, version * 10**9))  # a new mtime even within one clock tick


async def neutral_unknown(client) -> int:
    return (await kube_scores(client, {}, ["never-reported"]))["never-reported"]


@pytest.fixture
async def client(serve, tmp_path):
    path = tmp_path / "report.json"
    write_reports(path, [report(ReportConfig("30s", 50.0, POLICIES, 7))])
    return await serve(file_config(path))


async def kube_filter(client, labels: dict[str, str], names: list[str]) -> dict[str, Any]:
    raw = await client.post("/scheduler/filter", data=bodies.kube_args(names, labels=labels))
    assert raw.status == 200
    answer: dict[str, Any] = json.loads(await raw.read())
    return answer


async def kube_scores(client, labels: dict[str, str], names: list[str]) -> dict[str, int]:
    raw = await client.post("/scheduler/prioritize", data=bodies.kube_args(names, labels=labels))
    return {p["Host"]: p["Score"] for p in json.loads(await raw.read())}


async def volcano_scores(client, labels: dict[str, str], names: list[str]) -> dict[str, float]:
    body = bodies.volcano_prioritize(names, labels=labels)
    raw = await client.post("/volcano/prioritize", data=body, headers=JSON)
    scores: dict[str, float] = json.loads(await raw.read())["nodeScore"]
    return scores


async def predicate(client, labels: dict[str, str], node: str) -> dict[str, Any]:
    body = bodies.volcano_predicate(node, labels=labels)
    raw = await client.post("/volcano/predicate", data=body, headers=JSON)
    assert raw.status == 200
    answer: dict[str, Any] = json.loads(await raw.read())
    return answer


async def test_max_level_filters_only_the_pods_of_its_policy(client):
    names = ["quiet", "busy"]
    online = await kube_filter(client, ONLINE, names)
    assert online["NodeNames"] == ["quiet"]
    assert online["FailedAndUnresolvableNodes"] == {
        "busy": "mco: node busy interference level 0.5 is above 0.3, the maxLevel of policy online"
    }
    # The same names for a pod of another policy: another verdict table, another answer.
    assert (await kube_filter(client, {}, names))["NodeNames"] == names
    assert (await kube_filter(client, ONLINE, names))["NodeNames"] == ["quiet"]
    # Volcano reads the labels of the Pod inside the TaskInfo, on the 220 KB fast path too.
    assert await predicate(client, ONLINE, "quiet") == {"status": "", "code": 0}
    busy = await predicate(client, ONLINE, "busy")
    assert busy["code"] == UNSCHEDULABLE_AND_UNRESOLVABLE and "maxLevel" in busy["status"]
    assert await predicate(client, {"app": "web"}, "busy") == {"status": "", "code": 0}


async def test_hard_constraints_ignore_admits_a_violating_node(client):
    names = ["quiet", "blocked"]
    assert (await kube_filter(client, {}, names))["NodeNames"] == ["quiet"]
    scavenger = await kube_filter(client, {"tier": "spot"}, names)
    assert scavenger["NodeNames"] == names and scavenger["FailedAndUnresolvableNodes"] == {}
    assert await predicate(client, {"tier": "scavenger"}, "blocked") == {"status": "", "code": 0}
    assert (await predicate(client, {"tier": "other"}, "blocked"))["code"] == 3
    # Scored by its level like any other node.
    assert (await kube_scores(client, {"tier": "spot"}, names)) == {"quiet": 9, "blocked": 8}


async def test_score_weight_flattens_or_stretches_the_score(client):
    names = ["quiet", "busy", "never-reported"]
    assert await volcano_scores(client, {}, names) == {
        "quiet": 90.0,
        "busy": 50.0,
        "never-reported": 50.0,
    }
    # Weight 0: every node scores the neutral 50, data or not.
    assert await volcano_scores(client, {"team": "ads"}, names) == dict.fromkeys(names, 50.0)
    assert await kube_scores(client, {"team": "ads"}, names) == dict.fromkeys(names, 5)
    # Weight 2: twice as far from neutral, within 0-100.
    assert await volcano_scores(client, {"steep": "yes"}, names) == {
        "quiet": 100.0,
        "busy": 50.0,
        "never-reported": 50.0,
    }


async def test_the_first_matching_policy_applies(client):
    # Both "online" and "flat" match; "online" comes first, so busy is filtered.
    both = {**ONLINE, "team": "ads"}
    assert (await kube_filter(client, both, ["quiet", "busy"]))["NodeNames"] == ["quiet"]
    # A pod "online" does not match gets "flat": scores flattened, nothing filtered.
    assert await kube_scores(client, {"team": "ads"}, ["quiet", "busy"]) == {"quiet": 5, "busy": 5}


async def test_v1_nodes_shows_the_policies_and_each_policy_verdict(client):
    view = json.loads(await (await client.get("/v1/nodes")).read())
    assert view["configSource"] == "report" and view["configGeneration"] == 7
    assert [p["name"] for p in view["policies"]] == [p.name for p in POLICIES]
    busy = next(n for n in view["nodes"] if n["name"] == "busy")
    assert busy["verdict"]["passed"]  # a pod without labels: the default policy
    assert set(busy["policyVerdicts"]) == {p.name for p in POLICIES}
    assert busy["policyVerdicts"]["online"]["reason"] == Reason.MAX_LEVEL
    assert busy["policyVerdicts"]["flat"]["volcanoScore"] == 50.0


async def test_config_follows_the_report_file(serve, tmp_path):
    """Flags and the shipped policies until the report carries status.config; then the
    report's staleAfter, neutralScore and policies, each edit in force at the next load."""
    path = tmp_path / "report.json"
    found = {**nodes(), "aging": entry(0.1, age=10)}
    write_reports(path, [report(None, found)])
    client = await serve(file_config(path, neutral_score=40.0, stale_after=30.0))
    store = client.server.app[STORE]
    names = ["quiet", "busy", "aging", "never-reported"]
    # Flags: neutral 40; the shipped latency-sensitive policy (maxLevel 0.3) filters busy, and
    # never-reported too (neutral 40 is level 0.6: no data is no proof while quiet passes).
    assert (await kube_scores(client, {}, names))["never-reported"] == 4
    assert (await kube_filter(client, ONLINE, names))["NodeNames"] == ["quiet", "aging"]
    view = json.loads(await (await client.get("/v1/nodes")).read())
    assert view["configSource"] == "flags" and view["configGeneration"] is None
    assert [p["name"] for p in view["policies"]] == [p.name for p in DEFAULT_POLICIES]

    # The report now carries a config: neutral 80, staleAfter 5s, no policies at all.
    rewrite(path, report(ReportConfig("5s", 80.0, [], 3), found), 1)
    await wait_for(lambda: store.config is not None, what="the report's config")
    assert await neutral_unknown(client) == 8
    scores = await kube_scores(client, {}, names)
    assert scores == {"quiet": 9, "busy": 5, "aging": 8, "never-reported": 8}  # aging: stale
    assert (await kube_filter(client, ONLINE, names))["NodeNames"] == names  # no policies
    text = await (await client.get("/metrics")).text()
    assert metric(text, "mco_extender_report_nodes", state="stale") == 1.0

    # A config that does not make sense to this extender is ignored; a report without config
    # keeps the last one in force.
    rewrite(path, report(ReportConfig("banana", 10.0, [], 4), found), 2)
    await wait_for(lambda: store.config is not None and store.config.generation == 4)
    rewrite(path, report(None, {**found, "new": entry(0.3)}), 3)
    await wait_for(lambda: store.get("new") is not None, what="the report without config")
    assert await neutral_unknown(client) == 8
    view = json.loads(await (await client.get("/v1/nodes")).read())
    assert view["configSource"] == "report" and view["configGeneration"] == 3
    assert view["staleAfterSeconds"] == 5.0 and view["neutralScore"] == 80.0


def test_reservation_counts_toward_max_level_and_the_score():
    """``reserved`` (the extender's reservation, from each placed pod's reservationPerPod)
    adds to the measured level for maxLevel and for the score."""
    config = VerdictConfig()
    now = time.time()
    node = entry(0.25, now=now)
    online = PodFacts(None, False, DEFAULT_POLICIES[0])  # latency-sensitive: maxLevel 0.3
    assert decide(node, now, online, NodeFacts("n"), config, now).passed
    held = decide(node, now, online, NodeFacts("n"), config, now, NodeTerms(reserved=0.1))
    assert held.reason == Reason.MAX_LEVEL and not held.passed
    assert held.message == (
        "mco: node n interference level 0.25 + 0.1 reserved is above 0.3, "
        "the maxLevel of policy latency-sensitive"
    )
    plain = PodFacts(None, False, DEFAULT_POLICIES[-1])
    assert (
        decide(node, now, plain, NodeFacts("n"), config, now, NodeTerms(reserved=0.1)).score == 65.0
    )
    assert (
        decide(node, now, plain, NodeFacts("n"), config, now, NodeTerms(reserved=2.0)).score == 0.0
    )


@pytest.mark.parametrize(
    ("level", "weight", "neutral", "score"),
    [
        (0.1, 1.0, 50.0, 90.0),
        (0.1, 0.0, 50.0, 50.0),
        (0.9, 0.0, 30.0, 30.0),
        (0.1, 0.5, 50.0, 70.0),
        (0.4, 2.0, 50.0, 70.0),
        (0.1, 2.0, 50.0, 100.0),
        (0.9, 2.0, 50.0, 0.0),
    ],
)
def test_weighted_score(level: float, weight: float, neutral: float, score: float) -> None:
    assert weighted_score(level, weight, neutral) == pytest.approx(score)


def test_the_extender_refuses_policies_named_alike_or_too_many() -> None:
    """Issue 27 item 2, the extender's own entry points: a policy set (its verdict tables are
    keyed by policy name) and a report's config built in memory."""
    a1 = Policy("x", LabelSelector(match_labels={"app": "a1"}), max_level=0.9)
    a2 = Policy("x", LabelSelector(match_labels={"app": "a2"}), max_level=0.1)
    with pytest.raises(ValueError, match="unique"):
        PolicySet([a1, a2])
    with pytest.raises(ValueError, match="unique"):
        ReportConfig("30s", 50.0, [a1, a2])
    many = [Policy(f"p{i}") for i in range(MAX_POLICIES + 1)]
    with pytest.raises(ValueError, match=str(MAX_POLICIES)):
        PolicySet(many)
    with pytest.raises(ValueError, match=str(MAX_POLICIES)):
        ReportConfig("30s", 50.0, many)
    assert len(PolicySet(many[:MAX_POLICIES])) == MAX_POLICIES


async def test_a_report_with_policies_named_alike_changes_no_verdict(serve, tmp_path):
    """The issue's run: after a filter for an app=a1 pod, an app=a2 pod was rejected from a
    0.2 node while /v1/explain said it passes. Such a report is refused whole (logged); the
    config in force stays, and filter and explain agree."""
    path = tmp_path / "report.json"
    write_reports(path, [report(ReportConfig("30s", 50.0, POLICIES, 7), {"n": entry(0.2)})])
    client = await serve(file_config(path))
    store = client.server.app[STORE]
    await wait_for(lambda: store.config is not None, what="the first report")
    twins = [
        {"name": "x", "podSelector": {"matchLabels": {"app": "a1"}}, "maxLevel": 0.1},
        {"name": "x", "podSelector": {"matchLabels": {"app": "a2"}}, "maxLevel": 0.9},
    ]
    doc = json.loads(encode(report(ReportConfig("30s", 50.0, [], 8), {"n": entry(0.2)})))
    doc["status"]["config"]["policies"] = twins
    path.write_bytes(json.dumps(doc).encode())
    os.utime(path, ns=(1, 10**9))
    await asyncio.sleep(0.5)  # the file is polled every 50 ms: read and refused by now
    assert store.config is not None and store.config.generation == 7
    for app in ("a1", "a2"):
        filtered = await kube_filter(client, {"app": app}, ["n"])
        body = {"pod": {"metadata": {"labels": {"app": app}}}, "nodes": ["n"]}
        raw = await client.post("/v1/explain", data=json.dumps(body), headers=JSON)
        [explained] = json.loads(await raw.read())["nodes"]
        assert filtered["NodeNames"] == ["n"] and explained["passed"] is True
