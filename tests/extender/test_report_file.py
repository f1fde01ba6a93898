"""The report store (both layouts) and the file source (reload on atomic replace)."""

from __future__ import annotations

import json
import logging
import time

import pytest

from extender.app import SOURCE, STORE
from extender.reports import ReportStore
from reporter.schema import (
    NodeEntry,
    NodeInterferenceReport,
    ReportConfig,
    decode_reports,
    encode,
)
from testkit import bodies
from tests.extender.conftest import (
    cluster_report,
    entry,
    file_config,
    per_node_reports,
    wait_for,
    write_atomic,
    write_reports,
)


def test_both_layouts_give_the_same_view():
    nodes = {"a": entry(0.1), "b": entry(0.5)}
    cluster, per_node = ReportStore(), ReportStore()
    cluster.replace_all([cluster_report(nodes)])
    per_node.replace_all(per_node_reports(nodes))
    assert {n: k.entry for n, k in cluster.nodes.items()} == nodes
    assert {n: k.entry for n, k in per_node.nodes.items()} == nodes
    assert cluster.layouts() == {"cluster": 1} and per_node.layouts() == {"per-node": 2}


def entry_of(store: ReportStore, node: str) -> NodeEntry:
    known = store.get(node)
    assert known is not None, node
    return known.entry


def test_during_a_layout_switch_the_newest_sample_wins_and_removals_fall_back():
    store = ReportStore()
    old, new = entry(0.9, age=10), entry(0.1, age=1)
    store.replace_all([cluster_report({"a": old, "b": old}), *per_node_reports({"a": new})])
    assert entry_of(store, "a") == new and entry_of(store, "b") == old
    store.remove("a")  # the per-node object goes: the cluster object's entry is back
    assert entry_of(store, "a") == old
    store.upsert(cluster_report({"b": old}))  # "a" left the cluster object too
    assert store.get("a") is None and set(store.nodes) == {"b"}


def test_listeners_hear_what_changed_and_whether_it_matters():
    store = ReportStore()
    heard: list[dict[str, bool]] = []
    store.subscribe(lambda changes: heard.append(dict(changes)))
    t = 1_800_000_000.0
    store.replace_all([cluster_report({"a": entry(0.1, now=t), "b": entry(0.2, now=t)})])
    assert heard[-1] == {"a": True, "b": True}
    store.upsert(cluster_report({"a": entry(0.1, now=t + 1), "b": entry(0.3, now=t + 1)}))
    assert heard[-1] == {"a": False, "b": True}  # a: only the sample time moved
    unchanged = store.get("b")
    assert unchanged is not None
    store.upsert(cluster_report({"a": entry(0.1, now=t + 2), "b": unchanged.entry}))
    assert heard[-1] == {"a": False} and store.get("b") is unchanged
    calls = len(heard)
    store.upsert(cluster_report({"a": entry_of(store, "a"), "b": unchanged.entry}))
    assert len(heard) == calls  # nothing changed: nobody is told
    store.replace_all([])
    assert heard[-1] == {"a": True, "b": True} and not store.nodes


def test_decode_one_object_or_a_list():
    nodes = {"a": entry(0.1), "b": entry(0.5)}
    single = decode_reports(encode(cluster_report(nodes)))
    assert len(single) == 1 and single[0].status.nodes == nodes
    listed = decode_reports(
        encode({"apiVersion": "v1", "kind": "List", "items": per_node_reports(nodes)})
    )
    assert [r.metadata.name for r in listed] == ["a", "b"]
    assert decode_reports(b'{"apiVersion":"v1","kind":"List","items":[]}') == []


@pytest.mark.parametrize(
    "data",
    [b"", b"{", b"[]", b'{"metadata": {}}', b'{"kind":"List","items":[{"status":{}}]}',
     b'{"metadata":{"name":"c"},"status":{"nodes":{"a":{"level":0.1}}}}',
     b'{"metadata":{"name":"c"},"x":' + b"[" * 100_000 + b"]" * 100_000 + b"}"],
    ids=["empty", "truncated", "array", "no-name", "no-metadata", "no-sample-time", "deep"],
)  # fmt: skip
def test_decode_rejects_what_is_not_a_report(data):
    with pytest.raises(ValueError, match="not a NodeInterferenceReport"):
        decode_reports(data)


async def test_file_is_reloaded_when_replaced_and_bad_versions_keep_the_last_good(serve, tmp_path):
    path = tmp_path / "report.json"
    write_reports(path, [cluster_report({"a": entry(0.1)})])
    client = await serve(file_config(path))
    store = client.server.app[STORE]

    async def score(node: str) -> int:
        raw = await (
            await client.post("/scheduler/prioritize", data=bodies.kube_args([node]))
        ).read()
        return int(json.loads(raw)[0]["Score"])

    assert await score("a") == 9
    # Per-node layout written as a List, replacing the file atomically.
    write_reports(path, per_node_reports({"a": entry(0.6), "b": entry(0.0)}))
    await wait_for(lambda: store.get("b") is not None, what="the reload")
    assert await score("a") == 4 and await score("b") == 10
    assert store.layouts() == {"per-node": 2}
    # A broken file: logged, counted, and the last good data stays in force.
    write_atomic(path, b'{"kind": "List", "items": [{"metadata": {"name": "x"}, "status": 5}]}')
    await wait_for(
        lambda: 'mco_extender_report_loads_total{result="error",source="file"}' in _metrics(client),
        what="the rejected load",
    )
    assert await score("a") == 4
    # Removed: nothing changes; back: loaded again.
    path.unlink()
    write_reports(path, [cluster_report({"a": entry(0.0)})])
    await wait_for(lambda: store.get("b") is None, what="the second reload")
    assert await score("a") == 10


def _metrics(client) -> str:
    from prometheus_client import generate_latest

    from extender.app import METRICS

    return generate_latest(client.server.app[METRICS].registry).decode()


async def test_in_place_rewrite_of_same_size_is_noticed(serve, tmp_path):
    path = tmp_path / "report.json"
    write_reports(path, [cluster_report({"a": entry(0.1, now=1_800_000_000)})])
    client = await serve(file_config(path, stale_after=10**9))
    store = client.server.app[STORE]
    data = path.read_bytes()
    path.write_bytes(data.replace(b'"level":0.1', b'"level":0.7'))  # same size, new mtime
    await wait_for(lambda: entry_of(store, "a").level == 0.7, what="the in-place rewrite")


async def test_per_node_list_with_the_heartbeat_object_first(serve, tmp_path):
    """The shape mco-reporter's --output writes in the per-node layout: the ``cluster`` object
    (no nodes, the heartbeat) first, then one object per node; live entries hold up to the
    heartbeat, however old their sample time."""
    path = tmp_path / "report.json"
    now = time.time()
    nodes = {"a": entry(0.3, age=300, live=True), "b": entry(0.3, age=300)}
    write_reports(path, [cluster_report({}, heartbeat=now - 1), *per_node_reports(nodes)])
    client = await serve(file_config(path))
    raw = await (
        await client.post("/scheduler/prioritize", data=bodies.kube_args(["a", "b"]))
    ).read()
    assert json.loads(raw) == [{"Host": "a", "Score": 7}, {"Host": "b", "Score": 5}]  # b: stale
    view = await (await client.get("/v1/nodes")).json()
    assert view["layouts"] == {"cluster": 1, "per-node": 2}
    assert view["heartbeat"] is not None
    by_name = {n["name"]: n for n in view["nodes"]}
    assert by_name["a"]["live"] and not by_name["a"]["stale"] and by_name["a"]["ageSeconds"] < 5
    assert by_name["b"]["stale"] and by_name["b"]["ageSeconds"] > 299
    # The reporter stops: the heartbeat ages and the live entry goes stale with it.
    write_reports(path, [cluster_report({}, heartbeat=now - 60), *per_node_reports(nodes)])
    store = client.server.app[STORE]
    await wait_for(lambda: store.heartbeat < now - 30, what="the old heartbeat")
    raw = await (await client.post("/scheduler/prioritize", data=bodies.kube_args(["a"]))).read()
    assert json.loads(raw) == [{"Host": "a", "Score": 5}]


async def test_a_report_source_that_dies_fails_the_liveness_probe(serve, tmp_path):
    """The source runs as a background task; should it ever end with an error, /healthz says
    so (the kubelet restarts the pod) instead of the extender serving ever older data."""
    path = tmp_path / "report.json"
    write_reports(path, [cluster_report({"a": entry(0.1)})])
    client = await serve(file_config(path))
    assert (await client.get("/healthz")).status == 200

    def broken(changes: object) -> None:
        raise RuntimeError("a bug in a listener")

    client.server.app[STORE].subscribe(broken)
    write_reports(path, [cluster_report({"a": entry(0.5)})])
    await wait_for(lambda: client.server.app[SOURCE].done(), what="the source to stop")
    response = await client.get("/healthz")
    assert response.status == 503 and "report source" in await response.text()


async def test_reloads_log_at_info_only_when_they_tell_a_person_something(serve, tmp_path, caplog):
    """The reporter rewrites the file every second: an info line per rewrite is noise. The
    first load, a new DetectionRuleConfig generation and the first good load after an error
    are news (info); other reloads are debug."""
    caplog.set_level(logging.DEBUG, logger="mco.extender.report_file")
    path = tmp_path / "report.json"

    def with_generation(generation: int, level: float) -> list[NodeInterferenceReport]:
        report = cluster_report({"a": entry(level)})
        report.status.config = ReportConfig("30s", 50.0, [], generation)
        return [report]

    def loads() -> list[tuple[int, int | None]]:
        return [
            (r.levelno, getattr(r, "generation", None))
            for r in caplog.records
            if r.getMessage() == "report file loaded"
        ]

    write_reports(path, with_generation(1, 0.1))
    client = await serve(file_config(path))
    store = client.server.app[STORE]
    for level in (0.2, 0.3):  # the same generation, new data: debug
        before = len(loads())
        write_reports(path, with_generation(1, level))
        await wait_for(lambda: len(loads()) > before, what="a reload")  # noqa: B023
    write_reports(path, with_generation(2, 0.3))  # a new generation: info
    await wait_for(lambda: len(loads()) == 4, what="the new generation")
    write_atomic(path, b"{")  # an error, then the good file again: info
    await wait_for(lambda: "report file rejected" in caplog.text, what="the rejected load")
    write_reports(path, with_generation(2, 0.4))
    await wait_for(lambda: len(loads()) == 5, what="the reload after the error")
    write_reports(path, with_generation(2, 0.5))
    await wait_for(lambda: len(loads()) == 6, what="a last reload")
    info, debug = logging.INFO, logging.DEBUG
    assert loads() == [(info, 1), (debug, 1), (debug, 1), (info, 2), (info, 2), (debug, 2)]
    assert store.get("a") is not None
