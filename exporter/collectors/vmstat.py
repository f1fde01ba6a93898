"""Pages scanned by reclaim (``/proc/vmstat``), by reclaimer and by page type."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client.metrics_core import CounterMetricFamily

from exporter.errors import ParseError
from exporter.parsers.vmstat import page_scans, parse_vmstat
from exporter.paths import read_text
from exporter.registry import CollectorConfig, FileCollector, register

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric


@register("vmstat", default_enabled=True, help="page-scan counters from /proc/vmstat")
class VmstatCollector(FileCollector):
    def __init__(self, config: CollectorConfig) -> None:
        self._path = config.paths.proc("vmstat")

    def update(self) -> list[Metric]:
        scans = page_scans(parse_vmstat(read_text(self._path), prefix="pgscan_"))
        if not scans.by_reclaimer and not scans.by_type:
            raise ParseError("vmstat has no pgscan counters")
        by_reclaimer = CounterMetricFamily(
            "mco_vmstat_pgscan",
            "Pages scanned by reclaim, by reclaimer (global reclaim only; "
            "memory-cgroup limit reclaim is not counted here).",
            labels=["reclaimer"],
        )
        for reclaimer, pages in scans.by_reclaimer.items():
            by_reclaimer.add_metric([reclaimer], pages)
        metrics: list[Metric] = [by_reclaimer]
        if scans.by_type:
            by_type = CounterMetricFamily(
                "mco_vmstat_pgscan_by_type",
                "Pages scanned by reclaim, by page type, including memory-cgroup reclaim "
                "(5.8+). Counts the same pages as mco_vmstat_pgscan_total: never add the two.",
                labels=["type"],
            )
            for page_type, pages in scans.by_type.items():
                by_type.add_metric([page_type], pages)
            metrics.append(by_type)
        return metrics
