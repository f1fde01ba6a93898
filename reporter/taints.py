"""The taint mode (``--taint-nodes``, off by default): a zero-call path for hard constraints.

While a node's held hard-constraint flag (``node:mco_hard_constraint_violated:bool``, with the
rules' holdFor/clearAfter hysteresis; the entry's ``schedulable: false``) is set, the node carries
the taint ``mco.io/interference=hard-constraint:NoSchedule``; when it clears, the taint goes.
kube-scheduler's TaintToleration filter and Volcano's predicates plugin then drop the node
before any extender call, so Volcano's per-(task, node) predicate calls for it are saved.

Rules, the same as the extender's view of the report (``extender.judge``):

* Only fresh data adds or keeps a taint: an entry older than ``staleAfter`` (source down,
  reporter partitioned from Prometheus) is fail-open, so its taint is removed, and a dead
  Prometheus cannot keep nodes unschedulable. An entry dated ahead of this clock by more than
  ``MAX_CLOCK_SKEW`` is not fresh either.
* A node that leaves the report loses the taint.
* At most ``--taint-max-share`` (half) of the listed Nodes carry the taint at once: past it
  the nodes already tainted keep it, then the highest levels take the places left, and the
  rest are held back (``mco_reporter_taint_held_back_nodes``, a warning when it starts):
  the extender still judges them for the pods it sees, but no pod is stopped cluster-wide.
* Only the key ``mco.io/interference`` is ever written; every other taint is given back exactly
  as read (``reporter.nodeapi``), under the ``resourceVersion`` precondition (409: read again).
* Requests are paced by a token bucket (``--taint-qps``, ``--taint-burst``): every patch and
  every read of one Node spends a token, a conflict's re-read and retry included (the list at
  the start of a term and at each resync does not); removals go first,
  so under the limit freeing nodes wins over filtering more. What the bucket holds back is
  done in a later cycle (``mco_reporter_taint_pending_nodes``).
* One node's failure (404, 422, 403, conflicts that never settle) is counted and logged and the
  others go on; an API server that is unreachable or throttles stops the round and backs off.

What the reporter believes about the Nodes comes from one list at the start of a leader term
and every ``--taint-resync`` (a taint a person removed by hand comes back there), from the
answers to its own patches in between, and from one read of a node that joined after the list
when it first needs the taint.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from mco.apierrors import (
    CONFLICT,
    CONNECTION,
    NOT_FOUND,
    THROTTLED,
    UNCERTAIN,
    ApiError,
    Conflict,
)
from mco.backoff import Backoff
from reporter.metrics import ReporterMetrics
from reporter.nodeapi import NodeApi, NodeTaints
from reporter.nodewriter import NodeWriter, OutOfTokens
from reporter.schema import MAX_CLOCK_SKEW, entry_time, parse_time
from reporter.tracker import ReportView

TAINT_KEY: Final = "mco.io/interference"
TAINT_VALUE: Final = "hard-constraint"
TAINT_EFFECT: Final = "NoSchedule"
TAINT: Final = {"key": TAINT_KEY, "value": TAINT_VALUE, "effect": TAINT_EFFECT}
# The share of the Nodes that may carry the taint at once (--taint-max-share): past it the taint
# would stop most pods cluster-wide (every pod without the toleration, not only those the
# extender judges), which is more often a rule or data fault than a fleet in trouble. The same
# half as rulegen's guard on configurations (``rulegen.guard.DEFAULT_MAX_SHARE``).
DEFAULT_MAX_SHARE: Final = 0.5
_ATTEMPTS: Final = 4
_STOP_ROUND: Final = frozenset({CONNECTION, THROTTLED})  # not one node's fault: back off
log = logging.getLogger("mco.reporter.taints")


def wanted(view: ReportView, stale_after: float, now: float) -> set[str]:
    """The nodes that should carry the taint: a fresh entry with a held hard constraint."""
    heartbeat = parse_time(view.last_sync_time)
    horizon, ahead = now - stale_after, now + MAX_CLOCK_SKEW
    return {
        name
        for name, entry in view.entries.items()
        if not entry.schedulable and horizon <= entry_time(entry, heartbeat) <= ahead
    }


def ours(taint: dict[str, Any]) -> bool:
    return taint.get("key") == TAINT_KEY


@dataclass(slots=True)
class TaintResult:
    skipped: bool = False  # not leading, or backing off: nothing was looked at
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # error kinds (mco.apierrors)
    pending: int = 0  # changes due but held back by the rate limit or a stopped round
    held_back: list[str] = field(default_factory=list)  # wanted, past --taint-max-share


@dataclass(slots=True)
class _Known:
    rv: str  # "" after an uncertain write: read the Node again before the next one
    taints: list[dict[str, Any]]

    @classmethod
    def of(cls, node: NodeTaints) -> _Known:
        return cls(node.rv, node.taints)

    @property
    def tainted(self) -> bool:
        """Carries MCO's taint exactly (key, value, effect)."""
        return TAINT in self.taints

    @property
    def keyed(self) -> bool:
        """Carries MCO's key in any form (another value or effect set by hand goes too)."""
        return any(ours(t) for t in self.taints)


class NodeTainter(NodeWriter[_Known]):
    def __init__(
        self,
        api: NodeApi,
        metrics: ReporterMetrics,
        *,
        qps: float = 5.0,
        burst: int = 10,
        resync: float = 600.0,
        max_share: float = DEFAULT_MAX_SHARE,
        may_write: Callable[[], bool] = lambda: True,
        clock: Callable[[], float] = time.monotonic,
        backoff: Backoff | None = None,
    ) -> None:
        super().__init__(
            api, _Known.of, qps=qps, burst=burst, resync=resync, may_write=may_write,
            clock=clock, backoff=backoff, errors=metrics.taint_errors, log=log,
        )  # fmt: skip
        self.metrics = metrics
        if not 0 < max_share <= 1:
            raise ValueError("taint max share: need 0 < share <= 1")
        self.max_share = max_share
        self._conflicts: dict[str, int] = {}  # 409s of a change the rate limit interrupted
        self._held_back = False  # the share cap held nodes back at the last sync (log once)

    def forget(self) -> None:
        """Leadership lost: the next term lists the Nodes again."""
        self._nodes = None
        self._conflicts.clear()
        self.metrics.tainted_nodes.set(0)
        self.metrics.taint_pending.set(0)
        self.metrics.taint_held_back.set(0)
        self._held_back = False

    @property
    def tainted(self) -> set[str]:
        return {n for n, k in (self._nodes or {}).items() if k.tainted}

    async def sync(self, view: ReportView, stale_after: float, now: float) -> TaintResult:
        """Bring the Nodes' taints in line with ``view`` (as far as the rate limit allows)."""
        result = TaintResult()
        nodes = await self._start(result)
        if nodes is None:
            return result
        want, held_back = self._within_share(wanted(view, stale_after, now), view)
        result.held_back = sorted(held_back)
        # Removals first: under the rate limit, freeing a node wins over filtering one more.
        todo = [
            (n, False) for n in sorted(n for n, k in nodes.items() if k.keyed and n not in want)
        ]
        # A node that joined after the list is read once (``_set``); one without a Node object
        # (a report from elsewhere) is not asked about again until the next list.
        todo += [
            (n, True)
            for n in sorted(want)
            if (n in nodes and not nodes[n].tainted) or (n not in nodes and n not in self._absent)
        ]
        stopped = spent = False
        for name, on in todo:
            if stopped or spent or not self.may_write():
                result.pending += 1
                continue
            try:
                changed = await self._set(name, on)
            except OutOfTokens:
                spent = True  # this node and the rest wait for the next cycle's tokens
                result.pending += 1
                continue
            except ApiError as exc:
                self._error(result, exc, "tainting a node failed", node=name)
                if exc.kind in _STOP_ROUND:
                    stopped = True
                    self._back_off()
                continue
            if changed:
                (result.added if on else result.removed).append(name)
                self._log_change(name, on, view)
        if not stopped:
            self.backoff.reset()
        m = self.metrics
        m.taints_added.inc(len(result.added))
        m.taints_removed.inc(len(result.removed))
        m.tainted_nodes.set(sum(1 for k in nodes.values() if k.tainted))
        m.taint_pending.set(result.pending)
        m.taint_held_back.set(len(held_back))
        return result

    def _within_share(self, want: set[str], view: ReportView) -> tuple[set[str], set[str]]:
        """``want`` cut to ``max_share`` of the listed Nodes, and the nodes cut. Places go
        first to nodes that already carry the taint (no churn), then to the highest levels
        (names break ties); a node cut keeps no taint and is left to the extender."""
        nodes = self._nodes or {}
        want -= self._absent  # no Node object to taint: takes no place
        # The listed Nodes and any reported since (read when first tainted).
        cap = math.floor(self.max_share * len(nodes.keys() | want) + 1e-9)
        if self.max_share >= 1 or len(want) <= cap:
            if self._held_back:
                log.info("taint share back under the cap", extra={"cap": cap})
            self._held_back = False
            return want, set()

        def order(name: str) -> tuple[bool, float, str]:
            known = nodes.get(name)
            level = view.entries[name].level if name in view.entries else None
            return (not (known and known.keyed), -(level or 0.0), name)

        ranked = sorted(want, key=order)
        kept, cut = set(ranked[:cap]), set(ranked[cap:])
        if not self._held_back:
            log.warning(
                "taint share reached",
                extra={
                    "violating": len(want),
                    "nodes": len(nodes),
                    "cap": cap,
                    "max_share": self.max_share,
                    "held_back": ",".join(sorted(cut)[:10]),
                },
            )
        self._held_back = True
        return kept, cut

    async def _set(self, name: str, on: bool) -> bool:
        """Give ``name`` MCO's taint (``on``) or take it away; False: nothing to do (already so,
        or the Node is gone). 409: read the Node again and retry. Every request, the retries'
        reads and patches included, spends a token first (``OutOfTokens`` when there is none)."""
        nodes = self._nodes
        assert nodes is not None
        # Conflicts count across cycles: a node whose retries the bucket cuts short goes on
        # from where it stopped, so one that never settles fails after _ATTEMPTS in all and
        # cannot hold every later node back.
        tries = self._conflicts.pop(name, 0)
        while tries < _ATTEMPTS:
            known = nodes.get(name)
            if known is None or not known.rv:
                self._spend_or_hold(name, tries)
                fresh = await self.api.get(name)
                if fresh is None:
                    nodes.pop(name, None)
                    self._absent.add(name)
                    return False
                known = nodes[name] = _Known.of(fresh)
            # Ours exactly as wanted stays where it is; any other value or effect of our key goes.
            taints = [t for t in known.taints if not ours(t) or (on and t == TAINT)]
            if on and TAINT not in taints:
                taints.append(dict(TAINT))
            if taints == known.taints:
                return False
            self._spend_or_hold(name, tries)
            try:
                node = await self.api.patch_taints(name, taints, known.rv)
            except ApiError as exc:
                if exc.kind == CONFLICT:
                    known.rv = ""
                    tries += 1
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

    def _spend_or_hold(self, name: str, tries: int) -> None:
        """Take a token for the next request about ``name``; without one, remember its
        conflicts so far and raise ``OutOfTokens``."""
        if not self.bucket.take():
            if tries:
                self._conflicts[name] = tries
            raise OutOfTokens

    @staticmethod
    def _log_change(name: str, on: bool, view: ReportView) -> None:
        entry = view.entries.get(name)
        if on:
            assert entry is not None
            why = ",".join(r for r in entry.reasons if r.startswith("violated:"))
            log.info("node tainted", extra={"node": name, "taint": TAINT_KEY, "reason": why})
            return
        if entry is None:
            why = "node left the report"
        elif entry.schedulable:
            why = "hard constraint cleared"
        else:
            why = "data stale (fail-open)"
        log.info("node untainted", extra={"node": name, "taint": TAINT_KEY, "reason": why})
