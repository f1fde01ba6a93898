"""The finite ranges a DetectionRuleConfig's numbers must lie in, and bounded error echoes.

The rules compute ``sum(weight * index) / sum(weight)`` and ``(value - warn) / (critical -
warn)`` in float64. Weights of 1e308 overflow the sum (the level reads 0), subnormal weights
underflow it, and a 401-digit integer cannot even become a float. So every number is checked
for type, finiteness and range here, before any arithmetic, and the CRD's schema states the
same ranges (``rulegen.crd``). docs/rulegen.md lists them.

Error messages echo what was given, so they echo it bounded: ``shown`` never builds the full
``repr`` of a large or deeply shared value (a YAML alias bomb repr()s to gigabytes).
"""

from __future__ import annotations

import math
import reprlib
from typing import Any, Final

MAX_WEIGHT: Final = 1000.0
MIN_WEIGHT: Final = 0.001  # smallest weight above 0: weight * index never underflows
MAX_THRESHOLD: Final = 1e12  # signals without a natural maximum (seconds, pages/s, ratios > 1)
MAX_SHOWN: Final = 80  # characters of a given value echoed in a message
MAX_PROBLEMS: Final = 20  # problems listed in one error; the rest are counted


class _Shown(reprlib.Repr):
    def __init__(self) -> None:
        super().__init__()
        self.maxlevel = 3
        self.maxdict = self.maxlist = self.maxtuple = self.maxset = 4
        self.maxstring = self.maxother = MAX_SHOWN
        self.maxlong = 24

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > 64:  # repr() of a huge int is slow, and refused past 4300 digits
            digits = int(x.bit_length() * math.log10(2)) + 1
            return f"{'-' if x < 0 else ''}<integer of about {digits} digits>"
        return repr(x)


_SHOWN: Final = _Shown()


def shown(value: Any) -> str:
    """``repr(value)``, cut to about ``MAX_SHOWN`` characters without building the whole."""
    text = _SHOWN.repr(value)
    return text if len(text) <= 2 * MAX_SHOWN else text[: 2 * MAX_SHOWN] + "..."


def field_name(key: Any) -> str:
    """A mapping key for a field path: as written when a short string, else ``shown``."""
    return key if isinstance(key, str) and len(key) <= MAX_SHOWN else shown(key)


def capped(problems: list[str]) -> list[str]:
    """At most ``MAX_PROBLEMS`` problems, each at most a few hundred characters."""
    cut = [p if len(p) <= 4 * MAX_SHOWN else p[: 4 * MAX_SHOWN] + "..." for p in problems]
    if len(cut) <= MAX_PROBLEMS:
        return cut
    return [*cut[:MAX_PROBLEMS], f"... and {len(cut) - MAX_PROBLEMS} more problems"]


def as_number(given: Any, path: str, problems: list[str]) -> float | None:
    """``given`` as a finite float, or None with the reason appended to ``problems``."""
    if isinstance(given, bool) or not isinstance(given, int | float):
        problems.append(f"{path}: expected a number, got {shown(given)}")
        return None
    try:
        value = float(given)
    except OverflowError:
        problems.append(f"{path}: expected a finite number, got {shown(given)}")
        return None
    if not math.isfinite(value):
        problems.append(f"{path}: expected a finite number, got {shown(given)}")
        return None
    return value


def check_weight(value: float, path: str, problems: list[str]) -> None:
    """A weight is 0 (recorded, left out of the level) or within [MIN_WEIGHT, MAX_WEIGHT]."""
    if value < 0:
        problems.append(f"{path}: must be >= 0, got {value:g}")
    elif value > MAX_WEIGHT:
        problems.append(f"{path}: must be <= {MAX_WEIGHT:g}, got {value:g}")
    elif 0 < value < MIN_WEIGHT:
        problems.append(f"{path}: must be 0 or at least {MIN_WEIGHT:g}, got {value:g}")


def threshold_maximum(natural: float | None) -> float:
    """A signal's largest threshold: its natural maximum (1 for ratios), else MAX_THRESHOLD."""
    return MAX_THRESHOLD if natural is None else natural
