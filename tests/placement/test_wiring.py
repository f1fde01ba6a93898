"""How the benchmark wires its pipelines and measures them: the observer's rules, which
decisions count for the extender's CPU, Volcano's allocate, and Prometheus's rule lag."""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from bench.placement import run
from bench.placement.cluster import Cluster
from bench.placement.model import NODE_CPU, Demand
from bench.placement.pipeline import Pipeline, config_spec, rule_evaluation
from bench.placement.scheduler import DefaultScheduler, KubeExtender, VolcanoExtender
from bench.placement.trace import PodSpec
from rulegen.model import from_spec
from rulegen.render import render_rules
from tests.placement.served import served


def _args(**kw: Any) -> argparse.Namespace:
    fields = {"overrides": (), "avoid_per_pod": None, "triggered_level": None,
              "scrape_interval": 1.0, "evaluation_interval": 1.0, **kw}  # fmt: skip
    return argparse.Namespace(**fields)


def test_the_baselines_are_observed_by_their_own_pipeline_with_mco_fulls_rules() -> None:
    policies = {p.name: p for p in run.POLICY_SETS}
    assert {p.name: p.pipeline for p in policies.values()} == {
        "default": "observer",
        "native-affinity": "observer",
        "node-pool": "observer",
        "tier-labels": "observer",
        "mco-labels-only": "labels-only",
        "mco-full": "full",
    }
    args = _args(overrides=(("batch", "triggeredLevel", 0.4),), avoid_per_pod=0.07)
    full = run.pipeline_spec(args, policies, "full")
    assert run.pipeline_spec(args, policies, "observer") == full
    batch = next(p for p in full["policies"] if p["name"] == "batch")
    assert (batch["triggeredLevel"], batch["avoidPerPod"]) == (0.4, 0.07)
    basic = run.pipeline_spec(args, {**policies, "b": run.PolicySet("mco-basic", True)}, "basic")
    assert all(p["reservationPerPod"] == 0 for p in basic["policies"])


def test_labels_only_switches_off_every_use_of_the_interference_signal() -> None:
    """The ablation: online maxLevel 1 and no hard constraints, every scoreWeight 0, batch
    triggeredLevel 0; the label avoidance (avoidPolicies, avoidPerPod 0.1) kept."""
    policies = {p.name: p for p in run.POLICY_SETS}
    spec = run.pipeline_spec(_args(), policies, "labels-only")
    by = {p["name"]: p for p in spec["policies"]}
    assert all(p["scoreWeight"] == 0 for p in by.values())
    assert all(p["hardConstraints"] == "Ignore" for p in by.values())
    assert by["latency-sensitive"]["maxLevel"] == 1.0
    assert all(p["triggeredLevel"] == 0 for p in by.values())
    for name in ("batch", "best-effort"):
        assert by[name]["avoidPolicies"] == ["latency-sensitive"]
        assert by[name]["avoidPerPod"] == 0.1
    assert from_spec(spec).to_spec()["policies"] == spec["policies"]  # a valid config


EXPOSITION = """\
# HELP prometheus_rule_group_interval_seconds The interval of a rule group.
# TYPE prometheus_rule_group_interval_seconds gauge
prometheus_rule_group_interval_seconds{rule_group="/w/rules.yaml;mco.detect"} 1
prometheus_rule_group_interval_seconds{rule_group="/w/rules.yaml;mco.explain"} 1
prometheus_rule_group_interval_seconds{rule_group="/w/rules.yaml;mco.alerts"} 30
# HELP prometheus_rule_group_last_duration_seconds The duration of the last rule group evaluation.
# TYPE prometheus_rule_group_last_duration_seconds gauge
prometheus_rule_group_last_duration_seconds{rule_group="/w/rules.yaml;mco.detect"} 0.25
prometheus_rule_group_last_duration_seconds{rule_group="/w/rules.yaml;mco.explain"} 1.5
prometheus_rule_group_last_duration_seconds{rule_group="/w/rules.yaml;mco.alerts"} 2
# HELP prometheus_rule_group_iterations_missed_total The total number of rule group evaluations missed due to slow rule group evaluation.
# TYPE prometheus_rule_group_iterations_missed_total counter
prometheus_rule_group_iterations_missed_total{rule_group="/w/rules.yaml;mco.detect"} 0
prometheus_rule_group_iterations_missed_total{rule_group="/w/rules.yaml;mco.explain"} 7
# HELP prometheus_rule_group_iterations_total The total number of scheduled rule group evaluations, whether executed or missed.
# TYPE prometheus_rule_group_iterations_total counter
prometheus_rule_group_iterations_total{rule_group="/w/rules.yaml;mco.detect"} 100
prometheus_rule_group_iterations_total{rule_group="/w/rules.yaml;mco.explain"} 100
"""  # noqa: E501


def test_rule_evaluation_reads_the_busiest_group_and_missed_iterations() -> None:
    # The busiest group is the one that took most of its own interval, not the longest.
    assert rule_evaluation(EXPOSITION) == {
        "busiest_group": "mco.explain",
        "last_duration_s": 1.5,
        "interval_s": 1.0,
        "groups": 3,
        "last_duration_sum_s": 3.75,
        "iterations_missed": 7,
        "iterations": 200,
    }
    assert rule_evaluation("")["groups"] == 0


def _pod(name: str, cpu: float) -> PodSpec:
    return PodSpec(name, 0, 10, "batch", "io-heavy", Demand(cpu=cpu, memory=1, io=1), None)


@pytest.fixture
async def extender() -> AsyncIterator[tuple[str, list[str]]]:
    """A stand-in extender that passes every node and records the routes it was asked."""
    asked: list[str] = []

    async def answer(request: web.Request) -> web.Response:
        asked.append(request.path)
        body = await request.json()
        if request.path == "/scheduler/filter":
            return web.json_response({"NodeNames": body["NodeNames"]})
        if request.path == "/scheduler/prioritize":
            return web.json_response([{"Host": n, "Score": 0} for n in body["NodeNames"]])
        if request.path == "/volcano/prioritize":
            return web.json_response({"nodeScore": {}})
        return web.json_response({})

    app = web.Application()
    app.router.add_post("/{tail:.*}", answer)
    async with served(app) as url:
        yield url, asked


async def test_only_decisions_that_reach_the_extender_count_for_its_cpu(
    extender: tuple[str, list[str]],
) -> None:
    url, asked = extender
    c = Cluster("c1", "n", 2)
    async with aiohttp.ClientSession() as session:
        kube = KubeExtender(session, url)
        assert await kube.place(c, _pod("fits", 1.0), random.Random(1)) is not None
        assert await kube.place(c, _pod("too-big", 2 * NODE_CPU), random.Random(1)) is None
    assert (kube.decisions, kube.asked) == (2, 1)  # the fit failure never reached it
    assert kube.requests == {"filter": 1, "prioritize": 1}
    assert asked == ["/scheduler/filter", "/scheduler/prioritize"]
    default = DefaultScheduler()
    await default.place(c, _pod("x", 1.0), random.Random(1))
    assert (default.decisions, default.asked) == (1, 0)


async def test_volcano_sends_allocate_for_every_placement_when_asked_to(
    extender: tuple[str, list[str]],
) -> None:
    url, asked = extender
    c = Cluster("c1", "n", 3)
    async with aiohttp.ClientSession() as session:
        volcano = VolcanoExtender(session, url, allocate=True)
        for i in range(2):
            node = await volcano.place(c, _pod(f"p{i}", 1.0), random.Random(i))
            assert node is not None
            c.bind(_pod(f"p{i}", 1.0), node, 0.0, 5.0)
    assert volcano.requests == {"predicate": 6, "prioritize": 2, "allocate": 2}
    assert volcano.asked == 2 and asked.count("/volcano/allocate") == 2


def test_decision_cpu_takes_off_the_idle_rate_over_the_run() -> None:
    assert run.decision_cpu(spent=12.0, idle_rate=0.05, seconds=100.0) == pytest.approx(7.0)


class _BusyExtender:
    """Stands in for an extender whose /v1/nodes costs CPU (this process's)."""

    name = "busy"

    def cpu_seconds(self) -> float:
        return time.process_time()


class _BusyPipeline:
    def __init__(self) -> None:
        self.extenders = {"kube": _BusyExtender()}
        self.reads = 0

    def nodes(self) -> list[dict[str, Any]]:
        self.reads += 1
        end = time.process_time() + 0.1
        while time.process_time() < end:
            pass
        return []


def test_idle_rate_is_measured_while_the_views_are_read_once_a_second() -> None:
    pipeline = _BusyPipeline()
    rates = run.idle_rates({"p": pipeline}, 2.0)  # type: ignore[dict-item]
    assert pipeline.reads == 2
    # ~0.2 s of CPU over ~2 s: the reads' cost is in the rate that is taken off.
    assert 0.05 < rates["busy"] < 0.2


@pytest.mark.parametrize("reservation", [True, False])
def test_pipeline_rules_are_the_rulegen_clis_render_of_its_config_file(
    tmp_path: Path, reservation: bool
) -> None:
    """The rules come from `mco-rulegen render --config` on the file the reporter reads (the
    public CLI, not an import), and say what the policy set's config says."""
    spec = config_spec(reservation=reservation, hysteresis=reservation)
    p = Pipeline("full", tmp_path, spec, "127.0.0.1:1", "/nodes/full")
    assert p.config_path.exists()
    assert p.rules_path.read_text() == render_rules(p.config)


def test_a_15_s_scrape_and_evaluation_widen_the_window_and_staleness(tmp_path: Path) -> None:
    policies = {p.name: p for p in run.POLICY_SETS}
    shipped = run.pipeline_spec(_args(), policies, "full")
    assert shipped == config_spec(reservation=True, hysteresis=True)  # 1 s: as shipped
    args = _args(scrape_interval=15.0, evaluation_interval=15.0)
    slow = run.pipeline_spec(args, policies, "full")
    assert (slow["evaluationInterval"], slow["window"]) == ("15s", "60s")
    assert slow["report"]["staleAfter"] == "60s"
    assert from_spec(slow).evaluation_interval == 15
    p = Pipeline("p", tmp_path / "p", slow, "127.0.0.1:1", "/p", scrape_interval=15.0)
    assert p.prometheus.scrape_interval == "15s" and p.prometheus.evaluation_interval == "15s"


async def test_volcano_orders_nodes_by_leastrequested_and_balancedresource(
    extender: tuple[str, list[str]],
) -> None:
    """Nodeorder's balancedresource breaks a leastrequested tie, as it does in Volcano: the
    memory-heavy node is the balanced one for a small pod (the kube loop's own example)."""
    url, _ = extender
    c = Cluster("c", "n", 2)
    for i in range(4):
        c.bind(PodSpec(f"cpu{i}", 0, 10, "batch", "io-heavy", Demand(cpu=2, memory=2)),
               "n-0000", 0, 0)  # fmt: skip
        c.bind(PodSpec(f"mem{i}", 0, 10, "batch", "io-heavy", Demand(cpu=1, memory=6)),
               "n-0001", 0, 0)  # fmt: skip
    pod = PodSpec("p", 0, 10, "latency-sensitive", "io", Demand(cpu=0.5, memory=1))
    async with aiohttp.ClientSession() as session:
        volcano = VolcanoExtender(session, url, allocate=False)
        chosen = {await volcano.place(c, pod, random.Random(seed)) for seed in range(10)}
    assert chosen == {"n-0001"}
