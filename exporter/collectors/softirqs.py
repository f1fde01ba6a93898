"""Softirqs raised by type (``/proc/softirqs``), node totals."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client.metrics_core import CounterMetricFamily

from exporter.errors import NoDataError
from exporter.parsers.softirqs import parse_softirqs
from exporter.paths import read_text
from exporter.registry import CollectorConfig, FileCollector, register

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric


@register("softirqs", default_enabled=True, help="softirqs raised by type from /proc/softirqs")
class SoftirqsCollector(FileCollector):
    """One series per softirq type (about 10), summed over CPUs: bounded on any CPU count."""

    def __init__(self, config: CollectorConfig) -> None:
        self._path = config.paths.proc("softirqs")

    def update(self) -> list[Metric]:
        try:
            text = read_text(self._path)
        except FileNotFoundError:
            raise NoDataError("/proc/softirqs absent (kernel < 2.6.31)") from None
        family = CounterMetricFamily(
            "mco_softirqs",
            "Softirqs raised, by type (NET_RX, BLOCK, TIMER, ...), summed over all CPUs.",
            labels=["type"],
        )
        for kind, count in parse_softirqs(text).items():
            family.add_metric([kind], float(count))
        return [family]
