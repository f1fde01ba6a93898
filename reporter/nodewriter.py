"""What the two modes that write Nodes (taints, ``reporter.taints``; tier labels,
``reporter.tiers``) share: the pace of their requests and what they know of the Nodes.

Both keep their own view of the Nodes from one list at a leader term's start and every
``resync``, write through a token bucket of their own, and back off when the API server is
unreachable or throttles; only what each writes, and how it orders its changes, differ.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from mco.apierrors import ApiError
from mco.backoff import Backoff
from reporter.nodeapi import NodeApi, NodeTaints


class OutOfTokens(Exception):
    """The rate limit holds the next request back: the node waits for a later cycle."""


class TokenBucket:
    """``rate`` tokens a second, at most ``burst`` saved up."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float]) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("node write rate limit: need qps > 0 and burst >= 1")
        self.rate, self.burst, self.clock = rate, float(burst), clock
        self.tokens = float(burst)
        self.at = clock()

    def take(self) -> bool:
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True


class _Result(Protocol):
    skipped: bool
    errors: list[str]


class _Counter(Protocol):
    def labels(self, *values: str) -> _Inc: ...


class _Inc(Protocol):
    def inc(self, amount: float = 1) -> None: ...


Known = TypeVar("Known")


class NodeWriter(Generic[Known]):
    """The listing, pacing and back-off of a mode that writes Nodes; ``known_of`` keeps what
    the mode needs of each Node object it lists or reads."""

    def __init__(
        self,
        api: NodeApi,
        known_of: Callable[[NodeTaints], Known],
        *,
        qps: float,
        burst: int,
        resync: float,
        may_write: Callable[[], bool],
        clock: Callable[[], float],
        backoff: Backoff | None,
        errors: _Counter,
        log: logging.Logger,
    ) -> None:
        self.api = api
        self.known_of = known_of
        self.resync = resync
        self.may_write = may_write
        self.clock = clock
        self.bucket = TokenBucket(qps, burst, clock)
        self.backoff = backoff or Backoff(1.0, 30.0)
        self.retry_at = -math.inf
        self._nodes: dict[str, Known] | None = None  # None: list the Nodes first
        self._absent: set[str] = set()  # reported nodes without a Node (until the next list)
        self._listed_at = -math.inf
        self._errors = errors
        self._log = log

    async def _start(self, result: _Result) -> dict[str, Known] | None:
        """The Nodes as known for this sync, listed again when due; None (and ``result``
        marked) when not leading, backing off, or the list failed."""
        if not self.may_write() or self.clock() < self.retry_at:
            result.skipped = True
            return None
        if self._nodes is None or (
            self.resync > 0 and self.clock() - self._listed_at >= self.resync
        ):
            try:
                listed = await self.api.list_all()
            except ApiError as exc:
                self._error(result, exc, "listing the Nodes failed")
                self._back_off()
                return None
            self._nodes = {n.name: self.known_of(n) for n in listed}
            self._absent.clear()
            self._listed_at = self.clock()
        return self._nodes

    def _error(self, result: _Result, exc: ApiError, what: str, **extra: str) -> None:
        result.errors.append(exc.kind)
        self._errors.labels(exc.kind).inc()
        self._log.warning(
            what, extra={"kind": exc.kind, "status": exc.status, "err": exc.message, **extra}
        )

    def _back_off(self) -> None:
        self.retry_at = self.clock() + self.backoff.next()
