"""The benchmark's figures and its exit rule, on hand-built runs and fake pipeline views.

observe() and summary() are fed clusters built here and views shaped as the extender's
/v1/nodes entries, so each figure is checked against a value worked out by hand.
"""

from __future__ import annotations

import asyncio
import math
import random
from pathlib import Path
from typing import Any

import pytest

from bench.placement import run
from bench.placement.cluster import Cluster
from bench.placement.model import inflation
from bench.placement.pipeline import Pipeline, config_spec
from bench.placement.run import (
    OBSERVER,
    POLICY_SETS,
    RETRY_AFTER,
    Headline,
    Run,
    done,
    exit_code,
    headline_line,
    headlines,
    invalid,
    observe,
    step,
    summary,
    worst,
)
from bench.placement.scheduler import DefaultScheduler
from bench.placement.target import LiveFleet
from bench.placement.trace import BATCH_PROFILES, ONLINE_PROFILES, PodSpec, TraceShape

SHAPE = TraceShape(duration=100, nodes=2)
DEFAULT = POLICY_SETS[0]


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> Pipeline:
    """Only carried by the runs (observe and summary never call it): nothing is started."""
    root = tmp_path_factory.mktemp("pipeline")
    return Pipeline(OBSERVER, root, config_spec(reservation=False, hysteresis=False), "x:1", "/")


def online(name: str, profile: str = "io", arrival: float = 0.0) -> PodSpec:
    return PodSpec(name, arrival, 1000.0, "latency-sensitive", profile, ONLINE_PROFILES[profile])


def batch(name: str, profile: str = "io-heavy", arrival: float = 0.0) -> PodSpec:
    return PodSpec(name, arrival, 1000.0, "batch", profile, BATCH_PROFILES[profile])


def make_run(pipeline: Pipeline, arrivals: list[PodSpec] | None = None, nodes: int = 2) -> Run:
    return Run(
        DEFAULT,
        "none",
        Cluster("c", "n", nodes),
        DefaultScheduler(),
        LiveFleet(),
        pipeline,
        random.Random(1),
        list(arrivals or []),
    )


def running(r: Run, pod: PodSpec, node: str) -> None:
    """The pod bound and started on ``node`` at t=0."""
    r.cluster.start(r.cluster.bind(pod, node, now=0.0, startup=0.0))
    r.started.add(pod.name)


def views(*triggered_on: str, detection: str = "io_congestion") -> dict[str, Any]:
    """The pipeline's view: every node schedulable, ``detection`` triggered on those named."""
    nodes = {
        f"n-{i:04d}": {"name": f"n-{i:04d}", "schedulable": True, "level": 0.0, "detections": {}}
        for i in range(4)
    }
    for name in triggered_on:
        nodes[name]["detections"] = {detection: {"triggered": True}}
        nodes[name]["level"] = 0.5
    return {OBSERVER: nodes}


def row(r: Run, **kwargs: Any) -> dict[str, Any]:
    return summary([r], SHAPE, {}, **kwargs)[0]


def test_exposure_counts_measured_seconds_on_triggered_nodes(pipeline: Pipeline) -> None:
    r = make_run(pipeline)
    running(r, online("a"), "n-0000")
    running(r, online("b"), "n-0001")
    observe([r], views("n-0000"), now=1.0)
    observe([r], views("n-0000"), now=4.0)  # the loop lagged: this state stood for 3 s
    assert r.online_seconds == pytest.approx(8.0)
    assert r.exposed_seconds == pytest.approx(4.0)
    out = row(r)
    assert out["exposure"] == pytest.approx(0.5)
    assert out["online_pod_seconds"] == 8
    assert out["pending_online_share"] == 0.0
    assert out["sampled"] == pytest.approx(1.0)


def test_a_pending_online_pod_raises_exposure(pipeline: Pipeline) -> None:
    r = make_run(pipeline)
    running(r, online("a"), "n-0000")
    observe([r], views(), now=1.0)
    assert row(r)["exposure"] == 0.0
    # An online pod MCO leaves pending is not protected: its seconds are exposed ones.
    r.cluster.pending.append(online("waiting"))
    r.cluster.pending.append(batch("batchy"))  # a pending batch pod is not counted
    observe([r], views(), now=3.0)
    out = row(r)
    assert r.online_seconds == pytest.approx(1.0 + 2.0 + 2.0)
    assert out["exposure"] == pytest.approx(2.0 / 5.0)
    assert out["pending_online_share"] == pytest.approx(2.0 / 5.0)
    assert out["exposed_by_cause"]["pending"] == 1.0


def test_harm_is_the_models_slowdown_over_the_tolerance_whatever_mco_shows(
    pipeline: Pipeline,
) -> None:
    """Two cache-heavy pods slow a cache-sensitive pod past 1.2 while staying under MCO's
    cache_pollution warn: harmed, though MCO shows nothing triggered (exposure 0)."""
    r = make_run(pipeline)
    running(r, online("victim", "cache"), "n-0000")
    running(r, online("alone", "cache"), "n-0001")
    for i in range(2):
        running(r, batch(f"c{i}", "cache-heavy"), "n-0000")
    slowed = inflation("cache", r.cluster.nodes["n-0000"].signals())
    assert slowed > 1.2
    observe([r], views(), now=1.0)
    observe([r], views(), now=3.0)
    out = row(r)
    assert out["exposure"] == 0.0
    assert out["harmed"] == pytest.approx(0.5)
    # A looser tolerance than this slowdown: nobody harmed.
    r2 = make_run(pipeline)
    running(r2, online("victim", "cache"), "n-0000")
    for i in range(2):
        running(r2, batch(f"c{i}", "cache-heavy"), "n-0000")
    observe([r2], views(), now=1.0, tolerance=slowed)
    assert row(r2)["harmed"] == 0.0
    # A pending online pod is harmed (not served) for as long as it waits.
    r2.cluster.pending.append(online("waiting"))
    observe([r2], views(), now=2.0, tolerance=slowed)
    assert row(r2)["harmed"] == pytest.approx(1 / 3)


def test_batch_wait_completion_and_utilisation(pipeline: Pipeline) -> None:
    r = make_run(pipeline)
    early, late, never = batch("early", arrival=1.0), batch("late", arrival=2.0), batch("never")
    r.arrivals += [early, late]
    asyncio.run(step(r, 1.0, startup=2.0, tick=1.0))  # early bound at once
    r.cluster.nodes["n-0000"].cpu = r.cluster.nodes["n-0001"].cpu = 1e9  # full
    asyncio.run(step(r, 2.0, startup=2.0, tick=2.0))  # late cannot be placed
    r.cluster.nodes["n-0000"].cpu = r.cluster.nodes["n-0001"].cpu = 0.0
    r.cluster.nodes[r.cluster.placements["early"].node].cpu = early.demand.cpu
    asyncio.run(step(r, 2.0 + RETRY_AFTER, startup=2.0, tick=2.0 + RETRY_AFTER))
    assert r.bound_at == {"early": 1.0, "late": 2.0 + RETRY_AFTER}
    r.cluster.pending.append(never)  # arrived at 0, still pending at the end
    observe([r], views(), now=10.0)
    wait, completion = run.batch_waits(r, startup=2.0)
    assert wait == pytest.approx((0.0 + RETRY_AFTER + 10.0) / 3)
    assert completion == pytest.approx(wait + 2.0 + 1000.0)
    out = row(r)
    assert out["batch_wait_s"] == pytest.approx(wait)
    # Both nodes in use, each with one io-heavy pod's core: 2 of 32 cores.
    assert out["utilisation"] == pytest.approx(2 * early.demand.cpu / (2 * 16.0))


def test_qos_kept_is_each_online_pods_own_p99(pipeline: Pipeline) -> None:
    r = make_run(pipeline)
    running(r, online("quiet"), "n-0000")
    running(r, online("loud"), "n-0001")
    for i in range(3):
        running(r, batch(f"w{i}"), "n-0001")
    loaded = inflation("io", r.cluster.nodes["n-0001"].signals())
    quiet = inflation("io", r.cluster.nodes["n-0000"].signals())
    assert quiet <= 1.2 < loaded  # three writers slow an io-sensitive pod past the target
    for t in range(1, 11):
        observe([r], views(), now=float(t))
    out = row(r)
    assert out["qos_kept"] == pytest.approx(0.5)
    assert out["slowdown_p99"] == pytest.approx(loaded)
    assert out["slowdown_mean"] == pytest.approx((quiet + loaded) / 2)
    assert row(r, qos_slowdown=loaded)["qos_kept"] == 1.0
    # An online pod pending at the end that never ran kept no QoS.
    r.cluster.pending.append(online("never"))
    assert row(r)["qos_kept"] == pytest.approx(1 / 3)


def test_a_lagging_loop_records_its_lag_and_invalidates_the_run(pipeline: Pipeline) -> None:
    pods = [online("a", arrival=1.0), online("b", arrival=2.0), online("c", arrival=50.0)]
    r = make_run(pipeline, pods)
    asyncio.run(step(r, 9.0, startup=0.0))  # a and b handled 8 and 7 s after their arrival
    assert r.lags == [8.0, 7.0]
    assert len(r.cluster.placements) == 2
    observe([r], views(), now=60.0)  # c arrived at 50 and was never handled
    out = row(r)
    assert out["lag_max_s"] == 8.0
    assert out["untried"] == 1
    # 2 pods x 60 s seen against 59 + 58 + 10 expected from the trace.
    assert out["sampled"] == pytest.approx(120 / 127)
    default = {**out, "harmed": 0.2, "batch_wait_s": 1.0}
    rows = [default, {**default, "run": "mco-full/kube", "harmed": 0.05}]
    reasons = invalid(rows, max_lag=5.0, min_default_harmed=0.05)
    assert any("8.0 s late" in w for w in reasons)
    assert any("1 arrivals untried" in w for w in reasons)
    assert not any("sampled" in w for w in reasons)  # 0.94 >= 0.9
    assert invalid(rows, max_lag=10.0, min_default_harmed=0.05) == [
        "default/none left 1 arrivals untried",
        "mco-full/kube left 1 arrivals untried",
    ]


def test_unsampled_pods_invalidate_the_run(pipeline: Pipeline) -> None:
    r = make_run(pipeline, [online("late", arrival=0.0)])
    running(r, online("a"), "n-0000")
    observe([r], {OBSERVER: {}}, now=10.0)  # the pipeline showed no node
    out = row(r)
    assert out["sampled"] == 0.0
    rows = [{**out, "harmed": 0.2, "batch_wait_s": 1.0, "untried": 0}]
    rows.append({**rows[0], "run": "mco-full/kube"})
    assert any("sampled 0.00" in w for w in invalid(rows, 5.0, 0.05))


def rows_of(
    default: float, mco: float, wait: float = 1.0, **baselines: float
) -> list[dict[str, Any]]:
    """Rows of a run: the default harmed ``default`` with batch wait 1 s, mco-full/kube harmed
    ``mco`` with batch wait ``wait``; each named baseline (``native_affinity=0.1``) harmed that
    with batch wait 1 s (``<name>_wait`` sets it)."""
    ok = {"lag_max_s": 0.1, "untried": 0, "sampled": 1.0, "pending_online": 0}
    rows = [{"run": "default/none", "harmed": default, "batch_wait_s": 1.0, **ok}]
    for name, harmed in baselines.items():
        if not name.endswith("_wait"):
            w = baselines.get(f"{name}_wait", 1.0)
            rows.append({"run": f"{name.replace('_', '-')}/none", "harmed": harmed,
                         "batch_wait_s": w, **ok})  # fmt: skip
    rows.append({"run": "mco-full/kube", "harmed": mco, "batch_wait_s": wait, **ok})
    return rows


def test_validity_rule() -> None:
    assert invalid(rows_of(0.2, 0.05), 5.0, 0.05) == []
    assert invalid(rows_of(0.04, 0.0), 5.0, 0.05) == [
        "default harmed 0.040 under --min-default-harmed 0.05"
    ]
    assert any("no ratio" in w for w in invalid(rows_of(0.2, math.nan), 5.0, 0.05))


def test_best_baseline_is_the_least_harmed_whose_batch_wait_is_fair() -> None:
    rows = rows_of(0.4, 0.1, native_affinity=0.2, node_pool=0.0, node_pool_wait=1.3)
    # node-pool harms no one but keeps batch waiting 1.3x the default: not a fair winner.
    h = headlines(rows)["kube"]
    assert h.best == "native-affinity" and h.harm == pytest.approx(0.5) and h.wait == 1.0
    rows = rows_of(0.4, 0.1, native_affinity=0.2, node_pool=0.05, node_pool_wait=1.2)
    assert headlines(rows)["kube"].best == "node-pool"
    assert headlines(rows)["kube"].harm == pytest.approx(2.0)
    # No fair baseline better than the default: the default is the one.
    assert headlines(rows_of(0.4, 0.2, native_affinity=0.5))["kube"].best == "default"


def test_headline_takes_the_worst_protocol_and_the_mean_over_seeds() -> None:
    one = rows_of(0.4, 0.2, wait=1.1)
    one.append({**one[-1], "run": "mco-full/volcano", "harmed": 0.3, "batch_wait_s": 0.9,
                "pending_online": 3})  # fmt: skip
    h = worst([headlines(one)])
    assert h.harm == pytest.approx(0.75) and h.wait == pytest.approx(1.1) and h.pending == 3
    h = worst([headlines(one), headlines(rows_of(0.4, 0.1))])
    assert h.harm == pytest.approx((0.75 + 0.25) / 2) and h.pending == 3
    line = headline_line("labelled", h)
    assert line == (
        "placement[labelled]: harmed mco/best-baseline = 0.50 (best default), "
        "batch wait mco/default = 1.05, pending online mco = 3"
    )


def test_herding_without_a_placed_burst_pod_is_nan() -> None:
    c = Cluster("c", "n", 2)
    c.bind(batch("steady"), "n-0000", 0.0, 0.0)
    assert math.isnan(c.herding(30))


def test_exit_code_is_on_the_printed_figures() -> None:
    def h(harm: float, wait: float = 1.0, pending: int = 0) -> Headline:
        return Headline("mco-full/kube", "default", harm, wait, pending, 1)

    assert exit_code("unlabelled", h(0.504, 1.204), []) == 0  # prints 0.50 and 1.20: both met
    assert exit_code("unlabelled", h(0.506), []) == 1  # prints 0.51
    assert exit_code("labelled", h(0.506), []) == 0  # labelled: never worse than labels alone
    assert exit_code("labelled", h(1.006), []) == 1
    assert exit_code("labelled", h(0.1, 1.206), []) == 1
    assert exit_code("labelled", h(0.1, math.nan), []) == 1
    assert exit_code("labelled", h(0.1, pending=2), []) == 1  # more pending than the default
    assert exit_code("labelled", h(0.1), ["why"]) == 2


def test_the_loop_drains_until_every_pending_pod_was_retried(pipeline: Pipeline) -> None:
    r = make_run(pipeline, nodes=1)
    r.cluster.nodes["n-0000"].cpu = 1e9  # full: nothing fits
    last = online("last", arrival=99.5)
    r.arrivals.append(last)
    assert not done([r], 99.0, 100.0)
    asyncio.run(step(r, 100.0, startup=0.0))
    assert r.cluster.pending == [last] and r.tries == {"last": 1}
    assert not done([r], 100.5, 100.0)  # inside its first backoff: not yet counted pending
    asyncio.run(step(r, 100.0 + RETRY_AFTER, startup=0.0))
    assert r.tries == {"last": 2}
    assert done([r], 100.0 + RETRY_AFTER, 100.0)
    assert done([make_run(pipeline, [last])], 100.0 + run.DRAIN_LIMIT, 100.0)


def test_main_exits_2_when_any_seed_was_invalid(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    figures = {13: rows_of(0.2, 0.05), 14: rows_of(0.01, 0.0)}

    async def fake(args: Any, root: Path) -> list[dict[str, Any]]:
        out = []
        for r in figures[args.seed]:
            shares = dict.fromkeys(("other",), 0.0)
            out.append({**r, "qos_kept": 1.0, "pending_online_share": 0.0,
                        "exposed_by_cause": shares})  # fmt: skip
        return out

    monkeypatch.setattr(run, "simulate", fake)
    assert run.main(["--quick"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == (
        "placement[labelled]: harmed mco/best-baseline = 0.25 (best default), "
        "batch wait mco/default = 1.00, pending online mco = 0"
    )
    assert "qos kept (own p99 slowdown <= 1.2): mco-full/kube 1.00, default 1.00" in lines[-2]
    assert run.main(["--quick", "--seeds", "2"]) == 2
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2] == (
        "invalid run: seed 14: default harmed 0.010 under --min-default-harmed 0.02"
    )
    # The floor was the only reason: lowered, the same figures pass.
    assert run.main(["--quick", "--seed", "14", "--min-default-harmed", "0.01"]) == 0
    # The unlabelled scenario's target is 0.5: 0.25 meets it, its line names the scenario.
    assert run.main(["--quick", "--scenario", "unlabelled"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("placement[unlabelled]: ")


def test_a_node_whose_exporter_is_down_is_never_served_yet_its_harm_counts(
    pipeline: Pipeline,
) -> None:
    down = run.down_nodes(Cluster("c", "n", 10), 0.2)
    assert down == {"n-0008", "n-0009"}
    assert run.down_nodes(Cluster("c", "n", 10), 0.0) == frozenset()
    assert len(run.down_nodes(Cluster("c", "n", 2), 1.0)) == 1  # one node is always up
    r = make_run(pipeline)
    r.down = frozenset({"n-0001"})
    pods = [batch("w0", arrival=0.0), batch("w1", arrival=0.0)]
    r.arrivals += pods
    asyncio.run(step(r, 0.0, startup=0.0))
    asyncio.run(step(r, 0.5, startup=0.0))  # started: their nodes' signals change
    assert {p.node for p in r.cluster.placements.values()} == {"n-0000", "n-0001"}
    served = r.fleet.render().decode().split('node="')[1:]
    assert any(s.startswith("n-0000") for s in served)
    assert not any(s.startswith("n-0001") for s in served)
    running(r, online("victim"), "n-0001")
    for i in range(2):
        running(r, batch(f"x{i}"), "n-0001")
    nodes = views()[OBSERVER]
    del nodes["n-0001"]  # the pipeline has no entry for it
    observe([r], {OBSERVER: nodes}, now=1.0)
    observe([r], {OBSERVER: nodes}, now=2.0)
    out = row(r)
    assert out["harmed"] == pytest.approx(1.0) and out["exposure"] == 0.0
    assert out["sampled"] > 0 and "n-0001" not in r.last_schedulable
