"""Run-queue wait time (``/proc/schedstat``), present only with CONFIG_SCHEDSTATS."""

from __future__ import annotations

import errno
from typing import TYPE_CHECKING

from prometheus_client.metrics_core import CounterMetricFamily

from exporter.errors import NoDataError
from exporter.parsers.schedstat import parse_schedstat
from exporter.paths import read_text
from exporter.registry import CollectorConfig, FileCollector, register

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric


@register("schedstat", default_enabled=True, help="run-queue wait time from /proc/schedstat")
class SchedstatCollector(FileCollector):
    def __init__(self, config: CollectorConfig) -> None:
        self._path = config.paths.proc("schedstat")

    def update(self) -> list[Metric]:
        try:
            text = read_text(self._path)
        except FileNotFoundError:
            raise NoDataError(
                "/proc/schedstat absent (kernel built without CONFIG_SCHEDSTATS)"
            ) from None
        except OSError as exc:
            if exc.errno == errno.EOPNOTSUPP:
                raise NoDataError("schedstats not supported by this kernel") from None
            raise
        return [
            CounterMetricFamily(
                "mco_runqueue_wait_seconds",
                "Seconds runnable tasks waited for a CPU, summed over all CPUs.",
                value=parse_schedstat(text) / 1e9,
            )
        ]
