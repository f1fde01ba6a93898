"""resctrl monitoring files (``mon_data/mon_L3_XX/{llc_occupancy,mbm_total_bytes,...}``)."""

from __future__ import annotations

from exporter.errors import ParseError
from exporter.parsers.fields import uint

# What the kernel prints instead of a number: the RMID is not (yet) counting, or the read failed.
NO_VALUE = frozenset({"Unavailable", "Error"})


def parse_resctrl_value(text: str) -> int | None:
    """A counter value in bytes, or None when the kernel has no value to give right now."""
    value = text.strip()
    if value in NO_VALUE:
        return None
    return uint(value, "resctrl value")


def parse_domain_id(directory: str) -> str:
    """``mon_L3_01`` -> ``"1"``: the L3 cache domain (a socket or a CCX)."""
    prefix = "mon_L3_"
    if not directory.startswith(prefix):
        raise ParseError(f"not an L3 monitoring directory: {directory!r}")
    return str(uint(directory[len(prefix) :], "resctrl domain id"))
