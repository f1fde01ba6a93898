"""The benchmark's simulator parts: trace, cluster bookkeeping, the live scrape target."""

from __future__ import annotations

import argparse
import itertools
import json
from dataclasses import replace

import pytest
import requests
import yaml

from bench.placement import kubeapi, target
from bench.placement.cluster import Cluster
from bench.placement.model import NODE_CPU, NODE_MEMORY, Demand, signals
from bench.placement.pipeline import config_spec
from bench.placement.run import POLICY_SETS, main, overrides_of, variant
from bench.placement.scheduler import VolcanoExtender
from bench.placement.trace import PodSpec, TraceShape, generate
from extender.volcano import decode_predicate, placed_tasks, resident_tasks
from rulegen.model import from_spec


def test_trace_is_seeded_and_has_bursts() -> None:
    shape = TraceShape(duration=120, nodes=10, burst_every=30)
    a, b = generate(shape, 1), generate(shape, 1)
    assert a == b and a != generate(shape, 2)
    bursts: dict[int, list[PodSpec]] = {}
    for p in a:
        if p.burst is not None:
            bursts.setdefault(p.burst, []).append(p)
    assert bursts and all(len(ps) == shape.burst_size for ps in bursts.values())
    for ps in bursts.values():
        times = [p.arrival for p in ps]
        assert max(times) - min(times) <= shape.burst_span
        assert len({p.profile for p in ps}) == 1
    assert {p.workload_class for p in a} == {"latency-sensitive", "batch", "best-effort"}
    best_effort = [p for p in a if p.workload_class == "best-effort"]
    assert all(p.burst is None and p.lifetime <= 0.25 * shape.duration for p in best_effort)
    assert all(p.labels["mco.io/workload-class"] == p.workload_class for p in a)


def _pod(name: str, cpu: float, burst: int | None = None) -> PodSpec:
    return PodSpec(name, 0, 10, "batch", "io-heavy", Demand(cpu=cpu, memory=1, io=1), burst)


def test_fit_least_allocated_and_contention_after_start() -> None:
    c = Cluster("c", "n", 2)
    n0 = c.nodes["n-0000"]
    big = _pod("big", NODE_CPU)
    assert n0.fits(big)
    before = n0.least_allocated(_pod("x", 1))
    p = c.bind(big, "n-0000", now=0, startup=5)
    assert not n0.fits(_pod("y", 0.5))
    assert n0.least_allocated(_pod("x", 1)) < before
    assert n0.signals() == signals([])  # bound, not started: no load yet
    c.start(p)
    assert n0.signals().psi_io_some > signals([]).psi_io_some
    c.finish(p)
    assert n0.cpu == 0 and not n0.running and n0.signals() == signals([])


def test_herding_is_most_of_a_burst_on_one_node_over_even() -> None:
    c = Cluster("c", "n", 4)
    for i in range(30):
        c.bind(_pod(f"b{i}", 0.1, burst=0), "n-0000" if i < 12 else f"n-{1 + i % 3:04d}", 0, 0)
    assert c.herding(30) == pytest.approx(12 / 8)


def test_live_target_counters_keep_their_value_when_rates_change() -> None:
    fleet = target.LiveFleet()
    quiet, busy = signals([]), signals([Demand(io=4.0)])
    fleet.set("n1", quiet, now=100.0)
    name = 'mco_pressure_stalled_seconds_total{node="n1",kind="some",resource="io"}'
    v0 = fleet.value("n1", name, 110.0)
    fleet.set("n1", busy, now=110.0)
    assert fleet.value("n1", name, 110.0) == pytest.approx(v0)
    assert fleet.value("n1", name, 120.0) - v0 == pytest.approx(10 * busy.psi_io_some)
    body = fleet.render(120.0).decode()
    assert 'mco_node_info{node="n1"' in body and name in body


def test_live_target_serves_each_fleet_at_its_path() -> None:
    fleets = {"a": target.LiveFleet(), "b": target.LiveFleet()}
    fleets["a"].set("na", signals([]))
    fleets["b"].set("nb", signals([]))
    with target.serving(fleets) as port:
        a = requests.get(f"http://127.0.0.1:{port}/a", timeout=5)
        assert 'node="na"' in a.text and 'node="nb"' not in a.text
        assert requests.get(f"http://127.0.0.1:{port}/x", timeout=5).status_code == 404


def test_pods_api_lists_then_watches_from_the_lists_version(tmp_path) -> None:
    store = kubeapi.PodStore()
    pod = _pod("p1", 1.0)
    store.bind(pod, "c1-p1", "n-0001", at=1_764_600_000.0)
    with kubeapi.serving(store, tmp_path) as kubeconfig:
        server = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
        listing = requests.get(f"{server}/api/v1/pods", timeout=5).json()
        assert [p["metadata"]["uid"] for p in listing["items"]] == ["c1-p1"]
        assert listing["items"][0]["spec"]["nodeName"] == "n-0001"
        scheduled = listing["items"][0]["status"]["conditions"][0]
        assert scheduled["type"] == "PodScheduled"
        assert scheduled["lastTransitionTime"] == "2025-12-01T14:40:00Z"
        rv = listing["metadata"]["resourceVersion"]
        store.bind(_pod("p2", 1.0), "c1-p2", "n-0002", at=1_764_600_001.0)
        store.delete("c1-p1")
        watch = requests.get(
            f"{server}/api/v1/pods",
            params={"watch": "true", "resourceVersion": rv, "timeoutSeconds": "1"},
            timeout=5,
        )
        events = [json.loads(line) for line in watch.text.splitlines()]
        assert [(e["type"], e["object"]["metadata"]["uid"]) for e in events] == [
            ("ADDED", "c1-p2"),
            ("DELETED", "c1-p1"),
        ]


def test_unlabelled_scenario_takes_labels_off_half_the_aggressors_only() -> None:
    shape = TraceShape(duration=300, nodes=20, burst_every=30)
    labelled, unlabelled = generate(shape, 4), generate(shape, 4, "unlabelled")
    assert [(p.name, p.arrival) for p in labelled] == [(p.name, p.arrival) for p in unlabelled]
    assert all(p.labelled for p in labelled)
    aggressors = [p for p in unlabelled if not p.online]
    share = sum(not p.labelled for p in aggressors) / len(aggressors)
    assert 0.3 <= share <= 0.7
    assert all("mco.io/workload-class" not in p.labels for p in aggressors if not p.labelled)
    assert all(p.labelled for p in unlabelled if p.online)  # online pods keep their label
    for burst in {p.burst for p in aggressors if p.burst is not None}:
        assert len({p.labelled for p in aggressors if p.burst == burst}) == 1  # a workload
    online = [p for p in unlabelled if p.online]
    loud = [p for p in online if p.profile in ("io-heavy", "cache-heavy", "memory-heavy")]
    assert 0.1 <= len(loud) / len(online) <= 0.4
    assert {p.sensitivity for p in loud} <= {"io", "cache", "memory"}
    with pytest.raises(ValueError, match="unknown scenario"):
        generate(shape, 4, "nope")


def test_set_overrides_a_shipped_policy_in_the_full_set_only() -> None:
    fields = {"batch": {"triggeredLevel": 0.3, "reservationPerPod": 0.2}}
    full = config_spec(reservation=True, hysteresis=True, overrides=fields)
    batch = next(p for p in full["policies"] if p["name"] == "batch")
    assert (batch["triggeredLevel"], batch["reservationPerPod"]) == (0.3, 0.2)
    assert from_spec(full).to_spec()["policies"] == full["policies"]  # a valid config
    shipped = config_spec(reservation=True, hysteresis=True)
    assert [p for p in full["policies"] if p["name"] != "batch"] == [
        p for p in shipped["policies"] if p["name"] != "batch"
    ]
    with pytest.raises(ValueError, match="no shipped policy"):
        config_spec(reservation=True, hysteresis=True, overrides={"nope": {"maxLevel": 0.1}})
    with pytest.raises(ValueError, match="not one the spec writes"):
        config_spec(reservation=True, hysteresis=True, overrides={"batch": {"maxLvl": 0.1}})


def test_set_flag_must_name_policy_and_field() -> None:
    with pytest.raises(SystemExit):
        main(["--set", "batch=0.3"])


def test_a_variant_is_mco_full_with_its_fields_on_its_own_pipeline() -> None:
    v = variant("trig:batch.triggeredLevel=0.3,batch.reservationPerPod=0.2")
    assert (v.name, v.pipeline, v.reservation, v.hysteresis) == ("mco-trig", "trig", True, True)
    sets = {p.name: p for p in (*POLICY_SETS, v)}
    # observer (the three baselines), labels-only, full, trig
    assert len({p.pipeline for p in sets.values()}) == 4
    assert len({p.prefix for p in sets.values()}) == len(sets)  # every cluster's nodes apart
    args = argparse.Namespace(overrides=(("batch", "avoidPerPod", 0.02),))
    assert overrides_of(args, sets, "trig") == {
        "batch": {"triggeredLevel": 0.3, "reservationPerPod": 0.2}
    }
    assert overrides_of(args, sets, "full") == {"batch": {"avoidPerPod": 0.02}}
    assert overrides_of(args, sets, "basic") is None
    bad_names = ("full:batch.maxLevel=0.1", "observer:batch.maxLevel=0.1", "Trig:batch.x=1")
    for bad in (*bad_names, "trig:", "trig"):
        with pytest.raises(argparse.ArgumentTypeError):
            variant(bad)
    with pytest.raises(SystemExit):
        main(["--variant", "a:batch.maxLevel=0.1", "--variant", "a:batch.maxLevel=0.2"])


def test_volcano_bodies_show_the_extender_every_pod_on_the_node() -> None:
    """The extender finds a NodeInfo's tasks by Go's field order in the raw body: the
    benchmark's bodies must be read as Volcano's are, or avoidPolicies sees no pods there."""
    c = Cluster("c1", "n", 2)
    pods = [p for p in generate(TraceShape(100.0, 2), 3) if not p.online][:3]
    placements = [c.bind(p, "n-0000", 0.0, 5.0) for p in pods]
    c.start(placements[0])
    volcano = VolcanoExtender(None, "", allocate=False)  # type: ignore[arg-type]
    task = b'{"task":{"UID":"x","Pod":{"metadata":{"name":"x"}}},"node":'
    body = task + volcano.node_info(c, "n-0000") + b"}"
    assert decode_predicate(body).node.name == "n-0000"  # type: ignore[union-attr]
    found = {t.key: (t.node_name, t.status, t.labels["mco.io/workload-class"]) for t in
             resident_tasks(body)}  # fmt: skip
    assert found == {
        f"c1-{p.name}": ("n-0000", 32 if i == 0 else 16, p.workload_class)
        for i, p in enumerate(pods)
    }
    assert {t.key for t in placed_tasks(body)} == {f"c1-{p.name}" for p in pods[1:]}


def test_volcano_node_info_is_encoded_again_only_when_its_pods_change() -> None:
    c = Cluster("c1", "n", 1)
    volcano = VolcanoExtender(None, "", allocate=False)  # type: ignore[arg-type]
    empty = volcano.node_info(c, "n-0000")
    assert volcano.node_info(c, "n-0000") is empty
    pod = generate(TraceShape(100.0, 1), 3)[0]
    placement = c.bind(pod, "n-0000", 0.0, 5.0)
    bound = volcano.node_info(c, "n-0000")
    assert pod.name.encode() in bound and b'"Status":16' in bound
    c.start(placement)
    assert b'"Status":32' in volcano.node_info(c, "n-0000")
    c.finish(placement)
    assert pod.name.encode() not in volcano.node_info(c, "n-0000")


def test_volcano_node_info_carries_volcanos_resource_fields_with_the_nodes_figures() -> None:
    """Idle, Used, Allocatable, Capacity, Releasing and Pipelined, where Volcano's Go type has
    them, so that the bodies are as large as real ones; Used is what the node's pods request."""
    c = Cluster("c1", "n", 1)
    pods = [p for p in generate(TraceShape(100.0, 1), 3)][:2]
    for p in pods:
        c.bind(p, "n-0000", 0.0, 5.0)
    volcano = VolcanoExtender(None, "", allocate=False)  # type: ignore[arg-type]
    info = json.loads(volcano.node_info(c, "n-0000"))
    assert list(info) == [
        "Name",
        "Node",
        "State",
        "Releasing",
        "Pipelined",
        "Idle",
        "Used",
        "Allocatable",
        "Capacity",
        "Tasks",
        "Generation",
        "BindGeneration",
    ]
    cpu = sum(p.demand.cpu for p in pods)
    memory = sum(p.demand.memory for p in pods)
    assert info["Used"]["MilliCPU"] == pytest.approx(cpu * 1000)
    assert info["Used"]["Memory"] == pytest.approx(memory * 2**30)
    assert info["Used"]["ScalarResources"] == {"pods": 2}
    assert info["Idle"]["MilliCPU"] == pytest.approx((NODE_CPU - cpu) * 1000)
    assert info["Idle"]["Memory"] == pytest.approx((NODE_MEMORY - memory) * 2**30)
    assert info["Idle"]["ScalarResources"] == {"pods": 108}
    assert info["Allocatable"] == info["Capacity"]
    assert info["Allocatable"]["MilliCPU"] == NODE_CPU * 1000
    assert info["Releasing"]["MilliCPU"] == info["Pipelined"]["Memory"] == 0
    assert list(info["Used"]) == ["MilliCPU", "Memory", "ScalarResources", "MaxTaskNum"]
    # Written as Go writes a float64: an integral value has no fraction.
    assert b'"Allocatable":{"MilliCPU":16000,"Memory":68719476736,' in volcano.node_info(
        c, "n-0000"
    )


def test_phases_scenario_switches_aggressors_between_heavy_and_quiet() -> None:
    shape = TraceShape(duration=300, nodes=10, burst_every=30)
    pods = generate(shape, 4, "phases")
    aggressors = [p for p in pods if not p.online]
    assert all(15 <= p.period <= 45 for p in aggressors)  # 5-15 % of the trace
    assert {p.heavy_first for p in aggressors} == {True, False}
    assert all(p.period == 0 and p.heavy_at(1e6) for p in pods if p.online)
    p = replace(aggressors[0], period=10.0, heavy_first=True)
    assert [p.heavy_at(t) for t in (0, 9.9, 10, 19.9, 20)] == [True, True, False, False, True]
    # The cluster applies the phase: quiet, the pod adds only its requests' small load.
    c = Cluster("c", "n", 1)
    heavy = replace(_pod("w", 1), period=10.0, heavy_first=True)
    placement = c.bind(heavy, "n-0000", now=0, startup=0)
    c.start(placement)
    loud = c.nodes["n-0000"].signals()
    assert not c.phase(placement, 5.0)  # still heavy: nothing changed
    assert c.phase(placement, 12.0)
    assert c.nodes["n-0000"].signals().psi_io_some < loud.psi_io_some
    assert c.phase(placement, 21.0) and c.nodes["n-0000"].signals() == loud
    c.finish(placement)
    assert not c.nodes["n-0000"].quiet


def test_churn_scenario_rolls_each_online_workload_every_few_minutes() -> None:
    shape = TraceShape(duration=600, nodes=10, burst_every=60)
    labelled, churned = generate(shape, 4), generate(shape, 4, "churn")
    assert [p for p in churned if not p.online] == [p for p in labelled if not p.online]
    by_workload: dict[str, list[PodSpec]] = {}
    for p in churned:
        if p.online:
            by_workload.setdefault(p.name.split("-r")[0], []).append(p)
    assert sorted(by_workload) == sorted(p.name for p in labelled if p.online)
    rolled = 0
    for first, *rest in (sorted(g, key=lambda p: p.arrival) for g in by_workload.values()):
        original = next(p for p in labelled if p.name == first.name)
        assert first.arrival == original.arrival and first.profile == original.profile
        chain = [first, *rest]
        for a, b in itertools.pairwise(chain):  # each successor arrives at the roll
            assert b.arrival == pytest.approx(a.arrival + a.lifetime)
            assert 60 <= a.lifetime <= 150 and b.profile == a.profile  # 10-25 % of the trace
        assert chain[-1].arrival + chain[-1].lifetime > shape.duration  # the last outlives it
        rolled += len(rest)
    assert rolled > len(by_workload)  # most workloads roll more than once
