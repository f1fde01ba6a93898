"""The extender's own metrics: request latency by route, verdicts by reason, report freshness.

With ``--workers N`` the processes share counters and histograms through prometheus_client's
multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``); the report gauges describe the scraped worker's
own view, which every worker loads from the same source.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterator, Sequence
from operator import itemgetter

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from extender.config import CLOCK_SKEW
from extender.reports import ReportStore
from extender.reservation import Reservations
from extender.verdict import Verdict
from mco import selfmetrics
from mco.asynciotasks import AsyncioTasks

LATENCY_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
)  # fmt: skip


_REASON = itemgetter(1)  # Verdict.reason, read at C speed


class ReportCollector(Collector):
    """Report freshness computed at scrape time from the store (no bookkeeping on updates)."""

    def __init__(
        self, store: ReportStore, stale_after: Callable[[], float], clock_skew: float
    ) -> None:
        self._store = store
        self._stale_after = stale_after  # read at each scrape: it follows the report's config
        self._clock_skew = clock_skew

    def collect(self) -> Iterator[Metric]:
        now = time.time()
        store = self._store
        ready = GaugeMetricFamily(
            selfmetrics.EXTENDER_REPORT_LOADED, "1 once the first full report load has succeeded."
        )
        ready.add_metric([], 1.0 if store.loaded else 0.0)
        yield ready
        ages = [now - store.held_until(k) for k in store.nodes.values()]
        finite = [a for a in ages if math.isfinite(a)]
        nodes = GaugeMetricFamily(
            selfmetrics.EXTENDER_REPORT_NODES,
            "Nodes in the loaded reports by freshness.",
            labels=["state"],
        )
        stale_after, ahead = self._stale_after(), -self._clock_skew  # dated ahead: stale too
        stale = sum(1 for a in ages if a > stale_after or a <= ahead)
        nodes.add_metric(["fresh"], float(len(ages) - stale))
        nodes.add_metric(["stale"], float(stale))
        yield nodes
        newest = GaugeMetricFamily(
            selfmetrics.EXTENDER_NEWEST_SAMPLE_AGE,
            "Age of the freshest node data (reporter.schema.entry_time; NaN when empty).",
        )
        newest.add_metric([], min(finite) if finite else math.nan)
        yield newest
        oldest = GaugeMetricFamily(
            selfmetrics.EXTENDER_OLDEST_SAMPLE_AGE,
            "Age of the stalest node data (reporter.schema.entry_time; NaN when empty).",
        )
        oldest.add_metric([], max(finite) if finite else math.nan)
        yield oldest
        change = GaugeMetricFamily(
            selfmetrics.EXTENDER_LAST_CHANGE_AGE,
            "Seconds since the report source last delivered a change (NaN before the first).",
        )
        change.add_metric([], now - store.last_change if store.last_change else math.nan)
        yield change
        heartbeat = GaugeMetricFamily(
            selfmetrics.EXTENDER_HEARTBEAT_AGE,
            "Seconds since the report's heartbeat (lastSyncTime of `cluster`; NaN: none).",
        )
        heartbeat.add_metric(
            [], now - store.heartbeat if math.isfinite(store.heartbeat) else math.nan
        )
        yield heartbeat
        objects = GaugeMetricFamily(
            selfmetrics.EXTENDER_REPORT_OBJECTS,
            "Report objects held, by layout.",
            labels=["layout"],
        )
        for layout, count in sorted(store.layouts().items()):
            objects.add_metric([layout], float(count))
        yield objects


class ReservationCollector(Collector):
    """Placements held and whether each placement feed works, at scrape time."""

    def __init__(self, reservations: Reservations | None, source_up: dict[str, bool]) -> None:
        self._reservations = reservations
        self._source_up = source_up

    def collect(self) -> Iterator[Metric]:
        held = GaugeMetricFamily(
            selfmetrics.EXTENDER_RESERVATION_PODS,
            "Recent placements held for reservations (all sources, this worker).",
        )
        if self._reservations is not None:
            self._reservations.active(time.time())  # forget the expired ones first
        held.add_metric([], float(len(self._reservations or ())))
        yield held
        up = GaugeMetricFamily(
            selfmetrics.EXTENDER_RESERVATION_SOURCE_UP,
            "1 while a placement feed that can break works (the pod watch); 0: no reservation "
            "from it.",
            labels=["source"],
        )
        for source, ok in sorted(self._source_up.items()):
            up.add_metric([source], 1.0 if ok else 0.0)
        yield up


class ExtenderMetrics:
    def __init__(
        self,
        store: ReportStore,
        stale_after: float | Callable[[], float],
        clock_skew: float = CLOCK_SKEW,
        reservations: Reservations | None = None,
    ) -> None:
        multiprocess_dir = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        self.registry = CollectorRegistry(auto_describe=False)
        # In multiprocess mode the metric values live in shared files, read by the collector.
        owner = None if multiprocess_dir else self.registry
        if multiprocess_dir:
            MultiProcessCollector(self.registry, multiprocess_dir)  # type: ignore[no-untyped-call]
        follow = stale_after if callable(stale_after) else lambda: float(stale_after)
        self.registry.register(ReportCollector(store, follow, clock_skew))
        self.registry.register(AsyncioTasks(selfmetrics.EXTENDER_ASYNCIO_TASKS))
        # Feeds that can break (the pod watch) -> whether they work now; set by the feed.
        self.source_up: dict[str, bool] = {}
        self.registry.register(ReservationCollector(reservations, self.source_up))
        self._placements = Counter(
            selfmetrics.EXTENDER_PLACEMENTS,
            "Placements heard by source and result (recorded, unknown_node: ignored, removed).",
            ["source", "result"],
            registry=owner,
        )
        self._duration = Histogram(
            selfmetrics.EXTENDER_REQUEST_DURATION,
            "Time to answer a request, by route (body read included).",
            ["route"],
            buckets=LATENCY_BUCKETS,
            registry=owner,
        )
        self._requests = Counter(
            selfmetrics.EXTENDER_REQUESTS,
            "Requests by route and status code.",
            ["route", "code"],
            registry=owner,
        )
        self._verdicts = Counter(
            selfmetrics.EXTENDER_VERDICTS,
            "Node verdicts by route, outcome and reason.",
            ["route", "verdict", "reason"],
            registry=owner,
        )
        self.report_loads = Counter(
            selfmetrics.EXTENDER_REPORT_LOADS,
            "Report loads by source (file, list, watch event) and result.",
            ["source", "result"],
            registry=owner,
        )
        self.watch_restarts = Counter(
            selfmetrics.EXTENDER_WATCH_RESTARTS,
            "Kubernetes watch restarts by reason (gone: re-listed after 410; error; closed).",
            ["reason"],
            registry=owner,
        )
        # Label lookups cost more than the increments: children are cached (hot path).
        self._durations: dict[str, Histogram] = {}
        self._request_counts: dict[tuple[str, int], Counter] = {}
        self._verdict_counts: dict[tuple[str, bool, str], Counter] = {}

    def observe(self, route: str, code: int, seconds: float) -> None:
        duration = self._durations.get(route)
        if duration is None:
            duration = self._durations[route] = self._duration.labels(route)
        duration.observe(seconds)
        count = self._request_counts.get((route, code))
        if count is None:
            count = self._request_counts[route, code] = self._requests.labels(route, str(code))
        count.inc()

    def count_placement(self, source: str, result: str, n: int = 1) -> None:
        self._placements.labels(source, result).inc(n)

    def count_verdict(self, route: str, verdict: Verdict) -> None:
        self._verdict_counter(route, verdict.passed, verdict.reason).inc()

    def count_verdicts(self, route: str, verdicts: Sequence[Verdict]) -> None:
        # list.count over a handful of distinct reasons beats a Counter over thousands.
        reasons = list(map(_REASON, verdicts))
        for reason in set(reasons):
            passed = verdicts[reasons.index(reason)].passed  # one outcome per reason and config
            self._verdict_counter(route, passed, reason).inc(reasons.count(reason))

    def _verdict_counter(self, route: str, passed: bool, reason: str) -> Counter:
        key = (route, passed, reason)
        counter = self._verdict_counts.get(key)
        if counter is None:
            counter = self._verdict_counts[key] = self._verdicts.labels(
                route, "pass" if passed else "fail", reason
            )
        return counter
