"""Built-in collectors; importing this package registers them all."""

from exporter.collectors import (
    biolatency,
    cgroup,
    cpu,
    diskstats,
    kata,
    meminfo,
    perf_llc,
    pressure,
    resctrl,
    schedstat,
    softirqs,
    vmstat,
)

__all__ = [
    "biolatency",
    "cgroup",
    "cpu",
    "diskstats",
    "kata",
    "meminfo",
    "perf_llc",
    "pressure",
    "resctrl",
    "schedstat",
    "softirqs",
    "vmstat",
]
