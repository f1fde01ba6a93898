"""The Kubernetes report source against kmock (an aiohttp emulator of the API server): list then
watch with resourceVersion and bookmarks, re-list on 410, resume after a closed watch, back off
on errors, never blocking the handlers. kmock has no real resourceVersion semantics, so the
410s are scripted; what is asserted is what the extender asks for and what it serves."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from msgspec import to_builtins

from extender.app import STORE
from extender.config import ExtenderConfig, SourceConfig
from mco.labelselector import LabelSelector
from mco.policy import Policy
from reporter.schema import ReportConfig, encode
from testkit import bodies
from tests.extender.conftest import (
    cluster_report,
    entry,
    metric,
    per_node_reports,
    rfc3339,
    wait_for,
)

RES = "mco.io/v1alpha1/nodeinterferencereports"
URL = "/apis/mco.io/v1alpha1/nodeinterferencereports"


def as_object(report: Any) -> dict[str, Any]:
    return {
        "apiVersion": "mco.io/v1alpha1",
        "kind": "NodeInterferenceReport",
        **json.loads(encode(report)),
    }


def api_config(kubeconfig: Path) -> ExtenderConfig:
    return ExtenderConfig(
        source=SourceConfig(
            kubeconfig=str(kubeconfig), backoff_initial=0.05, backoff_max=0.2, watch_timeout=30
        )
    )


async def score(client, node: str) -> int:
    raw = await (await client.post("/scheduler/prioritize", data=bodies.kube_args([node]))).read()
    return int(json.loads(raw)[0]["Score"])


def requests_of(kmock: Any, kind: str) -> list[Any]:
    return list(kmock[f"{kind} {RES}"])


async def restarts(client: Any, reason: str) -> float:
    text = await (await client.get("/metrics")).text()
    return metric(text, "mco_extender_watch_restarts_total", reason=reason) or 0.0


async def test_list_then_watch_both_layouts(kmock, kubeconfig, serve):
    kmock.objects[RES, None, "cluster"] = as_object(
        cluster_report({"a": entry(0.1), "b": entry(0.2)})
    )
    kmock.objects[RES, None, "c"] = as_object(per_node_reports({"c": entry(0.5)})[0])
    client = await serve(api_config(kubeconfig))
    store = client.server.app[STORE]
    assert set(store.nodes) == {"a", "b", "c"}
    assert store.layouts() == {"cluster": 1, "per-node": 1}
    assert await score(client, "a") == 9 and await score(client, "c") == 5

    await wait_for(lambda: len(requests_of(kmock, "watch")) == 1, what="the watch")
    watch = requests_of(kmock, "watch")[0]
    assert watch.params["watch"] == "true"
    assert watch.params["allowWatchBookmarks"] == "true"
    assert watch.params["resourceVersion"] == "..."  # what kmock's list answered
    assert watch.params["timeoutSeconds"] == "30"

    # Changes arrive through the watch: a new per-node object, a patch, a deletion.
    await kmock.post(URL, json=as_object(per_node_reports({"d": entry(0.0)})[0]))
    await wait_for(lambda: store.get("d") is not None, what="ADDED")
    await kmock.patch(
        f"{URL}/cluster", json={"status": {"nodes": {"a": json.loads(encode(entry(0.8)))}}}
    )
    await wait_for(lambda: store.get("a").entry.level == 0.8, what="MODIFIED")
    assert await score(client, "a") == 2
    await kmock.delete(f"{URL}/c")
    await wait_for(lambda: store.get("c") is None, what="DELETED")
    assert await score(client, "c") == 5  # unknown again: neutral
    assert len(requests_of(kmock, "list")) == 1


async def test_410_on_the_watch_request_relists(kmock, kubeconfig, serve):
    kmock.objects[RES, None, "cluster"] = as_object(cluster_report({"a": entry(0.1)}))
    kmock[f"watch {RES}"][:1] << 410 << {"kind": "Status", "code": 410, "reason": "Expired"}
    client = await serve(api_config(kubeconfig))
    await wait_for(lambda: len(requests_of(kmock, "list")) == 2, what="the re-list")
    await wait_for(lambda: len(requests_of(kmock, "watch")) == 2, what="the second watch")
    assert await restarts(client, "gone") == 1
    assert await score(client, "a") == 9


async def test_410_error_event_in_the_stream_relists(kmock, kubeconfig, serve):
    kmock.objects[RES, None, "cluster"] = as_object(cluster_report({"a": entry(0.1)}))
    status = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 410}
    expired = {"type": "ERROR", "object": {**status, "reason": "Expired", "message": "too old"}}
    kmock[f"watch {RES}"][:1] << iter([expired])
    client = await serve(api_config(kubeconfig))
    await wait_for(lambda: len(requests_of(kmock, "list")) == 2, what="the re-list")
    assert await restarts(client, "gone") == 1
    await kmock.patch(
        f"{URL}/cluster", json={"status": {"nodes": {"a": json.loads(encode(entry(0.5)))}}}
    )
    store = client.server.app[STORE]
    await wait_for(lambda: store.get("a").entry.level == 0.5, what="the update after the re-list")


async def test_a_closed_watch_resumes_from_the_last_bookmark(kmock, kubeconfig, serve):
    kmock.objects[RES, None, "cluster"] = as_object(cluster_report({"a": entry(0.1)}))
    bookmark = {
        "type": "BOOKMARK",
        "object": {"kind": "NodeInterferenceReport", "metadata": {"resourceVersion": "77"}},
    }
    kmock[f"watch {RES}"][:1] << iter([bookmark])  # then the stream ends, as on a server timeout
    client = await serve(api_config(kubeconfig))
    await wait_for(lambda: len(requests_of(kmock, "watch")) >= 2, what="the resumed watch")
    assert requests_of(kmock, "watch")[1].params["resourceVersion"] == "77"
    assert len(requests_of(kmock, "list")) == 1  # resumed, not re-listed
    assert await restarts(client, "closed") >= 1


async def test_errors_back_off_and_handlers_never_wait(kmock, kubeconfig, serve):
    kmock.objects[RES, None, "cluster"] = as_object(cluster_report({"a": entry(0.1)}))
    kmock[f"list {RES}"][:3] << 500 << {"kind": "Status", "code": 500, "message": "etcd is sad"}
    began = asyncio.get_running_loop().time()
    client = await serve(api_config(kubeconfig), ready=False)
    assert (await client.get("/readyz")).status == 503
    # While the source fails, requests are answered at once, neutral and fail-open.
    started = asyncio.get_running_loop().time()
    raw = await (await client.post("/volcano/predicate", data=bodies.volcano_predicate("a"))).read()
    assert raw == b'{"status":"","code":0}'
    assert asyncio.get_running_loop().time() - started < 0.5
    await wait_for(lambda: client.server.app[STORE].loaded, timeout=10, what="recovery")
    # Pauses of 0.05, 0.1 and 0.2 s (each +-20 % jitter) came between the four attempts.
    assert asyncio.get_running_loop().time() - began >= 0.8 * (0.05 + 0.1 + 0.2)
    assert len(requests_of(kmock, "list")) == 4
    assert await restarts(client, "error") == 3
    assert (await client.get("/readyz")).status == 200
    assert await score(client, "a") == 9


async def test_invalid_objects_are_skipped_not_fatal(kmock, kubeconfig, serve):
    kmock.objects[RES, None, "cluster"] = as_object(cluster_report({"a": entry(0.1)}))
    kmock.objects[RES, None, "broken"] = {
        "metadata": {"name": "broken"},
        "status": {"nodes": {"x": {"level": "high"}}},
    }
    client = await serve(api_config(kubeconfig))
    assert set(client.server.app[STORE].nodes) == {"a"}
    text = await (await client.get("/metrics")).text()
    assert 'mco_extender_report_loads_total{result="error",source="list"} 1.0' in text


async def test_a_heartbeat_alone_keeps_live_entries_fresh(kmock, kubeconfig, serve):
    """mco-reporter's API sink patches only changed nodes plus the heartbeat (lastSyncTime)."""
    started = time.time()
    live = {"a": entry(0.1, age=100, live=True)}
    kmock.objects[RES, None, "cluster"] = as_object(cluster_report(live, heartbeat=started - 50))
    client = await serve(api_config(kubeconfig))
    assert await score(client, "a") == 5  # the heartbeat is 50 s old: stale, neutral
    beat = {"status": {"lastSyncTime": rfc3339(time.time())}}
    await kmock.patch(f"{URL}/cluster", json=beat)
    store = client.server.app[STORE]
    await wait_for(lambda: store.heartbeat > started, what="the heartbeat")
    assert await score(client, "a") == 9


async def test_an_object_whose_update_is_rejected_no_longer_counts(kmock, kubeconfig, serve):
    """A per-node object whose new version cannot be decoded must not keep serving its old,
    live entry: the heartbeat keeps moving, so that entry would look fresh forever. Dropped,
    the node gets the missing-data verdict (neutral), as a rejected object in a list does."""
    now = time.time()
    (b,) = per_node_reports({"b": entry(0.1, live=True)})
    kmock.objects[RES, None, "cluster"] = as_object(cluster_report({}, heartbeat=now))
    kmock.objects[RES, None, "b"] = as_object(b)
    client = await serve(api_config(kubeconfig))
    store = client.server.app[STORE]
    assert await score(client, "b") == 9
    await kmock.patch(f"{URL}/b", json={"status": {"nodes": {"b": {"level": "high"}}}})
    await wait_for(lambda: store.get("b") is None, what="the rejected object to be dropped")
    await kmock.patch(f"{URL}/cluster", json={"status": {"lastSyncTime": rfc3339(time.time())}})
    await wait_for(lambda: store.heartbeat > now, what="the heartbeat")
    assert await score(client, "b") == 5
    text = await (await client.get("/metrics")).text()
    assert 'mco_extender_report_loads_total{result="error",source="watch"} 1.0' in text


async def test_config_follows_status_config_through_the_watch(kmock, kubeconfig, serve):
    """The cluster object's status.config, changed through the watch, is in force at once:
    neutralScore and the policies (a maxLevel that filters)."""
    kmock.objects[RES, None, "cluster"] = as_object(
        cluster_report({"a": entry(0.1), "b": entry(0.5)}, heartbeat=time.time())
    )
    client = await serve(api_config(kubeconfig))
    store = client.server.app[STORE]
    online = {"mco.io/workload-class": "latency-sensitive"}

    async def passed(labels: dict[str, str]) -> list[str]:
        body = bodies.kube_args(["a", "b"], labels=labels)
        answer = json.loads(await (await client.post("/scheduler/filter", data=body)).read())
        return list(answer["NodeNames"])

    assert await score(client, "unknown") == 5  # the flags' neutral score
    assert await passed(online) == ["a"]  # the shipped latency-sensitive policy: maxLevel 0.3
    await wait_for(lambda: len(requests_of(kmock, "watch")) == 1, what="the watch")
    config = ReportConfig(
        "30s",
        90.0,
        [Policy("lenient", LabelSelector(match_labels=online), max_level=0.6)],
        generation=2,
    )
    await kmock.patch(f"{URL}/cluster", json={"status": {"config": to_builtins(config)}})
    await wait_for(lambda: store.config == config, what="status.config through the watch")
    assert await score(client, "unknown") == 9
    assert await passed(online) == ["a", "b"]  # 0.5 is within the new maxLevel 0.6
    assert await passed({}) == ["a", "b"]  # no catch-all in this list: today's behaviour
