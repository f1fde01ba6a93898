"""The cached half of a verdict: every node's `decide` for one kind of pod, kept current.

A request that names 5,000 nodes (kube-scheduler with ``nodeCacheCapable``) must be answered in
a few milliseconds. For such name-only requests the verdict of a node depends only on its entry
and on whether that entry is stale yet, so a table per kind of pod keeps the current verdict of
every node the store knows: a request looks its names up at C speed (``map`` over the dict),
and only nodes whose entry changed, turned stale or fresh are given to `decide` again. A name
the store does not know gets the table's one shared verdict for unknown nodes and is never
stored, so requests cannot grow a table; all tables together hold at most
``MAX_TABLE_ENTRIES`` verdicts, the least recently used table going first.

When a verdict turns stale: an entry that is not ``live`` holds until its sample time, so its
fresh verdict expires at ``sampleTime + staleAfter``; a ``live`` entry holds until the report's
heartbeat, so its fresh verdict lasts while ``max(sampleTime, heartbeat) + staleAfter`` is
ahead, and a stale one may turn fresh whenever the heartbeat moves. An entry dated
``clockSkew`` or more in the future is stale until the clock comes within ``clockSkew`` of it.

The tables hold verdicts without the per-node terms (reservations, residents): those change with
every placement and with the clock, and concern few nodes at a time. ``extender.judge`` decides
again, after the table, only the nodes asked about that hold one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from extender.config import VerdictConfig
from extender.reports import KnownNode, ReportStore
from extender.verdict import NodeFacts, PodFacts, Verdict, decide

# Verdicts kept by all tables together. An entry costs ~0.3 KiB (the verdict, its message, the
# dict slots and expiry times), so this is ~40 MiB at most: one table per Kata runtime class in
# use and per policy (spec.policies holds at most 16; a cluster uses a handful), at 5,000
# nodes; the least recently used go first. A single table larger than this (a store of more
# nodes) is kept alone.
MAX_TABLE_ENTRIES = 131_072
_TABLE_COST = 64  # a table's own cost, in entries, so that even empty tables are bounded


class _Verdicts(dict[str, Verdict]):
    """Verdicts by node name. A name it lacks reads as ``unknown`` and is counted in ``misses``
    (``__missing__`` runs only for those), so a lookup tells whether it met a node no report
    knows at no cost to the names it holds."""

    __slots__ = ("misses", "unknown")

    def __init__(self, unknown: Verdict) -> None:
        super().__init__()
        self.unknown = unknown
        self.misses = 0

    def __missing__(self, name: str) -> Verdict:
        self.misses += 1
        return self.unknown


class Table:
    """Current verdicts for one kind of pod, for every node the store knows."""

    def __init__(self, store: ReportStore, pod: PodFacts, config: VerdictConfig) -> None:
        self._store = store
        self._pod = pod
        self._config = config
        # What a node no report mentions gets; it does not depend on the node's name or time.
        self.unknown = decide(None, -math.inf, pod, NodeFacts(""), config, 0.0)
        self.verdicts = _Verdicts(self.unknown)
        # Nodes whose verdict is ``unproven`` (stale, under a maxLevel the neutral level is above).
        self.unproven: set[str] = set()
        # Fresh verdicts and when they can turn stale: a fixed time for entries that are not
        # live; the sample time, to be maxed with the heartbeat, for live ones.
        self._expires: dict[str, float] = {}
        self._live_sampled: dict[str, float] = {}
        self._future: dict[str, float] = {}  # dated ahead: stale until this time is passed
        self._stale_live: set[str] = set()  # stale verdicts a newer heartbeat may refresh
        self._min_expires = math.inf
        self._min_live_sampled = math.inf
        self._min_future = math.inf
        self._heartbeat = store.heartbeat
        self._missing: set[str] = set(store.nodes)  # known nodes without a verdict yet
        self._moved: set[str] = set()  # fresh verdicts whose entry got a new sample time
        # Verdicts were added since the owner last looked. A new table is new cost too (even one
        # over an empty store, which never adds a verdict), so the owner trims on its first use.
        self.grew = True

    def cost(self) -> int:
        return len(self.verdicts) + _TABLE_COST

    def changed(self, changes: Mapping[str, bool]) -> None:
        for name, matters in changes.items():
            known = self._store.get(name)
            if name not in self.verdicts:
                if known is None:
                    self._missing.discard(name)
                else:
                    self._missing.add(name)
                continue
            fresh = name in self._expires or name in self._live_sampled
            if matters or known is None or not fresh:
                # New inputs, a removed node, or a stale verdict whose data may be fresh again.
                self._forget(name)
            else:  # same inputs, new sample time: the fresh verdict stands, expiring later
                self._moved.add(name)

    def lookup(self, names: Sequence[str], now: float) -> list[Verdict]:
        if self._store.heartbeat != self._heartbeat:
            self._beat(now)
        if self._moved:
            self._retrack(now)
        stale_after = self._config.stale_after
        next_expiry = min(
            self._min_expires, max(self._min_live_sampled, self._heartbeat) + stale_after
        )
        if now > next_expiry or now > self._min_future:
            self._expire(now)
        if self._missing:
            self._refill(now)
        self.verdicts.misses = 0
        return list(map(self.verdicts.__getitem__, names))

    def may_be_unproven(self, names: Sequence[str]) -> bool:
        """Whether the last lookup, of ``names``, may hold an ``unproven`` verdict: a node no
        report knows while the unknown verdict is one, or a node whose verdict is one."""
        if self.unknown.unproven and self.verdicts.misses:
            return True
        return bool(self.unproven) and not self.unproven.isdisjoint(names)

    def _beat(self, now: float) -> None:
        self._heartbeat = self._store.heartbeat
        for name in self._stale_live:
            self._drop(name)
        self._stale_live.clear()
        if self._heartbeat - now >= self._config.clock_skew:
            # A heartbeat dated ahead does not keep live entries fresh: it makes them stale.
            for name in list(self._live_sampled):
                self._forget(name)

    def _retrack(self, now: float) -> None:
        skew = self._config.clock_skew
        for name in self._moved:
            known = self._store.get(name)
            if known is None or name not in self.verdicts:
                continue  # removed or re-decided since
            if known.held_until(self._heartbeat) - now >= skew:
                self._forget(name)  # moved into the future: stale now
            else:
                self._track(name, known)
        self._moved.clear()

    def _refill(self, now: float) -> None:
        for name in self._missing:
            if name not in self.verdicts and (known := self._store.get(name)) is not None:
                self._add(name, known, now)
        self._missing.clear()
        self.grew = True

    def _add(self, name: str, known: KnownNode, now: float) -> None:
        config = self._config
        held = known.held_until(self._heartbeat)
        verdict = decide(known.entry, held, self._pod, NodeFacts(name), config, now)
        self.verdicts[name] = verdict
        if verdict.unproven:
            self.unproven.add(name)
        if held - now >= config.clock_skew:
            at = held - config.clock_skew  # stale while now <= at
            self._future[name] = at
            self._min_future = min(self._min_future, at)
            if known.live:
                self._stale_live.add(name)
        elif now - held <= config.stale_after:
            self._track(name, known)
        elif known.live:
            self._stale_live.add(name)

    def _track(self, name: str, known: KnownNode) -> None:
        if known.live:
            self._live_sampled[name] = known.sampled_at
            self._min_live_sampled = min(self._min_live_sampled, known.sampled_at)
            self._expires.pop(name, None)
        else:
            expires = known.sampled_at + self._config.stale_after
            self._expires[name] = expires
            self._min_expires = min(self._min_expires, expires)
            self._live_sampled.pop(name, None)

    def _drop(self, name: str) -> None:
        """Forget the verdict of a node the store still knows: it is decided again."""
        self.verdicts.pop(name, None)
        self.unproven.discard(name)
        self._expires.pop(name, None)
        self._live_sampled.pop(name, None)
        self._future.pop(name, None)
        if self._store.get(name) is not None:
            self._missing.add(name)

    def _forget(self, name: str) -> None:
        self._drop(name)
        self._stale_live.discard(name)

    def _expire(self, now: float) -> None:
        stale_after, heartbeat = self._config.stale_after, self._heartbeat
        for name in [n for n, at in self._expires.items() if now > at]:
            self._forget(name)
        for name in [
            n for n, s in self._live_sampled.items() if now > max(s, heartbeat) + stale_after
        ]:
            self._forget(name)
        for name in [n for n, at in self._future.items() if now > at]:
            self._forget(name)
        self._min_expires = min(self._expires.values(), default=math.inf)
        self._min_live_sampled = min(self._live_sampled.values(), default=math.inf)
        self._min_future = min(self._future.values(), default=math.inf)
