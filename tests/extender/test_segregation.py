"""Dynamic segregation: ``avoidFilter`` and ``gatherPerPod`` (``mco.policy``).

A batch pod whose policy filters its ``avoidPolicies`` is rejected (reason ``avoided``) from
nodes running latency-sensitive pods while nodes without one remain, and where none remains the
fewest-online, least interfered pass (never pending); a latency-sensitive pod scores nodes up
for each pod of its own policy there. The residents come from the store the pod watch and
Volcano's NodeInfos feed; the policy fields validate as the CRD does.
"""

from __future__ import annotations

import pytest

from extender.config import VerdictConfig
from extender.judge import Judge
from extender.reports import ReportStore
from extender.residents import Residents
from extender.verdict import pod_facts
from mco.labelselector import LabelSelector
from mco.policy import WORKLOAD_CLASS_LABEL, Policy, parse_policies, to_spec
from tests.extender.conftest import cluster_report, entry

T0 = 1_700_000_000.0
ONLINE = {WORKLOAD_CLASS_LABEL: "online"}
BATCH = {WORKLOAD_CLASS_LABEL: "batch"}
POLICIES = (
    Policy("online", LabelSelector(match_labels=ONLINE), reservation_per_pod=0.0,
           gather_per_pod=0.1),
    Policy("batch", LabelSelector(match_labels=BATCH), reservation_per_pod=0.0,
           avoid_policies=("online",), avoid_per_pod=0.05, avoid_filter=True),
    Policy("default", reservation_per_pod=0.0),
)  # fmt: skip


def judge_of(levels: dict[str, float], online: dict[str, int]) -> Judge:
    store = ReportStore()
    store.replace_all([cluster_report({n: entry(lv, now=T0) for n, lv in levels.items()})])
    by_name = {p.name: p for p in POLICIES}

    def classify(labels: dict[str, str]) -> str:
        return "online" if labels == ONLINE else ("batch" if labels == BATCH else "default")

    residents = Residents(classify)  # type: ignore[arg-type]
    for node, count in online.items():
        for i in range(count):
            residents.put(f"{node}-{i}", node, ONLINE)
    judge = Judge(store, VerdictConfig(), residents=residents)
    judge.live = type(judge.live)(judge.live.verdict, type(judge.live.policies)(POLICIES))
    assert by_name["batch"].avoid_filter
    return judge


def test_batch_is_filtered_off_nodes_with_online_pods_while_others_remain() -> None:
    judge = judge_of({"a": 0.1, "b": 0.6, "c": 0.2}, {"a": 2, "c": 1})
    batch = pod_facts(None, judge.config, POLICIES[1])
    verdicts = judge.verdicts(["a", "b", "c"], batch, T0 + 1)
    assert [(v.passed, v.reason) for v in verdicts] == [
        (False, "avoided"),
        (True, "ok"),  # the busier node, but no online pod there
        (False, "avoided"),
    ]
    assert "2 pod(s) of online run on the node" in verdicts[0].message


def test_where_every_node_holds_online_pods_batch_still_places_on_the_fewest() -> None:
    judge = judge_of({"a": 0.1, "c": 0.2, "d": 0.1}, {"a": 3, "c": 1, "d": 2})
    batch = pod_facts(None, judge.config, POLICIES[1])
    verdicts = judge.verdicts(["a", "c", "d"], batch, T0 + 1)
    # Ranks: level + 0.05 per online pod: a 0.25, c 0.25, d 0.2 -> d, and a and c within 0.05.
    assert [(v.passed, v.reason) for v in verdicts] == [
        (True, "least_interfered"),
        (True, "least_interfered"),
        (True, "least_interfered"),
    ]
    judge = judge_of({"a": 0.1, "c": 0.5}, {"a": 3, "c": 1})
    verdicts = judge.verdicts(["a", "c"], batch, T0 + 1)
    assert [(v.passed, v.reason) for v in verdicts] == [
        (True, "least_interfered"),  # 0.25 against 0.55
        (False, "avoided"),
    ]


def test_online_pods_gather_where_online_pods_run() -> None:
    judge = judge_of({"a": 0.2, "b": 0.2, "c": 0.2}, {"a": 2, "b": 0, "c": 12})
    online = pod_facts(None, judge.config, POLICIES[0])
    scores = [v.score for v in judge.verdicts(["a", "b", "c"], online, T0 + 1)]
    assert scores == [pytest.approx(100.0), pytest.approx(80.0), pytest.approx(100.0)]
    judge = judge_of({"a": 0.5, "b": 0.2}, {"a": 1})
    scores = [v.score for v in judge.verdicts(["a", "b"], online, T0 + 1)]
    assert scores == [pytest.approx(60.0), pytest.approx(80.0)]  # 50 + 10, capped at 100
    # Another policy's pods are not gathered with.
    plain = pod_facts(None, judge.config, POLICIES[2])
    assert [v.score for v in judge.verdicts(["a", "b"], plain, T0 + 1)] == [50.0, 80.0]


def test_the_fields_validate_and_round_trip() -> None:
    problems: list[str] = []
    raw = to_spec(POLICIES)
    assert raw[1]["avoidFilter"] is True and raw[0]["gatherPerPod"] == 0.1
    assert parse_policies(raw, "spec.policies", problems) == POLICIES and not problems
    bad = [{"name": "x", "avoidFilter": "yes", "gatherPerPod": 2}]
    assert parse_policies(bad, "spec.policies", problems) == ()
    assert problems == [
        "spec.policies[0].gatherPerPod: must be within [0, 1], got 2",
        "spec.policies[0].avoidFilter: expected true or false, got 'yes'",
    ]
