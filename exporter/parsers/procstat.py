"""/proc/stat: CPU steal time and the number of CPUs it is spread over."""

from __future__ import annotations

from dataclasses import dataclass

from exporter.errors import ParseError
from exporter.parsers.fields import uint

STEAL_FIELD = 7  # user nice system idle iowait irq softirq steal guest guest_nice


@dataclass(frozen=True, slots=True)
class CPUStat:
    steal_ticks: int
    cpus: int


def parse_stat(text: str) -> CPUStat:
    """Take steal from the aggregate ``cpu`` line (in USER_HZ ticks) and count ``cpuN`` lines."""
    steal: int | None = None
    cpus = 0
    for line in text.splitlines():
        if not line.startswith("cpu"):
            continue
        parts = line.split()
        name = parts[0]
        if name == "cpu":
            if len(parts) <= STEAL_FIELD + 1:
                raise ParseError("aggregate cpu line has no steal column (kernel < 2.6.11)")
            steal = uint(parts[STEAL_FIELD + 1], "cpu steal")
        elif name[3:].isascii() and name[3:].isdigit():
            cpus += 1
        else:
            raise ParseError(f"unexpected cpu line {name!r}")
    if steal is None:
        raise ParseError("no aggregate cpu line")
    if cpus == 0:
        raise ParseError("no per-CPU lines")
    return CPUStat(steal_ticks=steal, cpus=cpus)
