"""Filter with fallback: a policy's limits never leave a pod pending while nodes fit it.

A policy's limits (``maxLevel``, ``hardConstraints: Enforce``, the no-data rule, and the
residents it keeps off, ``avoidFilter``) reject nodes so that a pod goes to a better one. When
no node of a call is within them, rejecting them all only makes the pod wait, and a waiting
online pod is served worse than one on the least interfered node (the placement yardstick counts
a pending second as harmed: docs/benchmarks.md, "placement"). So when no node of the call passes
and some were rejected by a limit, the least interfered of those pass instead, with reason
``least_interfered``: the ones whose level (measured, or neutral without data, plus reservation;
plus the residents kept off) is within `MARGIN` of the lowest, a node violating a hard
constraint ranking after every node that does not. Rejections that are no limit (a Kata pod on
a node without Kata, fail-closed missing data) never pass.

kube-scheduler's filter carries every candidate node, so `least_interfered` sees the whole
call. Volcano predicates one node per call (16 at a time), so no call shows the others:
`Rounds` remembers, per task, each node's rank from the predicates it was asked; a task asked
again after `ROUND_GAP` (its next scheduling session: Volcano retries a pending task every
``schedulePeriod``, 1 s by default) while no node ever passed it is one whose whole previous
round failed, and the least interfered of the nodes remembered pass (one round late). A pass
within the last `ROUND_GAP` holds the fallback back: that round had a node within the limits.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Final

from extender.config import VerdictConfig
from extender.verdict import Reason, Verdict, weighted_score
from mco.policy import Policy

# Rejections by a policy's limits, which the fallback may turn into passes.
LIMITS: Final = frozenset(
    (Reason.MAX_LEVEL, Reason.HARD_CONSTRAINT, Reason.NO_DATA, Reason.AVOIDED)
)
# Nodes within this much of the least interfered pass too: near-ties, so that a burst is not
# herded onto one node (each placement's reservation moves it up the ranking anyway).
MARGIN: Final = 0.05
# A node violating a hard constraint ranks after every node that does not.
_HARD_RANK: Final = 1.0
# A task asked again this long after its first predicate is in its next scheduling round.
ROUND_GAP: Final = 0.5
# A task not asked for this long is forgotten; at most MAX_TASKS are kept (oldest go first).
KEEP_FOR: Final = 60.0
MAX_TASKS: Final = 4096
_PASSED = itemgetter(0)  # Verdict.passed, read at C speed


def rank(verdict: Verdict) -> float:
    """How interfered a rejected node is for the fallback: lower goes first."""
    return verdict.level + (_HARD_RANK if verdict.reason == Reason.HARD_CONSTRAINT else 0.0)


def passing(verdict: Verdict, policy: Policy, config: VerdictConfig) -> Verdict:
    """``verdict`` (a rejection by a limit) as the fallback's pass, saying what it was."""
    score = weighted_score(min(1.0, verdict.level), policy.score_weight, config.neutral_score)
    message = (
        f"mco: least interfered: no node is within the limits of policy {policy.name}, so this "
        f"one passes at level {verdict.level:.3g}; rejected for: {verdict.message}"
    )
    return Verdict(
        True,
        Reason.LEAST_INTERFERED,
        message,
        score,
        min(10, max(0, int(score / 10 + 0.5))),
        False,
        False,
        verdict.level,
    )


def least_interfered(
    verdicts: list[Verdict], policy: Policy, config: VerdictConfig
) -> list[Verdict]:
    """One call's verdicts, with the least interfered limit rejections passed where no node of
    the call passes (the module's doc)."""
    if not verdicts or any(map(_PASSED, verdicts)):
        return verdicts
    ranks = [rank(v) for v in verdicts if v.reason in LIMITS]
    if not ranks:
        return verdicts
    bound = min(ranks) + MARGIN
    return [
        passing(v, policy, config) if v.reason in LIMITS and rank(v) <= bound else v
        for v in verdicts
    ]


class _Task:
    __slots__ = ("first", "last", "passed_at", "ranks")

    def __init__(self, now: float) -> None:
        self.first = now
        self.last = now
        self.passed_at = -float("inf")
        self.ranks: dict[str, float] = {}


class Rounds:
    """Per task, the ranks of the nodes its predicates were rejected on (Volcano's path)."""

    def __init__(self, max_tasks: int = MAX_TASKS, keep_for: float = KEEP_FOR) -> None:
        self._tasks: dict[str, _Task] = {}
        self._max = max_tasks
        self._keep_for = keep_for

    def __len__(self) -> int:
        return len(self._tasks)

    def predicate(
        self,
        task: str | None,
        node: str,
        verdict: Verdict,
        policy: Policy,
        config: VerdictConfig,
        now: float,
    ) -> Verdict:
        """``verdict`` for ``task`` on ``node``, or the fallback's pass where the task's previous
        round failed on every node and this one is among the least interfered of them."""
        if task is None:
            return verdict
        known = self._tasks.get(task)
        if known is None or now - known.last > self._keep_for:
            known = self._tasks[task] = _Task(now)
            while len(self._tasks) > self._max:
                del self._tasks[next(iter(self._tasks))]
        known.last = now
        if verdict.passed:
            known.passed_at = now
            known.ranks.pop(node, None)
            return verdict
        if verdict.reason not in LIMITS:
            known.ranks.pop(node, None)
            return verdict
        mine = known.ranks[node] = rank(verdict)
        if now - known.passed_at < ROUND_GAP or now - known.first < ROUND_GAP:
            return verdict
        if mine <= min(known.ranks.values()) + MARGIN:
            return passing(verdict, policy, config)
        return verdict

    def forget(self, task: str) -> None:
        """The task was placed (Volcano's allocate): its rounds are over."""
        self._tasks.pop(task, None)
