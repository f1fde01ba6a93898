"""A simulated cluster: nodes with capacity, pods placed on them, and their contention.

What kube-scheduler's cache holds (requests per node, for resource fit and LeastAllocated)
and what the contention model needs (the demands of the pods running on each node).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from bench.placement.model import (
    FAST_DISK,
    LARGE_CACHE,
    NODE_CPU,
    NODE_MEMORY,
    STANDARD,
    Demand,
    NodeKind,
    Signals,
    signals,
)
from bench.placement.trace import PodSpec


@dataclass
class Node:
    name: str
    cpu: float = 0.0  # requested
    memory: float = 0.0
    placed: dict[str, PodSpec] = field(default_factory=dict)  # bound, maybe not started
    running: dict[str, PodSpec] = field(default_factory=dict)  # started: part of the load
    quiet: set[str] = field(default_factory=set)  # running pods in a quiet phase
    generation: int = 0  # moves whenever a pod is placed, starts or ends here
    kind: NodeKind = STANDARD  # its LLC and disk (``mixed-nodes``: two types)

    def fits(self, pod: PodSpec) -> bool:
        return (
            self.cpu + pod.demand.cpu <= NODE_CPU and self.memory + pod.demand.memory <= NODE_MEMORY
        )

    def least_allocated(self, pod: PodSpec) -> float:
        """kube-scheduler's NodeResourcesFit LeastAllocated score (cpu and memory, weight 1
        each), 0-100, for the node with the pod on it."""
        cpu = (NODE_CPU - self.cpu - pod.demand.cpu) * 100 / NODE_CPU
        memory = (NODE_MEMORY - self.memory - pod.demand.memory) * 100 / NODE_MEMORY
        return (cpu + memory) / 2

    def signals(self) -> Signals:
        return signals(demands(self), kind=self.kind)


@dataclass
class Placement:
    pod: PodSpec
    node: str
    bound_at: float
    starts_at: float
    ends_at: float


def node_kinds(scenario: str, size: int) -> list[NodeKind]:
    """The type of each node: ``mixed-nodes`` alternates a large-LLC type and a fast-disk one
    (model.py), so every share of the cluster holds both; every other scenario one type."""
    if scenario == "mixed-nodes":
        return [LARGE_CACHE if i % 2 == 0 else FAST_DISK for i in range(size)]
    return [STANDARD] * size


class Cluster:
    def __init__(
        self, name: str, prefix: str, size: int, kinds: Sequence[NodeKind] | None = None
    ) -> None:
        self.name = name
        kinds = kinds or [STANDARD] * size
        self.nodes = {
            n: Node(n, kind=kinds[i])
            for i, n in enumerate(f"{prefix}-{i:04d}" for i in range(size))
        }
        self.pending: list[PodSpec] = []
        self.placements: dict[str, Placement] = {}
        self.attempts = 0
        self.unschedulable_attempts = 0

    def bind(self, pod: PodSpec, node: str, now: float, startup: float) -> Placement:
        n = self.nodes[node]
        n.cpu += pod.demand.cpu
        n.memory += pod.demand.memory
        n.placed[pod.name] = pod
        n.generation += 1
        placement = Placement(pod, node, now, now + startup, now + startup + pod.lifetime)
        self.placements[pod.name] = placement
        return placement

    def start(self, placement: Placement) -> None:
        n = self.nodes[placement.node]
        n.running[placement.pod.name] = placement.pod
        n.generation += 1

    def finish(self, placement: Placement) -> None:
        n = self.nodes[placement.node]
        pod = placement.pod
        n.cpu -= pod.demand.cpu
        n.memory -= pod.demand.memory
        n.placed.pop(pod.name, None)
        n.running.pop(pod.name, None)
        n.quiet.discard(pod.name)
        n.generation += 1

    def phase(self, placement: Placement, now: float) -> bool:
        """Put a running pod in its phase at ``now``; True when that changed its node's load."""
        n = self.nodes[placement.node]
        name = placement.pod.name
        if name not in n.running:
            return False
        quiet = not placement.pod.heavy_at(now - placement.starts_at)
        if quiet == (name in n.quiet):
            return False
        if quiet:
            n.quiet.add(name)
        else:
            n.quiet.discard(name)
        return True

    def herding(self, burst_size: int) -> float:
        """Most pods of one burst on one node, over an even spread (ceil(burst / nodes)); nan
        when no burst pod was placed (nothing measured, which must not pass as no herding)."""
        even = -(-burst_size // len(self.nodes))
        per_burst: dict[int, Counter[str]] = {}
        for p in self.placements.values():
            if p.pod.burst is not None:
                per_burst.setdefault(p.pod.burst, Counter())[p.node] += 1
        if not per_burst:
            return math.nan
        most = max(c.most_common(1)[0][1] for c in per_burst.values())
        return most / even


def demands(node: Node) -> list[Demand]:
    """What the node's running pods add, each as its phase has it."""
    return [p.quiet_demand if n in node.quiet else p.demand for n, p in node.running.items()]
