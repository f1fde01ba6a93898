"""`decide` applied to the report store, fast enough for thousands of nodes per request.

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

The tables hold verdicts without reservations: those change with every placement and with the
clock, and concern few nodes at a time. A lookup decides again, after the table, only the
nodes asked about that hold a reservation (``extender.reservation``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from itertools import repeat

from extender.config import VerdictConfig
from extender.policy import LiveConfig, PolicySet, from_report
from extender.reports import KnownNode, ReportStore
from extender.reservation import Reservations
from extender.residents import Residents
from extender.verdict import NodeFacts, PodFacts, Verdict, decide
from mco.policy import Policy
from reporter.schema import ReportConfig

log = logging.getLogger("mco.extender.judge")

# Verdicts kept by all tables together. An entry costs ~0.3 KiB (the verdict, its message, the
# dict slots and expiry times), so this is ~40 MiB at most: one table per Kata runtime class in
# use and per policy (spec.policies holds at most 16; a cluster uses a handful), at 5,000
# nodes; the least recently used go first. A single table larger than this (a store of more
# nodes) is kept alone.
MAX_TABLE_ENTRIES = 131_072
_TABLE_COST = 64  # a table's own cost, in entries, so that even empty tables are bounded


class _Table:
    """Current verdicts for one kind of pod, for every node the store knows."""

    def __init__(self, store: ReportStore, pod: PodFacts, config: VerdictConfig) -> None:
        self._store = store
        self._pod = pod
        self._config = config
        # What a node no report mentions gets; it does not depend on the node's name or time.
        self.unknown = decide(None, -math.inf, pod, NodeFacts(""), config, 0.0)
        self.verdicts: dict[str, Verdict] = {}
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
        return list(map(self.verdicts.get, names, repeat(self.unknown)))

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
        self.verdicts[name] = decide(known.entry, held, self._pod, NodeFacts(name), config, now)
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


class Judge:
    """The store and the configuration in force, asked by the wire formats for verdicts.

    The configuration starts as the flags with the shipped policies and follows the report's
    ``status.config`` from then on (``extender.policy``); a change drops every table.
    """

    def __init__(
        self,
        store: ReportStore,
        config: VerdictConfig,
        max_entries: int = MAX_TABLE_ENTRIES,
        reservations: Reservations | None = None,
        residents: Residents | None = None,
    ) -> None:
        self.store = store
        self.residents = residents
        self._flags = config
        self.live = LiveConfig(config, PolicySet())
        self.reservations = reservations
        self._max_entries = max_entries
        # Keyed by (Kata runtime class or None, policy name); least recently used first.
        self._tables: dict[tuple[str | None, str], _Table] = {}
        self._current: _Table | None = None
        store.subscribe(self._changed)
        store.subscribe_config(self._configured)
        if store.config is not None:
            self._configured(store.config)

    @property
    def config(self) -> VerdictConfig:
        return self.live.verdict

    @property
    def policies(self) -> PolicySet:
        return self.live.policies

    def policy_for(self, labels: Mapping[str, str] | None) -> Policy:
        """The workload-class policy of a pod with ``labels``, from the policies in force."""
        return self.live.policies.policy_for(labels)

    def node(self, facts: NodeFacts, pod: PodFacts, now: float) -> Verdict:
        """One node, with whatever the request told about it (its Kata label)."""
        known = self.store.get(facts.name)
        if known is None:
            return decide(None, -math.inf, pod, facts, self.config, now)
        held = known.held_until(self.store.heartbeat)
        reserved = self.reserved(facts.name, held, now)
        avoided = self.avoided(facts.name, pod.policy)
        return decide(known.entry, held, pod, facts, self.config, now, reserved, avoided)

    def avoided(self, name: str, policy: Policy) -> float:
        """What the pods on the node that ``policy`` keeps away from add to its score's level."""
        if self.residents is None or not policy.avoid_policies or policy.avoid_per_pod <= 0:
            return 0.0
        count = self.residents.count(name, policy.avoid_policies)
        return min(1.0, count * policy.avoid_per_pod)

    def reserved(self, name: str, held_until: float, now: float) -> float:
        """What recent placements add to the node's level (0 without reservations)."""
        if self.reservations is None:
            return 0.0
        return self.reservations.reserved(name, held_until, now)

    def names(self, names: Sequence[str], pod: PodFacts, now: float) -> list[Verdict]:
        """Many nodes known only by name: ``decide`` for each, served from the tables."""
        key = (pod.runtime_class if pod.wants_kata else None, pod.policy.name)
        table = self._tables.get(key)
        if table is None:
            table = self._tables[key] = _Table(self.store, pod, self.config)
        if table is not self._current:  # now the most recently used
            self._tables[key] = self._tables.pop(key)
            self._current = table
        verdicts = table.lookup(names, now)
        if table.grew:
            table.grew = False
            self._trim(table)
        hit: set[str] = set()
        if self.reservations is not None:
            active = self.reservations.active(now)
            if active:
                hit = active.keys() & names
        policy = pod.policy
        if self.residents is not None and policy.avoid_policies and policy.avoid_per_pod > 0:
            hit |= self.residents.nodes_with(policy.avoid_policies).intersection(names)
        self._reserve(names, verdicts, hit, pod, now)
        return verdicts

    def _reserve(
        self,
        names: Sequence[str],
        verdicts: list[Verdict],
        hit: set[str],
        pod: PodFacts,
        now: float,
    ) -> None:
        """Decide again, with their reservation and the pods their policy keeps away from, the
        nodes asked about that hold either."""
        if not hit:
            return
        redo: dict[str, Verdict] = {}
        for name in hit:
            known = self.store.get(name)
            if known is None:
                continue
            held = known.held_until(self.store.heartbeat)
            reserved = self.reserved(name, held, now)
            avoided = self.avoided(name, pod.policy)
            if reserved > 0 or avoided > 0:
                facts = NodeFacts(name)
                redo[name] = decide(
                    known.entry, held, pod, facts, self.config, now, reserved, avoided
                )
        if not redo:
            return
        where = dict(zip(names, range(len(names)), strict=True))  # at C speed
        if len(where) == len(names):
            for name, verdict in redo.items():
                verdicts[where[name]] = verdict
        else:  # a name asked twice: every copy gets its verdict
            for i, name in enumerate(names):
                if name in redo:
                    verdicts[i] = redo[name]

    def table_entries(self) -> int:
        """Verdicts held by all tables (for tests and the bound above)."""
        return sum(len(t.verdicts) for t in self._tables.values())

    def table_cost(self) -> int:
        """What ``max_entries`` bounds: the verdicts plus each table's own cost."""
        return sum(t.cost() for t in self._tables.values())

    def _trim(self, keep: _Table) -> None:
        total = sum(t.cost() for t in self._tables.values())
        for key, table in list(self._tables.items()):
            if total <= self._max_entries:
                break
            if table is not keep:
                del self._tables[key]
                total -= table.cost()

    def _configured(self, report: ReportConfig) -> None:
        live = from_report(self._flags, report)
        if live is None:
            return
        if self.reservations is not None:  # placements last as long as data can stay fresh
            self.reservations.keep_for = self.reservations.span + live.verdict.stale_after
        same = (
            live.verdict == self.live.verdict and live.policies.policies == self.policies.policies
        )
        self.live = live
        if not same:
            self._tables.clear()
            self._current = None
            if self.residents is not None:
                self.residents.reclassify()
            log.info(
                "following status.config of the report",
                extra={
                    "generation": live.generation,
                    "stale_after": live.verdict.stale_after,
                    "neutral_score": live.verdict.neutral_score,
                    "policies": [p.name for p in live.policies.policies],
                },
            )

    def _changed(self, changes: Mapping[str, bool]) -> None:
        for table in self._tables.values():
            table.changed(changes)
