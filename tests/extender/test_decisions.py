"""The decisions ring: what each scheduler route decided for a pod, through the real HTTP app
(``GET /v1/decisions``), the debug log, and the ring's bounds."""

from __future__ import annotations

import json
import logging
import time
import tracemalloc
from typing import Any

import pytest

from extender.app import DECISIONS
from extender.config import VerdictConfig
from extender.decisions import MERGE_SECONDS, Decisions, Note
from extender.verdict import PodFacts, Verdict, pod_facts
from reporter.schema import Violation
from testkit import bodies
from tests.extender.conftest import cluster_report, entry, file_config, wait_for, write_reports

JSON = {"Content-Type": "application/json"}
KUBE_POD = "shop/web-7d4b9c-x2x9q"  # bodies.kube_args
VOLCANO_POD = "team-a/train-42-worker-0"  # bodies.volcano_*


@pytest.fixture
async def client(serve, tmp_path):
    path = tmp_path / "report.json"
    nodes = {
        "quiet": entry(0.1),
        "busy": entry(0.6),
        "blocked": entry(
            0.2, schedulable=False, violations=[Violation("psi_memory_full", 0.05, 0.0)]
        ),
    }
    write_reports(path, [cluster_report(nodes, heartbeat=time.time())])
    return await serve(file_config(path))


async def decisions(client, pod: str) -> list[dict[str, Any]]:
    raw = await client.get("/v1/decisions", params={"pod": pod})
    assert raw.status == 200
    answer: dict[str, Any] = json.loads(await raw.read())
    assert answer["pod"] == pod
    found: list[dict[str, Any]] = answer["decisions"]
    return found


async def test_each_route_leaves_a_decision_for_the_pod(client, caplog):
    caplog.set_level(logging.DEBUG, logger="mco.extender.decisions")
    names = ["quiet", "busy", "blocked", "ghost"]
    assert (await client.post("/scheduler/filter", data=bodies.kube_args(names))).status == 200
    assert (await client.post("/scheduler/prioritize", data=bodies.kube_args(names))).status == 200
    await wait_for(lambda: "decision" in caplog.messages, what="the debug log")
    await wait_for(lambda: len(caplog.records) >= 2, what="two decisions logged")
    found = await decisions(client, KUBE_POD)
    assert [d["route"] for d in found] == ["scheduler_filter", "scheduler_prioritize"]
    filtered = found[0]
    assert (filtered["nodes"], filtered["passed"], filtered["policy"]) == (4, 3, "default")
    assert filtered["reasons"] == {"ok": 2, "hard_constraint": 1, "unknown": 1}
    listed = filtered["listed"]
    # The rejected node first, then the passing ones by score, best first.
    assert [(d["node"], d["passed"]) for d in listed] == [
        ("blocked", False), ("quiet", True), ("ghost", True), ("busy", True),
    ]  # fmt: skip
    assert listed[0]["reason"] == "hard_constraint"
    assert "psi_memory_full" in listed[0]["message"]
    assert [d["score"] for d in listed[1:]] == [90.0, 50.0, 40.0]
    record = next(r for r in caplog.records if r.message == "decision")
    assert record.levelno == logging.DEBUG
    assert record.pod == KUBE_POD
    assert record.rejected == {"blocked": "hard_constraint"}
    assert await decisions(client, "shop/someone-else") == []


async def test_volcano_predicates_of_one_pod_merge_into_one_decision(client):
    for name in ("quiet", "blocked", "busy"):
        body = bodies.volcano_predicate(name)
        assert (await client.post("/volcano/predicate", data=body, headers=JSON)).status == 200
    body = bodies.volcano_prioritize(["quiet", "busy"])
    assert (await client.post("/volcano/prioritize", data=body, headers=JSON)).status == 200
    await wait_for(lambda: True)  # the ring is filled after each answer, on the same loop

    found = await decisions(client, VOLCANO_POD)
    assert [d["route"] for d in found] == ["volcano_predicate", "volcano_prioritize"]
    predicate = found[0]
    assert (predicate["nodes"], predicate["passed"]) == (3, 2)
    assert {d["node"] for d in predicate["listed"]} == {"quiet", "blocked", "busy"}
    assert predicate["lastTime"] >= predicate["time"]
    assert found[1]["nodes"] == 2


@pytest.mark.parametrize("query", ["", "?pod=", "?pod=noslash", "?pod=/x", "?pod=a/", "?pod=a/b/c",
                                   "?pod=" + "n" * 300 + "/" + "m" * 300])  # fmt: skip
async def test_a_bad_pod_query_is_400(client, query):
    raw = await client.get("/v1/decisions" + query)
    assert raw.status == 400
    assert "namespace" in json.loads(await raw.read())["error"]


def _verdicts(n: int, passed: bool = True) -> list[Verdict]:
    reason = "ok" if passed else "hard_constraint"
    return [Verdict(passed, reason, "" if passed else "m" * 1000, float(i), 0, False)
            for i in range(n)]  # fmt: skip


POD: PodFacts = pod_facts(None, VerdictConfig())


def test_the_ring_is_bounded_in_pods_decisions_and_nodes():
    ring = Decisions(max_pods=3, max_per_pod=2, max_nodes=4)
    now = 1000.0
    for i in range(5):
        ring.record("scheduler_filter", [Note(f"ns/p{i}", POD, ["a"], _verdicts(1))], now)
    assert len(ring) == 3
    assert ring.of("ns/p0") == [] and ring.of("ns/p1") == []
    assert len(ring.of("ns/p4")) == 1
    for _ in range(5):
        ring.record("scheduler_filter", [Note("ns/p4", POD, ["a"], _verdicts(1))], now)
    assert len(ring.of("ns/p4")) == 2
    names = [f"n{i}" for i in range(100)]
    verdicts = _verdicts(90) + _verdicts(10, passed=False)
    ring.record("scheduler_prioritize", [Note("ns/p4", POD, names, verdicts)], now)
    [*_, last] = ring.of("ns/p4")
    assert (last.nodes, last.passed, last.reasons) == (100, 90, {"ok": 90, "hard_constraint": 10})
    assert [d.node for d in last.listed] == ["n90", "n91", "n92", "n93"]  # rejected first
    assert all(len(d.message) == 300 for d in last.listed)
    # A recently decided pod is kept when a new one pushes the oldest out.
    ring.record("scheduler_filter", [Note("ns/p9", POD, ["a"], _verdicts(1))], now)
    assert ring.of("ns/p4") and not ring.of("ns/p2")


def test_predicates_merge_within_the_window_and_rejections_displace_passes():
    ring = Decisions(max_nodes=2)
    at = 1000.0
    for i, passed in enumerate([True, True, False]):
        ring.record("volcano_predicate", [Note("ns/p", POD, [f"n{i}"], _verdicts(1, passed))], at)
    [merged] = ring.of("ns/p")
    assert merged.nodes == 3
    # The rejection took the place of the lowest passing score (equal scores: the earliest).
    assert sorted((d.node, d.passed) for d in merged.listed) == [("n1", True), ("n2", False)]
    later = at + MERGE_SECONDS + 1
    ring.record("volcano_predicate", [Note("ns/p", POD, ["n3"], _verdicts(1))], later)
    assert len(ring.of("ns/p")) == 2


async def test_explain_leaves_no_decision(client):
    body = {"pod": {"metadata": {"name": "x", "namespace": "y"}}, "nodes": ["quiet"]}
    raw = await client.post("/v1/explain", data=json.dumps(body), headers=JSON)
    assert raw.status == 200
    assert await decisions(client, "y/x") == []


def test_a_full_ring_of_the_longest_names_and_messages_stays_under_its_documented_bound():
    """docs/extender.md: ~48 MiB by the count bounds alone at the worst (253-character names,
    messages cut to 300), held under the 32 MiB byte bound by default."""
    for ring, pods in ((Decisions(max_bytes=1 << 30), 512), (Decisions(), None)):
        tracemalloc.start()
        try:
            for p in range(ring.max_pods + 10):
                for d in range(ring.max_per_pod + 1):
                    names = [f"{p}-{d}-{i}-".ljust(300, "x") for i in range(ring.max_nodes + 4)]
                    verdicts = _verdicts(len(names), passed=False)  # 1,000-character messages
                    note = Note(f"namespace-{p}/pod-{p}", POD, names, verdicts)
                    ring.record("scheduler_filter", [note], 1000.0 + d * 100)
            del names, verdicts, note
            held, _peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        if pods is not None:
            assert len(ring) == pods
            assert held < 52 * 2**20, held
        else:
            assert 300 < len(ring) < 512
            assert ring.bytes <= 32 << 20 and held < 34 * 2**20, (ring.bytes, held)
        assert 0.8 < held / ring.bytes < 1.2, (held, ring.bytes)


def _kube_pod(name: str, namespace: str, node_names: list[str]) -> bytes:
    pod = {"metadata": {"name": name, "namespace": namespace}, "spec": {}}
    return json.dumps({"Pod": pod, "Nodes": None, "NodeNames": node_names}).encode()


async def test_names_longer_than_kubernetes_allows_are_refused_or_cut(client):
    """Issue 27 item 1: 8 MiB pod names and 1 MiB node names were kept whole by the ring (RSS
    109 -> 331 MiB after 17 calls). Kubernetes never sends a pod name over 253 characters or
    a namespace over 63: 400. Node names are only listed in the ring, cut to 253."""
    for name, namespace in (("p" * (8 << 20), "ns"), ("p" * 254, "ns"), ("p", "n" * 64)):
        raw = await client.post("/scheduler/filter", data=_kube_pod(name, namespace, ["quiet"]))
        assert raw.status == 400, (len(name), len(namespace))
        assert "longer than" in json.loads(await raw.read())["error"]
    longest = ("p" * 253, "n" * 63)
    raw = await client.post("/scheduler/filter", data=_kube_pod(*longest, ["quiet"]))
    assert raw.status == 200
    huge = [f"{i}-".ljust(1 << 20, "x") for i in range(16)]
    raw = await client.post("/scheduler/filter", data=_kube_pod("p", "ns", huge))
    assert raw.status == 200
    await wait_for(lambda: bool(client.app[DECISIONS].of("ns/p")), what="the decision")
    [decision] = await decisions(client, "ns/p")
    assert decision["nodes"] == 16
    assert {len(d["node"]) for d in decision["listed"]} == {253}


def test_the_ring_accounts_its_bytes_and_keeps_under_its_bound():
    """The ring's accounted bytes stay under ``max_bytes`` after the issue's attack (many pods,
    16 node names of 1 MiB each per call), the least recently decided pods going first; the
    accounting is what tracemalloc measures, within 25 %."""
    bound = 1 << 20
    ring = Decisions(max_bytes=bound)
    tracemalloc.start()
    try:
        for p in range(200):
            names = [f"{p}-{i}-".ljust(1 << 20, "x") for i in range(16)]
            note = Note(f"namespace-{p}/pod-{p}", POD, names, _verdicts(16, passed=False))
            ring.record("scheduler_filter", [note], 1000.0 + p)
            del names, note
            assert ring.bytes <= bound, (p, ring.bytes)
        held, _peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert ring.bytes > bound * 0.9  # it is full, not empty
    assert 0 < len(ring) < 200 and ring.of("namespace-199/pod-199")
    assert ring.of("namespace-0/pod-0") == []
    assert held < ring.bytes * 1.25, (held, ring.bytes)
    assert held > ring.bytes * 0.75, (held, ring.bytes)


def test_the_byte_account_follows_merges_and_dropped_decisions():
    ring = Decisions(max_per_pod=2, max_nodes=4)
    for d in range(5):  # older decisions drop out of the pod's deque: their bytes too
        ring.record("scheduler_filter", [Note("ns/p", POD, ["a"] * 4, _verdicts(4))], 1000.0 + d)
    two = ring.bytes
    ring.record("scheduler_filter", [Note("ns/p", POD, ["a"] * 4, _verdicts(4))], 1010.0)
    assert ring.bytes == two
    for i in range(6):  # merged predicates grow the last decision up to max_nodes
        v = _verdicts(1, passed=False)
        ring.record("volcano_predicate", [Note("ns/p", POD, [f"node-{i}"], v)], 1020.0)
    assert ring.bytes > two
    assert ring.bytes == ring.recount()  # what a fresh count says
