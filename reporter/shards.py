"""Several PromQL sources at once (one per Prometheus or VictoriaMetrics shard), merged into one
snapshot per cycle.

Each shard evaluates the rules on its own share of the nodes, so the merge is a union: every
shard is asked the plan's three queries at the same evaluation time, concurrently, and a node
that two shards know (while targets move during a resharding) is taken from the answer whose
sample is the freshest (a time ahead of the reporter's own clock, a shard's clock running fast,
loses to any that is not). A shard that fails contributes nothing: its nodes are absent from the
snapshot, so the tracker lets exactly their entries age (``Tracker.apply``'s ``failed``), while
the others' nodes stay live. With one source this is ``query.fetch`` and nothing more.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from mco.promql import PromQLClient, SourceError
from reporter.query import MISSING, Plan, Snapshot, fetch
from reporter.schema import MAX_CLOCK_SKEW

MAX_COMBINED_MESSAGE = 1000  # characters of the message naming every failed shard
# Seconds a shard's sample time may be ahead of the time the reporter asked for and still
# compete on freshness (the evaluation time travels as milliseconds; nothing honest is later).
MERGE_AHEAD = 1.0


@dataclass(slots=True)
class Gathered:
    """One cycle's answers from every shard."""

    snapshot: Snapshot | None  # None: no shard answered
    failed: dict[str, SourceError] = field(default_factory=dict)  # by the shard's safe URL
    nodes: dict[str, int] = field(default_factory=dict)  # nodes taken from each shard

    def error(self) -> SourceError:
        """All shards failed: one error naming each (the first one's kind)."""
        errors = list(self.failed.values())
        if len(errors) == 1:
            return errors[0]
        message = "; ".join(e.message for e in errors)
        if len(message) > MAX_COMBINED_MESSAGE:
            message = message[: MAX_COMBINED_MESSAGE - 1] + "…"
        return SourceError(errors[0].kind, message)


async def gather(
    sources: Sequence[PromQLClient], plan: Plan, at: float, culprits: str | None = None
) -> Gathered:
    """Every source's snapshot at ``at``, merged. A SourceError fails only its shard; any
    other exception (a bug) propagates. ``culprits``: the victims and aggressors query
    (``query.fetch``), asked of every shard."""
    results = await asyncio.gather(
        *(fetch(source, plan, at, culprits) for source in sources), return_exceptions=True
    )
    snaps: list[tuple[str, Snapshot]] = []
    failed: dict[str, SourceError] = {}
    for source, result in zip(sources, results, strict=True):
        if isinstance(result, SourceError):
            failed[source.where] = result
        elif isinstance(result, BaseException):
            raise result
        else:
            snaps.append((source.where, result))
    if not snaps:
        return Gathered(None, failed)
    if len(snaps) == 1:
        where, snap = snaps[0]
        return Gathered(snap, failed, {where: len(snap.vectors)})
    return merge(plan, snaps, failed)


def merge(
    plan: Plan, snaps: Sequence[tuple[str, Snapshot]], failed: dict[str, SourceError]
) -> Gathered:
    """The union of the shards' vectors; a node in several takes the freshest usable sample.

    A sample time that is absent or NaN never wins; nor does one dated ahead of the
    reporter's evaluation time by more than ``MERGE_AHEAD``: an engine asked for time ``at``
    answers samples at or before it, so a later one comes from a shard whose clock runs fast,
    and its freshness is not believed against an honest shard's. It is still the node's
    answer when no other shard has one (within ``MAX_CLOCK_SKEW`` the tracker believes it);
    among shards that are all ahead, the one nearest the reporter's clock wins."""
    t_slot = plan.time_slot
    at = snaps[0][1].at
    honest, ahead = at + MERGE_AHEAD, at + MAX_CLOCK_SKEW

    def rank(vector: list[float]) -> tuple[int, float]:
        ts = vector[t_slot]
        if ts == MISSING or not ts <= ahead:  # NaN fails `<=` too
            return (0, -math.inf)
        return (2, ts) if ts <= honest else (1, -ts)

    vectors: dict[str, list[float]] = {}
    owner: dict[str, str] = {}
    rules = []
    size = 0
    for where, snap in snaps:
        rules += snap.rules
        size += snap.answer_bytes
        for node, vector in snap.vectors.items():
            held = vectors.get(node)
            if held is None or rank(vector) > rank(held):
                vectors[node] = vector
                owner[node] = where
    counts = dict.fromkeys((where for where, _ in snaps), 0)
    for where in owner.values():
        counts[where] += 1
    # A node's victims and aggressors come from the shard its vector came from.
    by_where = dict(snaps)
    culprits = {
        node: pods
        for node, where in owner.items()
        if (pods := by_where[where].culprits.get(node)) is not None
    }
    return Gathered(Snapshot(at, vectors, rules, size, culprits), failed, counts)
