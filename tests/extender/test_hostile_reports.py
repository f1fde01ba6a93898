"""Hostile report data and request names over real HTTP: times dated far ahead, and hundreds of
thousands of node names nobody reports."""

from __future__ import annotations

import asyncio
import json
import time

import msgspec
import pytest

from testkit import bodies
from tests.extender.conftest import (
    cluster_report,
    entry,
    file_config,
    metric,
    rfc3339,
    write_reports,
)

YEAR_9999 = "9999-12-31T23:59:59.000Z"
JSON = {"Content-Type": "application/json"}


@pytest.mark.parametrize("fail_closed", [False, True])
async def test_entries_dated_ahead_are_stale_with_a_reason(serve, tmp_path, fail_closed):
    now = time.time()
    nodes = {
        "calm": entry(0.2),
        "hour-ahead": entry(0.2, now=now + 3600),
        "year-9999": msgspec.structs.replace(entry(0.2), sample_time=YEAR_9999),
        "skewed-a-little": entry(0.2, now=now + 20),
    }
    path = tmp_path / "report.json"
    write_reports(path, [cluster_report(nodes, heartbeat=now)])
    client = await serve(file_config(path, fail_closed=fail_closed))

    view = {n["name"]: n for n in (await (await client.get("/v1/nodes")).json())["nodes"]}
    for name in ("hour-ahead", "year-9999"):
        assert view[name]["stale"] is True
        assert view[name]["verdict"]["reason"] == "stale"
        assert "dated in the future" in view[name]["verdict"]["message"]
    for name in ("calm", "skewed-a-little"):
        assert view[name]["stale"] is False and view[name]["verdict"]["reason"] == "ok"

    response = await client.post(
        "/scheduler/filter", data=bodies.kube_args(list(nodes)), headers=JSON
    )
    answer = await response.json()
    if fail_closed:
        assert sorted(answer["NodeNames"]) == ["calm", "skewed-a-little"]
        failed = answer["FailedAndUnresolvableNodes"]
        assert sorted(failed) == ["hour-ahead", "year-9999"]
        assert all("dated in the future" in reason for reason in failed.values())
    else:
        assert sorted(answer["NodeNames"]) == sorted(nodes)
    prioritize = await client.post(
        "/scheduler/prioritize", data=bodies.kube_args(list(nodes)), headers=JSON
    )
    scores = {s["Host"]: s["Score"] for s in await prioritize.json()}
    assert scores["calm"] == 8 and scores["hour-ahead"] == (0 if fail_closed else 5)
    text = await (await client.get("/metrics")).text()
    assert metric(text, "mco_extender_report_nodes", state="stale") == 2


async def test_a_heartbeat_dated_ahead_does_not_keep_live_entries_fresh(serve, tmp_path):
    now = time.time()
    live = {"n1": entry(0.2, age=10, live=True)}
    path = tmp_path / "report.json"
    report = cluster_report(live, heartbeat=now)
    report = msgspec.structs.replace(
        report, status=msgspec.structs.replace(report.status, last_sync_time=YEAR_9999)
    )
    write_reports(path, [report])
    client = await serve(file_config(path))
    view = await (await client.get("/v1/nodes")).json()
    assert view["heartbeat"] == YEAR_9999
    (node,) = view["nodes"]
    assert node["stale"] is True and "dated in the future" in node["verdict"]["message"]
    # The reporter's clock comes back: the entry is fresh again.
    write_reports(path, [cluster_report(live, heartbeat=now)])
    deadline = time.monotonic() + 5
    while (await (await client.get("/v1/nodes")).json())["heartbeat"] != rfc3339(now):
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    response = await client.post("/scheduler/filter", data=bodies.kube_args(["n1"]), headers=JSON)
    assert (await response.json())["NodeNames"] == ["n1"]
    assert (await (await client.get("/v1/nodes")).json())["nodes"][0]["stale"] is False


@pytest.mark.parametrize("runtime_class", [None, "kata-qemu"])
async def test_200000_names_nobody_reports(serve, tmp_path, runtime_class):
    path = tmp_path / "report.json"
    write_reports(path, [cluster_report({"calm": entry(0.2, kata=True)})])
    client = await serve(file_config(path))
    names = [f"ghost-{i:06d}" for i in range(200_000)]
    body = bodies.kube_args([*names, "calm"], runtime_class=runtime_class)
    response = await client.post("/scheduler/filter", data=body, headers=JSON)
    assert response.status == 200, await response.text()
    answer = json.loads(await response.read())
    if runtime_class is None:  # fail-open: unknown nodes pass
        assert len(answer["NodeNames"]) == 200_001 and not answer["FailedAndUnresolvableNodes"]
    else:  # a Kata pod needs evidence of Kata: unknown nodes are rejected, unresolvable
        assert answer["NodeNames"] == ["calm"]
        failed = answer["FailedAndUnresolvableNodes"]
        assert len(failed) == 200_000
        assert failed["ghost-000007"].endswith("is not known to be Kata-ready (no report)")
    too_long = bodies.kube_args(["calm"], runtime_class="kata-" + "x" * 300)
    response = await client.post("/scheduler/filter", data=too_long, headers=JSON)
    assert response.status == 400 and "runtimeClassName" in (await response.json())["error"]
