"""Pods placed on a node that the node's data cannot show yet: its reservation.

A pod placed at time ``t`` shows in its node's level once the level's window covers it and the
value has travelled through scrape, rule evaluation and the reporter: from data that holds up to
``t + span`` on. Until then its amount (``reservationPerPod`` of its policy) is added to the
node's level, for scores and for level limits, so a burst of pods does not herd onto the node
that looked quietest before the first of them arrived. The sum is capped at 1.

Memory follows recent placements only: a placement is forgotten ``keep_for`` after it happened
(the span plus the ``staleAfter`` in force: by then the data shows it, or is stale and the
verdict no longer reads the level), whatever order placements arrived in (a heap by time), and
at most ``MAX_PLACEMENTS`` are held, the first recorded going first. Placement times come from
this clock (Volcano) or from the pod's ``PodScheduled`` time, which the pod watch believes only
up to the clock-skew allowance ahead (``extender.pod_watch``).
Placements are keyed by the pod's UID, so the same pod reported by two sources (an allocate
call, then its NodeInfo task) counts once.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Mapping
from typing import Final, NamedTuple

# Placements held at once: a few times the pods a large cluster places within one span. Each
# costs ~0.3 KiB (two dict slots, the key, the tuple), so this is ~20 MiB at most.
MAX_PLACEMENTS: Final = 65_536

# Where placements come from (the ``source`` label of the extender's placement metrics).
VOLCANO_VERBS: Final = "volcano_verbs"  # POST /volcano/allocate and /volcano/deallocate
VOLCANO_TASKS: Final = "volcano_tasks"  # tasks of a predicate/prioritize body's NodeInfos
POD_WATCH: Final = "pod_watch"  # kube-scheduler: a watch of pods bound to nodes
SOURCES: Final = (VOLCANO_VERBS, VOLCANO_TASKS, POD_WATCH)

# A pod's labels -> the amount its placement reserves (its policy's reservationPerPod).
AmountFor = Callable[[Mapping[str, str]], float]


class Placement(NamedTuple):
    node: str
    amount: float
    at: float  # Unix time the pod was placed
    source: str


class Reservations:
    """Recent placements by pod and by node; ``reserved`` is what a node's level gets added."""

    def __init__(self, span: float, keep_for: float, max_placements: int = MAX_PLACEMENTS) -> None:
        if span < 0:
            raise ValueError("reservation span must not be negative")
        self.span = span
        self.keep_for = max(keep_for, span)
        self._max = max_placements
        self._pods: dict[str, Placement] = {}  # pod key -> placement, oldest insertion first
        self._nodes: dict[str, dict[str, Placement]] = {}  # node -> its pods' placements
        # (time, key) of every placement, earliest first; entries of placements replaced or
        # removed since stay until they reach the top (or the heap is rebuilt: _compact).
        self._by_time: list[tuple[float, str]] = []

    def __len__(self) -> int:
        return len(self._pods)

    def place(self, key: str, placement: Placement) -> bool:
        """Record a pod's placement; False when it was known already. The same pod on the same
        node keeps its first time (a task seen again in every NodeInfo was placed when it was
        first seen)."""
        old = self._pods.get(key)
        if old is not None:
            if old.node == placement.node and old.at <= placement.at:
                return False
            self.remove(key)
        self._pods[key] = placement
        self._nodes.setdefault(placement.node, {})[key] = placement
        heapq.heappush(self._by_time, (placement.at, key))
        while len(self._pods) > self._max:
            self.remove(next(iter(self._pods)))
        if len(self._by_time) > 2 * len(self._pods) + 1024:
            self._compact()
        return True

    def _compact(self) -> None:
        self._by_time = [(p.at, key) for key, p in self._pods.items()]
        heapq.heapify(self._by_time)

    def remove(self, key: str) -> bool:
        old = self._pods.pop(key, None)
        if old is None:
            return False
        pods = self._nodes[old.node]
        del pods[key]
        if not pods:
            del self._nodes[old.node]
        return True

    def clear(self, source: str) -> None:
        """Forget every placement one source reported (its feed broke: no reservation beats a
        wrong one)."""
        for key in [k for k, p in self._pods.items() if p.source == source]:
            self.remove(key)

    def active(self, now: float) -> Mapping[str, Mapping[str, Placement]]:
        """Nodes with placements not yet forgotten at ``now``, after dropping expired ones."""
        self._expire(now)
        return self._nodes

    def reserved(self, node: str, data_time: float, now: float) -> float:
        """The amount added to ``node``'s level: its pods placed after ``data_time - span``
        (placements the data, known to hold up to ``data_time``, cannot show), capped at 1."""
        pods = self._nodes.get(node)
        if not pods or not math.isfinite(data_time):
            return 0.0
        since, oldest = data_time - self.span, now - self.keep_for
        total = sum(p.amount for p in pods.values() if p.at > since and p.at >= oldest)
        return min(1.0, total)

    def recent(self, node: str, now: float) -> float:
        """The amount added to a node without data (no report, or none that parses): every
        placement there not yet forgotten, capped at 1."""
        pods = self._nodes.get(node)
        if not pods:
            return 0.0
        oldest = now - self.keep_for
        return min(1.0, sum(p.amount for p in pods.values() if p.at >= oldest))

    def _expire(self, now: float) -> None:
        oldest = now - self.keep_for
        heap = self._by_time
        while heap and heap[0][0] < oldest:  # by time, not insertion: a re-list inserts late
            at, key = heapq.heappop(heap)
            current = self._pods.get(key)
            if current is not None and current.at == at:
                self.remove(key)
