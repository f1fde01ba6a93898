"""/proc/meminfo."""

from __future__ import annotations

from exporter.errors import ParseError
from exporter.parsers.fields import uint

_UNITS = {"kB": 1024, "": 1}


def parse_meminfo(text: str, wanted: frozenset[str] | None = None) -> dict[str, int]:
    """Return fields in bytes (``MemTotal: 16 kB`` -> ``{"MemTotal": 16384}``): all of them, or
    only the ``wanted`` ones (the rest are not even validated, which keeps a scrape cheap)."""
    fields: dict[str, int] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        name, sep, rest = line.partition(":")
        if wanted is not None and name not in wanted:
            continue
        if not sep or not name or " " in name:
            raise ParseError(f"malformed meminfo line {line!r}")
        parts = rest.split()
        if not 1 <= len(parts) <= 2:
            raise ParseError(f"malformed meminfo value {line!r}")
        unit = parts[1] if len(parts) == 2 else ""
        if unit not in _UNITS:
            raise ParseError(f"unknown meminfo unit {unit!r}")
        fields[name] = uint(parts[0], f"meminfo {name}") * _UNITS[unit]
    return fields
