"""Block-device completions and busy time (``/proc/diskstats``): the eBPF-less latency signal."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from prometheus_client.metrics_core import CounterMetricFamily

from exporter.parsers.diskstats import parse_diskstats
from exporter.paths import read_text
from exporter.registry import CollectorConfig, FileCollector, Option, register

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

# node_exporter's default (``^(z?ram|loop|fd|(h|s|v|xv)d[a-z]|nvme\d+n\d+p)\d+$``) plus
# ``mmcblk\d+p``: whole disks only (SD/eMMC ones too), so a request is counted once, on its disk.
DEFAULT_EXCLUDE = r"^(z?ram|loop|fd|(h|s|v|xv)d[a-z]|nvme\d+n\d+p|mmcblk\d+p)\d+$"


@register(
    "diskstats",
    default_enabled=True,
    help="per-device completions and time from /proc/diskstats",
    options=(
        Option("device-exclude", DEFAULT_EXCLUDE, "regexp of devices to leave out", re.compile),
    ),
)
class DiskstatsCollector(FileCollector):
    def __init__(self, config: CollectorConfig) -> None:
        self._path = config.paths.proc("diskstats")
        exclude = re.compile(config.option("device-exclude"))
        self._include = lambda device: exclude.match(device) is None

    def update(self) -> list[Metric]:
        time_total = CounterMetricFamily(
            "mco_block_io_time_seconds",
            "Seconds spent on completed requests (reads, writes, discards, flushes); "
            "divided by mco_block_io_completed_total it is the mean request latency.",
            labels=["device"],
        )
        completed = CounterMetricFamily(
            "mco_block_io_completed",
            "Block requests completed (reads, writes, discards, flushes).",
            labels=["device"],
        )
        for disk in parse_diskstats(read_text(self._path), self._include):
            time_total.add_metric([disk.device], disk.time_ms / 1000)
            completed.add_metric([disk.device], disk.completed)
        return [time_total, completed]
