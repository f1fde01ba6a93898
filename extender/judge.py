"""`decide` applied to the report store, fast enough for thousands of nodes per request.

A request that names 5,000 nodes (kube-scheduler with ``nodeCacheCapable``) must be answered in
a few milliseconds. For such name-only requests the verdict of a node depends only on its entry
and on whether that entry is stale yet, so a table per kind of pod keeps each node's current
verdict: a request looks its names up at C speed (``map`` over the dict) and only nodes whose
entry changed, turned stale or fresh, or were never asked about go through `decide` again.

When a verdict turns stale: an entry that is not ``live`` holds until its sample time, so its
fresh verdict expires at ``sampleTime + staleAfter``; a ``live`` entry holds until the report's
heartbeat, so its fresh verdict lasts while ``max(sampleTime, heartbeat) + staleAfter`` is
ahead, and a stale one may turn fresh whenever the heartbeat moves.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from extender.config import VerdictConfig
from extender.reports import KnownNode, ReportStore
from extender.verdict import NodeFacts, PodFacts, Verdict, decide

_MAX_NAMES = 200_000  # names nobody reports are remembered too; bound what requests can add


class _Table:
    """Current verdicts for one kind of pod, for the node names requests asked about."""

    def __init__(self, store: ReportStore, pod: PodFacts, config: VerdictConfig) -> None:
        self._store = store
        self._pod = pod
        self._config = config
        self._clear()

    def _clear(self) -> None:
        self.verdicts: dict[str, Verdict] = {}
        # Fresh verdicts and when they can turn stale: a fixed time for entries that are not
        # live; the sample time, to be maxed with the heartbeat, for live ones.
        self._expires: dict[str, float] = {}
        self._live_sampled: dict[str, float] = {}
        self._stale_live: set[str] = set()  # stale verdicts a newer heartbeat may refresh
        self._min_expires = math.inf
        self._min_live_sampled = math.inf
        self._heartbeat = self._store.heartbeat

    def changed(self, changes: Mapping[str, bool]) -> None:
        for name, matters in changes.items():
            if name not in self.verdicts:
                continue
            known = self._store.get(name)
            fresh = name in self._expires or name in self._live_sampled
            if matters or known is None or not fresh:
                # New inputs, a removed node, or a stale verdict whose data may be fresh again.
                self._forget(name)
            else:  # same inputs, new sample time: the fresh verdict stands, expiring later
                self._track(name, known)

    def lookup(self, names: Sequence[str], now: float) -> list[Verdict]:
        if self._store.heartbeat != self._heartbeat:
            self._heartbeat = self._store.heartbeat
            for name in self._stale_live:
                self.verdicts.pop(name, None)
            self._stale_live.clear()
        stale_after = self._config.stale_after
        next_expiry = min(
            self._min_expires, max(self._min_live_sampled, self._heartbeat) + stale_after
        )
        if now > next_expiry:
            self._expire(now)
        try:
            return list(map(self.verdicts.__getitem__, names))
        except KeyError:
            for name in names:
                if name not in self.verdicts:
                    self._add(name, now)
            return list(map(self.verdicts.__getitem__, names))

    def _add(self, name: str, now: float) -> None:
        if len(self.verdicts) >= _MAX_NAMES:
            self._clear()
        known = self._store.get(name)
        if known is None:
            verdict = decide(None, -math.inf, self._pod, NodeFacts(name), self._config, now)
        else:
            held = known.held_until(self._heartbeat)
            verdict = decide(known.entry, held, self._pod, NodeFacts(name), self._config, now)
            if now - held <= self._config.stale_after:
                self._track(name, known)
            elif known.live:
                self._stale_live.add(name)
        self.verdicts[name] = verdict

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

    def _forget(self, name: str) -> None:
        self.verdicts.pop(name, None)
        self._expires.pop(name, None)
        self._live_sampled.pop(name, None)
        self._stale_live.discard(name)

    def _expire(self, now: float) -> None:
        stale_after, heartbeat = self._config.stale_after, self._heartbeat
        for name in [n for n, at in self._expires.items() if now > at]:
            self._forget(name)
        for name in [
            n for n, s in self._live_sampled.items() if now > max(s, heartbeat) + stale_after
        ]:
            self._forget(name)
        self._min_expires = min(self._expires.values(), default=math.inf)
        self._min_live_sampled = min(self._live_sampled.values(), default=math.inf)


class Judge:
    """The store and the configuration, asked by the wire formats for verdicts."""

    def __init__(self, store: ReportStore, config: VerdictConfig) -> None:
        self.store = store
        self.config = config
        self._tables: dict[str | None, _Table] = {}
        store.subscribe(self._changed)

    def node(self, facts: NodeFacts, pod: PodFacts, now: float) -> Verdict:
        """One node, with whatever the request told about it (its Kata label)."""
        known = self.store.get(facts.name)
        if known is None:
            return decide(None, -math.inf, pod, facts, self.config, now)
        held = known.held_until(self.store.heartbeat)
        return decide(known.entry, held, pod, facts, self.config, now)

    def names(self, names: Sequence[str], pod: PodFacts, now: float) -> list[Verdict]:
        """Many nodes known only by name: ``decide`` for each, served from the tables."""
        key = pod.runtime_class if pod.wants_kata else None
        table = self._tables.get(key)
        if table is None:
            if len(self._tables) > 64:  # one table per Kata runtime class seen; few exist
                self._tables.clear()
            table = self._tables[key] = _Table(self.store, pod, self.config)
        return table.lookup(names, now)

    def _changed(self, changes: Mapping[str, bool]) -> None:
        for table in self._tables.values():
            table.changed(changes)
