"""Reservations for pods placed since their node's data: the store itself, and through the real
HTTP app: Volcano's allocate/deallocate calls, the placed tasks of its NodeInfos, the verdict
tables, expiry by the node's data time, the cap, bad input, and the metrics."""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from typing import Any

import pytest

from extender import volcano
from extender.app import RESERVATIONS, STORE
from extender.config import ExtenderConfig, ReservationConfig, SourceConfig
from extender.reservation import (
    POD_WATCH,
    VOLCANO_TASKS,
    VOLCANO_VERBS,
    Placement,
    Reservations,
)
from mco.labelselector import LabelSelector
from mco.policy import WORKLOAD_CLASS_LABEL, Policy
from reporter.schema import NodeEntry, NodeInterferenceReport, ReportConfig
from testkit import bodies
from tests.extender.conftest import cluster_report, entry, metric, wait_for, write_reports

SPAN = 15.0


# -- the store ------------------------------------------------------------------------------


def test_only_placements_the_data_cannot_show_count_capped_at_one() -> None:
    r = Reservations(span=SPAN, keep_for=SPAN + 30)
    now = 1_000_000.0
    r.place("p1", Placement("a", 0.3, now - 20, VOLCANO_VERBS))
    r.place("p2", Placement("a", 0.3, now - 5, VOLCANO_VERBS))
    r.place("p3", Placement("b", 0.3, now - 5, VOLCANO_VERBS))
    # Data that holds up to now shows pods placed before now - span: p1 only.
    assert r.reserved("a", now, now) == pytest.approx(0.3)
    # Data 10 s old cannot show p1 (placed 10 s before it, less than the span) either.
    assert r.reserved("a", now - 10, now) == pytest.approx(0.6)
    # Data that holds up to placement + span shows the pod: its reservation ends.
    assert r.reserved("a", now - 5 + SPAN, now) == 0.0
    assert r.reserved("c", now, now) == 0.0  # no placements there
    assert r.reserved("a", float("-inf"), now) == 0.0  # no data to add to
    for i in range(5):
        r.place(f"q{i}", Placement("b", 0.3, now, VOLCANO_VERBS))
    assert r.reserved("b", now, now) == 1.0  # 1.8, capped


def test_a_pod_counts_once_from_its_first_placement_and_moves_with_its_node() -> None:
    r = Reservations(span=SPAN, keep_for=SPAN + 30)
    assert r.place("p", Placement("a", 0.2, 100.0, VOLCANO_TASKS))
    assert not r.place("p", Placement("a", 0.2, 105.0, VOLCANO_TASKS))  # seen again
    assert r.reserved("a", 100.0 + SPAN - 1, 110.0) == pytest.approx(0.2)  # still from 100
    assert r.place("p", Placement("b", 0.2, 106.0, VOLCANO_VERBS))  # placed elsewhere now
    assert r.reserved("a", 100.0, 110.0) == 0.0
    assert r.reserved("b", 100.0, 110.0) == pytest.approx(0.2)
    assert r.remove("p") and not r.remove("p") and len(r) == 0


def test_memory_follows_recent_placements_only() -> None:
    r = Reservations(span=SPAN, keep_for=45.0, max_placements=100)
    for i in range(1000):
        r.place(f"p{i}", Placement(f"n{i % 7}", 0.01, float(i), VOLCANO_VERBS))
    assert len(r) == 100  # the oldest went first
    assert set(r.active(1000.0)) == {f"n{i}" for i in range(7)}
    # Placements older than keep_for are forgotten as time passes.
    assert len(r.active(998.0 + 45.0 + 0.5)) == 1 and len(r) == 1
    assert not r.active(2000.0) and len(r) == 0


def test_clearing_a_source_keeps_the_others() -> None:
    r = Reservations(span=SPAN, keep_for=45.0)
    r.place("w", Placement("a", 0.1, 10.0, POD_WATCH))
    r.place("v", Placement("a", 0.1, 10.0, VOLCANO_VERBS))
    r.clear(POD_WATCH)
    assert r.reserved("a", 10.0, 10.0) == pytest.approx(0.1) and len(r) == 1


# -- through the HTTP app -------------------------------------------------------------------


# The amount a pod reserves is its policy's: 0.3 for "heavy" pods, 0.1 for the others here.
HEAVY = {WORKLOAD_CLASS_LABEL: "heavy"}
ONLINE = {WORKLOAD_CLASS_LABEL: "online"}
POLICIES = [
    Policy("heavy", LabelSelector(match_labels=HEAVY), reservation_per_pod=0.3),
    Policy("online", LabelSelector(match_labels=ONLINE), max_level=0.35, reservation_per_pod=0.1),
    Policy("default", reservation_per_pod=0.1),
]


def with_policies(nodes: dict[str, NodeEntry]) -> NodeInterferenceReport:
    report = cluster_report(nodes)
    report.status.config = ReportConfig("30s", 50.0, POLICIES, 1)
    return report


def config(path: Path, **reservation: Any) -> ExtenderConfig:
    return ExtenderConfig(
        source=SourceConfig(report_file=str(path), poll_interval=0.05),
        reservation=ReservationConfig(**reservation),
    )


@pytest.fixture
def report(tmp_path: Path) -> Path:
    path = tmp_path / "report.json"
    write_reports(path, [with_policies({"a": entry(0.2), "b": entry(0.2)})])
    return path


def task(uid: str, node: str, status: int = 2, labels: dict[str, str] | None = None) -> Any:
    p = bodies.pod(f"w-{uid}", "team-a", node_name=node)
    p["metadata"]["uid"] = uid
    if labels is not None:
        p["metadata"]["labels"].update(labels)
    return bodies.task_info(p, status=status, node_name=node)


def event(t: Any) -> bytes:
    return bodies.go_json({"task": t})


async def volcano_scores(client: Any, nodes: list[str], body: bytes | None = None) -> Any:
    body = body or bodies.volcano_prioritize(nodes, tasks=2)
    response = await client.post("/volcano/prioritize", data=body)
    assert response.status == 200
    return json.loads(await response.read())["nodeScore"]


async def kube_scores(client: Any, nodes: list[str]) -> dict[str, int]:
    raw = await (await client.post("/scheduler/prioritize", data=bodies.kube_args(nodes))).read()
    return {h["Host"]: h["Score"] for h in json.loads(raw)}


async def node_view(client: Any, name: str) -> Any:
    view = json.loads(await (await client.get("/v1/nodes")).read())
    return next(n for n in view["nodes"] if n["name"] == name)


async def placements(client: Any, source: str, result: str) -> float:
    text = await (await client.get("/metrics")).text()
    return metric(text, "mco_extender_placements_total", source=source, result=result) or 0.0


async def test_allocate_and_deallocate_change_the_next_answers(serve, report):
    client = await serve(config(report))
    # Tables filled before the placement must not hide it.
    assert await kube_scores(client, ["a", "b"]) == {"a": 8, "b": 8}
    assert await volcano_scores(client, ["a", "b"]) == {"a": 80.0, "b": 80.0}

    response = await client.post("/volcano/allocate", data=event(task("u1", "a")))
    assert response.status == 200
    assert await response.read() == b'{"errorMessage":""}'
    assert await volcano_scores(client, ["a", "b"]) == {"a": 70.0, "b": 80.0}
    assert await kube_scores(client, ["a", "b"]) == {"a": 7, "b": 8}
    pred = bodies.volcano_predicate("a")
    assert json.loads(await (await client.post("/volcano/predicate", data=pred)).read()) == {
        "status": "",
        "code": 0,
    }
    a = await node_view(client, "a")
    assert (a["level"], a["reservation"]) == (0.2, pytest.approx(0.1))
    assert a["verdict"]["volcanoScore"] == 70.0 and a["verdict"]["kubeScore"] == 7
    assert "measured level 0.2 + reservation 0.1" in a["verdict"]["message"]
    assert (await node_view(client, "b"))["reservation"] == 0.0
    assert await placements(client, VOLCANO_VERBS, "recorded") == 1

    # Pipelined (4) counts as well; the same task allocated again counts once.
    await client.post("/volcano/allocate", data=event(task("u2", "a", status=4)))
    await client.post("/volcano/allocate", data=event(task("u2", "a", status=4)))
    assert await volcano_scores(client, ["a", "b"]) == {"a": 60.0, "b": 80.0}

    response = await client.post("/volcano/deallocate", data=event(task("u1", "a")))
    assert (response.status, await response.read()) == (200, b'{"errorMessage":""}')
    assert await volcano_scores(client, ["a", "b"]) == {"a": 70.0, "b": 80.0}
    assert await kube_scores(client, ["a"]) == {"a": 7}
    assert await placements(client, VOLCANO_VERBS, "removed") == 1

    # A deallocate of a task never placed, and an allocate to a node no report knows: 200,
    # nothing changes.
    assert (await client.post("/volcano/deallocate", data=event(task("zz", "a")))).status == 200
    assert (await client.post("/volcano/allocate", data=event(task("u9", "nowhere")))).status == 200
    assert len(client.server.app[RESERVATIONS]) == 1
    assert await placements(client, VOLCANO_VERBS, "unknown_node") == 1
    assert await kube_scores(client, ["a", "b", "nowhere"]) == {"a": 7, "b": 8, "nowhere": 5}


async def test_the_reservation_is_capped_at_one(serve, report):
    client = await serve(config(report))
    for i in range(5):  # heavy pods: 0.3 each
        await client.post("/volcano/allocate", data=event(task(f"u{i}", "a", labels=HEAVY)))
    a = await node_view(client, "a")
    assert a["reservation"] == 1.0  # 1.5, capped
    assert a["verdict"]["volcanoScore"] == 0.0  # level 0.2 + 1, capped at 1
    assert await volcano_scores(client, ["a", "b"]) == {"a": 0.0, "b": 80.0}


async def test_the_reservation_counts_toward_a_policys_max_level(serve, report):
    """Level 0.2 passes online pods (maxLevel 0.35); two pods just placed (0.1 each) make it
    0.4: a node the burst just filled is filtered for them, not for the others."""
    client = await serve(config(report))

    async def online_filter() -> Any:
        body = bodies.kube_args(["a", "b"], labels=ONLINE)
        return json.loads(await (await client.post("/scheduler/filter", data=body)).read())

    assert (await online_filter())["NodeNames"] == ["a", "b"]
    for i in range(2):
        await client.post("/volcano/allocate", data=event(task(f"u{i}", "a", labels=ONLINE)))
    answer = await online_filter()
    assert answer["NodeNames"] == ["b"]
    why = answer["FailedAndUnresolvableNodes"]["a"]
    assert "0.2 + 0.2 reserved" in why and "maxLevel of policy online" in why
    assert await kube_scores(client, ["a", "b"]) == {"a": 6, "b": 8}  # other pods: scored
    a = await node_view(client, "a")
    assert a["policyVerdicts"]["online"]["reason"] == "max_level"
    assert a["verdict"]["passed"] and a["reservation"] == pytest.approx(0.2)


async def test_the_reservation_ends_when_the_data_can_show_the_pod(serve, report):
    client = await serve(config(report, span=2.0))
    placed = time.time()
    await client.post("/volcano/allocate", data=event(task("u1", "a")))
    assert await kube_scores(client, ["a"]) == {"a": 7}
    # New data for a, sampled after placement + span (a little ahead of this clock, within the
    # allowed skew): the pod is in it, the reservation ends.
    write_reports(report, [with_policies({"a": entry(0.2, now=placed + 2.5), "b": entry(0.2)})])
    store = client.server.app[STORE]
    await wait_for(lambda: store.get("a").sampled_at > placed + 2, what="the new report")
    assert (await node_view(client, "a"))["reservation"] == 0.0
    assert await kube_scores(client, ["a"]) == {"a": 8}
    assert await volcano_scores(client, ["a"]) == {"a": 80.0}


@pytest.mark.parametrize(
    ("route", "body", "why"),
    [
        ("allocate", b"", "empty request body"),
        ("allocate", b"{", "invalid request body"),
        ("allocate", b"[]", "invalid request body"),
        ("allocate", b"{}", "needs a task"),
        ("allocate", b'{"task": null}', "needs a task"),
        ("allocate", b'{"task": {"NodeName": "a", "Status": 2}}', "needs a UID"),
        ("allocate", b'{"task": {"UID": "u", "Status": 2}}', "needs its NodeName"),
        ("allocate", b'{"task": {"UID": 7, "NodeName": "a"}}', "invalid request body"),
        ("allocate", b'{"task": {"UID": "u", "NodeName": "a", "Status": "2"}}', "invalid"),
        (
            "allocate",
            b'{"task": {"UID": "u", "NodeName": "a", "Pod": {"metadata": {"labels": {"x": 1}}}}}',
            "invalid request body",
        ),
        ("allocate", b'{"task": {"UID": "' + b"u" * 254 + b'", "NodeName": "a"}}', "longer"),
        ("deallocate", b"{", "invalid request body"),
        ("deallocate", b'{"task": {}}', "needs a UID"),
    ],
)
async def test_malformed_allocate_and_deallocate_bodies_get_400_and_change_nothing(
    serve, report, route, body, why
):
    client = await serve(config(report))
    await client.post("/volcano/allocate", data=event(task("keep", "a")))
    response = await client.post(f"/volcano/{route}", data=body)
    assert response.status == 400
    assert why in json.loads(await response.read())["error"]
    assert len(client.server.app[RESERVATIONS]) == 1
    assert await volcano_scores(client, ["a", "b"]) == {"a": 70.0, "b": 80.0}


def with_tasks(node_info: Any, statuses: list[int], node: str = "a") -> Any:
    """The NodeInfo with one more task per status, placed on ``node``."""
    info = copy.deepcopy(node_info)
    for i, status in enumerate(statuses):
        info["Tasks"][f"team-a/new-{i}"] = task(f"new-{status}-{i}", node, status=status)
    return info


async def test_nodeinfo_tasks_count_only_when_placed_and_not_running(serve, report):
    client = await serve(config(report, volcano_placements="tasks"))
    # Running (32), Pending (1), Releasing (64) and Succeeded (128) do not count; Allocated,
    # Pipelined, Binding and Bound do.
    info = with_tasks(bodies.node_info("a", tasks=20), [1, 2, 4, 8, 16, 32, 64, 128])
    body = bodies.go_json({"task": bodies.pending_task(), "node": info})
    assert len(body) > 64 << 10  # large enough for the predicate's fast path
    response = await client.post("/volcano/predicate", data=body)
    assert response.status == 200
    assert len(client.server.app[RESERVATIONS]) == 4
    assert await placements(client, VOLCANO_TASKS, "recorded") == 4
    assert (await node_view(client, "a"))["reservation"] == pytest.approx(0.4)
    assert await kube_scores(client, ["a", "b"]) == {"a": 4, "b": 8}

    # A prioritize body: its NodeInfos' placed tasks count in the very answer.
    nodes = [with_tasks(bodies.node_info(n, tasks=3), [2], node=n) for n in ("b", "a")]
    for n, info in zip("ba", nodes, strict=True):
        info["Tasks"]["team-a/new-0"]["UID"] = f"prio-{n}"
    body = bodies.go_json({"task": bodies.pending_task(), "nodes": nodes})
    assert await volcano_scores(client, [], body) == {"a": 30.0, "b": 70.0}
    # A task placed on a node no report knows is ignored.
    info = with_tasks(bodies.node_info("a", tasks=3), [2], node="nowhere")
    await client.post("/volcano/predicate", data=bodies.go_json({"task": None, "node": info}))
    assert await placements(client, VOLCANO_TASKS, "unknown_node") == 1


@pytest.mark.parametrize("mode", ["auto", "verbs"])
async def test_tasks_are_not_read_once_the_verbs_are_in_use(serve, report, mode):
    client = await serve(config(report, volcano_placements=mode))
    info = with_tasks(bodies.node_info("a", tasks=20), [2])
    body = bodies.go_json({"task": bodies.pending_task(), "node": info})
    await client.post("/volcano/predicate", data=body)
    assert len(client.server.app[RESERVATIONS]) == (1 if mode == "auto" else 0)
    # Volcano sends allocate calls: from now on the calls alone say where tasks went.
    await client.post("/volcano/deallocate", data=event(task("other", "b")))
    info = with_tasks(bodies.node_info("a", tasks=20), [2, 2])
    info["Tasks"]["team-a/new-1"]["UID"] = "later"
    await client.post(
        "/volcano/predicate", data=bodies.go_json({"task": bodies.pending_task(), "node": info})
    )
    assert len(client.server.app[RESERVATIONS]) == (1 if mode == "auto" else 0)


async def test_a_nodeinfo_scanned_before_is_not_scanned_again(serve, report):
    client = await serve(config(report, volcano_placements="tasks"))
    reservations = client.server.app[RESERVATIONS]
    info = with_tasks(bodies.node_info("a", tasks=20), [2])
    body = bodies.go_json({"task": bodies.pending_task(), "node": info})
    await client.post("/volcano/predicate", data=body)
    assert len(reservations) == 1
    await client.post("/volcano/deallocate", data=event(task("new-2-0", "a")))
    assert len(reservations) == 0
    # The same NodeInfo again, for another pending task: not scanned again.
    other = bodies.go_json({"task": bodies.pending_task("train-42-worker-17"), "node": info})
    await client.post("/volcano/predicate", data=other)
    assert len(reservations) == 0
    # The NodeInfo changed (here only its Generation, at the end of the body): scanned.
    info["Generation"] += 1
    await client.post(
        "/volcano/predicate", data=bodies.go_json({"task": bodies.pending_task(), "node": info})
    )
    assert len(reservations) == 1

    # Prioritize: the same node list again is not scanned again either; a new task on a node is.
    nodes = [with_tasks(bodies.node_info(n, tasks=3), [], node=n) for n in ("a", "b")]
    nodes[1]["Tasks"]["team-a/p"] = task("p1", "b")
    body = bodies.go_json({"task": bodies.pending_task(), "nodes": nodes})
    assert await volcano_scores(client, [], body) == {"a": 70.0, "b": 70.0}
    await client.post("/volcano/deallocate", data=event(task("p1", "b")))
    assert await volcano_scores(client, [], body) == {"a": 70.0, "b": 80.0}
    nodes[1]["Tasks"]["team-a/q"] = task("q1", "b")
    body = bodies.go_json({"task": bodies.pending_task(), "nodes": nodes})
    assert await volcano_scores(client, [], body) == {"a": 70.0, "b": 60.0}  # p1 and q1


def test_placed_tasks_are_found_by_their_own_status_only() -> None:
    """A Running task whose LastTransaction says Allocated is not placed; the pending task of
    the body (Pending, no node) is not either; a body that is not Go's compact JSON yields none
    (a missed reservation, never a wrong one)."""
    running = task("r", "a", status=32)
    running["LastTransaction"] = {
        "NodeName": "a", "EvictionOccurred": False, "JobAllocatedHyperNode": "", "Status": 2,
    }  # fmt: skip
    info = bodies.node_info("a", tasks=2)
    info["Tasks"].update({"x/r": running, "x/b": task("b", "a", status=16, labels=HEAVY)})
    body = bodies.go_json({"task": bodies.pending_task(), "node": info})
    (found,) = volcano.placed_tasks(body)
    assert (found.key, found.node_name, found.status) == ("b", "a", 16)
    assert found.labels[WORKLOAD_CLASS_LABEL] == "heavy"
    pretty = json.dumps(json.loads(body), indent=1).encode()
    assert volcano.placed_tasks(pretty) == []


def test_expiry_does_not_depend_on_insertion_order() -> None:
    """Issue 27 item 3: a placement dated far ahead, inserted first, kept every later one from
    expiring (expiry walked the placements in insertion order and stopped at the first)."""
    r = Reservations(span=SPAN, keep_for=45.0)
    r.place("future", Placement("a", 0.2, 4102444800.0, POD_WATCH))
    r.place("relisted-late", Placement("b", 0.2, 990.0, POD_WATCH))
    r.place("earlier", Placement("b", 0.2, 900.0, POD_WATCH))  # a re-list: older, later
    for i in range(10):
        r.place(f"p{i}", Placement("c", 0.1, 1000.0 + i, VOLCANO_VERBS))
    assert set(r.active(1000.0)) == {"a", "b", "c"}
    assert set(r.active(990.0 + 45.0 + 0.5)) == {"a", "c"} and len(r) == 11
    assert set(r.active(1009.0 + 45.0 + 0.5)) == {"a"} and len(r) == 1
