"""/proc/stat: steal and IRQ time of the aggregate line, and each CPU's IRQ and total ticks."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from exporter.errors import ParseError
from exporter.parsers.fields import uint

# user nice system idle iowait irq softirq steal guest guest_nice (USER_HZ ticks)
IRQ_FIELD = 5
SOFTIRQ_FIELD = 6
STEAL_FIELD = 7
TIME_FIELDS = 8  # user..steal: a CPU's time; guest and guest_nice are already in user and nice


@dataclass(frozen=True, slots=True)
class CPUTicks:
    irq: int  # hard + soft IRQ ticks
    total: int  # all ticks, user..steal


@dataclass(frozen=True, slots=True)
class CPUStat:
    steal_ticks: int
    irq_ticks: int
    softirq_ticks: int
    per_cpu: Mapping[int, CPUTicks]  # by CPU number

    @property
    def cpus(self) -> int:
        return len(self.per_cpu)


def _times(parts: list[str], name: str) -> list[int]:
    if len(parts) <= TIME_FIELDS:
        raise ParseError(f"{name} line has no steal column (kernel < 2.6.11)")
    return [uint(v, f"{name} field {i}") for i, v in enumerate(parts[1 : TIME_FIELDS + 1])]


def parse_stat(text: str) -> CPUStat:
    """The aggregate ``cpu`` line's steal and IRQ ticks, and each ``cpuN`` line's IRQ share."""
    aggregate: list[int] | None = None
    per_cpu: dict[int, CPUTicks] = {}
    for line in text.splitlines():
        if not line.startswith("cpu"):
            continue
        parts = line.split()
        name = parts[0]
        if name == "cpu":
            if aggregate is not None:
                raise ParseError("duplicate aggregate cpu line")
            aggregate = _times(parts, "aggregate cpu")
        elif name[3:].isascii() and name[3:].isdigit() and len(name) <= 8:
            cpu = int(name[3:])
            if cpu in per_cpu:
                raise ParseError(f"duplicate line {name!r}")
            times = _times(parts, name)
            per_cpu[cpu] = CPUTicks(times[IRQ_FIELD] + times[SOFTIRQ_FIELD], sum(times))
        else:
            raise ParseError(f"unexpected cpu line {name[:32]!r}")
    if aggregate is None:
        raise ParseError("no aggregate cpu line")
    if not per_cpu:
        raise ParseError("no per-CPU lines")
    return CPUStat(
        steal_ticks=aggregate[STEAL_FIELD],
        irq_ticks=aggregate[IRQ_FIELD],
        softirq_ticks=aggregate[SOFTIRQ_FIELD],
        per_cpu=per_cpu,
    )


def busiest_irq_share(
    before: Mapping[int, CPUTicks], after: Mapping[int, CPUTicks]
) -> float | None:
    """The largest share of a CPU's time spent in IRQs between two reads (a CPU absent before
    counts from boot). None when no CPU's time moved (two reads within one tick): no share yet.
    A CPU whose counters went back (a wrapped or reset counter) is left out, not negative."""
    best: float | None = None
    for cpu, now in after.items():
        then = before.get(cpu, CPUTicks(0, 0))
        irq, total = now.irq - then.irq, now.total - then.total
        if total <= 0 or irq < 0:
            continue
        share = min(irq / total, 1.0)
        best = share if best is None else max(best, share)
    return best
