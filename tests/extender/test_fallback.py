"""Filter with fallback (``extender.fallback``): a policy's limits never leave a pod pending
while nodes fit it.

Over one call (kube-scheduler's filter): where no node passes, the least interfered of those
rejected by a limit pass with reason ``least_interfered``, a hard-constraint violation ranking
after every other node, a Kata rejection never passing. On Volcano's path, one node a call: the
task's first round keeps its rejections, the next round passes the least interfered of the
nodes remembered; a pass in that round holds the fallback back. Through the real HTTP app,
/v1/explain and /v1/decisions tell the reason.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from extender.config import ExtenderConfig, SourceConfig, VerdictConfig
from extender.fallback import MARGIN, ROUND_GAP, Rounds, least_interfered, rank
from extender.judge import Judge
from extender.reports import ReportStore
from extender.verdict import NodeFacts, Reason, decide, pod_facts
from mco.labelselector import LabelSelector
from mco.policy import WORKLOAD_CLASS_LABEL, Policy
from reporter.schema import ReportConfig
from testkit import bodies
from tests.extender.conftest import cluster_report, entry, write_reports

T0 = 1_700_000_000.0
ONLINE = {WORKLOAD_CLASS_LABEL: "online"}
STRICT = Policy("online", LabelSelector(match_labels=ONLINE), max_level=0.3)


def judge_of(nodes: dict[str, Any]) -> Judge:
    store = ReportStore()
    store.replace_all([cluster_report(nodes, heartbeat=T0)])
    return Judge(store, VerdictConfig())


def test_where_none_passes_the_least_interfered_do_and_the_rest_stay_rejected() -> None:
    nodes = {
        "a": entry(0.5, now=T0),
        "b": entry(0.42, now=T0),  # within MARGIN of c
        "c": entry(0.4, now=T0),
        "d": entry(0.1, now=T0, schedulable=False),  # quiet, but over a hard constraint
    }
    judge = judge_of(nodes)
    pod = pod_facts(None, judge.config, STRICT)
    verdicts = judge.verdicts(list(nodes), pod, T0 + 1)
    assert [(v.passed, v.reason) for v in verdicts] == [
        (False, "max_level"),
        (True, "least_interfered"),
        (True, "least_interfered"),
        (False, "hard_constraint"),
    ]
    assert verdicts[2].level == pytest.approx(0.4) and verdicts[2].score == pytest.approx(60.0)
    assert "above 0.3, the maxLevel of policy online" in verdicts[2].message
    # Every node over a hard constraint: the least interfered of them pass.
    held = {n: entry(lv, now=T0, schedulable=False) for n, lv in (("x", 0.6), ("y", 0.2))}
    judge = judge_of(held)
    verdicts = judge.verdicts(["x", "y"], pod, T0 + 1)
    assert [(v.passed, v.reason) for v in verdicts] == [
        (False, "hard_constraint"),
        (True, "least_interfered"),
    ]
    # One node within the limits: the others' rejections stand.
    judge = judge_of({**nodes, "e": entry(0.2, now=T0)})
    verdicts = judge.verdicts([*nodes, "e"], pod, T0 + 1)
    assert [v.passed for v in verdicts] == [False, False, False, False, True]


def test_rejections_that_are_no_limit_never_pass() -> None:
    config = VerdictConfig()
    kata = pod_facts("kata-qemu", config, STRICT)
    verdicts = [
        decide(entry(0.1, now=T0, kata=False), T0, kata, NodeFacts("a"), config, T0 + 1),
        decide(entry(0.9, now=T0, kata=True), T0, kata, NodeFacts("b"), config, T0 + 1),
    ]
    assert [v.reason for v in verdicts] == [Reason.KATA_NOT_READY, Reason.MAX_LEVEL]
    out = least_interfered(verdicts, STRICT, config)
    assert [(v.passed, v.reason) for v in out] == [
        (False, "kata_not_ready"),
        (True, "least_interfered"),
    ]
    closed = VerdictConfig(fail_closed=True)
    missing = [decide(None, float("-inf"), pod_facts(None, closed, STRICT), NodeFacts("z"),
                      closed, T0)]  # fmt: skip
    assert least_interfered(missing, STRICT, closed) == missing  # fail-closed stays closed


def test_a_node_without_data_counts_at_the_neutral_level_plus_its_reservation() -> None:
    judge = judge_of({"a": entry(0.7, now=T0)})
    pod = pod_facts(None, judge.config, STRICT)
    verdicts = judge.verdicts(["a", "ghost"], pod, T0 + 1)
    # ghost has no data: rejected (no data is no proof) while a has data; then, nothing
    # passing, ghost at the neutral level 0.5 is less interfered than a at 0.7.
    assert [(v.passed, v.reason) for v in verdicts] == [
        (False, "max_level"),
        (True, "least_interfered"),
    ]
    assert rank(verdicts[1]) == pytest.approx(0.5)


def test_volcano_rounds_pass_the_least_interfered_from_the_next_round_on() -> None:
    config = VerdictConfig()
    pod = pod_facts(None, config, STRICT)
    nodes = {"a": entry(0.6, now=T0), "b": entry(0.45, now=T0), "c": entry(0.9, now=T0)}
    judge = judge_of(nodes)
    rounds = Rounds()

    def round_at(now: float, task: str = "ns/p") -> dict[str, str]:
        out = {}
        for name in nodes:
            verdict = judge.node(NodeFacts(name), pod, now)
            out[name] = rounds.predicate(task, name, verdict, STRICT, config, now).reason
        return out

    # The first round: nothing is known of the other nodes, every rejection stands.
    assert round_at(T0 + 1) == {"a": "max_level", "b": "max_level", "c": "max_level"}
    # The next session: the task is still pending, the least interfered passes.
    assert round_at(T0 + 1 + ROUND_GAP + 0.5) == {
        "a": "max_level",
        "b": "least_interfered",
        "c": "max_level",
    }
    # Another task starts its own rounds.
    assert set(round_at(T0 + 3, "ns/q").values()) == {"max_level"}
    assert len(rounds) == 2


def test_a_pass_in_the_round_holds_the_volcano_fallback_back() -> None:
    config = VerdictConfig()
    pod = pod_facts(None, config, STRICT)
    judge = judge_of({"a": entry(0.6, now=T0), "ok": entry(0.1, now=T0)})
    rounds = Rounds()
    for now in (T0 + 1, T0 + 2):
        first = rounds.predicate("ns/p", "ok", judge.node(NodeFacts("ok"), pod, now), STRICT,
                                 config, now)  # fmt: skip
        assert first.reason == "ok"
        late = rounds.predicate("ns/p", "a", judge.node(NodeFacts("a"), pod, now), STRICT,
                                config, now)  # fmt: skip
        assert late.reason == "max_level"


def test_rounds_are_bounded() -> None:
    config = VerdictConfig()
    rounds = Rounds(max_tasks=3)
    judge = judge_of({"a": entry(0.6, now=T0)})
    pod = pod_facts(None, config, STRICT)
    verdict = judge.node(NodeFacts("a"), pod, T0)
    for i in range(10):
        rounds.predicate(f"ns/p{i}", "a", verdict, STRICT, config, T0)
    assert len(rounds) == 3
    assert MARGIN > 0


async def test_through_the_app_filter_explain_decisions_and_volcano(
    tmp_path: Path, serve: Any
) -> None:
    report = tmp_path / "report.json"
    found = cluster_report({"a": entry(0.6), "b": entry(0.45)})
    found.status.config = ReportConfig("30s", 60.0, [STRICT, Policy("default")], 1)
    write_reports(report, [found])
    client = await serve(
        ExtenderConfig(source=SourceConfig(report_file=str(report), poll_interval=0.05))
    )
    args = bodies.kube_args(["a", "b"], labels=ONLINE)
    filtered = json.loads(await (await client.post("/scheduler/filter", data=args)).read())
    assert filtered["NodeNames"] == ["b"]
    assert "a" in {**filtered["FailedNodes"], **filtered["FailedAndUnresolvableNodes"]}
    pod = json.loads(args)["Pod"]
    answer = json.loads(
        await (await client.post("/v1/explain", json={"pod": pod, "nodes": ["a", "b"]})).read()
    )
    reasons = {n["name"]: (n["passed"], n["reason"]) for n in answer["nodes"]}
    assert reasons == {"a": (False, "max_level"), "b": (True, "least_interfered")}
    name = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
    ring = json.loads(await (await client.get(f"/v1/decisions?pod={name}")).read())
    assert "least_interfered" in json.dumps(ring)
    # Volcano: the same task predicated on each node, twice, a session apart.
    answers: list[dict[str, int]] = []
    for _ in range(2):
        codes = {}
        for node in ("a", "b"):
            body = bodies.volcano_predicate(node, tasks=2, labels=ONLINE)
            result = json.loads(await (await client.post("/volcano/predicate", data=body)).read())
            codes[node] = result.get("code", 0)
        answers.append(codes)
        await asyncio.sleep(ROUND_GAP + 0.1)
    assert answers[0]["a"] != 0 and answers[0]["b"] != 0  # the first round: both rejected
    assert answers[1] == {"a": answers[0]["a"], "b": 0}  # then b, the least interfered
