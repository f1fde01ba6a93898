"""kube-scheduler's placements from a watch of pods bound to nodes, against kmock (the
Kubernetes API stand-in): recent placements reserve, old, finished and deleted pods do not, and
a watch that breaks falls back to no reservation (logged, counted) without an error answer."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from extender.app import RESERVATIONS
from extender.config import ExtenderConfig, ReservationConfig, SourceConfig
from extender.reservation import POD_WATCH
from testkit import bodies
from tests.extender.conftest import entry, metric, rfc3339, wait_for, write_reports
from tests.extender.test_reservation import with_policies

PODS = "v1/pods"
URL = "/api/v1/namespaces/shop/pods"


def pod(name: str, node: str, *, placed: float | None, phase: str = "Running") -> dict[str, Any]:
    """A bound pod as the API returns it; ``placed`` is its PodScheduled transition time."""
    conditions = []
    if placed is not None:
        conditions.append(
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": rfc3339(placed)}
        )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "shop",
            "uid": f"uid-{name}",
            "labels": {"app": name},
            "creationTimestamp": rfc3339(time.time() - 3600),
        },
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "nginx"}]},
        "status": {"phase": phase, "conditions": conditions},
    }


@pytest.fixture
def report(tmp_path: Path) -> Path:
    path = tmp_path / "report.json"
    write_reports(path, [with_policies({"a": entry(0.2), "b": entry(0.2)})])  # 0.1 per pod
    return path


def watch_config(report: Path, kubeconfig: Path) -> ExtenderConfig:
    return ExtenderConfig(
        source=SourceConfig(
            report_file=str(report),
            poll_interval=0.05,
            kubeconfig=str(kubeconfig),
            backoff_initial=0.05,
            backoff_max=0.2,
            watch_timeout=30,
        ),
        reservation=ReservationConfig(watch_pods=True),
    )


async def scores(client: Any) -> dict[str, int]:
    raw = await (
        await client.post("/scheduler/prioritize", data=bodies.kube_args(["a", "b"]))
    ).read()
    return {h["Host"]: h["Score"] for h in json.loads(raw)}


async def metrics(client: Any) -> str:
    text: str = await (await client.get("/metrics")).text()
    return text


async def up(client: Any) -> float | None:
    return metric(await metrics(client), "mco_extender_reservation_source_up", source=POD_WATCH)


async def test_recent_bound_pods_reserve_and_old_ones_do_not(kmock, kubeconfig, report, serve):
    now = time.time()
    kmock.objects[PODS, "shop", "new"] = pod("new", "a", placed=now - 2)
    kmock.objects[PODS, "shop", "old"] = pod("old", "a", placed=now - 600)
    kmock.objects[PODS, "shop", "done"] = pod("done", "b", placed=now - 1, phase="Succeeded")
    kmock.objects[PODS, "shop", "elsewhere"] = pod("elsewhere", "nowhere", placed=now - 1)
    client = await serve(watch_config(report, kubeconfig))
    reservations = client.server.app[RESERVATIONS]
    # "new" and "elsewhere" (a node no report knows yet: kept, the list may come first)
    await wait_for(lambda: len(reservations) == 2, what="the pod list")
    assert await up(client) == 1.0
    assert await scores(client) == {"a": 7, "b": 8}
    lists = list(kmock[f"list {PODS}"])
    assert lists[0].params["fieldSelector"] == "spec.nodeName!="

    # A pod bound through the watch counts from its PodScheduled time; a deleted one no more.
    await kmock.post(URL, json=pod("burst", "b", placed=time.time()))
    await wait_for(lambda: len(reservations) == 3, what="the ADDED pod")
    assert await scores(client) == {"a": 7, "b": 7}
    view = json.loads(await (await client.get("/v1/nodes")).read())
    assert {n["name"]: n["reservation"] for n in view["nodes"]} == {"a": 0.1, "b": 0.1}
    await kmock.delete(f"{URL}/new")
    await wait_for(lambda: len(reservations) == 2, what="the DELETED pod")
    assert await scores(client) == {"a": 8, "b": 7}
    text = await metrics(client)
    assert metric(text, "mco_extender_placements_total", source=POD_WATCH, result="recorded") == 3
    assert metric(text, "mco_extender_reservation_pods") == 2


async def test_a_broken_watch_falls_back_to_no_reservation(
    kmock, kubeconfig, report, serve, caplog
):
    kmock.objects[PODS, "shop", "new"] = pod("new", "a", placed=time.time())
    # The first list works; the watch after it fails, and so do the next 15 lists (~2.5 s of
    # backoff at most 0.2 s): no reservation meanwhile, answers as without one, never an error.
    status = {"kind": "Status", "code": 500, "message": "etcd is sad"}
    kmock[f"watch {PODS}"][:1] << 500 << status
    kmock[f"list {PODS}"][1:16] << 500 << status
    client = await serve(watch_config(report, kubeconfig))
    reservations = client.server.app[RESERVATIONS]
    await wait_for(lambda: len(list(kmock[f"list {PODS}"])) >= 2, what="the failures")
    assert len(reservations) == 0
    assert await up(client) == 0.0
    response = await client.post("/scheduler/prioritize", data=bodies.kube_args(["a", "b"]))
    assert response.status == 200
    assert await scores(client) == {"a": 8, "b": 8}
    assert "pod watch broke" in caplog.text
    text = await metrics(client)
    assert (metric(text, "mco_extender_watch_restarts_total", reason="error") or 0) >= 2

    # It lists again after its backoff: the recent pods reserve again.
    await wait_for(lambda: len(reservations) == 1, timeout=15, what="the re-list")
    assert await up(client) == 1.0
    assert await scores(client) == {"a": 7, "b": 8}
    assert len(list(kmock[f"list {PODS}"])) == 17


async def test_a_future_placement_time_reserves_nothing(kmock, kubeconfig, report, serve):
    """Issue 27 item 3: a pod whose PodScheduled time is 2100-01-01 reserved 0.1 on its node
    for as long as it existed. A time within the clock-skew allowance is the watch's now; one
    further ahead is not believed: that pod reserves nothing."""
    now = time.time()
    kmock.objects[PODS, "shop", "future"] = pod("future", "a", placed=4102444800.0)  # 2100
    kmock.objects[PODS, "shop", "skewed"] = pod("skewed", "b", placed=now + 3)
    client = await serve(watch_config(report, kubeconfig))
    reservations = client.server.app[RESERVATIONS]
    await wait_for(lambda: len(reservations) == 1, what="the pod list")
    [(node, placements)] = reservations.active(time.time()).items()
    assert node == "b" and all(p.at <= time.time() for p in placements.values())
    assert await scores(client) == {"a": 8, "b": 7}
