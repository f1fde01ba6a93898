"""/proc/softirqs: softirqs raised by type, one column per CPU, summed over CPUs."""

from __future__ import annotations

import re

from exporter.errors import ParseError
from exporter.parsers.fields import uint

_CPU = re.compile(r"CPU[0-9]{1,5}")
_TYPE = re.compile(r"[A-Z][A-Z0-9_]{0,31}")


def parse_softirqs(text: str) -> dict[str, int]:
    """Counts by type (``NET_RX``, ``TIMER``, ...), summed over the header's CPU columns.

    Every row must have exactly one count per CPU in the header: a row cut short (a read that
    raced a CPU going offline, a truncated file) is a ParseError, not a smaller sum.
    """
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise ParseError("empty softirqs file")
    header = lines[0].split()
    if not header or not all(_CPU.fullmatch(c) for c in header):
        raise ParseError(f"softirqs header is not CPU columns: {lines[0][:64]!r}")
    if len(set(header)) != len(header):
        raise ParseError("duplicate CPU column in softirqs header")
    counts: dict[str, int] = {}
    for line in lines[1:]:
        name, sep, rest = line.partition(":")
        name = name.strip()
        if not sep or not _TYPE.fullmatch(name):
            raise ParseError(f"bad softirqs row: {line[:64]!r}")
        if name in counts:
            raise ParseError(f"duplicate softirq type {name!r}")
        values = rest.split()
        if len(values) != len(header):
            raise ParseError(
                f"softirq {name} has {len(values)} counts for {len(header)} CPU columns"
            )
        counts[name] = sum(uint(v, f"softirq {name} count") for v in values)
    if not counts:
        raise ParseError("no softirq rows")
    return counts
