"""Every route over real HTTP with realistic bodies: exact keys, JSON types and status codes as
Volcano's and kube-scheduler's clients decode them
(shared/reference/scheduler-extender-protocols.md)."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator

import pytest
from aiohttp import ClientSession

from extender.config import ExtenderConfig, SourceConfig, VerdictConfig
from reporter.schema import Violation
from testkit import bodies
from tests.extender.conftest import cluster_report, entry, file_config, metric, write_reports

JSON = {"Content-Type": "application/json"}


@pytest.fixture
def nodes():
    return {
        "calm": entry(0.2, kata=True),
        "busy": entry(0.9),
        "blocked": entry(
            0.4, schedulable=False, violations=[Violation("psi_memory_full", 0.05, 0.0)]
        ),
        "old": entry(0.1, age=120),
        "no-kata": entry(0.0, kata=False),
    }


@pytest.fixture
async def client(serve, tmp_path, nodes):
    path = tmp_path / "report.json"
    write_reports(path, [cluster_report(nodes)])
    return await serve(file_config(path))


async def post(client, path: str, body: bytes, headers=JSON):
    response = await client.post(path, data=body, headers=headers)
    return response.status, response.headers.get("Content-Type", ""), await response.read()


# --- Volcano predicate ---------------------------------------------------------------------


async def test_predicate_passes_a_calm_node_with_a_real_220kb_body(client):
    body = bodies.volcano_predicate("calm", tasks=21)
    assert 200_000 < len(body) < 240_000
    status, ctype, raw = await post(client, "/volcano/predicate", body)
    assert status == 200 and ctype.startswith("application/json")
    assert raw == b'{"status":"","code":0}'


async def test_predicate_rejects_a_hard_constraint_with_an_int_code(client):
    status, _, raw = await post(client, "/volcano/predicate", bodies.volcano_predicate("blocked"))
    assert status == 200
    assert re.fullmatch(rb'\{"status":"mco: node blocked violates hard constraint '
                        rb'psi_memory_full=0.05 \(limit 0\)","code":3\}', raw), raw  # fmt: skip


async def test_reject_code_two_is_configurable(serve, tmp_path, nodes):
    path = tmp_path / "report.json"
    write_reports(path, [cluster_report(nodes)])
    client = await serve(file_config(path, reject_code=2))
    _, _, raw = await post(client, "/volcano/predicate", bodies.volcano_predicate("blocked"))
    assert json.loads(raw)["code"] == 2 and raw.endswith(b',"code":2}')


async def test_predicate_kata_pod(client):
    ok = bodies.volcano_predicate("calm", runtime_class="kata-qemu")
    assert (await post(client, "/volcano/predicate", ok))[2] == b'{"status":"","code":0}'
    bad = bodies.volcano_predicate("no-kata", runtime_class="kata-qemu")
    answer = json.loads((await post(client, "/volcano/predicate", bad))[2])
    assert answer["code"] == 3 and "Kata-ready" in answer["status"]
    # The node's own label, carried in the NodeInfo, is enough on an unreported node.
    labelled = bodies.volcano_predicate("fresh-node", runtime_class="kata-qemu", kata=True)
    assert (await post(client, "/volcano/predicate", labelled))[2] == b'{"status":"","code":0}'
    unlabelled = bodies.volcano_predicate("fresh-node", runtime_class="kata-qemu", kata=False)
    assert json.loads((await post(client, "/volcano/predicate", unlabelled))[2])["code"] == 3
    # kata-deploy labels only the nodes it installed Kata on: on a node with no report, a Node
    # object without the label is evidence too, and the Kata pod is kept off it.
    plain = bodies.volcano_predicate("fresh-node", runtime_class="kata-qemu", kata=None)
    answer = json.loads((await post(client, "/volcano/predicate", plain))[2])
    assert answer["code"] == 3 and "Kata-ready" in answer["status"]
    # A name-only request about a node with no report carries no evidence of Kata: kept off
    # too (a Kata pod on a node without Kata cannot start), as unresolvable.
    names = bodies.kube_args(["fresh-node", "calm"], runtime_class="kata-qemu")
    answer = json.loads((await post(client, "/scheduler/filter", names))[2])
    assert answer["NodeNames"] == ["calm"]
    assert "not known to be Kata-ready" in answer["FailedAndUnresolvableNodes"]["fresh-node"]
    full = bodies.kube_args(["fresh-node"], node_cache_capable=False, runtime_class="kata-qemu")
    answer = json.loads((await post(client, "/scheduler/filter", full))[2])
    assert answer["Nodes"]["items"] == [] and "fresh-node" in answer["FailedAndUnresolvableNodes"]


async def test_predicate_unknown_and_stale_nodes_pass(client):
    for name in ("never-reported", "old", "busy"):
        raw = (await post(client, "/volcano/predicate", bodies.volcano_predicate(name)))[2]
        assert raw == b'{"status":"","code":0}', name


async def test_fail_closed_rejects_unknown_and_stale(serve, tmp_path, nodes):
    path = tmp_path / "report.json"
    write_reports(path, [cluster_report(nodes)])
    client = await serve(file_config(path, fail_closed=True))
    for name in ("never-reported", "old"):
        answer = json.loads(
            (await post(client, "/volcano/predicate", bodies.volcano_predicate(name)))[2]
        )
        assert answer["code"] == 3 and "fail-closed" in answer["status"], name


# --- Volcano prioritize and session hooks --------------------------------------------------


async def test_volcano_prioritize_scores_as_floats(client):
    names = ["calm", "busy", "blocked", "old", "never-reported"]
    status, _, raw = await post(
        client, "/volcano/prioritize", bodies.volcano_prioritize(names, tasks=5)
    )
    assert status == 200
    answer = json.loads(raw)
    assert answer == {
        "nodeScore": {
            "calm": 80.0,
            "busy": 10.0,
            "blocked": 0.0,
            "old": 50.0,
            "never-reported": 50.0,
        },
        "errorMessage": "",
    }
    assert b'"calm":80.0' in raw  # float64 on the Go side; ints would decode too


async def test_volcano_weight(serve, tmp_path, nodes):
    path = tmp_path / "report.json"
    write_reports(path, [cluster_report(nodes)])
    client = await serve(file_config(path, volcano_weight=2.5))
    raw = (
        await post(
            client, "/volcano/prioritize", bodies.volcano_prioritize(["calm", "old"], tasks=1)
        )
    )[2]
    assert json.loads(raw)["nodeScore"] == {"calm": 200.0, "old": 125.0}


@pytest.mark.parametrize(
    "body", [b'{"task":null,"nodes":[]}', b'{"task":null,"nodes":null}', b"{}"]
)
async def test_volcano_prioritize_nothing_to_score_is_an_empty_map_never_null(client, body):
    status, _, raw = await post(client, "/volcano/prioritize", body)
    assert status == 200 and raw == b'{"nodeScore":{},"errorMessage":""}'


async def test_session_hooks_answer_200_with_an_empty_body(client):
    snapshot = (
        b'{"Jobs":{},"Nodes":{'
        + b",".join(
            b'"n%d":' % i + bodies.go_json(bodies.node_info(f"n{i}", tasks=3)) for i in range(40)
        )
        + b'},"Queues":{},"NamespaceInfo":{},"RevocableNodes":{},"NodeList":null}'
    )
    assert len(snapshot) > 1 << 20
    for path, body in (("/volcano/onSessionOpen", snapshot), ("/volcano/onSessionClose", b"{}")):
        response = await client.post(path, data=body, headers=JSON)
        assert response.status == 200, path
        assert response.headers["Content-Length"] == "0" and await response.read() == b""


# --- kube-scheduler ------------------------------------------------------------------------


async def test_kube_filter_with_node_names(client):
    names = ["calm", "busy", "blocked", "old", "never-reported"]
    status, _, raw = await post(client, "/scheduler/filter", bodies.kube_args(names))
    assert status == 200
    answer = json.loads(raw)
    assert list(answer) == [
        "Nodes",
        "NodeNames",
        "FailedNodes",
        "FailedAndUnresolvableNodes",
        "Error",
    ]
    assert answer["Nodes"] is None and answer["Error"] == ""
    assert answer["NodeNames"] == ["calm", "busy", "old", "never-reported"]
    assert answer["FailedNodes"] == {}
    assert answer["FailedAndUnresolvableNodes"] == {
        "blocked": "mco: node blocked violates hard constraint psi_memory_full=0.05 (limit 0)"
    }


async def test_kube_filter_reject_code_two_uses_failed_nodes(serve, tmp_path, nodes):
    path = tmp_path / "report.json"
    write_reports(path, [cluster_report(nodes)])
    client = await serve(file_config(path, reject_code=2))
    answer = json.loads(
        (await post(client, "/scheduler/filter", bodies.kube_args(["blocked", "calm"])))[2]
    )
    assert list(answer["FailedNodes"]) == ["blocked"] and answer["FailedAndUnresolvableNodes"] == {}


async def test_kube_filter_with_full_nodes_echoes_them_byte_for_byte(client):
    names = ["calm", "blocked", "no-kata", "unknown"]
    body = bodies.kube_args(names, node_cache_capable=False, runtime_class="kata-clh",
                            kata_labels={"unknown": True})  # fmt: skip
    request = json.loads(body)
    status, _, raw = await post(client, "/scheduler/filter", body)
    assert status == 200
    answer = json.loads(raw)
    assert answer["NodeNames"] is None and answer["Error"] == ""
    assert answer["Nodes"]["metadata"] == {}
    kept = [n["metadata"]["name"] for n in answer["Nodes"]["items"]]
    assert kept == ["calm", "unknown"]  # Kata-ready by report, and by its own label
    for item in request["Nodes"]["items"]:
        if item["metadata"]["name"] in kept:
            assert bodies.go_json(item) in raw  # the original bytes, not a re-encoding
    assert set(answer["FailedAndUnresolvableNodes"]) == {"blocked", "no-kata"}


async def test_kube_prioritize_integer_scores(client):
    names = ["calm", "busy", "blocked", "old", "never-reported"]
    for cache in (True, False):
        status, _, raw = await post(
            client, "/scheduler/prioritize", bodies.kube_args(names, node_cache_capable=cache)
        )
        assert status == 200
        assert json.loads(raw) == [
            {"Host": "calm", "Score": 8},
            {"Host": "busy", "Score": 1},
            {"Host": "blocked", "Score": 0},
            {"Host": "old", "Score": 5},
            {"Host": "never-reported", "Score": 5},
        ]
        assert b".0" not in raw  # Score is an int64 on the Go side


async def test_kube_prioritize_5000_names(client):
    names = [f"node-{i:04d}" for i in range(5000)] + ["calm"]
    raw = (await post(client, "/scheduler/prioritize", bodies.kube_args(names)))[2]
    answer = json.loads(raw)
    assert len(answer) == 5001 and answer[-1] == {"Host": "calm", "Score": 8}
    assert all(a["Score"] == 5 for a in answer[:-1])


async def test_kube_empty_requests(client):
    raw = (await post(client, "/scheduler/filter", b'{"Pod":null,"Nodes":null,"NodeNames":[]}'))[2]
    assert json.loads(raw)["NodeNames"] == []
    assert (
        await post(client, "/scheduler/prioritize", b'{"Pod":null,"Nodes":null,"NodeNames":null}')
    )[2] == b"[]"


# --- bad input, body limits ----------------------------------------------------------------

ANY_ROUTE_BAD = [
    b"",
    b"   \n",
    b"{not json",
    b"[1, 2]",
    b"null",
    b"\xff\xfe\x00",
    b'{"a":1}garbage',
    b'{"a":' * 5000,  # nesting too deep to follow
    b"[" * 100_000,
]
ROUTE_BAD = {
    "/volcano/predicate": [
        b"{}",
        b'{"node": {"Name": 3}}',
        b'{"node": {"Name": ""}}',
        b'{"task": 5, "node": {"Name": "n"}}',
        b'{"task": {"Pod": {"spec": {"runtimeClassName": 1}}}, "node": {"Name": "n"}}',
    ],
    "/volcano/prioritize": [b'{"nodes": {}}', b'{"nodes": [{"Name": 5}]}', b'{"task": "x"}'],
    "/scheduler/filter": [
        b'{"Pod": 5}',
        b'{"NodeNames": "n1"}',
        b'{"NodeNames": [1, 2]}',
        b'{"Nodes": {"items": [{"metadata": {}}]}, "NodeNames": null}',
        b'{"Nodes": {"items": [7]}, "NodeNames": null}',
    ],
    "/scheduler/prioritize": [
        b'{"NodeNames": {"a": 1}}',
        b'{"Nodes": {"items": [{"metadata": {"name": ""}}]}, "NodeNames": null}',
    ],
}


@pytest.mark.parametrize("path", list(ROUTE_BAD))
async def test_bad_input_is_a_400_json_error_and_the_server_keeps_serving(client, path):
    for body in ANY_ROUTE_BAD + ROUTE_BAD[path]:
        status, ctype, raw = await post(client, path, body)
        assert status == 400, (path, body, raw)
        assert ctype.startswith("application/json")
        error = json.loads(raw)["error"]
        assert isinstance(error, str) and error
        if not body.strip():
            assert error.startswith("empty request body")
    assert (await post(client, "/volcano/predicate", bodies.volcano_predicate("calm")))[0] == 200
    assert (await client.get("/healthz")).status == 200


async def test_body_limit_is_configurable_and_answers_413(serve, tmp_path, nodes):
    path = tmp_path / "report.json"
    write_reports(path, [cluster_report(nodes)])
    config = ExtenderConfig(
        source=SourceConfig(report_file=str(path), poll_interval=0.05), max_body_bytes=1 << 20
    )
    client = await serve(config)
    big = bodies.volcano_prioritize([f"n{i}" for i in range(40)], tasks=2)
    assert len(big) > 1 << 20
    status, ctype, raw = await post(client, "/volcano/prioritize", big)
    assert status == 413 and ctype.startswith("application/json") and json.loads(raw)["error"]

    # Chunked (no Content-Length): aiohttp's own limit is the same number.
    async def chunks() -> AsyncIterator[bytes]:
        for i in range(0, len(big), 65536):
            yield big[i : i + 65536]

    response = await client.post("/volcano/prioritize", data=chunks(), headers=JSON)
    assert response.status == 413
    assert (await post(client, "/volcano/predicate", bodies.volcano_predicate("calm")))[0] == 200


async def test_large_bodies_beyond_aiohttp_default_are_accepted(client):
    names = [f"n{i:03d}" for i in range(300)] + ["calm"]
    big = bodies.volcano_prioritize(names, tasks=3)
    assert len(big) > 12 << 20  # far past aiohttp's 1 MiB default client_max_size
    status, _, raw = await post(client, "/volcano/prioritize", big)
    assert status == 200
    scores = json.loads(raw)["nodeScore"]
    assert len(scores) == 301 and scores["calm"] == 80.0

    async def chunks() -> AsyncIterator[bytes]:
        for i in range(0, len(big), 1 << 20):
            yield big[i : i + (1 << 20)]

    async with ClientSession() as session:  # chunked transfer encoding, no Content-Length
        response = await session.post(
            client.make_url("/volcano/prioritize"), data=chunks(), headers=JSON
        )
        assert response.status == 200 and len((await response.json())["nodeScore"]) == 301


# --- operator routes -----------------------------------------------------------------------


async def test_health_and_readiness(serve, tmp_path, nodes):
    path = tmp_path / "report.json"  # not there yet
    client = await serve(file_config(path), ready=False)
    assert (await client.get("/healthz")).status == 200
    assert (await client.get("/readyz")).status == 503
    # Not ready, but already answering: neutral, fail-open.
    assert (await post(client, "/volcano/predicate", bodies.volcano_predicate("calm")))[
        2
    ] == b'{"status":"","code":0}'
    write_reports(path, [cluster_report(nodes)])
    for _ in range(100):
        if (await client.get("/readyz")).status == 200:
            break
        import asyncio

        await asyncio.sleep(0.05)
    assert (await client.get("/readyz")).status == 200


async def test_v1_nodes(client):
    response = await client.get("/v1/nodes")
    assert response.status == 200
    view = await response.json()
    assert view["ready"] is True and view["staleAfterSeconds"] == 30.0
    assert view["layouts"] == {"cluster": 1}
    by_name = {n["name"]: n for n in view["nodes"]}
    assert list(by_name) == sorted(by_name)
    calm = by_name["calm"]
    assert calm["verdict"] == {"passed": True, "reason": "ok", "message": "", "volcanoScore": 80.0,
                               "kubeScore": 8, "volcanoCode": 0}  # fmt: skip
    assert calm["level"] == 0.2 and calm["kataReady"] is True and not calm["stale"]
    assert 0 <= calm["ageSeconds"] < 5
    assert calm["detections"] == {"io_congestion": {"index": 0.2, "triggered": True}}
    blocked = by_name["blocked"]
    assert (
        blocked["verdict"]["passed"] is False and blocked["verdict"]["reason"] == "hard_constraint"
    )
    assert blocked["violations"] == [{"constraint": "psi_memory_full", "value": 0.05, "limit": 0.0}]
    assert by_name["old"]["stale"] is True and by_name["old"]["verdict"]["reason"] == "stale"
    assert by_name["no-kata"]["kataVerdict"]["reason"] == "kata_not_ready"


async def test_metrics(client):
    await post(client, "/volcano/predicate", bodies.volcano_predicate("blocked"))
    await post(client, "/scheduler/prioritize", bodies.kube_args(["calm", "old", "x"]))
    await post(client, "/scheduler/filter", b"{oops")
    text = await (await client.get("/metrics")).text()
    duration = "mco_extender_request_duration_seconds"
    assert metric(text, f"{duration}_count", route="volcano_predicate") == 1
    assert metric(text, f"{duration}_bucket", route="scheduler_prioritize", le="0.5") == 1
    assert metric(text, "mco_extender_requests_total", code="400", route="scheduler_filter") == 1
    verdicts = "mco_extender_verdicts_total"
    route = "scheduler_prioritize"
    assert metric(text, verdicts, reason="ok", route=route, verdict="pass") == 1
    assert metric(text, verdicts, reason="stale", route=route, verdict="pass") == 1
    assert metric(text, verdicts, reason="unknown", route=route, verdict="pass") == 1
    assert (
        metric(text, verdicts, reason="hard_constraint", route="volcano_predicate", verdict="fail")
        == 1
    )
    assert metric(text, "mco_extender_report_nodes", state="stale") == 1
    assert metric(text, "mco_extender_report_nodes", state="fresh") == 4
    assert metric(text, "mco_extender_report_loaded") == 1
    assert 119 < (metric(text, "mco_extender_report_oldest_sample_age_seconds") or 0) < 130
    assert 0 <= (metric(text, "mco_extender_report_newest_sample_age_seconds") or -1) < 10
    assert metric(text, "mco_extender_report_objects", layout="cluster") == 1


async def test_json_config_is_what_verdicts_use(serve, tmp_path, nodes):
    path = tmp_path / "report.json"
    write_reports(path, [cluster_report(nodes)])
    client = await serve(
        ExtenderConfig(
            verdict=VerdictConfig(stale_after=600),
            source=SourceConfig(report_file=str(path), poll_interval=0.05),
        )
    )
    raw = (await post(client, "/scheduler/prioritize", bodies.kube_args(["old"])))[2]
    assert json.loads(raw) == [{"Host": "old", "Score": 9}]  # 120 s old is fresh under 600 s
