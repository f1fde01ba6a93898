"""/proc/pressure/{cpu,io,memory,irq} (PSI)."""

from __future__ import annotations

from dataclasses import dataclass

from exporter.errors import ParseError
from exporter.parsers.fields import uint

KINDS = ("some", "full")


@dataclass(frozen=True, slots=True)
class Pressure:
    """Cumulative stall time in microseconds by kind; a kind the file lacks is absent."""

    total_us: dict[str, int]


def parse_pressure(text: str) -> Pressure:
    """Parse ``some avg10=0.00 avg60=0.00 avg300=0.00 total=123`` lines.

    ``irq`` has only a ``full`` line; ``cpu`` gained ``full`` in 5.13. Unknown kinds are an error,
    so a format change is noticed instead of half-read.
    """
    totals: dict[str, int] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        kind, _, rest = line.partition(" ")
        if kind not in KINDS:
            raise ParseError(f"unknown PSI line kind {kind!r}")
        if kind in totals:
            raise ParseError(f"duplicate PSI line kind {kind!r}")
        total: int | None = None
        for field in rest.split():
            key, sep, value = field.partition("=")
            if not sep:
                raise ParseError(f"PSI field without '=': {field!r}")
            if key == "total":
                total = uint(value, "PSI total")
        if total is None:
            raise ParseError(f"PSI {kind} line has no total=")
        totals[kind] = total
    if not totals:
        raise ParseError("empty PSI file")
    return Pressure(total_us=totals)
