"""The tier-label mode (``reporter.tiers``) against the Kubernetes-API stand-in (kmock with
resourceVersion semantics and injected faults, testkit/kapi.py), as the taint mode's tests: Nodes
are created through the API and every check reads them back from it."""

from __future__ import annotations

import json
from typing import Any

import kmock
import pytest
from kubernetes_asyncio import client

from mco.backoff import Backoff
from mco.promql import UNREACHABLE, PromQLClient, SourceConfig, SourceError
from reporter.cli import parse_settings
from reporter.engine import Reporter
from reporter.entries import EntryBuilder, Epsilon
from reporter.kubeapi import MERGE_PATCH, ReportApi, call
from reporter.kubesink import KubeSink
from reporter.layout import LayoutChooser
from reporter.metrics import ReporterMetrics
from reporter.nodeapi import NodeApi
from reporter.query import Kind, Plan
from reporter.ruleconfig import RuleConfigSource
from reporter.tiers import TIER_LABEL, NodeTierLabeller, TierRule
from reporter.tracker import Tracker
from rulegen.model import DetectionRuleConfig
from testkit.answers import T0, quiet_values, snapshot
from testkit.fakeprom import fake_prometheus
from testkit.kapi import VersionedKubernetes

PLAN = Plan(compact=False)
NODES = kmock.resource("", "v1", "nodes")
STALE_AFTER = 30.0
HOLD = 10.0
RULE = TierRule(medium_at=0.3, high_at=0.6, margin=0.1, hold=HOLD)
OTHER = {
    "kubernetes.io/hostname": "x",
    "topology.kubernetes.io/zone": "z1",
    "team.example.com/owner": "",
}


def node(level: float | None) -> dict[tuple[Kind, str], float]:
    v = quiet_values(PLAN)
    if level is None:
        del v[(Kind.LEVEL, "")]
        del v[(Kind.SCORE, "")]
    else:
        v[(Kind.LEVEL, "")] = level
        v[(Kind.SCORE, "")] = 100 * (1 - level)
    return v


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Rig:
    """A tracker and a labeller on the stand-in, driven cycle by cycle (1 s of a fake clock)."""

    def __init__(self, api_client: client.ApiClient, **kwargs: Any) -> None:
        self.tracker = Tracker(
            EntryBuilder(PLAN, DetectionRuleConfig.default(), Epsilon()),
            stale_after=STALE_AFTER,
            live_within=5,
        )
        self.clock = Clock()
        self.metrics = ReporterMetrics()
        self.api = NodeApi(api_client, timeout=2)
        kwargs.setdefault("rule", RULE)
        self.labeller = NodeTierLabeller(self.api, self.metrics, clock=self.clock, **kwargs)
        self.t = T0

    async def cycle(self, nodes: dict[str, dict[tuple[Kind, str], float]] | None) -> Any:
        """One cycle: ``nodes`` answered by the source, or None (the source is down)."""
        self.t += 1
        self.clock.now += 1
        if nodes is None:
            self.tracker.fail(SourceError(UNREACHABLE, "connection refused"), self.t)
        else:
            self.tracker.apply(snapshot(PLAN, nodes, self.t))
        return await self.labeller.sync(self.tracker.view(), STALE_AFTER, self.t)

    def metric(self, name: str, **labels: str) -> float:
        return self.metrics.registry.get_sample_value(name, labels) or 0.0


async def add_nodes(api_client: client.ApiClient, labels: dict[str, dict[str, str]]) -> None:
    v1 = client.CoreV1Api(api_client)
    for name, node_labels in labels.items():
        meta: dict[str, Any] = {"name": name}
        if node_labels:
            meta["labels"] = dict(node_labels)
        body = {"apiVersion": "v1", "kind": "Node", "metadata": meta}
        await call(v1.create_node, body, timeout=5)


def labels_of(kapi: VersionedKubernetes, name: str) -> dict[str, str]:
    obj = kapi.objects[NODES, None, name]
    labels: dict[str, str] = obj.raw.get("metadata", {}).get("labels") or {}
    return labels


def tier_of(kapi: VersionedKubernetes, name: str) -> str | None:
    return labels_of(kapi, name).get(TIER_LABEL)


def node_patches(kapi: VersionedKubernetes) -> list[Any]:
    return [r for r in kapi if r.resource == NODES and r.method.value == "PATCH"]


@pytest.fixture
def nodes_served(kapi: VersionedKubernetes) -> VersionedKubernetes:
    kapi.resources[NODES] = kmock.ResourceInfo(kind="Node", namespaced=False)
    return kapi


def test_the_rule_enters_at_once_and_leaves_below_the_margin_after_the_hold() -> None:
    r = RULE
    assert [r.tier_of(x) for x in (0.0, 0.29, 0.3, 0.59, 0.6, 1.0)] == [
        "low", "low", "medium", "medium", "high", "high",
    ]  # fmt: skip
    assert r.decide(0.1, None, None, 0) == ("low", None)  # no tier yet: the level's
    assert r.decide(0.65, "low", None, 0) == ("high", None)  # up at once, two tiers at a time
    assert r.decide(0.25, "medium", None, 0) == ("medium", None)  # inside the margin: stays
    assert r.decide(0.15, "medium", None, 0) == ("medium", 0)  # below it: the hold starts
    assert r.decide(0.15, "medium", 0, HOLD - 0.1) == ("medium", 0)
    assert r.decide(0.15, "medium", 0, HOLD) == ("low", 0)
    assert r.decide(0.45, "high", 0, HOLD) == ("medium", 0)  # one tier down: 0.45+0.1 is medium
    assert r.decide(0.05, "high", 0, HOLD) == ("low", 0)  # straight to low
    for bad in (
        {"medium_at": 0.6, "high_at": 0.3},
        {"medium_at": 0.0},
        {"high_at": 1.5},
        {"margin": 0.3},
        {"margin": -0.1},
        {"hold": -1},
    ):
        with pytest.raises(ValueError):
            TierRule(**bad)


async def test_the_label_follows_the_level_with_hysteresis_and_keeps_other_labels(
    nodes_served: VersionedKubernetes, api_client: client.ApiClient
) -> None:
    kapi = nodes_served
    await add_nodes(api_client, {"a": OTHER, "b": {}})
    rig = Rig(api_client)
    result = await rig.cycle({"a": node(0.1), "b": node(0.7)})
    assert list(result.changed.items()) == [("b", "high"), ("a", "low")]  # highest first
    assert labels_of(kapi, "a") == {**OTHER, TIER_LABEL: "low"}  # the others exactly as they were
    assert tier_of(kapi, "b") == "high"
    assert rig.metric("mco_reporter_tier_labelled_nodes", tier="low") == 1
    assert rig.metric("mco_reporter_tier_labelled_nodes", tier="high") == 1
    assert rig.metric("mco_reporter_tier_label_changes_total", tier="low") == 1
    # a's level crosses medium: up at once.
    assert (await rig.cycle({"a": node(0.35), "b": node(0.7)})).changed == {"a": "medium"}
    # Around the threshold, inside the margin (0.2-0.3): it stays medium however long.
    patches = len(node_patches(kapi))
    for i in range(3 * int(HOLD)):
        level = (0.31, 0.22, 0.29, 0.2)[i % 4]
        assert not (await rig.cycle({"a": node(level), "b": node(0.7)})).changed
    assert len(node_patches(kapi)) == patches and tier_of(kapi, "a") == "medium"
    # Below the margin: low only after the hold, and the hold starts over when it comes back.
    for _ in range(int(HOLD) - 2):
        assert not (await rig.cycle({"a": node(0.1), "b": node(0.7)})).changed
    await rig.cycle({"a": node(0.25), "b": node(0.7)})  # back inside the margin
    cycles = 0
    while tier_of(kapi, "a") == "medium":
        result = await rig.cycle({"a": node(0.1), "b": node(0.7)})
        cycles += 1
        assert cycles <= HOLD + 1
    assert cycles == HOLD + 1 and result.changed == {"a": "low"}  # the first sets the start
    assert labels_of(kapi, "a") == {**OTHER, TIER_LABEL: "low"}
    assert rig.metric("mco_reporter_tier_labelled_nodes", tier="medium") == 0


async def test_patches_name_only_our_label_and_replace_a_foreign_value(
    nodes_served: VersionedKubernetes, api_client: client.ApiClient
) -> None:
    kapi = nodes_served
    await add_nodes(api_client, {"a": {**OTHER, TIER_LABEL: "bogus"}, "b": {TIER_LABEL: "high"}})
    rig = Rig(api_client)
    result = await rig.cycle({"a": node(0.1), "b": node(0.9)})
    assert result.changed == {"a": "low"}  # b already carries its tier: untouched
    assert labels_of(kapi, "a") == {**OTHER, TIER_LABEL: "low"}
    (patch,) = node_patches(kapi)
    body = json.loads(patch.body)
    assert body["metadata"]["labels"] == {TIER_LABEL: "low"}
    assert set(body) == {"metadata"} and set(body["metadata"]) == {"labels", "resourceVersion"}
    assert patch.headers["Content-Type"].startswith(MERGE_PATCH)


async def test_a_conflict_is_retried_on_a_fresh_read_and_retries_spend_tokens(
    nodes_served: VersionedKubernetes, api_client: client.ApiClient
) -> None:
    kapi = nodes_served
    await add_nodes(api_client, {"a": {}})
    rig = Rig(api_client)
    await rig.cycle({"a": node(0.1)})  # listed, labelled low: rv known
    v1 = client.CoreV1Api(api_client)
    body = {"metadata": {"labels": {"someone": "else"}}}
    await call(v1.patch_node, "a", body, timeout=5, _content_type=MERGE_PATCH)  # our rv is old
    result = await rig.cycle({"a": node(0.7)})
    assert result.changed == {"a": "high"} and not result.errors
    assert labels_of(kapi, "a") == {"someone": "else", TIER_LABEL: "high"}  # theirs kept
    gets = [r for r in kapi if r.resource == NODES and r.method.value == "GET" and r.name == "a"]
    assert gets, "the conflict is followed by a fresh read"
    # The retry spends tokens: with one token a second, the refused patch uses this second's,
    # the read and the second patch wait for the next cycles (pending, not lost).
    tight = Rig(api_client, qps=1.0, burst=1, resync=0)
    await tight.cycle({"a": node(0.7)})  # list (free), already high: nothing to do
    await call(v1.patch_node, "a", body, timeout=5, _content_type=MERGE_PATCH)
    for _ in range(2):  # below high's margin: the hold starts, the label stays
        assert not (await tight.cycle({"a": node(0.05)})).changed
    tight.clock.now += HOLD
    await call(v1.patch_node, "a", body, timeout=5, _content_type=MERGE_PATCH)
    before = len(node_patches(kapi))
    result = await tight.cycle({"a": node(0.05)})
    assert result.pending == 1 and not result.changed  # 409 spent the token; the read waits
    assert len(node_patches(kapi)) == before + 1
    result = await tight.cycle({"a": node(0.05)})  # the fresh read; the patch waits again
    assert result.pending == 1 and not result.changed
    result = await tight.cycle({"a": node(0.05)})
    assert result.changed == {"a": "low"} and tier_of(kapi, "a") == "low"
    assert labels_of(kapi, "a")["someone"] == "else"


async def test_conflicts_that_never_settle_fail_that_node_only(
    nodes_served: VersionedKubernetes, api_client: client.ApiClient
) -> None:
    kapi = nodes_served
    await add_nodes(api_client, {"a": {}, "b": {}, "c": {}})
    rig = Rig(api_client, burst=50)
    kapi.fail("update", 409, times=4, name="b")
    kapi.fail("update", 422, times=1, name="a")
    result = await rig.cycle({n: node(0.4) for n in "abc"})
    assert result.changed == {"c": "medium"}
    assert sorted(result.errors) == ["conflict", "invalid"]
    assert rig.metric("mco_reporter_tier_label_errors_total", kind="conflict") == 1
    result = await rig.cycle({n: node(0.4) for n in "abc"})
    assert result.changed == {"a": "medium", "b": "medium"}


async def test_stale_data_no_level_and_a_node_gone_remove_the_label(
    nodes_served: VersionedKubernetes, api_client: client.ApiClient
) -> None:
    """No data, no preference (fail-open): the label goes, every other stays."""
    kapi = nodes_served
    await add_nodes(api_client, {"a": OTHER, "b": {}, "c": {}})
    rig = Rig(api_client)
    await rig.cycle({"a": node(0.7), "b": node(0.1), "c": node(0.4)})
    assert [tier_of(kapi, n) for n in "abc"] == ["high", "low", "medium"]
    # b's detections lose their data (no level): its label goes at once.
    result = await rig.cycle({"a": node(0.7), "b": node(None), "c": node(0.4)})
    assert result.changed == {"b": None} and tier_of(kapi, "b") is None
    # The source goes down: within staleAfter the labels hold; past it, they go.
    kept = 0
    while tier_of(kapi, "a") is not None:
        result = await rig.cycle(None)
        kept += 1
        assert kept <= STALE_AFTER + 2
    assert STALE_AFTER - 1 <= kept <= STALE_AFTER + 1
    assert result.changed == {"a": None, "c": None}
    assert labels_of(kapi, "a") == OTHER
    assert rig.metric("mco_reporter_tier_label_changes_total", tier="none") == 3
    # A Node deleted from the cluster: its patch answers 404, no error.
    await rig.cycle({"a": node(0.1), "c": node(0.1)})
    await client.CoreV1Api(api_client).delete_node("c")
    result = await rig.cycle({"a": node(0.7), "c": node(0.7)})
    assert result.changed == {"a": "high"} and not result.errors


async def test_a_stale_entry_never_adds_a_label_and_a_node_leaving_the_report_loses_it(
    nodes_served: VersionedKubernetes, api_client: client.ApiClient
) -> None:
    kapi = nodes_served
    await add_nodes(api_client, {"a": {}, "b": {}})
    rig = Rig(api_client)
    await rig.cycle({"a": node(0.5)})
    old = rig.t + 1 - STALE_AFTER - 5
    rig.t += 1
    rig.clock.now += 1
    rig.tracker.apply(snapshot(PLAN, {"a": node(0.5), "b": node(0.9)}, rig.t, times={"b": old}))
    result = await rig.labeller.sync(rig.tracker.view(), STALE_AFTER, rig.t)
    assert not result.changed and tier_of(kapi, "b") is None
    removed: dict[str, Any] = {}
    for _ in range(int(STALE_AFTER) + 2):  # a's exporter stops: its entry ages out
        removed |= (await rig.cycle({})).changed
    assert removed == {"a": None} and tier_of(kapi, "a") is None


async def test_the_rate_limit_spreads_a_fleet_wide_change_moves_up_first(
    nodes_served: VersionedKubernetes, api_client: client.ApiClient
) -> None:
    kapi = nodes_served
    names = [f"n{i:02}" for i in range(12)]
    await add_nodes(api_client, {n: {} for n in names})
    rig = Rig(api_client, qps=2.0, burst=4)
    quiet = {n: node(0.1) for n in names}
    result = await rig.cycle(quiet)
    assert len(result.changed) == 4 and result.pending == 8
    assert rig.metric("mco_reporter_tier_label_pending_nodes") == 8
    # Two nodes turn noisy while eight still wait for their first label: they go first.
    hot = dict(quiet, n10=node(0.8), n11=node(0.8))
    result = await rig.cycle(hot)
    assert result.changed == {"n10": "high", "n11": "high"} and result.pending == 6
    for _ in range(3):
        await rig.cycle(hot)
    assert rig.labeller.labels == {n: "high" if n in ("n10", "n11") else "low" for n in names}
    assert len(node_patches(kapi)) == 12  # every change once, never a storm


async def test_an_unreachable_api_stops_the_round_and_backs_off(
    nodes_served: VersionedKubernetes, api_client: client.ApiClient
) -> None:
    kapi = nodes_served
    await add_nodes(api_client, {"a": {}, "b": {}})
    rig = Rig(api_client, backoff=Backoff(5.0, 30.0, jitter=0))
    kapi.fail("update", 429, times=1)
    result = await rig.cycle({"a": node(0.5), "b": node(0.5)})
    assert result.errors == ["throttled"] and result.pending == 1 and not result.changed
    for _ in range(4):
        assert (await rig.cycle({"a": node(0.5), "b": node(0.5)})).skipped
    result = await rig.cycle({"a": node(0.5), "b": node(0.5)})
    assert result.changed == {"a": "medium", "b": "medium"}


async def test_only_the_leader_labels_and_a_new_term_starts_from_the_labels(
    nodes_served: VersionedKubernetes, api_client: client.ApiClient
) -> None:
    kapi = nodes_served
    await add_nodes(api_client, {"a": {TIER_LABEL: "high"}})
    leading = False
    rig = Rig(api_client, may_write=lambda: leading)
    assert (await rig.cycle({"a": node(0.45)})).skipped
    assert not [r for r in kapi if r.resource == NODES and r.method.value != "POST"]
    leading = True
    # The last leader's label is where the hysteresis starts: 0.45 is below high's threshold
    # minus the margin, yet high holds for the hold time (no drop to medium at the takeover).
    assert not (await rig.cycle({"a": node(0.45)})).changed
    assert rig.metric("mco_reporter_tier_labelled_nodes", tier="high") == 1
    rig.labeller.forget()
    assert rig.metric("mco_reporter_tier_labelled_nodes", tier="high") == 0


async def test_a_whole_reporter_flag_on_labels_flag_off_touches_no_node(
    nodes_served: VersionedKubernetes, api_client: client.ApiClient
) -> None:
    kapi = nodes_served
    await add_nodes(api_client, {"a": OTHER})
    m = ReporterMetrics()
    async with fake_prometheus() as prom, PromQLClient(SourceConfig(prom.url)) as source:
        prom.nodes = {"a": node(0.7)}

        def reporter(labeller: NodeTierLabeller | None) -> Reporter:
            return Reporter(
                source=source,
                rules=RuleConfigSource(),
                plan=PLAN,
                epsilon=Epsilon(),
                metrics=m,
                sink=KubeSink(ReportApi(api_client), LayoutChooser("cluster", 1 << 20)),
                labeller=labeller,
            )

        off = reporter(None)
        for _ in range(2):
            outcome = await off.cycle()
            assert outcome.ok and outcome.tiers is None
        assert [r.method.value for r in kapi if r.resource == NODES] == ["POST"]  # ours only
        on = reporter(NodeTierLabeller(NodeApi(api_client), m))
        outcome = await on.cycle()
        assert outcome.tiers is not None and outcome.tiers.changed == {"a": "high"}
    assert labels_of(kapi, "a") == {**OTHER, TIER_LABEL: "high"}


def test_flags() -> None:
    base = ["--prometheus-url", "http://p:9090"]
    assert parse_settings(base).tiers is None
    s = parse_settings([*base, "--tier-label-nodes", "--tier-hold", "5m", "--tier-qps", "2"])
    assert s.tiers is not None and s.tiers.rule.hold == 300 and s.tiers.qps == 2
    for bad in (
        ["--output", "-"],
        ["--tier-medium-at", "0.7"],
        ["--tier-margin", "0.5"],
        ["--tier-burst", "0"],
        ["--tier-resync", "-1s"],
    ):
        with pytest.raises(SystemExit) as exc:
            parse_settings([*base, "--tier-label-nodes", *bad])
        assert exc.value.code == 2
