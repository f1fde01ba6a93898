"""CPU steal and IRQ time (``/proc/stat``): one read serves both."""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily

from exporter.parsers.procstat import CPUTicks, busiest_irq_share, parse_stat
from exporter.paths import read_text
from exporter.registry import CollectorConfig, FileCollector, register

if TYPE_CHECKING:
    from collections.abc import Mapping

    from prometheus_client.metrics_core import Metric

USER_HZ = os.sysconf("SC_CLK_TCK")


@register("cpu", default_enabled=True, help="steal and IRQ time and CPU count from /proc/stat")
class CPUCollector(FileCollector):
    """Node totals, plus one gauge for the busiest CPU's IRQ share.

    The share is the delta since the previous scrape, so the collector keeps the last per-CPU
    ticks: one series whatever the CPU count, where per-CPU counters would be 2 × CPUs series
    (512 on a 256-CPU node) for a value the rules only ever take the max of.
    """

    def __init__(self, config: CollectorConfig) -> None:
        self._path = config.paths.proc("stat")
        self._lock = threading.Lock()
        self._previous: Mapping[int, CPUTicks] = {}  # empty: the first share counts from boot
        self._share = 0.0

    def update(self) -> list[Metric]:
        stat = parse_stat(read_text(self._path))
        with self._lock:
            share = busiest_irq_share(self._previous, stat.per_cpu)
            if share is not None:  # else no tick since the last read: keep the last share
                self._previous, self._share = stat.per_cpu, share
            busiest = self._share
        irq = CounterMetricFamily(
            "mco_cpu_irq_seconds",
            "CPU seconds spent serving hard (kind=hard) and soft (kind=soft) interrupts, "
            "summed over all CPUs.",
            labels=["kind"],
        )
        irq.add_metric(["hard"], stat.irq_ticks / USER_HZ)
        irq.add_metric(["soft"], stat.softirq_ticks / USER_HZ)
        return [
            CounterMetricFamily(
                "mco_cpu_steal_seconds",
                "CPU seconds stolen by the hypervisor, summed over all CPUs.",
                value=stat.steal_ticks / USER_HZ,
            ),
            irq,
            GaugeMetricFamily(
                "mco_cpu_irq_busiest_ratio",
                "Share of its time the busiest CPU spent in hard and soft IRQs since the "
                "previous scrape (since boot at the first).",
                value=busiest,
            ),
            GaugeMetricFamily(
                "mco_cpu_online",
                "CPUs counted in /proc/stat: the denominator of the steal, IRQ and run-queue "
                "ratios.",
                value=stat.cpus,
            ),
        ]
