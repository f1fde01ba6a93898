"""/proc/vmstat page-scan counters across kernel versions."""

from __future__ import annotations

from dataclasses import dataclass

from exporter.errors import ParseError
from exporter.parsers.fields import sint

RECLAIMERS = ("kswapd", "direct", "khugepaged", "proactive")
SCAN_TYPES = ("anon", "file")
# Before 4.8 reclaim was counted per zone: pgscan_kswapd_normal, pgscan_direct_dma32, ...
ZONES = ("dma", "dma32", "normal", "highmem", "movable", "device")


@dataclass(frozen=True, slots=True)
class PageScans:
    """Pages scanned, counted two ways; the two views overlap and must never be added."""

    by_reclaimer: dict[str, int]
    by_type: dict[str, int]


def parse_vmstat(text: str, prefix: str = "") -> dict[str, int]:
    """Parse ``name value`` lines into a dict, only those whose name starts with ``prefix``.

    /proc/vmstat has ~200 lines and we need a dozen; skipping the rest keeps a scrape cheap.
    """
    fields: dict[str, int] = {}
    for line in text.splitlines():
        if not line.startswith(prefix) or not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2:
            raise ParseError(f"malformed vmstat line {line!r}")
        name, value = parts
        fields[name] = sint(value, f"vmstat {name}")
    return fields


def page_scans(fields: dict[str, int]) -> PageScans:
    """Pick the page-scan counters: per-node fields (4.8+) or the sum of per-zone fields.

    ``pgscan_direct_throttle`` counts throttling events, not pages, so it is never summed.
    """
    by_reclaimer: dict[str, int] = {}
    for reclaimer in RECLAIMERS:
        name = f"pgscan_{reclaimer}"
        if name in fields:
            by_reclaimer[reclaimer] = fields[name]
            continue
        zoned = [fields[f"{name}_{zone}"] for zone in ZONES if f"{name}_{zone}" in fields]
        if zoned:
            by_reclaimer[reclaimer] = sum(zoned)
    by_type = {t: fields[f"pgscan_{t}"] for t in SCAN_TYPES if f"pgscan_{t}" in fields}
    return PageScans(by_reclaimer=by_reclaimer, by_type=by_type)
