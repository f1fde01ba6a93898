"""Volcano's placements, fed into the reservations: its allocate/deallocate calls, or the placed
tasks inside the NodeInfos of its predicate and prioritize bodies.

``--volcano-placements``: ``verbs`` reads only the calls (the NodeInfos' tasks are never
looked at: the predicate's fast path stays as it was); ``tasks`` reads the tasks of every body
(for a Volcano without ``extender.allocateFuncVerb``, or ``--workers N``, where each call
reaches one worker only); ``auto`` (default) reads the tasks until the first allocate or
deallocate call arrives, then only the calls, since a Volcano that sends them sends them all.

A task placed on a node the report does not know is ignored (no level to add to); a deallocate
of a task never placed is fine.
"""

from __future__ import annotations

from extender.metrics import ExtenderMetrics
from extender.reports import ReportStore
from extender.reservation import (
    VOLCANO_TASKS,
    VOLCANO_VERBS,
    AmountFor,
    Placement,
    Reservations,
)
from extender.volcano import PlacedTask, placed_tasks
from extender.wire import Body


class VolcanoPlacements:
    def __init__(
        self,
        mode: str,
        store: ReportStore,
        reservations: Reservations,
        amount_for: AmountFor,
        metrics: ExtenderMetrics,
    ) -> None:
        self._mode = mode
        self._store = store
        self._reservations = reservations
        self._amount_for = amount_for
        self._metrics = metrics
        self.verbs_seen = False

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

    def seen_in(self, body: Body, now: float) -> None:
        """The placed tasks of a predicate or prioritize body, when this mode reads them."""
        if self.reads_tasks:
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
