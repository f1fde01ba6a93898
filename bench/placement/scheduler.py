"""Scheduling one pending pod, as kube-scheduler's framework and Volcano's session do it.

kube-scheduler (``kubeframework``, its v1.31+ source quoted there): resource fit over the
nodes from ``nextStartNodeIndex`` on, stopping once numFeasibleNodesToFind nodes fit (all of
them below 100 nodes, 100 of 200); the extender's filter over those; per node LeastAllocated
plus BalancedAllocation (weight 1 each, 0-100 each) plus the extender's 0-10 priority times
``weight x 10`` (MaxNodeScore / MaxExtenderPriority); the highest total wins, ties broken by
selectHost's reservoir sampling from the run's seeded generator. The default scheduler is the
same cycle without the extender.

Volcano: resource fit, the extender's predicate for each remaining node (16 at a time, as
Volcano does), its prioritize over the survivors added unweighted to the nodeorder plugin's
leastrequested plus balancedresource scores (weight 1 each, kube's own LeastAllocated and
BalancedAllocation; pkg/scheduler/plugins/nodeorder/nodeorder.go, calculateWeight),
then allocate (when the extender serves the verb, as a Volcano configured with allocateVerb
always sends it); ties uniformly at random (SelectBestNode).
Volcano samples nodes too (volcano-sh/volcano pkg/scheduler/util: PredicateNodes stops after
CalculateNumOfFeasibleNodesToFind nodes pass, defaults ``--minimum-feasible-nodes`` 100,
``--minimum-percentage-nodes-to-find`` 5, ``--percentage-nodes-to-find`` 0 = the same adaptive
``50 - n/125`` %, from a rotating lastProcessedNodeIndex). This loop does not sample: it
predicates every fitting node. Up to 100 nodes (``--quick``'s 20) that changes nothing; above
that the Volcano rows differ from Volcano's own loop there, and the default 200-node run does
not run Volcano.
"""

from __future__ import annotations

import abc
import asyncio
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import aiohttp

from bench.placement import kubeframework, wire
from bench.placement.cluster import Cluster, Node
from bench.placement.tiers import TierLabels
from bench.placement.trace import WORKLOAD_CLASS, PodSpec

PREDICATE_CONCURRENCY = 16
JSON_BODY = {"Content-Type": "application/json"}


def pick(scores: dict[str, float], rng: random.Random) -> str:
    """Volcano's SelectBestNode: one of the best, uniformly
    (``bestNodes[rand.Intn(len(bestNodes))]``)."""
    best = max(scores.values())
    return rng.choice(sorted(n for n, s in scores.items() if s == best))


class Scheduler(Protocol):
    protocol: str
    decisions: int
    asked: int  # decisions that sent the extender at least one request
    requests: Counter[str]  # requests sent, by verb
    seconds: float

    async def place(self, cluster: Cluster, pod: PodSpec, rng: random.Random) -> str | None: ...


class _Timed(abc.ABC):
    protocol = ""

    def __init__(self) -> None:
        self.decisions = 0
        self.asked = 0
        self.requests: Counter[str] = Counter()
        self.seconds = 0.0

    async def place(self, cluster: Cluster, pod: PodSpec, rng: random.Random) -> str | None:
        start = time.perf_counter()
        sent = self.requests.total()
        try:
            return await self._place(cluster, pod, rng)
        finally:
            self.decisions += 1
            self.asked += self.requests.total() > sent
            self.seconds += time.perf_counter() - start

    @abc.abstractmethod
    async def _place(self, cluster: Cluster, pod: PodSpec, rng: random.Random) -> str | None:
        """The node chosen for ``pod``, or None when none fits (each scheduler its own way)."""


def uid(cluster: Cluster, pod: PodSpec) -> str:
    return f"{cluster.name}-{pod.name}"


def feasible(cluster: Cluster, pod: PodSpec) -> list[str]:
    return [n.name for n in cluster.nodes.values() if n.fits(pod)]


class DefaultScheduler(_Timed):
    """No extender: kube-scheduler's cycle with its default score plugins only.

    ``native``: the pods carry their class's preferred anti-affinity and the bursts a spread
    constraint (the ``native-affinity`` baseline, ``kubeframework.native_scores``). ``pool``:
    the nodes labelled and tainted online-only (the ``node-pool`` baseline): online pods select
    them (a required node affinity on the label) and tolerate the taint; every other pod, a pod
    without a class label too, does not tolerate it and is kept off them."""

    protocol = "none"

    def __init__(
        self,
        *,
        native: bool = False,
        pool: frozenset[str] = frozenset(),
        tiers: TierLabels | None = None,
    ) -> None:
        super().__init__()
        self.native, self.pool = native, pool
        # ``tier-labels``: the pods' preferred node affinity on MCO's tier label, scored by
        # NodeAffinity (weight 2, normalised): MCO's zero-call path.
        self.tiers = tiers
        self.search = kubeframework.NodeSearch()

    def admits(self, pod: PodSpec) -> Callable[[Node], bool] | None:
        if not self.pool:
            return None
        online = pod.labels.get(WORKLOAD_CLASS) == kubeframework.ONLINE
        return lambda node: (node.name in self.pool) == online

    async def _place(self, cluster: Cluster, pod: PodSpec, rng: random.Random) -> str | None:
        names = self.search.feasible(cluster, pod, self.admits(pod))
        if len(names) <= 1:  # schedulePod: "When only one node after predicate, just use it."
            return names[0] if names else None
        if self.native:
            totals = kubeframework.native_scores((cluster.nodes[n] for n in names), pod)
            return kubeframework.select_host(list(totals.items()), rng)
        scores = {n: kubeframework.score(cluster.nodes[n], pod) for n in names}
        raw = self.tiers.raw_scores(names, pod) if self.tiers is not None else None
        if raw is not None:
            for name, s in kubeframework.normalize_node_affinity(raw).items():
                scores[name] += s * kubeframework.NODE_AFFINITY_WEIGHT
        return kubeframework.select_host(list(scores.items()), rng)


class KubeExtender(_Timed):
    protocol = "kube"

    def __init__(self, session: aiohttp.ClientSession, url: str, weight: int = 1) -> None:
        super().__init__()
        self.session, self.url, self.weight = session, url, weight
        self.search = kubeframework.NodeSearch()

    async def _post(self, verb: str, body: Any) -> Any:
        self.requests[verb] += 1
        async with self.session.post(f"{self.url}/scheduler/{verb}", json=body) as response:
            response.raise_for_status()
            return await response.json()

    async def _place(self, cluster: Cluster, pod: PodSpec, rng: random.Random) -> str | None:
        names = self.search.feasible(cluster, pod)
        if not names:
            return None
        obj = wire.pod_object(pod, uid=uid(cluster, pod))
        result = await self._post("filter", {"Pod": obj, "NodeNames": names})
        names = result.get("NodeNames") or []
        if len(names) <= 1:  # schedulePod: "When only one node after predicate, just use it."
            return names[0] if names else None
        scores = {n: kubeframework.score(cluster.nodes[n], pod) for n in names}
        for entry in await self._post("prioritize", {"Pod": obj, "NodeNames": names}):
            scores[entry["Host"]] += kubeframework.extender_score(entry["Score"], self.weight)
        return kubeframework.select_host(list(scores.items()), rng)


class VolcanoExtender(_Timed):
    """Each node's NodeInfo is encoded once per change of its tasks (its generation) and the
    bytes reused by every predicate and prioritize body until then: a burst asks about the
    same nodes dozens of times a second, and encoding them anew each time cost the loop more
    than the extender took to answer (docs/benchmarks.md, "placement")."""

    protocol = "volcano"

    def __init__(self, session: aiohttp.ClientSession, url: str, *, allocate: bool) -> None:
        super().__init__()
        self.session, self.url, self.allocate = session, url, allocate
        self._encoded: dict[str, tuple[int, bytes]] = {}  # node -> (generation, NodeInfo)

    async def _post(self, verb: str, body: bytes) -> Any:
        self.requests[verb] += 1
        async with self.session.post(
            f"{self.url}/volcano/{verb}", data=body, headers=JSON_BODY
        ) as response:
            response.raise_for_status()
            return await response.json()

    def node_info(self, cluster: Cluster, name: str) -> bytes:
        """The node's NodeInfo as Volcano sends it: every task on it, placed ones Bound,
        started ones Running."""
        node = cluster.nodes[name]
        cached = self._encoded.get(name)
        if cached is not None and cached[0] == node.generation:
            return cached[1]
        tasks = [
            wire.task_info(
                p, name, wire.RUNNING if p.name in node.running else wire.BOUND, uid(cluster, p)
            )
            for p in node.placed.values()
        ]
        info = wire.node_info(name, tasks, node.generation, used=(node.cpu, node.memory))
        encoded = wire.encode(info)
        self._encoded[name] = (node.generation, encoded)
        return encoded

    async def _predicates(self, cluster: Cluster, task: bytes, names: Sequence[str]) -> list[str]:
        gate = asyncio.Semaphore(PREDICATE_CONCURRENCY)

        async def one(name: str) -> bool:
            async with gate:
                body = b'{"task":' + task + b',"node":' + self.node_info(cluster, name) + b"}"
                result = await self._post("predicate", body)
                return not result.get("status")

        passed = await asyncio.gather(*(one(n) for n in names))
        return [n for n, ok in zip(names, passed, strict=True) if ok]

    async def _place(self, cluster: Cluster, pod: PodSpec, rng: random.Random) -> str | None:
        names = feasible(cluster, pod)
        if not names:
            return None
        task = wire.encode(wire.task_info(pod, uid=uid(cluster, pod)))
        names = await self._predicates(cluster, task, names)
        if not names:
            return None
        nodes = b",".join(self.node_info(cluster, n) for n in names)
        result = await self._post("prioritize", b'{"task":' + task + b',"nodes":[' + nodes + b"]}")
        extra = result.get("nodeScore") or {}
        # nodeorder's leastrequested and balancedresource (weight 1 each): kube's own plugins,
        # as kubeframework.score computes them.
        scores = {n: kubeframework.score(cluster.nodes[n], pod) + extra.get(n, 0.0) for n in names}
        chosen = pick(scores, rng)
        if self.allocate:
            placed = wire.task_info(pod, chosen, wire.ALLOCATED, uid(cluster, pod))
            await self._post("allocate", wire.encode({"task": placed}))
        return chosen
