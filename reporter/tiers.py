"""The tier-label mode (``--tier-label-nodes``, off by default): a zero-call path for scores.

The reporter (the leader only) keeps the node label ``mco.io/interference-tier=low|medium|high``
from each node's interference level in the report, so the schedulers' own node-affinity scoring
(kube-scheduler's NodeAffinity, Volcano's nodeorder) can prefer quiet nodes for the pods the
chart's MutatingAdmissionPolicy gives a preferred node affinity on it, without an extender call.

Rules:

* Hysteresis, so the label changes rarely: a node enters a higher tier as soon as its level
  reaches that tier's threshold (``medium_at``, ``high_at``); it leaves a tier only once its
  level has stayed below the tier's threshold minus ``margin`` for ``hold`` seconds
  (``TierRule.decide``). The label a node carries is where it starts, so a new leader goes on
  from the last one's labels.
* Only fresh data with a level sets or keeps the label. A stale entry (older than ``staleAfter``,
  or dated too far ahead, the taint mode's freshness rule), an entry without a level (no
  detection had data) and a node that left the report lose it: no data, no preference (fail-open:
  a dead Prometheus cannot keep steering pods by old numbers).
* Only the key ``mco.io/interference-tier`` is ever written: a merge patch of that one label
  under the ``resourceVersion`` read (409: read the Node again and retry); a value of the key that
  is not a tier (set by hand) is replaced or removed.
* Writes are paced by a token bucket of their own (``--tier-qps``, ``--tier-burst``); every
  request of a change spends a token, a retry after a conflict and its fresh read included.
  Moves to a higher tier go first, the highest target first (a node turning noisy matters
  most), then the rest. What the
  bucket holds back is done in a later cycle (``mco_reporter_tier_label_pending_nodes``).
* Errors are the taint mode's: one node's failure is counted and the others go on; an
  unreachable or throttling API server ends the round and backs off.

The Nodes are known from one list at a leader term's start and every ``--tier-resync``, from the
answers to the mode's own patches, and from one read of a node that joined after the list.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Literal

from mco.apierrors import CONFLICT, CONNECTION, NOT_FOUND, THROTTLED, UNCERTAIN, ApiError, Conflict
from mco.backoff import Backoff
from reporter.metrics import ReporterMetrics
from reporter.nodeapi import NodeApi, NodeTaints
from reporter.nodewriter import NodeWriter, OutOfTokens
from reporter.schema import MAX_CLOCK_SKEW, NodeEntry, entry_time, parse_time
from reporter.tracker import ReportView

TIER_LABEL: Final = "mco.io/interference-tier"
Tier = Literal["low", "medium", "high"]
TIERS: Final[tuple[Tier, ...]] = ("low", "medium", "high")
_RANK: Final = {t: i for i, t in enumerate(TIERS)}
_ATTEMPTS: Final = 4
_STOP_ROUND: Final = frozenset({CONNECTION, THROTTLED})
log = logging.getLogger("mco.reporter.tiers")


@dataclass(frozen=True, slots=True)
class TierRule:
    """Level thresholds and hysteresis. Defaults: ``medium`` from 0.3 (the shipped
    latency-sensitive policy's maxLevel), ``high`` from 0.6; leave a tier 0.1 below its
    threshold, after 2 minutes there."""

    medium_at: float = 0.3
    high_at: float = 0.6
    margin: float = 0.1
    hold: float = 120.0

    def __post_init__(self) -> None:
        if not 0 < self.medium_at < self.high_at <= 1:
            raise ValueError("tier thresholds: need 0 < medium < high <= 1")
        if not 0 <= self.margin < self.medium_at:
            raise ValueError("tier margin: need 0 <= margin < the medium threshold")
        if self.hold < 0:
            raise ValueError("tier hold must not be negative")

    def tier_of(self, level: float) -> Tier:
        """The tier a level enters (no hysteresis)."""
        if level >= self.high_at:
            return "high"
        return "medium" if level >= self.medium_at else "low"

    def decide(
        self, level: float, current: Tier | None, below_since: float | None, now: float
    ) -> tuple[Tier, float | None]:
        """The tier to hold now, and since when the level has been low enough to leave
        ``current`` (None: it is not; the caller keeps it for the next cycle)."""
        entered = self.tier_of(level)
        if current is None or _RANK[entered] >= _RANK[current]:
            return entered, None  # up at once (or the same tier, or no tier yet)
        lower = self.tier_of(level + self.margin)  # below current's threshold minus the margin?
        if _RANK[lower] >= _RANK[current]:
            return current, None  # inside the margin: stay, and the hold starts over
        since = now if below_since is None else below_since
        return (lower, since) if now - since >= self.hold else (current, since)


def tier_of_label(value: str | None) -> Tier | None:
    return value if value in _RANK else None


@dataclass(slots=True)
class TierResult:
    skipped: bool = False  # not leading, or backing off: nothing was looked at
    # node -> the tier written (None: the label removed)
    changed: dict[str, Tier | None] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)  # error kinds (mco.apierrors)
    pending: int = 0  # changes due but held back by the rate limit or a stopped round


@dataclass(slots=True)
class _Known:
    rv: str  # "" after a conflict or an uncertain write: read the Node before the next one
    value: str | None  # our label's value as last seen (any string; None: absent)

    @classmethod
    def of(cls, node: NodeTaints) -> _Known:
        return cls(node.rv, node.labels.get(TIER_LABEL))


def _fresh_level(entry: NodeEntry, heartbeat: float, horizon: float, ahead: float) -> float | None:
    if entry.level is None or not math.isfinite(entry.level):
        return None
    return entry.level if horizon <= entry_time(entry, heartbeat) <= ahead else None


class NodeTierLabeller(NodeWriter[_Known]):
    def __init__(
        self,
        api: NodeApi,
        metrics: ReporterMetrics,
        *,
        rule: TierRule | None = None,
        qps: float = 5.0,
        burst: int = 10,
        resync: float = 600.0,
        may_write: Callable[[], bool] = lambda: True,
        clock: Callable[[], float] = time.monotonic,
        backoff: Backoff | None = None,
    ) -> None:
        super().__init__(
            api, _Known.of, qps=qps, burst=burst, resync=resync, may_write=may_write,
            clock=clock, backoff=backoff, errors=metrics.tier_errors, log=log,
        )  # fmt: skip
        self.metrics = metrics
        self.rule = rule or TierRule()
        self._below: dict[str, float] = {}  # node -> since when it may leave its tier

    def forget(self) -> None:
        """Leadership lost: the next term lists the Nodes again (and starts from their labels)."""
        self._nodes = None
        self._below.clear()
        for tier in TIERS:
            self.metrics.tier_nodes.labels(tier).set(0)
        self.metrics.tier_pending.set(0)

    @property
    def labels(self) -> dict[str, str]:
        """Node -> our label's value, as this replica last saw them."""
        return {n: k.value for n, k in (self._nodes or {}).items() if k.value is not None}

    def wanted(self, view: ReportView, stale_after: float, now: float) -> dict[str, Tier]:
        """The tier each node should carry now (nodes without fresh data are left out); moves
        the hysteresis timers on."""
        nodes = self._nodes or {}
        heartbeat = parse_time(view.last_sync_time)
        horizon, ahead = now - stale_after, now + MAX_CLOCK_SKEW
        t = self.clock()
        want: dict[str, Tier] = {}
        for name, entry in view.entries.items():
            level = _fresh_level(entry, heartbeat, horizon, ahead)
            if level is None:
                continue
            known = nodes.get(name)
            current = tier_of_label(known.value) if known is not None else None
            tier, since = self.rule.decide(level, current, self._below.get(name), t)
            want[name] = tier
            if since is None:
                self._below.pop(name, None)
            else:
                self._below[name] = since
        for name in set(self._below) - set(want):
            del self._below[name]
        return want

    async def sync(self, view: ReportView, stale_after: float, now: float) -> TierResult:
        """Bring the Nodes' tier labels in line with ``view`` (as far as the rate limit allows)."""
        result = TierResult()
        nodes = await self._start(result)
        if nodes is None:
            return result
        want = self.wanted(view, stale_after, now)
        todo: list[tuple[str, Tier | None]] = [
            (n, None) for n, k in nodes.items() if k.value is not None and n not in want
        ]
        todo += [
            (n, tier)
            for n, tier in want.items()
            if (n in nodes and nodes[n].value != tier) or (n not in nodes and n not in self._absent)
        ]
        # Moves up first, the highest target first (a node turning noisy matters most).
        todo.sort(key=lambda c: (not self._raises(c[0], c[1]), -_RANK[c[1]] if c[1] else 0, c[0]))
        stopped = False
        for name, tier in todo:
            if stopped or not self.may_write():
                result.pending += 1
                continue
            try:
                changed = await self._set(name, tier)
            except OutOfTokens:
                result.pending += 1
                continue
            except ApiError as exc:
                self._error(result, exc, "labelling a node failed", node=name)
                if exc.kind in _STOP_ROUND:
                    stopped = True
                    self._back_off()
                continue
            if changed:
                result.changed[name] = tier
                self._below.pop(name, None)
                self.metrics.tier_changes.labels(tier or "none").inc()
                self._log_change(name, tier, view)
        if not stopped:
            self.backoff.reset()
        for t in TIERS:
            self.metrics.tier_nodes.labels(t).set(sum(1 for k in nodes.values() if k.value == t))
        self.metrics.tier_pending.set(result.pending)
        return result

    def _raises(self, name: str, tier: Tier | None) -> bool:
        """A move to a higher tier (from none, or from a lower one)."""
        if tier is None:
            return False
        known = self._nodes.get(name) if self._nodes is not None else None
        current = tier_of_label(known.value) if known is not None else None
        return current is None or _RANK[tier] > _RANK[current]

    def _take(self) -> None:
        if not self.bucket.take():
            raise OutOfTokens

    async def _set(self, name: str, tier: Tier | None) -> bool:
        """Set ``name``'s label to ``tier`` (None: remove it); False: nothing to do (already so,
        or the Node is gone). Every request spends a token; 409: read again and retry."""
        nodes = self._nodes
        assert nodes is not None
        for _ in range(_ATTEMPTS):
            known = nodes.get(name)
            if known is None or not known.rv:
                self._take()
                fresh = await self.api.get(name)
                if fresh is None:
                    nodes.pop(name, None)
                    self._absent.add(name)
                    return False
                known = nodes[name] = _Known.of(fresh)
            if known.value == tier:
                return False
            self._take()
            try:
                node = await self.api.patch_label(name, TIER_LABEL, tier, known.rv)
            except ApiError as exc:
                if exc.kind == CONFLICT:
                    known.rv = ""
                    continue
                if exc.kind == NOT_FOUND:
                    nodes.pop(name, None)
                    self._absent.add(name)
                    return False
                if exc.kind in UNCERTAIN:
                    known.rv = ""  # it may or may not have happened: read before writing
                raise
            nodes[name] = _Known.of(node)
            return True
        raise Conflict(409, f"Node {name}: still conflicting after {_ATTEMPTS} fresh reads")

    @staticmethod
    def _log_change(name: str, tier: Tier | None, view: ReportView) -> None:
        entry = view.entries.get(name)
        if tier is not None:
            level = entry.level if entry is not None else None
            log.info("node tier labelled", extra={"node": name, "tier": tier, "level": level})
            return
        if entry is None:
            why = "node left the report"
        elif entry.level is None:
            why = "no level (no detection had data)"
        else:
            why = "data stale (fail-open)"
        log.info("node tier label removed", extra={"node": name, "reason": why})
