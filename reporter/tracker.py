"""The report across cycles: which entries to keep, rebuild, let age or drop, and the conditions.

The dangerous failure is an error that looks like a quiet node. So:

* A source error changes no entry and does not advance the heartbeat (``lastSyncTime``): every
  entry ages and goes stale; ``SourceReachable`` says why.
* A node present in the answer with a fresh sample is *live*: its entry is rebuilt only when a
  value moves beyond the epsilon (``EntryBuilder.bounds``), and otherwise holds up to the
  heartbeat. An entry object is replaced, never mutated, so sinks can tell a change by identity.
* A node without a fresh sample (absent from the answer, or its newest sample older than
  ``live_within``) loses ``live`` and keeps the time of its last sample, so it ages on its own;
  once that is older than ``stale_after`` it is removed.
* With several sources (shards, ``reporter.shards``), one that fails leaves its nodes out of
  the answer: they lose ``live`` and age from their last sample like any absent node, while the
  heartbeat moves on for the others; and while any source fails no absent entry is removed
  (it may be one of the failed shard's), so none is dropped, only left to go stale.
* A sample time that is not a number or lies ahead of this clock by more than
  ``MAX_CLOCK_SKEW`` is an engine fault: the node counts as without a fresh sample (never live
  "until then"), and the ``Synced`` condition names it with the reason.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from operator import le
from typing import Final, Literal

import msgspec

from mco.promql import SourceError
from reporter import culprits as culprit_lists
from reporter.entries import EntryBuilder
from reporter.query import MISSING, Snapshot
from reporter.schema import (
    MAX_CLOCK_SKEW,
    Condition,
    NodeEntry,
    ReportConfig,
    ReportSummary,
    WorkloadProfile,
    entry_time,
    format_time,
    parse_time,
    summarize,
)
from rulegen import series

SOURCE_REACHABLE: Final = "SourceReachable"
SYNCED: Final = "Synced"
_NAMED: Final = 5  # nodes a condition message names; more are counted
log = logging.getLogger("mco.reporter")


@dataclass(slots=True)
class CycleResult:
    nodes: int = 0
    changed: int = 0  # entries rebuilt, added or removed this cycle
    removed: int = 0
    lagging: int = 0  # entries without a fresh sample (not live)
    stale: int = 0  # entries a reader judges stale right now (schema.entry_time)
    rule_hash_mismatch: bool = False


@dataclass(slots=True)
class _Basis:
    lo: list[float]
    hi: list[float]
    sampled: float  # Unix time the entry's sampleTime says


@dataclass(slots=True)
class ReportView:
    """What the sinks write: the whole report as of the last cycle (shared, read-only)."""

    entries: dict[str, NodeEntry]
    last_sync_time: str | None
    rule_config_generation: int | None
    conditions: list[Condition]
    at: float  # when the last cycle ran (Unix time)
    changed_nodes: set[str] = field(default_factory=set)
    last_seen: dict[str, float] = field(default_factory=dict)  # node -> its newest sample time
    summary: ReportSummary = field(default_factory=lambda: ReportSummary(0, 0))  # all entries
    config: ReportConfig | None = None  # status.config, set by the engine
    # status.profiles, set by the engine (None: not learning, or nothing published yet)
    profiles: list[WorkloadProfile] | None = None


class Tracker:
    def __init__(
        self,
        builder: EntryBuilder,
        *,
        stale_after: float,
        live_within: float,
        refresh_after: float = 0.0,
    ) -> None:
        if stale_after <= 0 or live_within <= 0:
            raise ValueError("stale_after and live_within must be positive")
        self.builder = builder
        self.stale_after = stale_after
        self.live_within = min(live_within, stale_after)
        self.refresh_after = refresh_after
        self.entries: dict[str, NodeEntry] = {}
        self._basis: dict[str, _Basis] = {}
        self.last_seen: dict[str, float] = {}
        self.last_sync: float | None = None
        self.generation: int | None = None
        self._conditions: dict[str, Condition] = {}
        self._times: dict[float, str] = {}
        self._changed: set[str] = set()
        self._at = 0.0
        self._summary: ReportSummary | None = None  # of the entries; None: to compute again
        self._stale = 0
        self._unusable = ""  # the last message about unusable sample times

    # -----------------------------------------------------------------------------------------

    def apply(self, snap: Snapshot, failed: Mapping[str, SourceError] | None = None) -> CycleResult:
        """One answered cycle; ``failed``: the sources (by safe URL) that did not answer, when
        there are several and some did."""
        at = snap.at
        self._at = at
        self._times = {}
        result = CycleResult()
        changed = self._changed = set()
        builder = self.builder
        entries = self.entries
        basis_of = self._basis
        t_slot = builder.plan.time_slot
        refresh = self.refresh_after
        seen: set[str] = set()
        unusable: dict[str, str] = {}
        horizon, ahead = at - self.stale_after, at + MAX_CLOCK_SKEW
        ranked = snap.culprits
        relative = builder.epsilon.signal
        for node, vector in snap.vectors.items():
            ts = vector[t_slot]
            if not horizon <= ts <= ahead:
                # No usable sample: handled below as absent. Absent (MISSING) or too old is
                # ordinary; NaN, or a time ahead of this clock, is a fault worth naming.
                if ts != MISSING and not ts < horizon:
                    unusable[node] = "in the future" if ts > at else "not a number"
                continue
            seen.add(node)
            self.last_seen[node] = ts
            live = at - ts <= self.live_within
            entry = entries.get(node)
            basis = basis_of.get(node)
            pods = ranked.get(node, culprit_lists.NONE)
            if entry is not None and basis is not None and entry.live == live:
                same = all(map(le, basis.lo, vector)) and all(map(le, vector, basis.hi))
                if not same:
                    builder.normalize(vector)  # NaN never compares equal: retry once cleaned
                    same = all(map(le, basis.lo, vector)) and all(map(le, vector, basis.hi))
                if same and not builder.plan.compact:
                    same = culprit_lists.same(
                        entry.victims, pods.victims, "victims", relative
                    ) and culprit_lists.same(
                        entry.aggressors, pods.aggressors, "aggressors", relative
                    )
                # A live entry holds until the heartbeat; one that is not live must also carry
                # its newest sample time. --refresh-after rewrites old live entries anyway.
                due = refresh > 0 and live and ts - basis.sampled > refresh
                if same and (live or ts == basis.sampled) and not due:
                    continue
            builder.normalize(vector)
            entries[node] = builder.build(
                vector, self._time(ts), live=live, victims=pods.victims, aggressors=pods.aggressors
            )
            lo, hi = builder.bounds(vector)
            basis_of[node] = _Basis(lo, hi, ts)
            changed.add(node)
        for node in list(entries):
            if node in seen:
                continue
            last = self.last_seen.get(node, -math.inf)
            # Too old (unless a source failed: it may be that source's node), or dated ahead.
            if (at - last > self.stale_after and not failed) or last > ahead:
                del entries[node]
                basis_of.pop(node, None)
                self.last_seen.pop(node, None)
                changed.add(node)
                result.removed += 1
                continue
            entry = entries[node]
            if entry.live:
                entries[node] = msgspec.structs.replace(
                    entry, live=False, sample_time=self._time(last)
                )
                basis = basis_of.get(node)
                if basis is not None:
                    basis.sampled = last
                changed.add(node)
        self.last_sync = at
        infos = snap.rules
        generations = [i.generation for i in infos if i.generation is not None]
        self.generation = max(generations) if generations else self.generation
        note = self._note_unusable(unusable)
        rules_message = ""
        if infos:
            own = builder.config.config_hash()
            hashes = sorted({i.hash for i in infos})
            result.rule_hash_mismatch = hashes != [own]
            if result.rule_hash_mismatch:
                rules_message = (
                    f"the source evaluates DetectionRuleConfig hash {','.join(hashes)}; this "
                    f"reporter uses {own} for staleAfter and the hard-constraint limits"
                )
        if failed:
            first = next(iter(failed.values()))
            self._set(
                SOURCE_REACHABLE,
                "False",
                _REASONS.get(first.kind, "Failed"),
                _bounded("; ".join(e.message for e in failed.values())),
                at,
            )
            partial = (
                f"{len(failed)} source(s) failed ({', '.join(failed)}): the entries of their "
                "nodes are left as they were and age; they go stale after staleAfter"
            )
            if not infos:
                rules_message = f"{series.RULE_CONFIG_INFO} is absent at every source that answered"
            self._set(
                SYNCED,
                "False",
                "SourcePartiallyUnavailable",
                _join(partial, rules_message, note),
                at,
            )
            result.changed = len(changed)
            if changed:
                self._summary = None
            return self._finish(result, at)
        self._set(SOURCE_REACHABLE, "True", "QuerySucceeded", "", at)
        if not infos:
            self._set(
                SYNCED,
                "False",
                "RulesNotLoaded",
                _join(
                    f"{series.RULE_CONFIG_INFO} is absent at the source: MCO's recording rules "
                    "are not evaluated there, so nodes have no data",
                    note,
                ),
                at,
            )
        else:
            self._set(SYNCED, "True", "UpToDate", _join(rules_message, note), at)
        result.changed = len(changed)
        if changed:
            self._summary = None
        return self._finish(result, at)

    def _note_unusable(self, unusable: dict[str, str]) -> str:
        """The condition message about nodes whose sample time was unusable (stable while the
        fault lasts, so it costs no write per cycle); logged when it changes."""
        note = ""
        if unusable:
            names = sorted(unusable)
            listed = ", ".join(f"{n} ({unusable[n]})" for n in names[:_NAMED])
            more = f" and {len(names) - _NAMED} more" if len(names) > _NAMED else ""
            note = (
                f"unusable sample times (not a number, or more than {MAX_CLOCK_SKEW:g}s ahead "
                f"of the reporter's clock) on {len(names)} node(s), which count as without a "
                f"fresh sample: {listed}{more}"
            )
        if note != self._unusable:
            self._unusable = note
            if note:
                log.warning("unusable sample times", extra={"err": note})
        return note

    def fail(self, error: SourceError, at: float) -> CycleResult:
        """A source error: only the conditions change."""
        self._at = at
        self._changed = set()
        reason = _REASONS.get(error.kind, "Failed")
        self._set(SOURCE_REACHABLE, "False", reason, error.message, at)
        self._set(
            SYNCED,
            "False",
            "SourceUnavailable",
            "entries are left as they were and age; they go stale after staleAfter",
            at,
        )
        return self._finish(CycleResult(), at)

    def _finish(self, result: CycleResult, at: float) -> CycleResult:
        heartbeat = self.last_sync if self.last_sync is not None else -math.inf
        horizon = at - self.stale_after
        stale = lagging = 0
        fresh_heartbeat = heartbeat >= horizon  # then only entries that are not live can be stale
        for entry in self.entries.values():
            if not entry.live:
                lagging += 1
            elif fresh_heartbeat:
                continue
            if entry_time(entry, heartbeat) < horizon:
                stale += 1
        result.nodes = len(self.entries)
        result.stale = self._stale = stale
        result.lagging = lagging
        return result

    # -----------------------------------------------------------------------------------------

    def view(self) -> ReportView:
        summary = self._summary
        if summary is None:  # entries changed: one pass over them (most cycles skip it)
            summary = self._summary = summarize(self.entries.values())
        return ReportView(
            entries=self.entries,
            last_sync_time=format_time(self.last_sync) if self.last_sync is not None else None,
            rule_config_generation=self.generation,
            conditions=[
                self._conditions[t] for t in (SOURCE_REACHABLE, SYNCED) if t in self._conditions
            ],
            at=self._at,
            changed_nodes=self._changed,
            last_seen=self.last_seen,
            summary=msgspec.structs.replace(summary, stale=self._stale),
        )

    def _time(self, ts: float) -> str:
        text = self._times.get(ts)
        if text is None:
            text = self._times[ts] = format_time(ts)
        return text

    def _set(
        self,
        kind: str,
        status: Literal["True", "False", "Unknown"],
        reason: str,
        message: str,
        at: float,
    ) -> None:
        old = self._conditions.get(kind)
        if old is not None and (old.status, old.reason, old.message) == (status, reason, message):
            return
        transition = (
            old.last_transition_time
            if old is not None and old.status == status
            else format_time(at)
        )
        self._conditions[kind] = Condition(
            type=kind,
            status=status,
            last_transition_time=transition,
            reason=reason,
            message=message,
        )

    def with_builder(self, builder: EntryBuilder, stale_after: float, live_within: float) -> None:
        """A new rule config (limits, thresholds, staleAfter): keep the entries and times, and
        rebuild every entry at the next sync, so no violation keeps an old limit. A config
        change therefore costs one write of every node, like a start."""
        self.builder = builder
        self.stale_after = stale_after
        self.live_within = min(live_within, stale_after)
        self._basis.clear()

    def seed(self, entries: dict[str, NodeEntry]) -> None:
        """Start from what a sink found already written (a restart, a new leader): unchanged
        nodes are then not rewritten. Only used before the first cycle. (An entry dated ahead
        of the clock is removed by the first sync that does not vouch for it.)"""
        if self.entries:
            return
        self._summary = None
        builder = self.builder
        for node, entry in entries.items():
            sampled = parse_time(entry.sample_time)
            if not math.isfinite(sampled):
                continue
            self.last_seen[node] = sampled
            vector = builder.vector_of(entry)
            normalized = list(vector)
            builder.normalize(normalized)
            pods = {"victims": entry.victims, "aggressors": entry.aggressors}
            if normalized != vector:
                # It holds a value this reporter would not write (a hand-edited or corrupted
                # file): from now on it is written without it, even if the source never answers.
                entry = builder.build(normalized, entry.sample_time, live=entry.live, **pods)
            self.entries[node] = entry
            # Only an entry this reporter would write from the same values is kept as is; one
            # written under another config (limits) or --compact setting is rebuilt next sync.
            if builder.build(list(normalized), entry.sample_time, live=entry.live, **pods) == entry:
                lo, hi = builder.bounds(normalized)
                self._basis[node] = _Basis(lo, hi, sampled)


_REASONS: Final = {
    "source_unreachable": "Unreachable",
    "source_timeout": "Timeout",
    "source_error": "QueryFailed",
    "source_bad_answer": "InvalidAnswer",
    "source_too_large": "AnswerTooLarge",
}


def _bounded(message: str, limit: int = 1000) -> str:
    return message if len(message) <= limit else message[: limit - 1] + "…"


def _join(*messages: str) -> str:
    return "; ".join(m for m in messages if m)
