"""CPU time stolen by the hypervisor (``/proc/stat``)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily

from exporter.parsers.procstat import parse_stat
from exporter.paths import read_text
from exporter.registry import CollectorConfig, FileCollector, register

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

USER_HZ = os.sysconf("SC_CLK_TCK")


@register("cpu", default_enabled=True, help="steal time and CPU count from /proc/stat")
class CPUCollector(FileCollector):
    def __init__(self, config: CollectorConfig) -> None:
        self._path = config.paths.proc("stat")

    def update(self) -> list[Metric]:
        stat = parse_stat(read_text(self._path))
        return [
            CounterMetricFamily(
                "mco_cpu_steal_seconds",
                "CPU seconds stolen by the hypervisor, summed over all CPUs.",
                value=stat.steal_ticks / USER_HZ,
            ),
            GaugeMetricFamily(
                "mco_cpu_online",
                "CPUs counted in /proc/stat: the denominator of the steal and run-queue ratios.",
                value=stat.cpus,
            ),
        ]
