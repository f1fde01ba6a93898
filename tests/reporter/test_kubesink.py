"""The Kubernetes sink against kmock (with resourceVersion semantics and injected faults, see
testkit/kapi.py). Every object left in the API server is validated against the CRD schema, because
kmock itself accepts anything."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import msgspec
import pytest
from kmock._internal import enums

from mco.policy import DEFAULT_POLICIES, Policy
from mco.promql import UNREACHABLE, PromQLClient, SourceConfig, SourceError
from reporter.engine import Reporter, report_config
from reporter.entries import EntryBuilder, Epsilon
from reporter.kubeapi import ReportApi
from reporter.kubesink import KubeSink
from reporter.layout import LayoutChooser
from reporter.metrics import ReporterMetrics
from reporter.query import Kind, Plan
from reporter.ruleconfig import RuleConfigSource
from reporter.schema import LAYOUT_LABEL, NodeInterferenceReport, ReportConfig
from reporter.tracker import Tracker
from rulegen.model import DetectionRuleConfig
from testkit.answers import T0, quiet_values, snapshot
from testkit.fakeprom import fake_prometheus
from testkit.kapi import REPORTS, VersionedKubernetes
from tests.reporter.conftest import validate_object

PLAN = Plan(compact=False)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def node(level: float) -> dict[tuple[Kind, str], float]:
    v = quiet_values(PLAN)
    v[(Kind.LEVEL, "")] = level
    v[(Kind.SCORE, "")] = 100 * (1 - level)
    return v


class Rig:
    """A tracker and a sink, driven cycle by cycle."""

    def __init__(self, api_client: Any, layout: str = "cluster", max_bytes: int = 1 << 20) -> None:
        self.tracker = Tracker(
            EntryBuilder(PLAN, DetectionRuleConfig.default(), Epsilon()),
            stale_after=30,
            live_within=5,
        )
        self.clock = Clock()
        self.api = ReportApi(api_client, timeout=2)
        self.sink = KubeSink(
            self.api,
            LayoutChooser(layout, max_bytes),  # type: ignore[arg-type]
            clock=self.clock,
            backoff_base=5.0,  # longer than a cycle of this rig (1 s of its clock)
            backoff_cap=1000.0,
        )
        self.t = T0

    async def cycle(
        self, nodes: dict[str, dict[tuple[Kind, str], float]], config: ReportConfig | None = None
    ) -> Any:
        self.t += 1
        self.clock.now += 1
        self.tracker.apply(snapshot(PLAN, nodes, self.t))
        view = self.tracker.view()
        view.config = config
        return await self.sink.write(view)


def stored(kapi: VersionedKubernetes) -> dict[str, dict[str, Any]]:
    objects = kapi.reports()
    for obj in objects.values():
        validate_object(obj)
        msgspec.convert(obj, NodeInterferenceReport)  # what the extender decodes
    return objects


def writes(kapi: VersionedKubernetes) -> list[Any]:
    return [
        r for r in kapi if r.resource == REPORTS and r.method.value in ("POST", "PATCH", "DELETE")
    ]


async def test_creates_the_report_then_patches_only_changed_nodes(kapi, api_client) -> None:
    rig = Rig(api_client)
    fleet = {f"n{i}": node(0.1 * i) for i in range(5)}
    result = await rig.cycle(fleet)
    assert result.ok
    cluster = stored(kapi)["cluster"]
    assert cluster["metadata"]["labels"] == {LAYOUT_LABEL: "cluster"}
    assert set(cluster["status"]["nodes"]) == set(fleet)
    assert cluster["status"]["nodeCount"] == 5
    assert cluster["status"]["nodes"]["n3"]["level"] == pytest.approx(0.3)

    before = len(writes(kapi))
    fleet["n2"] = node(0.9)
    fleet["n4"] = node(0.404)  # below the epsilon: not written
    assert (await rig.cycle(fleet)).ok
    new = writes(kapi)[before:]
    assert (
        len(new) == 1
        and new[0].method.value == "PATCH"
        and new[0].url.path.endswith("/cluster/status")
    )
    body = new[0].data
    assert set(body["status"]["nodes"]) == {"n2"}
    assert set(body["status"]) == {"nodes", "lastSyncTime", "summary"}  # nothing else changed
    assert body["status"]["summary"] == {"maxLevel": 0.9, "minScore": pytest.approx(10)}
    assert set(body["status"]["nodes"]["n2"]) == {"level", "score", "sampleTime"}  # the diff only
    assert stored(kapi)["cluster"]["status"]["nodes"]["n2"]["level"] == 0.9

    # Nothing changes: the heartbeat alone.
    before = len(writes(kapi))
    assert (await rig.cycle(fleet)).ok
    (only,) = writes(kapi)[before:]
    assert set(only.data["status"]) == {"lastSyncTime"}


async def test_bytes_counted_are_the_bytes_sent(kapi, api_client) -> None:
    rig = Rig(api_client)
    fleet = {f"n{i}": node(0.1) for i in range(20)}
    for level in (0.1, 0.5, 0.6):
        fleet["n1"] = node(level)
        await rig.cycle(fleet)
    sent = sum(len(r.body) for r in writes(kapi))
    assert rig.api.stats.bytes == sent
    assert rig.api.stats.writes == {"create": 1, "patch": 3}


async def test_removed_node_is_patched_to_null(kapi, api_client) -> None:
    rig = Rig(api_client)
    await rig.cycle({"a": node(0.1), "b": node(0.2)})
    for _ in range(33):  # b is gone: it ages, then is removed after staleAfter
        await rig.cycle({"a": node(0.1)})
    assert set(stored(kapi)["cluster"]["status"]["nodes"]) == {"a"}
    nulls = [
        r
        for r in writes(kapi)
        if r.data and r.data.get("status", {}).get("nodes", {}).get("b", 0) is None
    ]
    assert len(nulls) == 1


async def test_conflict_is_retried_on_a_fresh_read(kapi, api_client) -> None:
    rig = Rig(api_client)
    await rig.cycle({"a": node(0.1), "b": node(0.2)})
    # Someone else edits the status (another writer, a person): the resourceVersion moves.
    key = (REPORTS, None, "cluster")
    kapi.objects[key].patch(
        {"status": {"nodes": {"a": {"level": 0.99}}}, "metadata": {"resourceVersion": "900"}}
    )
    result = await rig.cycle({"a": node(0.1), "b": node(0.25)})
    assert result.ok, result
    nodes = stored(kapi)["cluster"]["status"]["nodes"]
    assert nodes["a"]["level"] == 0.1  # the foreign edit was seen on the fresh read and undone
    assert nodes["b"]["level"] == 0.25
    methods = [r.method.value for r in kapi if r.resource == REPORTS][-3:]
    assert methods == ["PATCH", "GET", "PATCH"]  # 409, fresh read, retry


async def test_deleted_report_is_recreated(kapi, api_client) -> None:
    rig = Rig(api_client)
    await rig.cycle({"a": node(0.1), "b": node(0.2)})
    await api_client.call_api(
        "/apis/mco.io/v1alpha1/nodeinterferencereports/cluster", "DELETE", auth_settings=[]
    )
    assert "cluster" not in kapi.reports()
    result = await rig.cycle({"a": node(0.1), "b": node(0.2)})
    assert result.ok
    assert set(stored(kapi)["cluster"]["status"]["nodes"]) == {"a", "b"}


@pytest.mark.parametrize(
    "status,kind", [(500, "server_error"), (503, "server_error"), (410, "gone"), (429, "throttled")]
)
async def test_server_errors_back_off_then_reread(kapi, api_client, status: int, kind: str) -> None:
    rig = Rig(api_client)
    await rig.cycle({"a": node(0.1)})
    kapi.fail("update", status, times=1)
    result = await rig.cycle({"a": node(0.5)})
    assert not result.ok and result.errors == [kind]
    assert rig.sink.retry_at > rig.clock.now
    # Within the backoff nothing is sent.
    before = len(list(kapi))
    result = await rig.cycle({"a": node(0.5)})
    assert result.skipped and len(list(kapi)) == before
    rig.clock.now = rig.sink.retry_at + 0.01
    result = await rig.cycle({"a": node(0.5)})
    assert result.ok
    recent = [r.method.value for r in kapi if r.resource == REPORTS][-2:]
    assert recent == ["GET", "PATCH"]  # the object's state was unknown: read first
    assert stored(kapi)["cluster"]["status"]["nodes"]["a"]["level"] == 0.5


async def test_backoff_grows_exponentially_and_resets(kapi, api_client) -> None:
    rig = Rig(api_client)
    await rig.cycle({"a": node(0.1)})
    delays = []
    for i in range(4):
        kapi.fail("fetch", 500, times=10)
        kapi.fail("update", 500, times=1)
        rig.clock.now = rig.sink.retry_at + 0.01
        start = rig.clock.now
        await rig.cycle({"a": node(0.2 + 0.1 * i)})
        delays.append(rig.sink.retry_at - start)
    assert all(b > a * 1.3 for a, b in itertools.pairwise(delays)), delays
    kapi._faults.clear()
    rig.clock.now = rig.sink.retry_at + 0.01
    assert (await rig.cycle({"a": node(0.9)})).ok
    kapi.fail("update", 500)
    rig.clock.now += 0.5
    await rig.cycle({"a": node(0.1)})
    assert rig.sink.retry_at - rig.clock.now < 6.1  # back to the base delay


async def test_connection_loss_backs_off(kapi, api_client) -> None:
    rig = Rig(api_client)
    await rig.cycle({"a": node(0.1)})
    kapi.delay = 3.0  # longer than the client's timeout
    result = await rig.cycle({"a": node(0.6)})
    assert result.errors == ["connection"]
    kapi.delay = 0.0
    rig.clock.now = rig.sink.retry_at + 0.01
    assert (await rig.cycle({"a": node(0.6)})).ok
    assert stored(kapi)["cluster"]["status"]["nodes"]["a"]["level"] == 0.6


async def test_invalid_answer_is_reported_not_retried_in_a_loop(kapi, api_client) -> None:
    rig = Rig(api_client)
    await rig.cycle({"a": node(0.1)})
    kapi.fail("update", 422)
    result = await rig.cycle({"a": node(0.7)})
    assert result.errors == ["invalid"] and rig.sink.retry_at > rig.clock.now


async def test_missing_crd_says_so(kapi, api_client) -> None:
    kapi.fail("list", 404)
    rig = Rig(api_client)
    result = await rig.cycle({"a": node(0.1)})
    assert result.errors == ["not_found"]


async def test_per_node_layout_one_object_per_node(kapi, api_client) -> None:
    rig = Rig(api_client, layout="per-node")
    fleet = {"a": node(0.1), "b": node(0.2), "cluster": node(0.3)}
    assert (await rig.cycle(fleet)).ok
    objects = stored(kapi)
    assert set(objects) == {"cluster", "a", "b"}
    assert set(objects["a"]["status"]["nodes"]) == {"a"}
    # The node literally named "cluster" lives in the heartbeat object, which has its name.
    assert set(objects["cluster"]["status"]["nodes"]) == {"cluster"}
    assert objects["cluster"]["status"]["nodeCount"] == 3
    assert all(o["metadata"]["labels"][LAYOUT_LABEL] == "per-node" for o in objects.values())
    assert objects["a"]["status"]["lastSyncTime"]

    before = len(writes(kapi))
    fleet["b"] = node(0.8)
    await rig.cycle(fleet)
    new = writes(kapi)[before:]
    assert [r.url.path.rsplit("/", 2)[-2] for r in new] == ["b", "cluster"]  # node, then heartbeat
    assert set(new[1].data["status"]) == {"lastSyncTime", "summary"}  # b is the new maximum
    assert new[1].data["status"]["summary"] == {"maxLevel": 0.8, "minScore": pytest.approx(20)}
    assert set(new[0].data["status"]) == {"nodes", "lastSyncTime", "summary"}

    del fleet["a"]
    for _ in range(33):
        await rig.cycle(fleet)
    assert "a" not in stored(kapi)


async def test_heartbeat_waits_for_every_node_object(kapi, api_client) -> None:
    rig = Rig(api_client, layout="per-node")
    fleet = {"a": node(0.1), "b": node(0.2)}
    await rig.cycle(fleet)
    heartbeat = stored(kapi)["cluster"]["status"]["lastSyncTime"]
    kapi.fail("update", 500, name="b", subresource="status")
    fleet["b"] = node(0.9)
    result = await rig.cycle(fleet)
    assert not result.ok
    # b's new value could not be written, so nothing may look current beyond what was written.
    assert stored(kapi)["cluster"]["status"]["lastSyncTime"] == heartbeat


async def test_auto_layout_switches_both_ways_without_losing_a_node(kapi, api_client) -> None:
    rig = Rig(api_client, layout="auto", max_bytes=6000)
    small = {f"n{i}": node(0.1) for i in range(3)}
    await rig.cycle(small)
    assert set(stored(kapi)) == {"cluster"}
    big = {f"n{i}": node(0.1) for i in range(12)}
    result = await rig.cycle(big)
    assert result.ok and result.layout == "per-node"
    objects = stored(kapi)
    assert set(objects) == {"cluster", *big}
    assert objects["cluster"]["status"].get("nodes", {}) == {}
    assert objects["cluster"]["metadata"]["labels"][LAYOUT_LABEL] == "per-node"
    for _ in range(33):  # nodes go away: back under 3/4 of the limit -> one object again
        result = await rig.cycle(small)
    assert result.layout == "cluster"
    objects = stored(kapi)
    assert set(objects) == {"cluster"}
    assert set(objects["cluster"]["status"]["nodes"]) == set(small)
    assert objects["cluster"]["metadata"]["labels"][LAYOUT_LABEL] == "cluster"


async def test_a_new_sink_starts_from_what_is_written(kapi, api_client) -> None:
    """A restart or a new leader: read first, then write only differences."""
    rig = Rig(api_client, layout="auto", max_bytes=2000)
    fleet = {"a": node(0.1), "b": node(0.2)}
    await rig.cycle(fleet)
    assert rig.sink.chooser.current == "per-node"
    second = Rig(api_client, layout="auto", max_bytes=2000)
    second.t = rig.t
    second.tracker.seed(await second.sink.load())
    assert second.sink.chooser.current == "per-node"  # kept the layout it found
    before = len(writes(kapi))
    assert (await second.cycle(fleet)).ok
    new = writes(kapi)[before:]
    assert [r.url.path.rsplit("/", 2)[-2] for r in new] == ["cluster"]  # heartbeat only


async def test_no_write_when_not_allowed(kapi, api_client) -> None:
    rig = Rig(api_client)
    rig.sink.may_write = lambda: False
    result = await rig.cycle({"a": node(0.1)})
    assert result.skipped and kapi.reports() == {}
    assert not [r for r in kapi if r.method != enums.method.GET]


async def test_an_object_that_does_not_decode_is_an_error_not_a_crash(kapi, api_client) -> None:
    """A hand edit the CRD let through in a shape the reporter cannot read (here a level that
    is a string) fails the write with kind ``malformed`` and a backoff; the reporter lives on."""
    rig = Rig(api_client)
    await rig.cycle({"a": node(0.1)})
    bad = stored(kapi)["cluster"]
    bad["status"]["nodes"]["a"]["level"] = "high"
    kapi.objects[(REPORTS, None, "cluster")] = bad
    rig.sink.forget()  # a restart: the next write starts with a fresh read
    result = await rig.cycle({"a": node(0.2)})
    assert result.errors == ["malformed"] and rig.sink.retry_at > rig.clock.now


def levelless() -> dict[tuple[Kind, str], float]:
    """A node whose level and score are absent at the source."""
    v = node(0.1)
    del v[(Kind.LEVEL, "")], v[(Kind.SCORE, "")]
    return v


def violating(level: float) -> dict[tuple[Kind, str], float]:
    v = node(level)
    v[(Kind.VIOLATED, "psi_io_some")] = 1.0
    return v


async def test_summary_is_written_and_patched_only_when_it_changes(kapi, api_client) -> None:
    rig = Rig(api_client)
    fleet = {"a": node(0.1), "b": node(0.2)}
    await rig.cycle(fleet)
    assert stored(kapi)["cluster"]["status"]["summary"] == {
        "nodes": 2,
        "unschedulable": 0,
        "maxLevel": 0.2,
        "minScore": pytest.approx(80),
        "stale": 0,
    }
    fleet["b"] = violating(0.95)
    assert (await rig.cycle(fleet)).ok
    summary = stored(kapi)["cluster"]["status"]["summary"]
    assert (summary["unschedulable"], summary["maxLevel"]) == (1, 0.95)
    # Nothing moves: the heartbeat alone, no summary.
    before = len(writes(kapi))
    await rig.cycle(fleet)
    (only,) = writes(kapi)[before:]
    assert set(only.data["status"]) == {"lastSyncTime"}
    # Every level disappears: maxLevel and minScore are removed (sent as null), not kept.
    before = len(writes(kapi))
    assert (await rig.cycle({"a": levelless(), "b": levelless()})).ok
    (patch,) = writes(kapi)[before:]
    assert patch.data["status"]["summary"] == {
        "unschedulable": 0,
        "maxLevel": None,
        "minScore": None,
    }
    assert stored(kapi)["cluster"]["status"]["summary"] == {
        "nodes": 2,
        "unschedulable": 0,
        "stale": 0,
    }


@pytest.mark.parametrize("layout", ["cluster", "per-node"])
async def test_config_is_written_on_the_cluster_object_only_when_it_changes(
    kapi, api_client, layout: str
) -> None:
    rig = Rig(api_client, layout)
    fleet = {"a": node(0.1), "b": node(0.2)}
    first = report_config(DetectionRuleConfig.default(), 4)
    await rig.cycle(fleet, first)
    objects = stored(kapi)
    # As JSON carries it (a policy's tuples are lists there).
    assert objects["cluster"]["status"]["config"] == msgspec.json.decode(msgspec.json.encode(first))
    assert objects["cluster"]["status"]["config"]["generation"] == 4
    assert [p["name"] for p in objects["cluster"]["status"]["config"]["policies"]] == [
        p.name for p in DEFAULT_POLICIES
    ]
    assert all("config" not in o["status"] for n, o in objects.items() if n != "cluster")
    # The same config again: not sent.
    before = len(writes(kapi))
    await rig.cycle(fleet, report_config(DetectionRuleConfig.default(), 4))
    assert all("config" not in w.data["status"] for w in writes(kapi)[before:])
    # A new generation with other policies: sent once, the list replaced whole.
    second = ReportConfig("1m", 70.0, [Policy("only", max_level=0.5)], 5)
    before = len(writes(kapi))
    await rig.cycle(fleet, second)
    sent = [
        w.data["status"]["config"] for w in writes(kapi)[before:] if "config" in w.data["status"]
    ]
    assert len(sent) == 1
    config = stored(kapi)["cluster"]["status"]["config"]
    assert config == {"staleAfter": "1m", "neutralScore": 70.0, "generation": 5,
                      "policies": [{"name": "only", "maxLevel": 0.5}]}  # fmt: skip
    decoded = msgspec.convert(stored(kapi)["cluster"], NodeInterferenceReport)
    assert decoded.status.config == second


async def test_per_node_objects_summarize_their_node(kapi, api_client) -> None:
    rig = Rig(api_client, layout="per-node")
    await rig.cycle({"a": node(0.1), "b": violating(0.7)})
    objects = stored(kapi)
    assert objects["a"]["status"]["summary"] == {
        "nodes": 1,
        "unschedulable": 0,
        "maxLevel": 0.1,
        "minScore": pytest.approx(90),
    }
    assert objects["b"]["status"]["summary"]["unschedulable"] == 1
    whole = objects["cluster"]["status"]["summary"]
    assert (whole["nodes"], whole["unschedulable"], whole["maxLevel"], whole["stale"]) == (
        2,
        1,
        0.7,
        0,
    )
    # Objects written by a reporter without summaries get one patch each, then nothing.
    for name in ("a", "b"):
        raw = kapi.objects[(REPORTS, None, name)].raw
        del raw["status"]["summary"]
        kapi.objects[(REPORTS, None, name)] = raw
    second = Rig(api_client, layout="per-node")
    second.t = rig.t
    second.tracker.seed(await second.sink.load())
    before = len(writes(kapi))
    assert (await second.cycle({"a": node(0.1), "b": violating(0.7)})).ok
    new = writes(kapi)[before:]
    assert sorted(r.url.path.rsplit("/", 2)[-2] for r in new) == ["a", "b", "cluster"]
    assert set(new[0].data["status"]) == {"summary"}
    assert stored(kapi)["b"]["status"]["summary"]["unschedulable"] == 1
    before = len(writes(kapi))
    await second.cycle({"a": node(0.1), "b": violating(0.7)})
    assert [r.url.path.rsplit("/", 2)[-2] for r in writes(kapi)[before:]] == ["cluster"]


async def test_source_failure_reaches_the_object(kapi, api_client) -> None:
    """Prometheus fails: the object says so (SourceReachable=False), its entries and heartbeat
    stay as they were (never zeros with a fresh time), and after staleAfter the summary counts
    the nodes as stale."""
    rig = Rig(api_client)
    await rig.cycle({"a": node(0.3), "b": node(0.6)})
    before = stored(kapi)["cluster"]

    async def failing(seconds: float) -> Any:
        rig.t += seconds
        rig.clock.now += seconds
        rig.tracker.fail(SourceError(UNREACHABLE, "connection refused"), rig.t)
        return await rig.sink.write(rig.tracker.view())

    n = len(writes(kapi))
    assert (await failing(1)).ok
    (patch,) = writes(kapi)[n:]
    assert set(patch.data["status"]) == {"conditions"}  # nothing about the nodes
    after = stored(kapi)["cluster"]
    conditions = {c["type"]: c for c in after["status"]["conditions"]}
    assert conditions["SourceReachable"]["status"] == "False"
    assert conditions["SourceReachable"]["reason"] == "Unreachable"
    assert "connection refused" in conditions["SourceReachable"]["message"]
    assert conditions["Synced"]["status"] == "False"
    assert after["status"]["lastSyncTime"] == before["status"]["lastSyncTime"]
    assert after["status"]["nodes"] == before["status"]["nodes"]
    n = len(writes(kapi))
    assert (await failing(1)).ok
    assert writes(kapi)[n:] == []  # the same failure again: nothing to send
    assert (await failing(30)).ok
    after = stored(kapi)["cluster"]
    assert after["status"]["summary"]["stale"] == 2
    assert after["status"]["nodes"] == before["status"]["nodes"]
    assert after["status"]["lastSyncTime"] == before["status"]["lastSyncTime"]


async def test_too_large_object_is_reported_and_backed_off(kapi, api_client) -> None:
    rig = Rig(api_client)
    await rig.cycle({"a": node(0.1)})
    kapi.fail("update", 413)
    result = await rig.cycle({"a": node(0.7)})
    assert result.errors == ["too_large"] and rig.sink.retry_at > rig.clock.now
    before = len(list(kapi))
    assert (await rig.cycle({"a": node(0.7)})).skipped and len(list(kapi)) == before
    rig.clock.now = rig.sink.retry_at + 0.01
    assert (await rig.cycle({"a": node(0.7)})).ok
    assert stored(kapi)["cluster"]["status"]["nodes"]["a"]["level"] == 0.7


async def test_explicit_cluster_layout_over_the_limit_warns_once(kapi, api_client, caplog) -> None:
    rig = Rig(api_client, layout="cluster", max_bytes=6000)
    small = {f"n{i}": node(0.1) for i in range(3)}
    big = {f"n{i}": node(0.1) for i in range(12)}
    caplog.set_level("WARNING", logger="mco.reporter.layout")

    def over() -> bool:
        return rig.sink.chooser.over_limit

    await rig.cycle(small)
    assert not over() and not caplog.records
    for _ in range(3):
        result = await rig.cycle(big)
        assert result.layout == "cluster"  # kept: the operator asked for it
    assert over()
    (warning,) = caplog.records
    assert "--layout per-node" in warning.getMessage()
    assert getattr(warning, "object_bytes", 0) > 6000
    for _ in range(33):  # the fleet shrinks again (nodes age out): the flag clears
        await rig.cycle(small)
    assert not over()
    await rig.cycle(big)
    assert len([r for r in caplog.records if r.levelname == "WARNING"]) == 2  # a new crossing


async def test_api_write_metrics_move_with_what_was_sent(kapi, api_client) -> None:
    """mco_reporter_api_writes_total{verb} and mco_reporter_api_write_bytes_total, read from a
    whole Reporter's registry, equal the requests and body bytes the API server received."""
    m = ReporterMetrics()

    def counted() -> tuple[dict[str, float], float]:
        verbs = {
            v: m.registry.get_sample_value("mco_reporter_api_writes_total", {"verb": v}) or 0.0
            for v in ("create", "patch", "delete")
        }
        return verbs, m.registry.get_sample_value("mco_reporter_api_write_bytes_total") or 0.0

    def received() -> tuple[dict[str, float], float]:
        verbs = {"POST": "create", "PATCH": "patch", "DELETE": "delete"}
        sent = writes(kapi)
        by_verb = {
            v: float(sum(1 for r in sent if verbs[r.method.value] == v)) for v in verbs.values()
        }
        return by_verb, float(sum(len(r.body) for r in sent))

    async with fake_prometheus() as prom, PromQLClient(SourceConfig(prom.url)) as source:
        prom.nodes = {f"n{i}": node(0.1) for i in range(4)}
        sink = KubeSink(ReportApi(api_client), LayoutChooser("auto", 3000))
        reporter = Reporter(
            source=source,
            rules=RuleConfigSource(),
            plan=PLAN,
            epsilon=Epsilon(),
            metrics=m,
            sink=sink,
        )
        assert (await reporter.cycle()).ok  # per-node at this limit: creates and patches
        assert counted() == received() and counted()[0]["create"] == 5
        first_bytes = counted()[1]
        prom.nodes["n1"] = node(0.9)
        assert (await reporter.cycle()).ok
        assert counted() == received()
        # One node changed: its object and the heartbeat, a small fraction of the first cycle.
        assert counted()[0]["patch"] == 5 + 2
        assert 0 < counted()[1] - first_bytes < first_bytes / 3
        for name in list(prom.nodes)[1:]:  # three nodes go away...
            del prom.nodes[name]
        reporter.tracker.stale_after = 1.0  # ...and age out at the next cycle
        await asyncio.sleep(1.1)
        assert (await reporter.cycle()).ok
        # One node left: auto goes back to the cluster layout, so all four node objects go.
        assert sink.chooser.current == "cluster"
        assert counted() == received() and counted()[0]["delete"] == 4
