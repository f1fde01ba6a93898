"""LLC occupancy and memory bandwidth per L3 domain from resctrl (Intel RDT / AMD PQoS).

Reported for every CTRL_MON group (the root ``/`` and each top-level control group) and each
MON group under them, told apart by the ``group`` and ``type`` labels. A CTRL_MON group's values
include its MON groups, so node totals sum ``type="ctrl_mon"`` only.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily

from exporter.errors import NoDataError
from exporter.parsers.resctrl import parse_domain_id, parse_resctrl_value
from exporter.paths import read_text
from exporter.registry import CollectorConfig, FileCollector, register

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

# Top-level entries of the resctrl root that are not control groups.
_NOT_GROUPS = frozenset({"info", "mon_data", "mon_groups"})
_BANDWIDTH = (("mbm_total_bytes", "total"), ("mbm_local_bytes", "local"))


def _entries(directory: str) -> list[str]:
    """Sorted names in a group's directory; none when the group was removed since it was listed.

    Groups come and go while a scrape walks the tree (an orchestrator deletes a finished job's
    group): a vanished group is simply not reported, and the other groups still are.
    """
    try:
        return sorted(os.listdir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return []


@register("resctrl", default_enabled=True, help="LLC occupancy and MBM from /sys/fs/resctrl")
class ResctrlCollector(FileCollector):
    def __init__(self, config: CollectorConfig) -> None:
        self._root = config.paths.sys("fs", "resctrl")

    def _groups(self) -> Iterator[tuple[str, str, str]]:
        """(group name, type, directory) for every group with monitoring data."""
        ctrl_groups = [("/", self._root)]
        for entry in sorted(os.listdir(self._root)):
            path = os.path.join(self._root, entry)
            if entry not in _NOT_GROUPS and os.path.isdir(os.path.join(path, "mon_data")):
                ctrl_groups.append((f"/{entry}", path))
        for name, path in ctrl_groups:
            yield name, "ctrl_mon", path
            prefix = "" if name == "/" else name
            mon_groups = os.path.join(path, "mon_groups")
            for mon in _entries(mon_groups):
                yield f"{prefix}/mon_groups/{mon}", "mon", os.path.join(mon_groups, mon)

    def update(self) -> list[Metric]:
        if not os.path.isdir(os.path.join(self._root, "mon_data")):
            raise NoDataError(
                f"{self._root}/mon_data absent: resctrl not mounted, or no L3 monitoring"
            )
        occupancy = GaugeMetricFamily(
            "mco_llc_occupancy_bytes",
            "Last-level cache occupied by the group's tasks, in bytes, per L3 domain.",
            labels=["domain", "group", "type"],
        )
        bandwidth = CounterMetricFamily(
            "mco_memory_bandwidth_bytes",
            "Bytes moved between the L3 domain and memory by the group's tasks "
            "(scope=local: to the domain's own NUMA node only).",
            labels=["domain", "scope", "group", "type"],
        )
        for group, group_type, path in self._groups():
            mon_data = os.path.join(path, "mon_data")
            for domain_dir in _entries(mon_data):
                if not domain_dir.startswith("mon_L3_"):
                    continue  # mon_MB_* and future resources are not ours
                domain = parse_domain_id(domain_dir)
                files = os.path.join(mon_data, domain_dir)
                value = self._read(os.path.join(files, "llc_occupancy"))
                if value is not None:
                    occupancy.add_metric([domain, group, group_type], value)
                for filename, scope in _BANDWIDTH:
                    value = self._read(os.path.join(files, filename))
                    if value is not None:
                        bandwidth.add_metric([domain, scope, group, group_type], value)
        return [occupancy, bandwidth]

    @staticmethod
    def _read(path: str) -> int | None:
        """None for a file this CPU lacks (no MBM) or an ``Unavailable`` value."""
        try:
            text = read_text(path)
        except FileNotFoundError:
            return None
        return parse_resctrl_value(text)
