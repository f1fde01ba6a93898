"""The block-latency histogram's bucket bounds: the ones the exporter can export, and the ones a
configuration's thresholds need.

The eBPF collector counts requests in power-of-two microsecond slots, so a bucket bound can only
be ``2^k`` us. Each bound is two raw series per device (read and write) that every rule
evaluation reads, and most of them change no detection: ``histogram_quantile`` interpolates
inside one bucket, so only the buckets around the P95/P99 thresholds decide whether a quantile
reaches ``warn`` and where it lies between ``warn`` and ``critical``. ``needed`` keeps exactly
those (docs/detection-model.md, "Which buckets the model reads"). Shared by the exporter (which
buckets it exports), mco-rulegen (which a configuration needs) and the chart's generated table.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Final

MIN_SLOT: Final = 3  # 2^3 us = 8 us
MAX_SLOT: Final = 23  # 2^23 us ~ 8.4 s
# Every bound the exporter can export, ascending (+Inf is always exported besides).
BOUNDS: Final[tuple[float, ...]] = tuple(2**k / 1e6 for k in range(MIN_SLOT, MAX_SLOT + 1))
SLOTS: Final[dict[float, int]] = {
    b: k for k, b in zip(range(MIN_SLOT, MAX_SLOT + 1), BOUNDS, strict=True)
}
ALL: Final = "all"


def needed(thresholds: Iterable[tuple[float, float]]) -> tuple[float, ...]:
    """The bounds that give every (warn, critical) pair the same verdicts as all of them.

    For one pair: every bound from the largest one *below* ``warn`` to the smallest one at or
    above ``critical``. A quantile that all bounds put in one of those buckets comes out the
    same (same bucket, same counts, same interpolation); one below the lower bound stays below
    it (under ``warn``: index 0, not triggered); one above the upper bound stays above it (or
    reads the highest bound kept, still at or above ``critical``: index 1). The union over the
    pairs serves them all.
    """
    keep: set[float] = set()
    for warn, critical in thresholds:
        below = [b for b in BOUNDS if b < warn]
        above = [b for b in BOUNDS if b >= critical]
        low = below[-1] if below else BOUNDS[0]
        high = above[0] if above else BOUNDS[-1]
        keep.update(b for b in BOUNDS if low <= b <= high)
    return tuple(sorted(keep))


def format_bounds(bounds: Iterable[float]) -> str:
    """The ``--collector.biolatency.buckets`` value for ``bounds`` (``all`` for every one)."""
    ordered = tuple(sorted(bounds))
    return ALL if ordered == BOUNDS else ",".join(repr(b) for b in ordered)


def parse_bounds(text: str) -> tuple[float, ...]:
    """``all``, or comma-separated bounds in seconds, each one of ``BOUNDS``: sorted, unique."""
    if text.strip() == ALL:
        return BOUNDS
    out: set[float] = set()
    for item in text.split(","):
        if not item.strip():
            continue
        try:
            value = float(item)
        except ValueError:
            raise ValueError(f"{item.strip()!r} is not a number of seconds") from None
        match = [b for b in BOUNDS if math.isclose(b, value, rel_tol=1e-6)]
        if not match:
            raise ValueError(
                f"{item.strip()} s is not a bucket bound of the eBPF histogram; the bounds "
                f"are 2^k microseconds: {', '.join(repr(b) for b in BOUNDS)}"
            )
        out.add(match[0])
    if not out:
        raise ValueError(f"no bucket bound given (a comma-separated list, or {ALL!r})")
    return tuple(sorted(out))
