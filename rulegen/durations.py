"""Durations as DetectionRuleConfig spells them: whole hours, minutes and seconds (``1m30s``).

The format is the intersection of Prometheus durations and Go's ``time.ParseDuration``, so the
same string is a valid PromQL range, a valid rule-group interval, and parses with CEL's
``duration()`` in the CRD's validation rules (Kubernetes evaluates CEL with Go semantics).
"""

from __future__ import annotations

import re
from typing import Final

# Bounded length so the API server's CEL cost estimate for ``matches`` stays small.
MAX_LENGTH: Final = 16
PATTERN: Final = r"^([0-9]+h)?([0-9]+m)?([0-9]+s)?$"
_RE: Final = re.compile(PATTERN)


def parse_duration(text: str) -> int:
    """Seconds in ``text``; ValueError when it is not a positive ``XhYmZs`` duration."""
    match = _RE.fullmatch(text) if len(text) <= MAX_LENGTH else None
    if not text or match is None:
        raise ValueError(f"{text!r} is not a duration like 10s, 1m or 1h30m (units h, m, s)")
    hours, minutes, seconds = (int(g[:-1]) if g else 0 for g in match.groups())
    total = hours * 3600 + minutes * 60 + seconds
    if total <= 0:
        raise ValueError(f"{text!r} must be longer than 0s")
    return total


def format_duration(seconds: int) -> str:
    """The canonical spelling (``90`` -> ``1m30s``), accepted by Prometheus, Go and CEL."""
    if seconds <= 0:
        raise ValueError(f"duration must be positive, got {seconds}s")
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return "".join(f"{n}{unit}" for n, unit in ((hours, "h"), (minutes, "m"), (secs, "s")) if n)
