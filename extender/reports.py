"""The in-memory view of every node's report entry, fed by a report source, read by handlers.

Handlers only read it (no I/O on the request path). Sources hand it whole report objects of
either layout: ``cluster`` (one object holding every node) or ``per-node`` (one object per node);
both layouts may coexist while the reporter switches. When two objects hold the same node, the
entry with the newer sample time wins.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping

from reporter.schema import (
    CLUSTER_REPORT_NAME,
    LAYOUT_LABEL,
    NodeEntry,
    NodeInterferenceReport,
    ReportConfig,
    WorkloadProfile,
    parse_time,
)

log = logging.getLogger("mco.extender.reports")


class KnownNode:
    """A report entry with its sample time parsed once, when the report was loaded."""

    __slots__ = ("entry", "live", "sampled_at")

    def __init__(self, entry: NodeEntry, sampled_at: float) -> None:
        self.entry = entry
        self.sampled_at = sampled_at  # Unix seconds; -inf when it could not be parsed
        self.live = entry.live

    def held_until(self, heartbeat: float) -> float:
        """``reporter.schema.entry_time`` without parsing the sample time again."""
        return max(self.sampled_at, heartbeat) if self.live else self.sampled_at

    def judged_alike(self, other: KnownNode) -> bool:
        """Whether `decide` reads the same inputs from both, apart from the times.

        Reports are rewritten every cycle with new sample times while what a verdict reads
        mostly stays put; cached verdicts survive such rewrites.
        """
        old, new = other.entry, self.entry
        return (
            old.schedulable == new.schedulable
            and old.level == new.level
            and old.kata_ready == new.kata_ready
            and old.violations == new.violations
            and old.reasons == new.reasons
            and other.live == self.live
            and math.isfinite(other.sampled_at) == math.isfinite(self.sampled_at)
        )


Listener = Callable[[Mapping[str, bool]], None]
ConfigListener = Callable[[ReportConfig], None]


class ReportStore:
    """Node name -> its freshest entry. Listeners hear which nodes changed after each update,
    and whether the change matters to a verdict (False: only the sample time moved)."""

    def __init__(self) -> None:
        self._objects: dict[str, dict[str, KnownNode]] = {}  # object name -> its nodes
        self._layouts: dict[str, str] = {}
        self._nodes: dict[str, KnownNode] = {}
        self._holders: dict[str, set[str]] = {}  # node -> objects holding it
        self._listeners: list[Listener] = []
        self._config_listeners: list[ConfigListener] = []
        self._changes: dict[str, bool] = {}
        # status.config of the object named "cluster": the accepted DetectionRuleConfig's
        # report settings and policies. Kept when that object goes or comes back without it
        # (an older reporter): the last config a report carried stays in force.
        self.config: ReportConfig | None = None
        # status.profiles of the object named "cluster" (extender.profiles); replaced whole.
        self.profiles: list[WorkloadProfile] = []
        self._config_changed = False
        # lastSyncTime of the object named "cluster" (both layouts have it): live entries hold
        # up to it (the reporter's freshness rule, reporter.schema).
        self.heartbeat = -math.inf
        self.loaded = False  # a first full load (file read or list) has succeeded
        self.last_change = 0.0  # time.time() of the last applied change

    def get(self, node: str) -> KnownNode | None:
        return self._nodes.get(node)

    @property
    def nodes(self) -> Mapping[str, KnownNode]:
        return self._nodes

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def subscribe_config(self, listener: ConfigListener) -> None:
        """Hear each new ``status.config`` (before the node changes of the same update)."""
        self._config_listeners.append(listener)

    def layouts(self) -> dict[str, int]:
        """How many objects of each layout are held (for /metrics and /v1/nodes)."""
        counts: dict[str, int] = {}
        for layout in self._layouts.values():
            counts[layout] = counts.get(layout, 0) + 1
        return counts

    def replace_all(self, reports: Iterable[NodeInterferenceReport]) -> None:
        """A full load (file, list): objects absent from ``reports`` are dropped."""
        fresh = {r.metadata.name: r for r in reports}
        for name in list(self._objects):
            if name not in fresh:
                self._remove(name)
        for report in fresh.values():
            self._upsert(report)
        self.loaded = True
        self._publish()

    def upsert(self, report: NodeInterferenceReport) -> None:
        self._upsert(report)
        self._publish()

    def remove(self, name: str) -> None:
        self._remove(name)
        self._publish()

    def held_until(self, known: KnownNode) -> float:
        return known.held_until(self.heartbeat)

    def _upsert(self, report: NodeInterferenceReport) -> None:
        name = report.metadata.name
        if name == CLUSTER_REPORT_NAME:
            self.heartbeat = parse_time(report.status.last_sync_time)
            if report.status.profiles is not None:  # an older reporter: keep the last ones
                self.profiles = report.status.profiles
            config = report.status.config
            if config is not None and config != self.config:
                self.config = config
                self._config_changed = True
        old = self._objects.get(name, {})
        parsed: dict[str, float] = {}  # a reporter cycle stamps most nodes with one time
        known: dict[str, KnownNode] = {}
        for node, entry in report.status.nodes.items():
            previous = old.get(node)
            if previous is not None and previous.entry == entry:
                known[node] = previous  # unchanged (merge-patched reports touch few nodes)
                continue
            at = parsed.get(entry.sample_time)
            if at is None:
                at = parsed[entry.sample_time] = parse_time(entry.sample_time)
            known[node] = KnownNode(entry, at)
        self._layouts[name] = report.metadata.labels.get(LAYOUT_LABEL) or _guess_layout(report)
        self._objects[name] = known
        for node in old.keys() - known.keys():
            self._holders.get(node, set()).discard(name)
            self._refresh(node)
        for node, fresh in known.items():
            holders = self._holders.get(node)
            if holders is None:
                self._holders[node] = {name}
                self._set(node, fresh)
            elif len(holders) == 1 and name in holders:
                self._set(node, fresh)  # the common case: one object holds the node
            else:
                holders.add(name)
                self._refresh(node)

    def _remove(self, name: str) -> None:
        if name == CLUSTER_REPORT_NAME:
            self.heartbeat = -math.inf
        old = self._objects.pop(name, {})
        self._layouts.pop(name, None)
        for node in old:
            self._holders.get(node, set()).discard(name)
            self._refresh(node)

    def _refresh(self, node: str) -> None:
        holders = self._holders.get(node)
        if not holders:
            self._holders.pop(node, None)
            self._set(node, None)
            return
        self._set(node, max((self._objects[h][node] for h in holders), key=_sample_time))

    def _set(self, node: str, known: KnownNode | None) -> None:
        previous = self._nodes.get(node)
        if known is previous:
            return
        if known is None:
            del self._nodes[node]
        else:
            self._nodes[node] = known
        alike = previous is not None and known is not None and known.judged_alike(previous)
        self._changes[node] = self._changes.get(node, False) or not alike

    def _publish(self) -> None:
        self.last_change = time.time()
        if self._config_changed and self.config is not None:
            self._config_changed = False
            for config_listener in self._config_listeners:
                config_listener(self.config)
        changes, self._changes = self._changes, {}
        if changes:
            for listener in self._listeners:
                listener(changes)


def _sample_time(known: KnownNode) -> float:
    return known.sampled_at


def _guess_layout(report: NodeInterferenceReport) -> str:
    nodes = report.status.nodes
    return "per-node" if len(nodes) == 1 and report.metadata.name in nodes else "cluster"
