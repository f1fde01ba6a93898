"""/proc/schedstat: time tasks spent runnable but waiting for a CPU."""

from __future__ import annotations

from exporter.errors import ParseError
from exporter.parsers.fields import uint

# Versions whose cpu lines carry run/wait time in nanoseconds (v15 since 2.6.37; v16 6.6; v17 6.12).
SUPPORTED_VERSIONS = (15, 16, 17)
WAIT_FIELD = 8  # 1-based field after "cpuN": sum of time spent waiting to run, ns


def parse_schedstat(text: str) -> int:
    """Return the run-queue wait summed over CPUs, in nanoseconds."""
    lines = text.splitlines()
    if not lines or not lines[0].startswith("version "):
        raise ParseError("schedstat does not start with a version line")
    words = lines[0].split()
    version = uint(words[1], "schedstat version") if len(words) == 2 else -1
    if version not in SUPPORTED_VERSIONS:
        raise ParseError(f"unsupported schedstat version line {lines[0]!r}")
    total = 0
    cpus = 0
    for line in lines[1:]:
        parts = line.split()
        if not parts or not parts[0].startswith("cpu"):
            continue
        if not (parts[0][3:].isascii() and parts[0][3:].isdigit()):
            raise ParseError(f"unexpected schedstat cpu line {parts[0]!r}")
        if len(parts) < WAIT_FIELD + 1:
            raise ParseError(f"schedstat cpu line has {len(parts) - 1} fields")
        total += uint(parts[WAIT_FIELD], "schedstat wait time")
        cpus += 1
    if cpus == 0:
        raise ParseError("schedstat has no cpu lines")
    return total
