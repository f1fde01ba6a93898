"""The taint mode (``reporter.taints``) against the Kubernetes-API stand-in (kmock with
resourceVersion semantics and injected faults, testkit/kapi.py): Nodes are created through the
API and every check reads them back from it."""

from __future__ import annotations

from typing import Any

import kmock
import pytest
from kubernetes_asyncio import client

from mco.backoff import Backoff
from mco.promql import UNREACHABLE, PromQLClient, SourceConfig, SourceError
from reporter.engine import Reporter
from reporter.entries import EntryBuilder, Epsilon
from reporter.kubeapi import MERGE_PATCH, ReportApi, call
from reporter.kubesink import KubeSink
from reporter.layout import LayoutChooser
from reporter.metrics import ReporterMetrics
from reporter.nodeapi import NodeApi
from reporter.nodewriter import TokenBucket
from reporter.query import Kind, Plan
from reporter.ruleconfig import RuleConfigSource
from reporter.taints import TAINT, NodeTainter
from reporter.tracker import Tracker
from rulegen.model import DetectionRuleConfig
from testkit.answers import T0, quiet_values, snapshot
from testkit.fakeprom import fake_prometheus
from testkit.kapi import VersionedKubernetes

PLAN = Plan(compact=False)
NODES = kmock.resource("", "v1", "nodes")
STALE_AFTER = 30.0
OTHER = [
    {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
    {
        "key": "dedicated",
        "value": "gpu",
        "effect": "NoExecute",
        "timeAdded": "2026-01-01T00:00:00Z",
    },
]


def node(violated: bool) -> dict[tuple[Kind, str], float]:
    v = quiet_values(PLAN)
    v[(Kind.VIOLATED, "psi_memory_full")] = 1.0 if violated else 0.0
    return v


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Rig:
    """A tracker and a tainter on the stand-in, driven cycle by cycle (1 s of a fake clock)."""

    def __init__(self, api_client: client.ApiClient, **kwargs: Any) -> None:
        self.tracker = Tracker(
            EntryBuilder(PLAN, DetectionRuleConfig.default(), Epsilon()),
            stale_after=STALE_AFTER,
            live_within=5,
        )
        self.clock = Clock()
        self.metrics = ReporterMetrics()
        self.api = NodeApi(api_client, timeout=2)
        kwargs.setdefault("max_share", 1.0)  # the share cap has tests of its own
        self.tainter = NodeTainter(self.api, self.metrics, clock=self.clock, **kwargs)
        self.t = T0

    async def cycle(self, nodes: dict[str, dict[tuple[Kind, str], float]] | None) -> Any:
        """One cycle: ``nodes`` answered by the source, or None (the source is down)."""
        self.t += 1
        self.clock.now += 1
        if nodes is None:
            self.tracker.fail(_down(), self.t)
        else:
            self.tracker.apply(snapshot(PLAN, nodes, self.t))
        return await self.tainter.sync(self.tracker.view(), STALE_AFTER, self.t)

    def metric(self, name: str, **labels: str) -> float:
        return self.metrics.registry.get_sample_value(name, labels) or 0.0


def _down() -> SourceError:
    return SourceError(UNREACHABLE, "connection refused")


async def add_nodes(api_client: client.ApiClient, taints: dict[str, list[dict[str, Any]]]) -> None:
    v1 = client.CoreV1Api(api_client)
    for name, node_taints in taints.items():
        body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}
        if node_taints:
            body["spec"] = {"taints": node_taints}
        await call(v1.create_node, body, timeout=5)


def taints_of(kapi: VersionedKubernetes, name: str) -> list[dict[str, Any]]:
    obj = kapi.objects[NODES, None, name]
    taints: list[dict[str, Any]] = obj.raw.get("spec", {}).get("taints") or []
    return taints


def node_patches(kapi: VersionedKubernetes) -> list[Any]:
    return [r for r in kapi if r.resource == NODES and r.method.value == "PATCH"]


@pytest.fixture
def nodes_served(kapi: VersionedKubernetes) -> VersionedKubernetes:
    kapi.resources[NODES] = kmock.ResourceInfo(kind="Node", namespaced=False)
    return kapi


async def test_taint_follows_the_held_flag_and_keeps_other_taints(
    nodes_served: VersionedKubernetes, api_client: client.ApiClient
) -> None:
    kapi = nodes_served
    await add_nodes(api_client, {"a": OTHER, "b": []})
    rig = Rig(api_client)
    result = await rig.cycle({"a": node(False), "b": node(False)})
    assert not result.added and not node_patches(kapi)  # nothing held: nothing written
    # The held flag (the rules' holdFor already passed in Prometheus) sets: the taint comes.
    result = await rig.cycle({"a": node(True), "b": node(False)})
    assert result.added == ["a"]
    assert taints_of(kapi, "a") == [*OTHER, TAINT]  # the others exactly as they were
    assert taints_of(kapi, "b") == []
    assert rig.metric("mco_reporter_taints_added_total") == 1
    assert rig.metric("mco_reporter_tainted_nodes") == 1
    patches = len(node_patches(kapi))
    for _ in range(5):  # held: nothing more to write
        assert not (await rig.cycle({"a": node(True), "b": node(False)})).added
    assert len(node_patches(kapi)) == patches
    # Cleared (after clearAfter, in the rules): the taint goes, the others stay.
    result = await rig.cycle({"a": node(False), "b": node(False)})
    assert result.removed == ["a"]
    assert taints_of(kapi, "a") == OTHER
    assert rig.metric("mco_reporter_taints_removed_total") == 1
    assert rig.metric("mco_reporter_tainted_nodes") == 0


async def test_a_conflict_is_retried_on_a_fresh_read(
    nodes_served: VersionedKubernetes, api_client: client.ApiClient
) -> None:
    kapi = nodes_served
    await add_nodes(api_client, {"a": []})
    rig = Rig(api_client)
    await rig.cycle({"a": node(False)})  # the tainter lists the Nodes: rv known
    # Someone (a kubelet, a person) changes the Node meanwhile: our rv is old.
    v1 = client.CoreV1Api(api_client)
    body = {"spec": {"taints": [OTHER[1]]}}
    await call(v1.patch_node, "a", body, timeout=5, _content_type=MERGE_PATCH)
    result = await rig.cycle({"a": node(True)})
    assert result.added == ["a"] and not result.errors
    assert taints_of(kapi, "a") == [OTHER[1], TAINT]  # their change kept, ours added
    sent = node_patches(kapi)
    assert len(sent) == 3  # theirs, ours refused (409), ours again on the fresh rv
    gets = [r for r in kapi if r.resource == NODES and r.method.value == "GET" and r.name == "a"]
    assert gets, "the conflict is followed by a fresh read"


async def test_conflicts_that_never_settle_fail_that_node_only(
    nodes_served: VersionedKubernetes, api_client: client.ApiClient
) -> None:
    kapi = nodes_served
    await add_nodes(api_client, {"a": [], "b": [], "c": []})
    rig = Rig(api_client)
    kapi.fail("update", 409, times=4, name="b")  # every attempt of one cycle
    kapi.fail("update", 422, times=1, name="a")
    result = await rig.cycle({n: node(True) for n in "abc"})
    assert result.added == ["c"]
    assert sorted(result.errors) == ["conflict", "invalid"]
    assert rig.metric("mco_reporter_taint_errors_total", kind="conflict") == 1
    assert rig.metric("mco_reporter_taint_errors_total", kind="invalid") == 1
    # The next cycle tries again (not a round-stopping error): a and b get it then.
    result = await rig.cycle({n: node(True) for n in "abc"})
    assert sorted(result.added) == ["a", "b"]
    assert all(TAINT in taints_of(kapi, n) for n in "abc")


async def test_a_node_gone_from_the_report_or_the_cluster(
    nodes_served: VersionedKubernetes, api_client: client.ApiClient
) -> None:
    kapi = nodes_served
    await add_nodes(api_client, {"a": [], "b": []})
    rig = Rig(api_client)
    await rig.cycle({"a": node(True), "b": node(True)})
    assert TAINT in taints_of(kapi, "a") and TAINT in taints_of(kapi, "b")
    # b is deleted from the cluster (its patch answers 404: nothing to do, no error).
    await client.CoreV1Api(api_client).delete_node("b")
    # a leaves the report: its exporter stops; after staleAfter the tracker drops its entry.
    # The taint goes with its freshness already (stale data is fail-open).
    removed: list[str] = []
    for _ in range(int(STALE_AFTER) + 2):
        result = await rig.cycle({"b": node(False)})
        removed += result.removed
        assert not result.errors
    assert "a" not in rig.tracker.entries
    assert removed == ["a"]
    assert taints_of(kapi, "a") == []


async def test_a_node_that_joins_after_the_list_is_read_once(
    nodes_served: VersionedKubernetes, api_client: client.ApiClient
) -> None:
    kapi = nodes_served
    await add_nodes(api_client, {"a": []})
    rig = Rig(api_client, resync=0)  # one list only, at the start
    await rig.cycle({"a": node(False)})
    await add_nodes(api_client, {"late": OTHER})
    result = await rig.cycle({"a": node(False), "late": node(True), "ghost": node(True)})
    assert result.added == ["late"] and not result.errors
    assert taints_of(kapi, "late") == [*OTHER, TAINT]
    for _ in range(3):  # "ghost" has no Node object: asked about once, not every cycle
        await rig.cycle({"a": node(False), "late": node(True), "ghost": node(True)})
    ghost_reads = [r for r in kapi if r.resource == NODES and r.name == "ghost"]
    assert len(ghost_reads) == 1


async def test_our_taint_already_in_place_is_left_alone(
    nodes_served: VersionedKubernetes, api_client: client.ApiClient
) -> None:
    """Wherever it sits in the list; a value or effect of our key that is not ours is replaced."""
    kapi = nodes_served
    await add_nodes(
        api_client,
        {
            "a": [OTHER[0], TAINT, OTHER[1]],
            "b": [{"key": "mco.io/interference", "value": "x", "effect": "NoExecute"}],
        },
    )
    rig = Rig(api_client)
    both = {"a": node(True), "b": node(True)}
    await rig.cycle(both)
    assert [r.name for r in node_patches(kapi)] == ["b"]  # a: already so, untouched
    assert taints_of(kapi, "a") == [OTHER[0], TAINT, OTHER[1]]
    assert taints_of(kapi, "b") == [TAINT]
    result = await rig.cycle(both)
    assert not result.added and not result.removed
    result = await rig.cycle({"a": node(False), "b": node(False)})
    assert sorted(result.removed) == ["a", "b"]
    assert taints_of(kapi, "a") == OTHER and taints_of(kapi, "b") == []


async def test_stale_data_removes_the_taint_and_never_adds_one(
    nodes_served: VersionedKubernetes, api_client: client.ApiClient
) -> None:
    kapi = nodes_served
    await add_nodes(api_client, {"a": [], "b": []})
    rig = Rig(api_client)
    await rig.cycle({"a": node(True), "b": node(False)})
    assert TAINT in taints_of(kapi, "a")
    # Prometheus goes down: the heartbeat stops, the entries age. Within staleAfter the taint
    # holds (the extender still trusts the entry too); past it, it goes (fail-open).
    kept = 0
    while TAINT in taints_of(kapi, "a"):
        result = await rig.cycle(None)
        kept += 1
        assert kept <= STALE_AFTER + 2
    assert STALE_AFTER - 1 <= kept <= STALE_AFTER + 1
    assert result.removed == ["a"]
    # A violated entry that is already stale when it arrives adds no taint: b's newest sample
    # is older than staleAfter (an engine lagging behind).
    old = rig.t + 1 - STALE_AFTER - 5
    rig.t += 1
    rig.clock.now += 1
    rig.tracker.apply(snapshot(PLAN, {"b": node(True)}, rig.t, times={"b": old}))
    result = await rig.tainter.sync(rig.tracker.view(), STALE_AFTER, rig.t)
    assert not result.added and taints_of(kapi, "b") == []


async def test_a_future_dated_entry_adds_no_taint(
    nodes_served: VersionedKubernetes, api_client: client.ApiClient
) -> None:
    kapi = nodes_served
    await add_nodes(api_client, {"a": []})
    rig = Rig(api_client)
    view_at = rig.t + 1
    await rig.cycle({"a": node(False)})
    rig.tracker.apply(snapshot(PLAN, {"a": node(True)}, view_at + 1, times={"a": view_at + 600}))
    result = await rig.tainter.sync(rig.tracker.view(), STALE_AFTER, view_at + 1)
    assert not result.added and taints_of(kapi, "a") == []


async def test_the_rate_limit_spreads_a_fleet_wide_change(
    nodes_served: VersionedKubernetes, api_client: client.ApiClient
) -> None:
    kapi = nodes_served
    names = [f"n{i:02}" for i in range(12)]
    await add_nodes(api_client, {n: [] for n in names})
    rig = Rig(api_client, qps=2.0, burst=4)
    hot = {n: node(True) for n in names}
    result = await rig.cycle(hot)
    assert len(result.added) == 4 and result.pending == 8
    assert rig.metric("mco_reporter_taint_pending_nodes") == 8
    result = await rig.cycle(hot)  # 1 s later: 2 more tokens
    assert len(result.added) == 2 and result.pending == 6
    # Removals go first: two nodes clear while six still wait to be tainted.
    cleared = dict(hot, n00=node(False), n01=node(False))
    result = await rig.cycle(cleared)
    assert result.removed == ["n00", "n01"] and not result.added
    for _ in range(5):
        await rig.cycle(cleared)
    assert rig.tainter.tainted == set(names) - {"n00", "n01"}
    # Every change once, never a storm: 6 added, 2 removed, then the 6 that waited.
    assert len(node_patches(kapi)) == 6 + 2 + 6


async def test_conflict_retries_spend_tokens_too(
    nodes_served: VersionedKubernetes, api_client: client.ApiClient
) -> None:
    """Issue 27: with every Node PATCH answering 409, 16 patches and 15 reads went out in 2 s
    at qps 2, burst 2 (the limit allows 6): each retry's read and patch spends a token."""
    kapi = nodes_served
    names = [f"n{i}" for i in range(8)]
    await add_nodes(api_client, {n: [] for n in names})
    rig = Rig(api_client, qps=2.0, burst=2)
    kapi.fail("update", 409, times=10_000)
    hot = {n: node(True) for n in names}
    pending = []
    for _ in range(3):  # at 1 s, 2 s and 3 s of the clock: 2 tokens, then 2 a second
        result = await rig.cycle(hot)
        pending.append(result.pending)
        assert not result.added and not result.errors
    one_by_one = [r for r in kapi if r.resource == NODES and r.name is not None]
    # 6 requests in those 2 s, each a conflict's patch or the fresh read after it.
    assert [(r.method.value, r.name) for r in one_by_one] == [("PATCH", "n0"), ("GET", "n0")] * 3
    # Every node the bucket held back waits for a later cycle, none is dropped or failed.
    assert pending == [8, 8, 8]
    # The conflicts count across cycles: n0's fourth fails it, and n1 gets its turn.
    result = await rig.cycle(hot)
    assert result.errors == ["conflict"] and result.pending == 7
    assert rig.metric("mco_reporter_taint_errors_total", kind="conflict") == 1
    one_by_one = [r for r in kapi if r.resource == NODES and r.name is not None]
    assert [(r.method.value, r.name) for r in one_by_one[6:]] == [("PATCH", "n0"), ("PATCH", "n1")]
    # Once the conflicts stop, the same pace brings every node its taint.
    kapi._faults.clear()
    for _ in range(10):
        await rig.cycle(hot)
    assert rig.tainter.tainted == set(names)


async def test_the_share_of_nodes_tainted_at_once_is_bounded(
    nodes_served: VersionedKubernetes, api_client: client.ApiClient, caplog
) -> None:
    """Issue 27: with every node violating, every node was tainted NoSchedule at once, which
    stops every pod without the toleration. At most ``max_share`` of the Nodes carry the taint:
    those already tainted keep it, then the highest levels; the rest are held back (counted,
    logged once) and left to the extender's judgement."""
    kapi = nodes_served
    names = [f"n{i}" for i in range(10)]
    await add_nodes(api_client, {n: [] for n in names})
    rig = Rig(api_client, max_share=0.5)

    def hot(level: float, violated: bool = True) -> dict[tuple[Kind, str], float]:
        values = node(violated)
        values[(Kind.LEVEL, "")] = level
        return values

    fleet = {n: hot(0.1 * i) for i, n in enumerate(names)}  # n9 the worst
    with caplog.at_level("WARNING", logger="mco.reporter.taints"):
        result = await rig.cycle(fleet)
        await rig.cycle(fleet)
    assert sorted(result.added) == ["n5", "n6", "n7", "n8", "n9"]
    assert sorted(result.held_back) == ["n0", "n1", "n2", "n3", "n4"]
    assert sorted(n for n in names if TAINT in taints_of(kapi, n)) == sorted(result.added)
    assert rig.metric("mco_reporter_taint_held_back_nodes") == 5
    assert rig.metric("mco_reporter_tainted_nodes") == 5
    held = [r for r in caplog.records if r.getMessage() == "taint share reached"]
    assert len(held) == 1, "logged when the cap starts holding nodes back, not every cycle"
    # A tainted node whose constraint clears frees a place: the next worst takes it, and a
    # higher level elsewhere does not take a place from a node already tainted.
    fleet = dict(fleet, n9=hot(0.9, violated=False), n0=hot(0.95))
    for _ in range(2):
        result = await rig.cycle(fleet)
    assert rig.tainter.tainted == {"n0", "n5", "n6", "n7", "n8"}
    # Once fewer nodes violate than the cap, nothing is held back.
    calm = {n: hot(0.1, violated=n in {"n5", "n6"}) for n in names}
    for _ in range(2):
        result = await rig.cycle(calm)
    assert rig.tainter.tainted == {"n5", "n6"} and result.held_back == []
    assert rig.metric("mco_reporter_taint_held_back_nodes") == 0


async def test_a_share_of_one_taints_every_violating_node(
    nodes_served: VersionedKubernetes, api_client: client.ApiClient
) -> None:
    names = [f"n{i}" for i in range(4)]
    await add_nodes(api_client, {n: [] for n in names})
    rig = Rig(api_client, max_share=1.0)
    await rig.cycle({n: node(True) for n in names})
    assert rig.tainter.tainted == set(names)


async def test_an_unreachable_api_stops_the_round_and_backs_off(
    nodes_served: VersionedKubernetes, api_client: client.ApiClient
) -> None:
    kapi = nodes_served
    await add_nodes(api_client, {"a": [], "b": []})
    rig = Rig(api_client, backoff=Backoff(5.0, 30.0, jitter=0))
    await rig.cycle({"a": node(False), "b": node(False)})
    kapi.fail("update", 429, times=1)
    result = await rig.cycle({"a": node(True), "b": node(True)})
    assert result.errors == ["throttled"] and result.pending == 1 and not result.added
    assert rig.tainter.retry_at == rig.clock.now + 5
    for _ in range(4):
        assert (await rig.cycle({"a": node(True), "b": node(True)})).skipped
    result = await rig.cycle({"a": node(True), "b": node(True)})
    assert sorted(result.added) == ["a", "b"]


async def test_a_taint_removed_by_hand_comes_back_at_the_resync(
    nodes_served: VersionedKubernetes, api_client: client.ApiClient
) -> None:
    kapi = nodes_served
    await add_nodes(api_client, {"a": []})
    rig = Rig(api_client, resync=10.0)
    await rig.cycle({"a": node(True)})
    v1 = client.CoreV1Api(api_client)
    await call(v1.patch_node, "a", {"spec": {"taints": []}}, timeout=5, _content_type=MERGE_PATCH)
    back_after = 0
    while TAINT not in taints_of(kapi, "a"):
        await rig.cycle({"a": node(True)})
        back_after += 1
        assert back_after <= 11
    assert back_after >= 9  # not before the resync: no list per cycle


async def test_only_the_leader_taints(
    nodes_served: VersionedKubernetes, api_client: client.ApiClient
) -> None:
    kapi = nodes_served
    await add_nodes(api_client, {"a": []})
    leading = False
    rig = Rig(api_client, may_write=lambda: leading)
    assert (await rig.cycle({"a": node(True)})).skipped
    assert not [r for r in kapi if r.resource == NODES and r.method.value != "POST"]
    leading = True
    assert (await rig.cycle({"a": node(True)})).added == ["a"]


async def test_flag_off_never_touches_a_node(
    nodes_served: VersionedKubernetes, api_client: client.ApiClient
) -> None:
    """A whole Reporter (fake Prometheus, the Kubernetes sink) without a tainter: hard
    constraints violated, and not one request for a Node."""
    kapi = nodes_served
    await add_nodes(api_client, {"a": OTHER})
    async with fake_prometheus() as prom, PromQLClient(SourceConfig(prom.url)) as source:
        prom.nodes = {"a": node(True)}
        reporter = Reporter(
            source=source,
            rules=RuleConfigSource(),
            plan=PLAN,
            epsilon=Epsilon(),
            metrics=ReporterMetrics(),
            sink=KubeSink(ReportApi(api_client), LayoutChooser("cluster", 1 << 20)),
        )
        for _ in range(3):
            outcome = await reporter.cycle()
            assert outcome.ok and outcome.taints is None
    assert not kapi.reports()["cluster"]["status"]["nodes"]["a"]["schedulable"]
    assert [r.method.value for r in kapi if r.resource == NODES] == ["POST"]  # ours only
    assert taints_of(kapi, "a") == OTHER


async def test_a_whole_reporter_with_the_flag_on_taints_and_untaints(
    nodes_served: VersionedKubernetes, api_client: client.ApiClient
) -> None:
    kapi = nodes_served
    await add_nodes(api_client, {"a": OTHER, "b": []})
    m = ReporterMetrics()
    async with fake_prometheus() as prom, PromQLClient(SourceConfig(prom.url)) as source:
        prom.nodes = {"a": node(True), "b": node(False)}
        reporter = Reporter(
            source=source,
            rules=RuleConfigSource(),
            plan=PLAN,
            epsilon=Epsilon(),
            metrics=m,
            sink=KubeSink(ReportApi(api_client), LayoutChooser("cluster", 1 << 20)),
            tainter=NodeTainter(NodeApi(api_client), m),
        )
        outcome = await reporter.cycle()
        assert outcome.ok and outcome.taints is not None and outcome.taints.added == ["a"]
        assert taints_of(kapi, "a") == [*OTHER, TAINT]
        prom.nodes = {"a": node(False), "b": node(False)}
        outcome = await reporter.cycle()
        assert outcome.taints is not None and outcome.taints.removed == ["a"]
        assert taints_of(kapi, "a") == OTHER
        reporter.reset()  # leadership lost: forgets the Nodes, the gauge drops to 0
        assert m.registry.get_sample_value("mco_reporter_tainted_nodes") == 0


def test_token_bucket() -> None:
    clock = Clock()
    bucket = TokenBucket(2.0, 3, clock)
    assert [bucket.take() for _ in range(4)] == [True, True, True, False]
    clock.now += 0.5
    assert bucket.take() and not bucket.take()
    clock.now += 100
    assert sum(bucket.take() for _ in range(10)) == 3
    with pytest.raises(ValueError):
        TokenBucket(0, 1, clock)
