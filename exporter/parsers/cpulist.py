"""Kernel CPU lists (``0-3,8,10-11``), as in /sys/devices/system/cpu/online."""

from __future__ import annotations

from exporter.errors import ParseError
from exporter.parsers.fields import uint

MAX_CPUS = 1 << 16


def parse_cpulist(text: str) -> list[int]:
    cpus: list[int] = []
    body = text.strip()
    if not body:
        return cpus
    for part in body.split(","):
        lo_text, sep, hi_text = part.partition("-")
        lo = uint(lo_text, "CPU list element")
        hi = uint(hi_text, "CPU list element") if sep else lo
        if hi < lo or hi >= MAX_CPUS:
            raise ParseError(f"bad CPU range {part!r}")
        cpus.extend(range(lo, hi + 1))
    return sorted(set(cpus))
