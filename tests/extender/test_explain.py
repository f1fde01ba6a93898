"""``POST /v1/explain`` through the real HTTP app: every field of the explanation against the
report it was made from (thresholds from ``status.config``, the level arithmetic redone here),
the paths for stale, unknown, violated and fallback nodes, and bad bodies answered 400."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from extender.config import DEFAULT_RESERVATION_SPAN, VerdictConfig
from extender.explain import MAX_NODES, decode
from extender.explain import explain as explain_nodes
from extender.judge import Judge
from extender.reports import ReportStore
from extender.verdict import weighted_score
from mco.labelselector import LabelSelector
from mco.policy import Policy
from reporter.engine import report_config
from reporter.schema import DetectionState, NodeEntry, Violation
from rulegen.model import DetectionRuleConfig, from_spec
from testkit import bodies
from tests.extender.conftest import cluster_report, file_config, rfc3339, write_reports

JSON = {"Content-Type": "application/json"}
POLICIES = [
    Policy("online", LabelSelector(match_labels={"tier": "online"}), max_level=0.3),
    Policy("scavenger", LabelSelector(match_labels={"tier": "scavenger"}),
           hard_constraints="Ignore", score_weight=0.5, reservation_per_pod=0.2),
    Policy("default"),
]  # fmt: skip
# Thresholds unlike the defaults, so the answer can only have them from the report.
SPEC = {
    "detections": {
        "ioCongestion": {"weight": 2.0, "signals": {"psiIOSome": {"warn": 0.2, "critical": 0.6}}},
        "memoryPressure": {
            "weight": 1.0,
            "fallback": {"memoryAvailableRatio": {"warn": 0.3, "critical": 0.1}},
        },
    },
    "hardConstraints": {"psiMemoryFullMax": 0.05},
    "report": {"staleAfter": "40s", "neutralScore": 60.0},
}


def node(
    now: float,
    *,
    io: float = 0.3,
    mem: float | None = 0.0,
    age: float = 1.0,
    schedulable: bool = True,
    violations: list[Violation] | None = None,
    fallback: bool = False,
    kata: bool = False,
    signals: dict[str, float] | None = None,
) -> NodeEntry:
    """An entry as the reporter writes it for ``SPEC``: indices from the signals, the level
    as the rules compute it (weights 2 and 1)."""
    io_index = min(1.0, max(0.0, (io - 0.2) / 0.4))
    detections = {"io_congestion": DetectionState(io_index, io >= 0.2)}
    level = io_index
    if mem is not None:
        detections["memory_pressure"] = DetectionState(mem, mem > 0)
        level = (2 * io_index + mem) / 3
    return NodeEntry(
        sample_time=rfc3339(now - age),
        schedulable=schedulable,
        fallback=fallback,
        kata_ready=kata,
        level=round(level, 6),
        score=round(100 * (1 - level), 3),
        reasons=[f"triggered:{k}" for k, d in detections.items() if d.triggered],
        detections=detections,
        signals={"psiIOSome": io, "psiMemorySome": 0.0, "psiMemoryFull": 0.0, **(signals or {})},
        violations=violations or [],
    )


def write(path, nodes: dict[str, NodeEntry], *, with_config: bool = True) -> None:
    report = cluster_report(nodes, heartbeat=time.time())
    if with_config:
        report.status.config = report_config(from_spec(SPEC), 12)
        report.status.config.policies = POLICIES
    write_reports(path, [report])


def pod(name: str = "web-1", namespace: str = "shop", **extra: Any) -> dict[str, Any]:
    labels = extra.pop("labels", {})
    spec = extra.pop("spec", {"containers": [{"name": "c", "image": "x"}]})
    return {"metadata": {"name": name, "namespace": namespace, "labels": labels}, "spec": spec}


async def explain(client, body: Any) -> dict[str, Any]:
    raw = await client.post("/v1/explain", data=json.dumps(body), headers=JSON)
    assert raw.status == 200, await raw.text()
    answer: dict[str, Any] = json.loads(await raw.read())
    return answer


async def one(client, name: str, **pod_fields: Any) -> dict[str, Any]:
    answer = await explain(client, {"pod": pod(**pod_fields), "nodes": [name]})
    [found] = answer["nodes"]
    assert isinstance(found, dict)
    return found


@pytest.fixture
async def client(serve, tmp_path):
    now = time.time()
    path = tmp_path / "report.json"
    write(
        path,
        {
            "calm": node(now, io=0.3, mem=0.25),
            "held": node(  # violated in the report, the value back under its limit
                now,
                io=0.1,
                schedulable=False,
                violations=[Violation("psi_memory_full", 0.08, 0.05)],
                signals={"psiMemoryFull": 0.01},
            ),
            "old": node(now, age=300),
            "nopsi": node(
                now, io=0.5, mem=0.5, fallback=True, signals={"memoryAvailableRatio": 0.2}
            ),
            "kata": node(now, kata=True),
        },
    )
    return await serve(file_config(path))


async def test_a_scored_node_is_explained_field_by_field(client):
    answer = await explain(client, {"pod": pod(), "nodes": ["calm"]})
    assert answer["ready"] is True
    assert answer["pod"]["pod"] == "shop/web-1"
    assert answer["pod"]["policy"]["name"] == "default"
    config = answer["config"]
    assert config == {
        "source": "report",
        "generation": 12,
        "thresholdsSource": "report",
        "staleAfterSeconds": 40.0,
        "neutralScore": 60.0,
        "failClosed": False,
    }
    [calm] = answer["nodes"]
    assert (calm["name"], calm["known"], calm["passed"], calm["reason"]) == (
        "calm", True, True, "ok"
    )  # fmt: skip
    why = calm["explanation"]
    io = why["detections"]["io_congestion"]
    assert io["index"] == pytest.approx(0.25)
    assert io["triggered"] is True
    assert (io["weight"], io["counted"], io["judgedBy"]) == (2.0, True, "signals")
    assert io["signals"]["psiIOSome"] == {
        "value": 0.3, "warn": 0.2, "critical": 0.6, "index": 0.25, "beyondWarn": True
    }  # fmt: skip
    mem = why["detections"]["memory_pressure"]
    assert (mem["index"], mem["weight"], mem["judgedBy"]) == (0.25, 1.0, "signals")
    assert mem["signals"]["psiMemorySome"]["index"] == 0.0  # the default thresholds apply
    # Detections not in the report's config are the defaults' (cache pollution, CPU).
    cpu = why["detections"]["cpu_contention"]
    assert (cpu["weight"], cpu["counted"], cpu["index"]) == (0.0, False, None)
    level = why["level"]
    assert [t["detection"] for t in level["terms"]] == ["io_congestion", "memory_pressure"]
    assert level["weightSum"] == 3.0
    assert level["weightedSum"] == pytest.approx(2 * 0.25 + 0.25)
    assert level["computed"] == pytest.approx(0.25)
    assert level["reported"] == pytest.approx(0.25)
    assert (level["reserved"], level["used"]) == (0.0, pytest.approx(0.25))
    score = why["score"]
    assert score["score"] == calm["score"] == weighted_score(0.25, 1.0, 60.0) == 75.0
    assert (score["neutral"], score["policyWeight"], score["kubeScore"]) == (60.0, 1.0, 8)
    assert score["volcanoScore"] == 75.0
    memfull = why["hardConstraints"]["psi_memory_full"]
    assert memfull == {
        "signal": "psiMemoryFull", "value": 0.0, "limit": 0.05, "exceeded": False,
        "violated": False, "held": False, "enforced": True,
    }  # fmt: skip
    default = DetectionRuleConfig.default().hard_constraints["psiIOSomeMax"]
    assert why["hardConstraints"]["psi_io_some"]["limit"] == default  # not in SPEC
    assert why["schedulable"] is True
    data = why["data"]
    assert 0.5 < data["ageSeconds"] < 30
    assert (data["stale"], data["live"], data["staleAfterSeconds"]) == (False, False, 40.0)
    assert data["heldUntil"] == data["sampleTime"]  # not live: it holds at its sample time
    assert data["heartbeat"] is not None
    assert why["path"] == {
        "psiFallback": False, "missingData": "fail-open", "taken": "scored by level"
    }  # fmt: skip
    assert why["reservation"] == {
        "reserved": 0.0, "perPod": 0.05, "tracked": True,
        "spanSeconds": DEFAULT_RESERVATION_SPAN, "pods": [],
    }  # fmt: skip
    assert why["kata"] == {
        "wanted": False, "runtimeClass": None, "reportReady": False, "nodeLabel": None,
        "ready": False,
    }  # fmt: skip
    assert why["reasons"] == ["triggered:io_congestion", "triggered:memory_pressure"]


async def test_the_policy_changes_the_verdict_and_its_arithmetic(client):
    online = await one(client, "calm", labels={"tier": "online"})
    assert (online["passed"], online["reason"]) == (True, "ok")  # 0.25 <= maxLevel 0.3
    scavenger = await one(client, "calm", labels={"tier": "scavenger"})
    assert scavenger["score"] == weighted_score(0.25, 0.5, 60.0) == 67.5
    assert scavenger["explanation"]["score"]["policyWeight"] == 0.5
    assert scavenger["explanation"]["reservation"]["perPod"] == 0.2
    nodes = ["nopsi", "calm"]  # calm passes, so nopsi's rejection stands (extender.fallback)
    answer = await explain(client, {"pod": pod(labels={"tier": "online"}), "nodes": nodes})
    assert answer["pod"]["policy"]["maxLevel"] == 0.3
    busy, _calm = answer["nodes"]
    assert (busy["passed"], busy["reason"]) == (False, "max_level")
    assert busy["explanation"]["path"]["taken"] == "policy maxLevel: rejected"
    # Asked alone, no node of the call is within the policy's limits: the least interfered pass.
    [alone] = (await explain(client, {"pod": pod(labels={"tier": "online"}), "nodes": ["nopsi"]}))[
        "nodes"
    ]
    assert (alone["passed"], alone["reason"]) == (True, "least_interfered")
    assert "above 0.3, the maxLevel of policy online" in alone["message"]
    assert alone["explanation"]["path"]["taken"].startswith("least interfered: passed")


def allocate(uid: str, node: str, labels: dict[str, str]) -> bytes:
    """Volcano's allocate call for a task of a pod with ``labels`` placed on ``node``."""
    p = bodies.pod(f"w-{uid}", "team-a", node_name=node, labels=labels)
    p["metadata"]["uid"] = uid
    return bodies.go_json({"task": bodies.task_info(p, status=2, node_name=node)})


async def test_the_reservation_that_applied_is_in_the_level_and_listed(client):
    for uid in ("u1", "u2"):  # scavenger pods reserve 0.2 each
        body = allocate(uid, "calm", {"tier": "scavenger"})
        assert (await client.post("/volcano/allocate", data=body, headers=JSON)).status == 200
    calm = await one(client, "calm")
    why = calm["explanation"]
    reservation = why["reservation"]
    assert reservation["reserved"] == pytest.approx(0.4)
    assert reservation["perPod"] == 0.05  # this pod's own policy (default)
    assert sorted(p["pod"] for p in reservation["pods"]) == ["u1", "u2"]
    assert {(p["amount"], p["source"]) for p in reservation["pods"]} == {(0.2, "volcano_verbs")}
    level = why["level"]
    assert (level["reported"], level["reserved"]) == (pytest.approx(0.25), pytest.approx(0.4))
    assert level["used"] == pytest.approx(0.65)
    assert calm["score"] == why["score"]["score"] == weighted_score(0.65, 1.0, 60.0)
    online = await one(client, "calm", labels={"tier": "online"})  # maxLevel 0.3 < 0.65
    # The call's only node, over the limit: passed as the least interfered, saying why not.
    assert (online["passed"], online["reason"]) == (True, "least_interfered")
    assert "reserved" in online["message"] and "maxLevel" in online["message"]


async def test_a_held_hard_constraint_is_told_apart_from_an_exceeded_one(client):
    answer = await explain(client, {"pod": pod(), "nodes": ["held", "calm"]})
    held = answer["nodes"][0]
    assert (held["passed"], held["reason"]) == (False, "hard_constraint")
    assert "psi_memory_full" in held["message"]  # the short form stays short
    constraint = held["explanation"]["hardConstraints"]["psi_memory_full"]
    assert constraint == {
        "signal": "psiMemoryFull", "value": 0.01, "limit": 0.05, "exceeded": False,
        "violated": True, "held": True, "enforced": True,
    }  # fmt: skip
    assert held["explanation"]["schedulable"] is False
    assert held["explanation"]["path"]["taken"] == "hard constraint: rejected"
    ignored = await one(client, "held", labels={"tier": "scavenger"})
    assert ignored["passed"] is True
    assert ignored["explanation"]["hardConstraints"]["psi_memory_full"]["enforced"] is False


async def test_stale_data_takes_the_missing_data_path(client):
    old = await one(client, "old")
    assert (old["passed"], old["reason"], old["score"]) == (True, "stale", 60.0)
    why = old["explanation"]
    assert why["data"]["stale"] is True
    assert why["data"]["ageSeconds"] > 290
    assert why["path"]["taken"] == "fail-open: neutral score"


async def test_fail_closed_is_the_path_when_the_extender_says_so(serve, tmp_path):
    path = tmp_path / "report.json"
    write(path, {"old": node(time.time(), age=300)})
    client = await serve(file_config(path, fail_closed=True))
    old = await one(client, "old")
    assert (old["passed"], old["reason"]) == (False, "stale")
    assert old["explanation"]["path"] == {
        "psiFallback": False, "missingData": "fail-closed", "taken": "fail-closed: rejected"
    }  # fmt: skip


async def test_without_psi_the_fallback_signals_are_shown(client):
    why = (await one(client, "nopsi"))["explanation"]
    mem = why["detections"]["memory_pressure"]
    assert mem["judgedBy"] == "fallback"
    available = mem["signals"]["memoryAvailableRatio"]
    # Lower is worse: warn 0.3 > critical 0.1, so 0.2 is half-way.
    assert available == {
        "value": 0.2, "warn": 0.3, "critical": 0.1, "index": 0.5, "beyondWarn": True
    }  # fmt: skip
    assert "psiMemorySome" not in mem["signals"]
    assert why["path"]["psiFallback"] is True


async def test_kata_evidence(client):
    kata = {"runtimeClassName": "kata-qemu", "containers": []}
    ready = await one(client, "kata", spec=kata)
    assert ready["passed"] is True
    assert ready["explanation"]["kata"] == {
        "wanted": True, "runtimeClass": "kata-qemu", "reportReady": True, "nodeLabel": None,
        "ready": True,
    }  # fmt: skip
    not_ready = await one(client, "calm", spec=kata)
    assert (not_ready["passed"], not_ready["reason"]) == (False, "kata_not_ready")
    assert not_ready["explanation"]["kata"]["ready"] is False
    assert not_ready["explanation"]["path"]["taken"] == "Kata: not ready, rejected"


async def test_unknown_nodes_get_an_unknown_entry_and_all_nodes_by_default(client):
    answer = await explain(client, {"pod": pod(), "nodes": ["ghost", "calm", "ghost"]})
    ghost, calm = answer["nodes"]
    assert ghost == {
        "name": "ghost", "known": False, "passed": True, "reason": "unknown",
        "message": "mco: no interference report for the node: neutral score", "score": 60.0,
        "volcanoCode": 0, "explanation": None,
    }  # fmt: skip
    assert calm["known"] is True
    every = await explain(client, {"pod": pod()})
    assert [n["name"] for n in every["nodes"]] == ["calm", "held", "kata", "nopsi", "old"]
    assert every["truncated"] is False


async def test_thresholds_are_the_defaults_until_the_report_carries_them(serve, tmp_path):
    path = tmp_path / "report.json"
    write(path, {"calm": node(time.time(), io=0.3)}, with_config=False)
    client = await serve(file_config(path))
    answer = await explain(client, {"pod": pod(), "nodes": ["calm"]})
    assert answer["config"]["thresholdsSource"] == "defaults"
    assert answer["config"]["source"] == "flags"
    signal = answer["nodes"][0]["explanation"]["detections"]["io_congestion"]["signals"]
    default = DetectionRuleConfig.default().threshold("psiIOSome")
    warn, critical = signal["psiIOSome"]["warn"], signal["psiIOSome"]["critical"]
    assert (warn, critical) == (default.warn, default.critical)
    index = min(1.0, max(0.0, (0.3 - warn) / (critical - warn)))
    assert signal["psiIOSome"]["index"] == pytest.approx(index)


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"", "empty request body"),
        (b"{not json", "invalid request body"),
        (b"[1, 2]", "invalid request body"),
        (b'"pod"', "invalid request body"),
        (b"{}", "explain needs"),
        (b'{"pod": null}', "explain needs"),
        (b'{"pod": 5}', "invalid request body"),
        (b'{"pod": {}, "nodes": "calm"}', "invalid request body"),
        (b'{"pod": {}, "nodes": [1]}', "invalid request body"),
        (b'{"pod": {}, "nodes": [""]}', "invalid request body"),
        (json.dumps({"pod": {}, "nodes": ["n" * 254]}).encode(), "invalid request body"),
        (json.dumps({"pod": {}, "nodes": [f"n{i}" for i in range(MAX_NODES + 1)]}).encode(),
         f"at most {MAX_NODES} nodes"),
        (json.dumps({"pod": {"spec": {"runtimeClassName": "k" * 254}}}).encode(),
         "runtimeClassName longer"),
        (b'{"pod": {"metadata": {"labels": {"a": 1}}}}', "invalid request body"),
        (b"\xff\xfe", "invalid request body"),
    ],
)  # fmt: skip
async def test_bad_bodies_are_answered_400_with_a_json_error(client, body, says):
    raw = await client.post("/v1/explain", data=body, headers=JSON)
    assert raw.status == 400
    assert says in json.loads(await raw.read())["error"]


async def test_a_body_over_the_limit_is_refused(serve, tmp_path):
    path = tmp_path / "report.json"
    write(path, {"calm": node(time.time())})
    config = file_config(path)
    client = await serve(config)
    big = json.dumps({"pod": pod(), "pad": "x" * config.max_body_bytes}).encode()
    raw = await client.post("/v1/explain", data=big, headers=JSON)
    assert raw.status == 413
    assert "error" in json.loads(await raw.read())


async def test_a_body_that_does_not_decode_is_400_and_the_route_keeps_serving(client):
    headers = {**JSON, "Content-Encoding": "deflate"}
    raw = await client.post("/v1/explain", data=b"\x00not deflate at all" * 10, headers=headers)
    assert raw.status == 400
    assert (await one(client, "calm"))["passed"] is True


def test_all_nodes_are_cut_at_the_bound_and_say_so():
    now = time.time()
    store = ReportStore()
    names = [f"n{i:04d}" for i in range(MAX_NODES + 1)]
    store.replace_all([cluster_report({n: node(now) for n in names}, heartbeat=now)])
    judge = Judge(store, VerdictConfig())
    answer = explain_nodes(decode(b'{"pod": {}}'), judge, now)
    assert answer.truncated is True
    assert [n.name for n in answer.nodes] == names[:MAX_NODES]
    assert answer.config.thresholds_source == "defaults"
    asked = explain_nodes(
        decode(b'{"pod": {}, "nodes": ["n1000"]}'), Judge(store, VerdictConfig()), now
    )
    assert (asked.truncated, [n.name for n in asked.nodes]) == (False, ["n1000"])


@pytest.mark.parametrize("labels", [{"tier": "online"}, {"tier": "scavenger"}, {}])
@pytest.mark.parametrize(
    "names",
    [["calm", "ghost", "old"], ["ghost", "old"], ["held", "ghost", "nopsi"], ["ghost"]],
)
async def test_explain_answers_what_filter_and_prioritize_answer(client, labels, names):
    """Node by node, the same pass: whether a node without data is rejected (no data is no
    proof) depends on the other nodes of the call, and explain sees the same nodes."""
    args = bodies.kube_args(names, labels=labels)
    filtered = json.loads(await (await client.post("/scheduler/filter", data=args)).read())
    scores = json.loads(await (await client.post("/scheduler/prioritize", data=args)).read())
    answer = await explain(client, {"pod": json.loads(args)["Pod"], "nodes": names})
    failed = {**filtered["FailedNodes"], **filtered["FailedAndUnresolvableNodes"]}
    kube = {s["Host"]: s["Score"] for s in scores}
    for n in answer["nodes"]:
        assert n["passed"] == (n["name"] in filtered["NodeNames"]), n
        assert n["passed"] or failed[n["name"]] == n["message"]
        assert kube[n["name"]] == min(10, max(0, int(n["score"] / 10 + 0.5))), n
    reasons = {n["name"]: n["reason"] for n in answer["nodes"]}
    online = labels == {"tier": "online"}
    # Neutral 60 is level 0.4, above online's maxLevel 0.3: rejected where another node of the
    # call has data (calm passes, held is over a hard constraint, nopsi has no level).
    with_data = online and bool({"calm", "held", "nopsi"} & set(names))
    # Where no node of the call passes (held over a hard constraint, nopsi over maxLevel), the
    # least interfered pass: ghost at the neutral level 0.4 (extender.fallback).
    rejected = "least_interfered" if "calm" not in names else "no_data"
    assert reasons["ghost"] == (rejected if with_data else "unknown")
    if "old" in names:  # stale data is no data either
        assert reasons["old"] == (rejected if with_data else "stale")
