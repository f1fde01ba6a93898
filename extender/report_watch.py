"""Reports from the Kubernetes API: ``mco.watch``'s list-then-watch, feeding the report store.

List, then watch from the list's resourceVersion, re-list on ``410 Gone``, back off with jitter
on errors: all of it is the shared loop (``mco.watch.ListWatch``); this module only turns its
objects into the store's reports and counts restarts and loads. Handlers never wait on any of
this: they read the store.

Objects arrive as raw JSON and are decoded with msgspec into the report schema, so a report
object of any size (up to etcd's ~1.5 MiB) is one line of the stream, not one read.
"""

from __future__ import annotations

import logging

import msgspec
from kubernetes_asyncio import client as k8s

from extender.config import SourceConfig
from extender.metrics import ExtenderMetrics
from extender.reports import ReportStore
from mco.apierrors import ApiError
from mco.watch import ListWatch, Resource, WatchSettings, object_meta
from reporter.schema import GROUP, PLURAL, VERSION, NodeInterferenceReport, decode_report

log = logging.getLogger("mco.extender.report_watch")


class ReportWatch:
    def __init__(
        self,
        api: k8s.ApiClient,
        store: ReportStore,
        metrics: ExtenderMetrics,
        config: SourceConfig,
    ) -> None:
        self._store = store
        self._metrics = metrics
        self._watch = ListWatch(
            api,
            Resource(GROUP, VERSION, PLURAL),
            self,
            WatchSettings(
                timeout=config.watch_timeout,
                backoff_initial=config.backoff_initial,
                backoff_max=config.backoff_max,
            ),
            on_restart=self._restarted,
        )

    async def run(self) -> None:
        """List and watch until cancelled."""
        await self._watch.run()

    def _restarted(self, reason: str, error: ApiError | None) -> None:
        self._metrics.watch_restarts.labels(reason).inc()

    # -- mco.watch.Handler ----------------------------------------------------------------------

    async def listed(self, items: list[msgspec.Raw]) -> None:
        reports = [r for raw in items if (r := self._decode(raw, "list")) is not None]
        self._store.replace_all(reports)
        self._metrics.report_loads.labels("list", "ok").inc()
        log.info("reports listed", extra={"objects": len(reports), "nodes": len(self._store.nodes)})

    async def changed(self, kind: str, obj: msgspec.Raw) -> None:
        if kind == "DELETED":
            self._store.remove(object_meta(obj).name)
            return
        report = self._decode(obj, "watch")
        if report is not None:
            self._store.upsert(report)
            self._metrics.report_loads.labels("watch", "ok").inc()
        else:
            # Its old version must not stay in force: a live entry there would be held fresh
            # by the heartbeat for ever. A list drops such an object the same way.
            self._store.remove(object_meta(obj).name)

    def _decode(self, raw: msgspec.Raw, source: str) -> NodeInterferenceReport | None:
        try:
            return decode_report(raw)
        except ValueError as exc:
            self._metrics.report_loads.labels(source, "error").inc()
            log.error("report object rejected", extra={"err": str(exc)})
            return None
