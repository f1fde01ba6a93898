"""Last-level-cache references and misses from the CPU's PMU, system-wide, every online CPU.

One event group (references leads, misses follows) per CPU, so both are scheduled on the PMU
together and their ratio is meaningful even when the kernel multiplexes counters. Each scrape
reads every group and scales the *increase* since the last read by enabled/running time of that
interval, so the exported totals stay monotonic when the multiplexing share changes.
"""

from __future__ import annotations

import errno
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prometheus_client.metrics_core import CounterMetricFamily

from exporter.collectors.perf_syscalls import (
    PERF_COUNT_HW_CACHE_LL,
    PERF_COUNT_HW_CACHE_MISSES,
    PERF_COUNT_HW_CACHE_OP_READ,
    PERF_COUNT_HW_CACHE_REFERENCES,
    PERF_COUNT_HW_CACHE_RESULT_ACCESS,
    PERF_COUNT_HW_CACHE_RESULT_MISS,
    PERF_FLAG_FD_CLOEXEC,
    PERF_TYPE_HARDWARE,
    PERF_TYPE_HW_CACHE,
    READ_FORMAT,
    Event,
    LinuxPerfSyscalls,
    PerfSyscalls,
    decode_group_read,
    encode_attr,
    hw_cache_config,
)
from exporter.errors import UnavailableError
from exporter.parsers.cpulist import parse_cpulist
from exporter.paths import read_text
from exporter.registry import CollectorConfig, Option, register

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

log = logging.getLogger("mco.exporter.perf_llc")

EVENT_SETS: dict[str, tuple[Event, Event]] = {
    # The kernel's generic events; on Intel and most Arm cores they count the last level.
    "generic": (
        Event(PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_REFERENCES),
        Event(PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_MISSES),
    ),
    # Explicit LL-cache read events, for CPUs whose generic events count another level.
    "ll-read": (
        Event(
            PERF_TYPE_HW_CACHE,
            hw_cache_config(
                PERF_COUNT_HW_CACHE_LL,
                PERF_COUNT_HW_CACHE_OP_READ,
                PERF_COUNT_HW_CACHE_RESULT_ACCESS,
            ),
        ),
        Event(
            PERF_TYPE_HW_CACHE,
            hw_cache_config(
                PERF_COUNT_HW_CACHE_LL, PERF_COUNT_HW_CACHE_OP_READ, PERF_COUNT_HW_CACHE_RESULT_MISS
            ),
        ),
    ),
}
_NO_PMU = {errno.ENOENT, errno.EOPNOTSUPP, errno.ENODEV}
_NO_PERMISSION = {errno.EACCES, errno.EPERM}


def explain_open_error(err: int) -> str:
    """Turn perf_event_open's errno into the reason an operator can act on."""
    if err in _NO_PMU:
        return "no hardware PMU for these events (virtual machine without vPMU, or unsupported CPU)"
    if err in _NO_PERMISSION:
        return (
            "permission denied: needs CAP_PERFMON (or CAP_SYS_ADMIN before 5.8) "
            "or kernel.perf_event_paranoid <= 0"
        )
    if err == errno.EINVAL:
        return "the kernel rejected the event attributes (EINVAL): event not valid on this CPU"
    if err == errno.ENOSYS:
        return "perf_event_open is not implemented here (a sandboxed kernel, or seccomp)"
    if err in (errno.EMFILE, errno.ENFILE):
        return "out of file descriptors for per-CPU perf events"
    return f"perf_event_open failed: {errno.errorcode.get(err, err)}"


@dataclass(slots=True)
class _CPUGroup:
    cpu: int
    leader: int
    fds: list[int]
    last_enabled: int = 0
    last_running: int = 0
    last_values: tuple[int, ...] = (0, 0)
    totals: list[float] = field(default_factory=lambda: [0.0, 0.0])


def _event_set(name: str) -> None:
    if name not in EVENT_SETS:
        raise ValueError(f"not an event set; choose one of {', '.join(EVENT_SETS)}")


@register(
    "perf_llc",
    default_enabled=True,
    help="LLC references and misses from perf_event_open (needs a PMU and CAP_PERFMON)",
    options=(Option("events", "generic", f"event set: {', '.join(EVENT_SETS)}", _event_set),),
)
class PerfLLCCollector:
    def __init__(self, config: CollectorConfig, syscalls: PerfSyscalls | None = None) -> None:
        event_set = config.option("events")
        if event_set not in EVENT_SETS:
            raise UnavailableError(f"unknown perf_llc event set {event_set!r}")
        try:
            self._sys = syscalls if syscalls is not None else LinuxPerfSyscalls()
            cpus = parse_cpulist(read_text(config.paths.sys("devices", "system", "cpu", "online")))
        except (OSError, ValueError) as exc:
            raise UnavailableError(f"cannot prepare perf events: {exc}") from exc
        if not cpus:
            raise UnavailableError("no online CPUs listed")
        self._groups: list[_CPUGroup] = []
        references, misses = EVENT_SETS[event_set]
        try:
            for cpu in cpus:
                leader = self._sys.open(
                    encode_attr(references, READ_FORMAT), -1, cpu, -1, PERF_FLAG_FD_CLOEXEC
                )
                group = _CPUGroup(cpu, leader, [leader])
                self._groups.append(group)
                group.fds.append(
                    self._sys.open(
                        encode_attr(misses, READ_FORMAT), -1, cpu, leader, PERF_FLAG_FD_CLOEXEC
                    )
                )
        except OSError as exc:
            self.close()
            raise UnavailableError(f"cpu {cpu}: {explain_open_error(exc.errno or 0)}") from exc
        self._read_size = 24 + 8 * 2

    def update(self) -> list[Metric]:
        for group in self._groups:
            reading = decode_group_read(self._sys.read(group.leader, self._read_size))
            enabled = reading.time_enabled - group.last_enabled
            running = reading.time_running - group.last_running
            if running > 0:
                scale = enabled / running
                for i, value in enumerate(reading.values):
                    group.totals[i] += (value - group.last_values[i]) * scale
            group.last_enabled = reading.time_enabled
            group.last_running = reading.time_running
            group.last_values = reading.values
        return [
            CounterMetricFamily(
                "mco_llc_references",
                "Last-level cache references on all CPUs, scaled for PMU multiplexing.",
                value=sum(g.totals[0] for g in self._groups),
            ),
            CounterMetricFamily(
                "mco_llc_misses",
                "Last-level cache misses on all CPUs, scaled for PMU multiplexing.",
                value=sum(g.totals[1] for g in self._groups),
            ),
        ]

    def close(self) -> None:
        for group in self._groups:
            for fd in reversed(group.fds):
                self._sys.close(fd)
        self._groups = []
