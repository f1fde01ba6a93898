"""Volcano's placements, fed into the reservations: its allocate/deallocate calls, or the placed
tasks inside the NodeInfos of its predicate and prioritize bodies.

``--volcano-placements``: ``verbs`` reads only the calls (the NodeInfos' tasks are never
looked at: the predicate's fast path stays as it was); ``tasks`` reads the tasks of every body
(for a Volcano without ``extender.allocateFuncVerb``, or ``--workers N``, where each call
reaches one worker only); ``auto`` (default) reads the tasks until the first allocate or
deallocate call arrives, then only the calls, since a Volcano that sends them sends them all.

Volcano sends the same NodeInfo again and again (for every pending task, every session) until
a task is placed on the node, so a body whose NodeInfo part is the same as the last one scanned
(same length, same last bytes: the node's Generation and BindGeneration end it) is not scanned
again: one signature per node the report knows for predicate bodies, one for the whole node
list of the last prioritize body. A node whose tasks changed and kept its length and its
Generation would only miss a reservation.

A task placed on a node the report does not know is ignored (no level to add to); a deallocate
of a task never placed is fine.

While a policy in force keeps pods away from others (``avoidPolicies``), each NodeInfo's placed
and running tasks also replace its node's pods in the residents (``extender.residents``),
whatever the mode, with the same skip of a NodeInfo part seen before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from extender.metrics import ExtenderMetrics
from extender.reports import ReportStore
from extender.reservation import (
    VOLCANO_TASKS,
    VOLCANO_VERBS,
    AmountFor,
    Placement,
    Reservations,
)
from extender.residents import Residents
from extender.volcano import PlacedTask, placed_tasks, resident_tasks
from extender.wire import Body

_NODE_KEY = b'"node":{'  # a predicate body's NodeInfo
_NODES_KEY = b'"nodes":['  # a prioritize body's NodeInfos
_TAIL = 96  # the last bytes of a signature: the NodeInfo's Generation and BindGeneration

Signature = tuple[int, bytes]


def _signature(body: Body, key: bytes) -> Signature | None:
    start = body.find(key)
    return None if start < 0 else (len(body) - start, bytes(body[-_TAIL:]))


class VolcanoPlacements:
    def __init__(
        self,
        mode: str,
        store: ReportStore,
        reservations: Reservations,
        amount_for: AmountFor,
        metrics: ExtenderMetrics,
        residents: Residents | None = None,
        wants_residents: Callable[[], bool] = lambda: False,
    ) -> None:
        self._mode = mode
        self._residents = residents
        self._wants_residents = wants_residents
        self._resident_seen: dict[str, Signature] = {}  # node -> its last NodeInfo read
        self._resident_prioritize_seen: Signature | None = None
        self._store = store
        self._reservations = reservations
        self._amount_for = amount_for
        self._metrics = metrics
        self.verbs_seen = False
        self._predicate_seen: dict[str, Signature] = {}  # node -> its last NodeInfo scanned
        self._prioritize_seen: Signature | None = None

    @property
    def reads_tasks(self) -> bool:
        return self._mode == "tasks" or (self._mode == "auto" and not self.verbs_seen)

    def allocated(self, task: PlacedTask, now: float) -> None:
        self.verbs_seen = True
        self._place(task, now, VOLCANO_VERBS)

    def deallocated(self, task: PlacedTask) -> None:
        self.verbs_seen = True
        if self._reservations.remove(task.key):
            self._metrics.count_placement(VOLCANO_VERBS, "removed")

    def in_predicate(self, body: Body, node: str, now: float) -> None:
        """The placed tasks of a predicate body for ``node``, when this mode reads them."""
        if self._residents is not None and self._wants_residents():
            signature = _signature(body, _NODE_KEY)
            if signature is None or self._resident_seen.get(node) != signature:
                self._replace(body, [node])
                if signature is not None and self._store.get(node) is not None:
                    self._resident_seen[node] = signature
        if not self.reads_tasks:
            return
        signature = _signature(body, _NODE_KEY)
        if signature is not None and self._predicate_seen.get(node) == signature:
            return
        self._scan(body, now)
        if signature is not None and self._store.get(node) is not None:  # bounded by the report
            self._predicate_seen[node] = signature

    def in_prioritize(self, body: Body, now: float, nodes: Sequence[str] = ()) -> None:
        """The placed tasks of a prioritize body (whose NodeInfos are ``nodes``), when this
        mode reads them."""
        if self._residents is not None and self._wants_residents():
            signature = _signature(body, _NODES_KEY)
            if signature is None or signature != self._resident_prioritize_seen:
                self._replace(body, nodes)
                self._resident_prioritize_seen = signature
        if not self.reads_tasks:
            return
        signature = _signature(body, _NODES_KEY)
        if signature is not None and signature == self._prioritize_seen:
            return
        self._scan(body, now)
        self._prioritize_seen = signature

    def _replace(self, body: Body, nodes: Sequence[str]) -> None:
        assert self._residents is not None
        on: dict[str, list[tuple[str, dict[str, str]]]] = {n: [] for n in nodes}
        for task in resident_tasks(body):
            if task.node_name in on:
                on[task.node_name].append((task.key, task.labels))
        for node, pods in on.items():
            self._residents.replace_node(node, pods)

    def _scan(self, body: Body, now: float) -> None:
        for task in placed_tasks(body):
            self._place(task, now, VOLCANO_TASKS)

    def _place(self, task: PlacedTask, now: float, source: str) -> None:
        node = task.node_name
        if self._store.get(node) is None:
            self._metrics.count_placement(source, "unknown_node")
            return
        placement = Placement(node, self._amount_for(task.labels), now, source)
        if self._reservations.place(task.key, placement):
            self._metrics.count_placement(source, "recorded")
