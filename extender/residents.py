"""The pods running on each node, by policy: what a policy's ``avoidPolicies`` counts.

A batch pod whose policy keeps away from latency-sensitive pods scores a node as if its level
were ``avoidPerPod`` higher for each latency-sensitive pod on it (``extender.verdict.decide``).
That needs the pods on each node, which no scheduler call carries for kube-scheduler: the pod
watch (``--watch-pods``, ``extender.pod_watch``) feeds this store with every bound pod that has
not finished, and forgets deleted and finished ones. On the Volcano path each NodeInfo of a
predicate or prioritize body lists its node's tasks, which replace that node's pods here
(``extender.volcano_placements``).

Each pod is kept with its labels, so that a change of the policies in force (the report's
``status.config``) reclassifies the pods already known. At most ``MAX_RESIDENTS`` are held (the
oldest going first): about 110 pods on each of 2,400 nodes, ~0.5 KiB each with a few labels.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final, NamedTuple

MAX_RESIDENTS: Final = 262_144

# A pod's labels -> the name of its policy (from the policies in force).
Classify = Callable[[Mapping[str, str]], str]


class Resident(NamedTuple):
    node: str
    labels: Mapping[str, str]
    policy: str
    workload: str = ""  # namespace/Kind/name (mco.workload); "" where the source has no owner


class Residents:
    """Pods by key (the pod's UID) and, per node, how many of each policy run there."""

    def __init__(self, classify: Classify, max_pods: int = MAX_RESIDENTS) -> None:
        self._classify = classify
        self._max = max_pods
        self._pods: dict[str, Resident] = {}
        self._nodes: dict[str, Counter[str]] = {}
        self._keys: dict[str, set[str]] = {}  # node -> its pods' keys
        # node -> (workload, policy) of its pods with a workload; workload -> nodes it runs on
        self._kinds: dict[str, Counter[tuple[str, str]]] = {}
        self._where: dict[str, Counter[str]] = {}

    def __len__(self) -> int:
        return len(self._pods)

    def put(self, key: str, node: str, labels: Mapping[str, str], workload: str = "") -> None:
        """The pod ``key`` runs (or was bound to run) on ``node``; ``workload``: its
        controller's key, what workload profiles are looked up by (extender.profiles)."""
        self.remove(key)
        resident = Resident(node, labels, self._classify(labels), workload)
        self._pods[key] = resident
        self._nodes.setdefault(node, Counter())[resident.policy] += 1
        self._keys.setdefault(node, set()).add(key)
        if workload:
            self._kinds.setdefault(node, Counter())[(workload, resident.policy)] += 1
            self._where.setdefault(workload, Counter())[node] += 1
        while len(self._pods) > self._max:
            self.remove(next(iter(self._pods)))

    def remove(self, key: str) -> None:
        old = self._pods.pop(key, None)
        if old is None:
            return
        keys = self._keys[old.node]
        keys.discard(key)
        if not keys:
            del self._keys[old.node]
        counts = self._nodes[old.node]
        counts[old.policy] -= 1
        if counts[old.policy] <= 0:
            del counts[old.policy]
        if not counts:
            del self._nodes[old.node]
        if old.workload:
            _drop(self._kinds, old.node, (old.workload, old.policy))
            _drop(self._where, old.workload, old.node)

    def clear(self) -> None:
        self._pods.clear()
        self._nodes.clear()
        self._keys.clear()
        self._kinds.clear()
        self._where.clear()

    def replace_node(self, node: str, pods: Iterable[tuple[str, Mapping[str, str]]]) -> None:
        """The pods on ``node`` are exactly ``pods`` (key, labels): a Volcano NodeInfo lists
        every task on its node, so pods it no longer lists have left."""
        for key in list(self._keys.get(node, ())):
            self.remove(key)
        for key, labels in pods:
            self.put(key, node, labels)

    def count(self, node: str, policies: Sequence[str]) -> int:
        """Pods of any of ``policies`` on ``node``."""
        counts = self._nodes.get(node)
        return sum(counts[p] for p in policies) if counts else 0

    def nodes_with(self, policies: Sequence[str]) -> set[str]:
        """Nodes where at least one pod of ``policies`` runs."""
        return {n for n, c in self._nodes.items() if any(c[p] for p in policies)}

    def workloads_on(self, node: str) -> Mapping[tuple[str, str], int]:
        """(workload, policy) -> pods of it on ``node`` (pods with a known workload only)."""
        return self._kinds.get(node) or {}

    def nodes_of(self, workloads: Iterable[str]) -> set[str]:
        """Nodes where a pod of any of ``workloads`` runs."""
        found: set[str] = set()
        for workload in workloads:
            where = self._where.get(workload)
            if where:
                found.update(where)
        return found

    def reclassify(self) -> None:
        """Sort every pod into its policy again (the policies in force changed)."""
        pods = list(self._pods.items())
        self.clear()
        for key, r in pods:
            self.put(key, r.node, r.labels, r.workload)


def _drop(index: dict[Any, Counter[Any]], key: object, item: object) -> None:
    counts = index[key]
    counts[item] -= 1
    if counts[item] <= 0:
        del counts[item]
    if not counts:
        del index[key]
