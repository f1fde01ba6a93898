"""Capped exponential backoff with jitter, the one retry pace of every Kubernetes loop.

The n-th consecutive failure waits ``initial * 2**(n-1)`` seconds, at most ``cap``, scaled by
a random factor within ``1 +- jitter`` so that replicas that failed together do not retry in
step. A success resets it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass(slots=True)
class Backoff:
    initial: float = 0.5
    cap: float = 30.0
    jitter: float = 0.2
    rng: random.Random = field(default_factory=random.Random, repr=False)
    failures: int = 0  # consecutive failures so far

    def __post_init__(self) -> None:
        if not (self.initial > 0 and self.cap > 0):
            raise ValueError("backoff: the initial delay and the cap must be positive")
        if not 0 <= self.jitter < 1:
            raise ValueError("backoff: jitter must be within [0, 1)")

    def next(self) -> float:
        """Count one more failure; the seconds to wait before the next try."""
        base = min(self.cap, self.initial * 2.0 ** min(self.failures, 64))
        self.failures += 1
        factor: float = self.rng.uniform(1 - self.jitter, 1 + self.jitter)
        return base * factor

    def reset(self) -> None:
        self.failures = 0
