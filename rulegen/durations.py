"""Durations as DetectionRuleConfig spells them: whole hours, minutes and seconds (``1m30s``).

The format is the intersection of Prometheus durations and Go's ``time.ParseDuration``, so the
same string is a valid PromQL range, a valid rule-group interval, and parses with CEL's
``duration()`` in the CRD's validation rules (Kubernetes evaluates CEL with Go semantics).

Both parsers overflow past about 292 years (int64 nanoseconds): Prometheus then rejects the
rules ("duration out of range") and CEL fails at run time. So each part has a bounded number
of digits (at most about 6 years in all, whatever the spelling, so ``duration()`` never
overflows) and the whole is at most ``MAX_SECONDS``.
"""

from __future__ import annotations

import re
from typing import Final

# Bounded length so the API server's CEL cost estimate for ``matches`` stays small.
MAX_LENGTH: Final = 16
MAX_SECONDS: Final = 8760 * 3600  # 365 days: no window, interval or `for` needs more
MAX_TEXT: Final = "8760h"
PATTERN: Final = r"^([0-9]{1,4}h)?([0-9]{1,6}m)?([0-9]{1,8}s)?$"
_RE: Final = re.compile(PATTERN)
_EXAMPLE: Final = "a duration like 10s, 1m or 1h30m (units h, m, s)"


def parse_duration(text: str) -> int:
    """Seconds in ``text``; ValueError when it is not an ``XhYmZs`` duration in (0s, 8760h]."""
    if not isinstance(text, str) or len(text) > MAX_LENGTH:
        raise ValueError(f"expected {_EXAMPLE} of at most {MAX_LENGTH} characters")
    match = _RE.fullmatch(text)
    if not text or match is None:
        if re.fullmatch(r"([0-9]+h)?([0-9]+m)?([0-9]+s)?", text):
            raise ValueError(
                f"{text!r} is out of range: at most {MAX_TEXT} "
                "(4 digits of hours, 6 of minutes, 8 of seconds)"
            )
        raise ValueError(f"{text!r} is not {_EXAMPLE}")
    hours, minutes, seconds = (int(g[:-1]) if g else 0 for g in match.groups())
    total = hours * 3600 + minutes * 60 + seconds
    if total <= 0:
        raise ValueError(f"{text!r} must be longer than 0s")
    if total > MAX_SECONDS:
        raise ValueError(f"{text!r} is out of range: at most {MAX_TEXT}")
    return total


def format_duration(seconds: int) -> str:
    """The canonical spelling (``90`` -> ``1m30s``), accepted by Prometheus, Go and CEL."""
    if not 0 < seconds <= MAX_SECONDS:
        raise ValueError(f"duration must be within (0s, {MAX_TEXT}], got {seconds}s")
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return "".join(f"{n}{unit}" for n, unit in ((hours, "h"), (minutes, "m"), (secs, "s")) if n)
