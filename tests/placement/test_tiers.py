"""The ``tier-labels`` policy set: the reporter's tier rule over the views, the chart's class
terms, and kube-scheduler's NodeAffinity score in the default cycle, without an extender."""

from __future__ import annotations

import asyncio
import random
from collections import Counter

from bench.placement import kubeframework as kf
from bench.placement.cluster import Cluster
from bench.placement.model import Demand
from bench.placement.scheduler import DefaultScheduler
from bench.placement.tiers import TierLabels, class_terms
from bench.placement.trace import PodSpec
from reporter.tiers import TierRule


def _pod(name: str, cls: str) -> PodSpec:
    return PodSpec(name, 0, 10, cls, "io", Demand(cpu=0.5, memory=1.0))


def _entry(level: float | None, stale: bool = False) -> dict[str, object]:
    return {"level": level, "stale": stale, "schedulable": True}


def test_the_terms_are_the_charts_defaults() -> None:
    assert class_terms() == {
        "latency-sensitive": (50, "In", frozenset({"low"})),
        "batch": (50, "NotIn", frozenset({"high"})),
    }


def test_normalize_node_affinity() -> None:
    assert kf.normalize_node_affinity({"a": 50, "b": 0, "c": 25}) == {"a": 100, "b": 0, "c": 50}
    assert kf.normalize_node_affinity({"a": 0, "b": 0}) == {"a": 0, "b": 0}


def test_labels_follow_the_views_with_the_reporters_rule() -> None:
    tiers = TierLabels(TierRule(hold=5))
    tiers.update({"a": _entry(0.1), "b": _entry(0.7), "c": _entry(None)}, 0)
    assert tiers.labels == {"a": "low", "b": "high"} and tiers.changes == 2
    tiers.update({"a": _entry(0.35), "b": _entry(0.4), "c": _entry(0.1, stale=True)}, 1)
    assert tiers.labels == {"a": "medium", "b": "high"}  # up at once; down only after the hold
    for t in range(2, 6):
        tiers.update({"a": _entry(0.35), "b": _entry(0.4)}, t)
    assert tiers.labels == {"a": "medium", "b": "high"}
    tiers.update({"a": _entry(0.35), "b": _entry(0.4)}, 6)
    assert tiers.labels == {"a": "medium", "b": "medium"} and tiers.changes == 4
    tiers.update({"a": _entry(0.35, stale=True)}, 7)  # stale, gone: no label (fail-open)
    assert tiers.labels == {} and tiers.changes == 6


def test_the_default_cycle_scores_the_tier_without_an_extender() -> None:
    c = Cluster("c", "n", 3)
    quiet, middling, noisy = list(c.nodes)
    tiers = TierLabels()
    tiers.update({quiet: _entry(0.05), middling: _entry(0.4), noisy: _entry(0.9)}, 0)
    scheduler = DefaultScheduler(tiers=tiers)
    rng = random.Random(1)

    async def place(cls: str, n: int) -> Counter[str | None]:
        return Counter([await scheduler.place(c, _pod(f"{cls}{i}", cls), rng) for i in range(n)])

    online = asyncio.run(place("latency-sensitive", 20))
    assert online == Counter({quiet: 20})  # empty nodes: NodeAffinity's 200 decides
    batch = asyncio.run(place("batch", 40))
    assert noisy not in batch and set(batch) == {quiet, middling}
    best_effort = asyncio.run(place("best-effort", 60))
    assert set(best_effort) == {quiet, middling, noisy}  # no term: the tier is not looked at
    assert scheduler.requests.total() == 0 and scheduler.asked == 0  # zero extender calls
