"""The last scheduling decisions per pod, for ``GET /v1/decisions`` and the debug log.

The scheduler routes only *note* what they decided (``note``: the pod, the names asked, the
verdicts, by reference) into the request's collector, a list in a context variable that the
route handler sets; after the answer is on its way the handler gives the notes to `Decisions`,
which condenses each into a small record. So the hot path pays one context-variable lookup
and one append; a call outside a handler (tests, ``/v1/explain``) notes nothing.

Memory bound: at most ``max_pods`` pods (least recently decided go first), each with at most
``max_per_pod`` decisions (oldest go first), each listing at most ``max_nodes`` nodes (the
rejected ones first, then the best scores; the rest are only counted by reason), and at most
``max_bytes`` accounted bytes in all (``--decisions-memory``): the least recently decided pods
go first until the ring is under it. A node record holds a name (cut to 253 characters, the
longest a Kubernetes object name may be; pod names and namespaces longer than Kubernetes allows
are refused at the wire, ``extender.wire.pod_key``), a short reason and a message (cut to
``MESSAGE_CHARS``). Each record is accounted with ``sys.getsizeof`` of what it holds, which is
what tracemalloc measures within 25 % (tests). The count bounds alone (512 x 8 x 16 = 65,536
node records) hold ~48 MiB with 253-character names and full messages, ~21 MiB with
20-character names and 100-character messages, so the default byte bound (32 MiB) only bites
on long names. Volcano asks ``predicate`` once per node: successive predicates of one pod
within ``MERGE_SECONDS`` are one decision, its nodes added up to the same bound.
"""

from __future__ import annotations

import contextvars
import heapq
import logging
import sys
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Sequence
from itertools import compress, count, islice
from operator import itemgetter, not_
from typing import Final, NamedTuple

import msgspec

from extender.config import DEFAULT_DECISIONS_MEMORY
from extender.verdict import PodFacts, Verdict

log = logging.getLogger("mco.extender.decisions")

MAX_PODS: Final = 512
MAX_PER_POD: Final = 8
MAX_NODES: Final = 16
MESSAGE_CHARS: Final = 300
MERGE_SECONDS: Final = 10.0
MAX_BYTES: Final = DEFAULT_DECISIONS_MEMORY  # --decisions-memory
MAX_NODE_NAME: Final = 253  # a Kubernetes object name; Node names are no longer


class Note(NamedTuple):
    """One judge call of a scheduler route, as it happened (references, nothing copied)."""

    pod: str  # namespace/name
    facts: PodFacts
    names: Sequence[str]
    verdicts: Sequence[Verdict]


_PASSED = itemgetter(0)  # Verdict fields, read at C speed
_REASON = itemgetter(1)
_SCORE = itemgetter(3)

_COLLECTOR: contextvars.ContextVar[list[Note] | None] = contextvars.ContextVar(
    "mco_decisions", default=None
)


def note(pod: str, facts: PodFacts, names: Sequence[str], verdicts: Sequence[Verdict]) -> None:
    """Keep what a route decided for ``pod``, when a handler collects (cheap otherwise)."""
    collected = _COLLECTOR.get()
    if collected is not None and pod:
        collected.append(Note(pod, facts, names, verdicts))


def collect() -> tuple[list[Note], contextvars.Token[list[Note] | None]]:
    """Start collecting the notes of this request (its handler's task)."""
    notes: list[Note] = []
    return notes, _COLLECTOR.set(notes)


def stop(token: contextvars.Token[list[Note] | None]) -> None:
    _COLLECTOR.reset(token)


class NodeDecision(msgspec.Struct, rename="camel"):
    node: str
    passed: bool
    reason: str
    score: float
    message: str = ""


class Decision(msgspec.Struct, rename="camel"):
    route: str  # scheduler_filter | scheduler_prioritize | volcano_predicate | volcano_prioritize
    time: str  # RFC 3339, UTC: when the (first) request was answered
    policy: str  # the pod's workload-class policy
    runtime_class: str | None
    nodes: int  # nodes decided (all of them, not only those listed)
    passed: int
    reasons: dict[str, int]  # nodes by verdict reason
    listed: list[NodeDecision]  # rejected first, then the best scores; at most max_nodes
    last_time: str = ""  # merged predicates: when the last one was answered


class Decisions:
    """A bounded ring of the last decisions per pod (bounds in the module docstring)."""

    def __init__(
        self,
        max_pods: int = MAX_PODS,
        max_per_pod: int = MAX_PER_POD,
        max_nodes: int = MAX_NODES,
        max_bytes: int = MAX_BYTES,
    ) -> None:
        self.max_pods = max_pods
        self.max_per_pod = max_per_pod
        self.max_nodes = max_nodes
        self.max_bytes = max_bytes
        self.bytes = 0  # accounted: what the kept pods and decisions hold (_pod_bytes, _size)
        self._pods: OrderedDict[str, deque[Decision]] = OrderedDict()
        self._merge_until: dict[str, float] = {}  # pod -> when its last predicate may merge

    def __len__(self) -> int:
        return len(self._pods)

    def of(self, pod: str) -> list[Decision]:
        """The pod's decisions, oldest first (empty when none is kept)."""
        return list(self._pods.get(pod, ()))

    def recount(self) -> int:
        """The accounted bytes counted afresh (what ``bytes`` keeps up to date)."""
        return sum(_pod_bytes(pod) + sum(map(_size, kept)) for pod, kept in self._pods.items())

    def record(self, route: str, notes: Sequence[Note], now: float) -> None:
        for n in notes:
            self._record(route, n, now)
        while self.bytes > self.max_bytes and len(self._pods) > 1:
            self._drop_oldest()

    def _drop_oldest(self) -> None:
        gone, kept = self._pods.popitem(last=False)
        self._merge_until.pop(gone, None)
        self.bytes -= _pod_bytes(gone) + sum(map(_size, kept))

    def _record(self, route: str, n: Note, now: float) -> None:
        kept = self._pods.get(n.pod)
        if kept is None:
            kept = self._pods[n.pod] = deque()
            self.bytes += _pod_bytes(n.pod)
            while len(self._pods) > self.max_pods:
                self._drop_oldest()
        else:
            self._pods.move_to_end(n.pod)
        stamp = _stamp(now)
        last = kept[-1] if kept else None
        if (
            route == "volcano_predicate"
            and last is not None
            and last.route == route
            and last.policy == n.facts.policy.name
            and now <= self._merge_until.get(n.pod, -1.0)
        ):
            before = _size(last)
            self._merge(last, n, stamp)
            self.bytes += _size(last) - before
        else:
            decision = self._condense(route, n, stamp)
            kept.append(decision)
            self.bytes += _size(decision)
            while len(kept) > self.max_per_pod:
                self.bytes -= _size(kept.popleft())
        if log.isEnabledFor(logging.DEBUG):
            _log(route, n)
        if route == "volcano_predicate":
            self._merge_until[n.pod] = now + MERGE_SECONDS
        else:
            self._merge_until.pop(n.pod, None)

    def _condense(self, route: str, n: Note, stamp: str) -> Decision:
        # C-speed passes only: 5,000 verdicts per kube-scheduler call are normal.
        verdicts = n.verdicts
        passed = list(map(_PASSED, verdicts))
        return Decision(
            route=route,
            time=stamp,
            policy=n.facts.policy.name,
            runtime_class=n.facts.runtime_class,
            nodes=len(verdicts),
            passed=sum(passed),
            reasons=dict(Counter(map(_REASON, verdicts))),
            listed=self._listed(n.names, verdicts, passed),
        )

    def _listed(
        self, names: Sequence[str], verdicts: Sequence[Verdict], passed: list[bool]
    ) -> list[NodeDecision]:
        failed = map(not_, passed)
        pairs = zip(names, verdicts, strict=False)
        rejected = list(islice(compress(pairs, failed), self.max_nodes))
        room = self.max_nodes - len(rejected)
        best: list[tuple[float, int]] = []
        if room > 0:  # (score, -position) pairs compare in C: ties go to the earlier node
            scored = compress(zip(map(_SCORE, verdicts), count(0, -1), strict=False), passed)
            best = heapq.nlargest(room, scored)
        return [_node(name, v) for name, v in rejected] + [
            _node(names[-i], verdicts[-i]) for _score, i in best
        ]

    def _merge(self, last: Decision, n: Note, stamp: str) -> None:
        for name, v in zip(n.names, n.verdicts, strict=False):
            last.nodes += 1
            last.passed += v.passed
            last.reasons[v.reason] = last.reasons.get(v.reason, 0) + 1
            if len(last.listed) < self.max_nodes:
                last.listed.append(_node(name, v))
            elif not v.passed:  # a rejection takes the place of the lowest passing node
                passing = [i for i, d in enumerate(last.listed) if d.passed]
                if passing:
                    low = min(passing, key=lambda i: last.listed[i].score)
                    last.listed[low] = _node(name, v)
        last.last_time = stamp


def _node(name: str, v: Verdict) -> NodeDecision:
    return NodeDecision(
        name[:MAX_NODE_NAME], v.passed, v.reason, v.score, v.message[:MESSAGE_CHARS]
    )


# What one kept pod and one decision hold besides their strings (CPython object sizes): the
# ring's deque and its OrderedDict entry; a Decision with its dict, list and time stamps; a
# NodeDecision with its float. Strings count sys.getsizeof (header and characters).
_POD: Final = sys.getsizeof(deque()) + 104 + sys.getsizeof(0.0) + 64
_DECISION: Final = (
    sys.getsizeof(Decision("", "", "", None, 0, 0, {}, [])) + sys.getsizeof({"": 0}) + 56 + 64
)
_NODE: Final = sys.getsizeof(NodeDecision("", True, "", 0.0)) + sys.getsizeof(0.0) + 8


def _pod_bytes(pod: str) -> int:
    return _POD + sys.getsizeof(pod)


def _size(d: Decision) -> int:
    """Accounted bytes of one decision: its fixed parts, strings, reasons and listed nodes."""
    return (
        _DECISION
        + sys.getsizeof(d.time)
        + sys.getsizeof(d.last_time)
        + 8 * len(d.listed)
        + 64 * len(d.reasons)
        + sum(_NODE + sys.getsizeof(x.node) + sys.getsizeof(x.message) for x in d.listed)
    )


def _stamp(now: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now * 1000) % 1000:03d}Z"


def _log(route: str, n: Note) -> None:
    rejected = {name: v.reason for name, v in zip(n.names, n.verdicts, strict=False)
                if not v.passed}  # fmt: skip
    log.debug(
        "decision",
        extra={
            "pod": n.pod,
            "route": route,
            "policy": n.facts.policy.name,
            "nodes": len(n.verdicts),
            "passed": len(n.verdicts) - len(rejected),
            "rejected": dict(list(rejected.items())[:MAX_NODES]),
        },
    )
