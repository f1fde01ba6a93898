"""PSI stall time per resource (``/proc/pressure/*``)."""

from __future__ import annotations

import errno
from typing import TYPE_CHECKING

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily

from exporter.errors import NoDataError
from exporter.parsers.pressure import parse_pressure
from exporter.paths import read_text
from exporter.registry import CollectorConfig, FileCollector, register

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

RESOURCES = ("cpu", "io", "memory", "irq")
# PSI is "available" when these can be read; irq exists only with IRQ time accounting (6.1+).
REQUIRED = ("cpu", "io", "memory")


@register("pressure", default_enabled=True, help="PSI stall time from /proc/pressure")
class PressureCollector(FileCollector):
    def __init__(self, config: CollectorConfig) -> None:
        self._files = {r: config.paths.proc("pressure", r) for r in RESOURCES}

    def update(self) -> list[Metric]:
        stalled = CounterMetricFamily(
            "mco_pressure_stalled_seconds",
            "Seconds some (or all, kind=full) non-idle tasks were stalled on the resource (PSI).",
            labels=["resource", "kind"],
        )
        available = GaugeMetricFamily(
            "mco_pressure_available",
            "1 when PSI (/proc/pressure) can be read on this host, else 0.",
        )
        readable: list[str] = []
        absent: list[str] = []
        for resource, path in self._files.items():
            try:
                text = read_text(path)
            except OSError as exc:
                # Absent file: kernel < 4.20 or CONFIG_PSI=n. EOPNOTSUPP: booted with psi=0.
                if exc.errno in (errno.ENOENT, errno.EOPNOTSUPP, errno.ENOTSUP):
                    absent.append(resource)
                    continue
                raise
            for kind, total_us in parse_pressure(text).total_us.items():
                stalled.add_metric([resource, kind], total_us / 1e6)
            readable.append(resource)
        if not all(r in readable for r in REQUIRED):
            available.add_metric([], 0.0)
            raise NoDataError(
                f"PSI unavailable for {', '.join(r for r in REQUIRED if r not in readable)}"
                " (kernel < 4.20, CONFIG_PSI=n, or booted with psi=0)",
                metrics=[available],
            )
        available.add_metric([], 1.0)
        return [stalled, available]
