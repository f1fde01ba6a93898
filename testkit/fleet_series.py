"""mco-exporter's raw node series as (base, slope) pairs: the building blocks of a synthetic node.

Shared by the synthetic fleet of the rule tests and benchmarks (``testkit/fleet.py``) and by
the placement benchmark's live target (``bench/placement/target.py``), so both serve the
exporter's own metric names and labels.
A counter's value at time t is ``base + slope * t``; gauges have slope 0.
"""

from __future__ import annotations

from dataclasses import dataclass

from mco import selfmetrics


@dataclass(frozen=True)
class Series:
    name: str
    labels: tuple[tuple[str, str], ...]
    base: float
    slope: float = 0.0  # per second; 0 for gauges


def series(name: str, base: float, slope: float = 0.0, **labels: str) -> Series:
    return Series(name, tuple(sorted(labels.items())), base, slope)


def psi(
    cpu: float, io_some: float, io_full: float, mem_some: float, mem_full: float
) -> list[Series]:
    out = [series("mco_pressure_available", 1)]
    for (resource, kind), slope in {
        ("cpu", "some"): cpu,
        ("io", "some"): io_some,
        ("io", "full"): io_full,
        ("memory", "some"): mem_some,
        ("memory", "full"): mem_full,
    }.items():
        out.append(
            series("mco_pressure_stalled_seconds_total", 100, slope, resource=resource, kind=kind)
        )
    return out


def disk(device: str, seconds_per_s: float, completed_per_s: float) -> list[Series]:
    return [
        series("mco_block_io_time_seconds_total", 50, seconds_per_s, device=device),
        series("mco_block_io_completed_total", 5000, completed_per_s, device=device),
    ]


def memory(available_ratio: float, total: float = 64 * 2**30) -> list[Series]:
    return [
        series("mco_memory_available_bytes", available_ratio * total),
        series("mco_memory_total_bytes", total),
    ]


def common(cpus: int) -> list[Series]:
    out = [series("mco_cpu_online", cpus)]
    for collector in (
        "cpu",
        "diskstats",
        "meminfo",
        "pressure",
        "vmstat",
        "perf_llc",
        "resctrl",
        "softirqs",
    ):
        out.append(series(selfmetrics.EXPORTER_COLLECTOR_SUCCESS, 1, collector=collector))
    return out
