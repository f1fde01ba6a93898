"""Available and total memory (``/proc/meminfo``), the PSI-less memory-pressure fallback."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client.metrics_core import GaugeMetricFamily

from exporter.errors import ParseError
from exporter.parsers.meminfo import parse_meminfo
from exporter.paths import read_text
from exporter.registry import CollectorConfig, FileCollector, register

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric


WANTED = frozenset({"MemTotal", "MemAvailable"})


@register("meminfo", default_enabled=True, help="MemAvailable and MemTotal from /proc/meminfo")
class MeminfoCollector(FileCollector):
    def __init__(self, config: CollectorConfig) -> None:
        self._path = config.paths.proc("meminfo")

    def update(self) -> list[Metric]:
        fields = parse_meminfo(read_text(self._path), WANTED)
        missing = [f for f in sorted(WANTED) if f not in fields]
        if missing:  # MemAvailable appeared in 3.14
            raise ParseError(f"meminfo lacks {', '.join(missing)}")
        return [
            GaugeMetricFamily(
                "mco_memory_available_bytes",
                "Memory available for new work without swapping, in bytes (MemAvailable).",
                value=fields["MemAvailable"],
            ),
            GaugeMetricFamily(
                "mco_memory_total_bytes",
                "Usable RAM in bytes (MemTotal).",
                value=fields["MemTotal"],
            ),
        ]
