"""/proc/diskstats: the block-latency fallback when eBPF is not available."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from exporter.errors import ParseError
from exporter.parsers.fields import uint


@dataclass(frozen=True, slots=True)
class DiskStats:
    """Completed requests and the milliseconds spent on them, all operations together."""

    device: str
    completed: int
    time_ms: int


def parse_diskstats(text: str, include: Callable[[str], bool] = lambda _: True) -> list[DiskStats]:
    """Parse the 14-field (<4.18), 18-field (4.18+, discards) or 20-field (5.5+, flushes) form.

    Completions and time are summed over reads, writes, discards and flushes, so that
    time / completions is the mean request latency whatever the kernel version. Devices that
    ``include`` rejects (loops, partitions) are skipped before their numbers are parsed.
    """
    disks: list[DiskStats] = []
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        if len(parts) not in (14, 18, 20):
            raise ParseError(f"diskstats line has {len(parts)} fields: {line!r}")
        if not include(parts[2]):
            continue
        values = [uint(p, f"diskstats {parts[2]} field") for p in parts[3:]]
        # reads: values[0], ms_reading: values[3]; writes: values[4], ms_writing: values[7]
        completed = values[0] + values[4]
        time_ms = values[3] + values[7]
        if len(values) >= 15:  # discards completed [11], ms discarding [14]
            completed += values[11]
            time_ms += values[14]
        if len(values) == 17:  # flushes completed [15], ms flushing [16]
            completed += values[15]
            time_ms += values[16]
        disks.append(DiskStats(device=parts[2], completed=completed, time_ms=time_ms))
    return disks
