"""Learned workload interference profiles: each node's victims and aggressors
(``reporter.culprits``) accumulated by workload (docs/reporter.md, "Workload profiles").

Every answered cycle, each pod named on a node counts for its workload (``PodRef.workload``,
``mco.workload``), per resource:

* as an aggressor of ``r``: one sample, its share of the ``r`` usage named on that node (its
  value over the sum of the listed aggressors' values), so the workload that holds the cache or
  fills the disk the victims lack gets most of the blame;
* as a victim of ``r``: one sample, its stall share (PSI some, 0-1).

A profile keeps, per resource and role, the decayed sum of samples and their decayed count:
the intensity (sensitivity) is their quotient, the count is the confidence. Both halve every
``half_life`` seconds, so a workload that changed (a new release, a quieter phase) is judged
by what it does now. The book keeps at most ``max_workloads``: over it, the least-observed
(then the longest unseen) go first, down to nine tenths of the bound, so the sort is paid once
per tenth of the bound of new workloads. Nothing is learned from a pod without a workload (no
kube-state-metrics), and there is no per-pod cache victim (no per-pod miss counters), so no
``llc`` sensitivity is ever learned: the extender says what it assumes instead
(``extender.profiles``).

What is published (``status.profiles`` of the object named ``cluster``) is at most
``max_workloads`` profiles, rounded, sorted by workload; each is at most ``PROFILE_BYTES`` of
JSON, so the list is bounded whatever the number of nodes (docs/reporter.md gives the figure).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from mco.workload import MAX_KEY
from reporter.culprits import Culprits
from reporter.schema import PodRef, ResourceProfile, WorkloadProfile, format_time, parse_time

RESOURCES: Final = ("llc", "io", "memory")
DEFAULT_HALF_LIFE: Final = 3600.0
DEFAULT_MAX_WORKLOADS: Final = 500
# Below this decayed count a profile says nothing any more: dropped when published.
FORGET_BELOW: Final = 0.01
# JSON bytes of one published profile at most: the key, the time, three resources of four
# rounded numbers each, and the field names (pinned by tests/reporter/test_profiles.py).
PROFILE_BYTES: Final = MAX_KEY + 420
_DIGITS: Final = 4


@dataclass(slots=True)
class _Sums:
    """Decayed sums of one resource of one workload: aggressor and victim samples, counts."""

    agg: float = 0.0
    agg_n: float = 0.0
    vic: float = 0.0
    vic_n: float = 0.0

    def scale(self, factor: float) -> None:
        self.agg *= factor
        self.agg_n *= factor
        self.vic *= factor
        self.vic_n *= factor


@dataclass(slots=True)
class _Profile:
    at: float  # the time the sums are decayed to
    seen: float  # the last cycle it was named in
    sums: dict[str, _Sums] = field(default_factory=dict)

    def decay(self, to: float, half_life: float) -> None:
        if to > self.at:
            factor = 0.5 ** ((to - self.at) / half_life)
            for s in self.sums.values():
                s.scale(factor)
            self.at = to

    def count(self) -> float:
        return sum(s.agg_n + s.vic_n for s in self.sums.values())


class ProfileBook:
    """The profiles learned so far, decayed and bounded."""

    def __init__(
        self, half_life: float = DEFAULT_HALF_LIFE, max_workloads: int = DEFAULT_MAX_WORKLOADS
    ) -> None:
        if not half_life > 0 or not math.isfinite(half_life):
            raise ValueError(f"the profile half-life must be a positive duration: {half_life}")
        if max_workloads < 1:
            raise ValueError(f"at least one workload profile must be kept: {max_workloads}")
        self.half_life = half_life
        self.max_workloads = max_workloads
        self._profiles: dict[str, _Profile] = {}

    def __len__(self) -> int:
        return len(self._profiles)

    def observe(self, culprits: Mapping[str, Culprits], at: float) -> None:
        """One cycle's lists, every node's, counted for the workloads they name."""
        for pods in culprits.values():
            for ref in pods.victims:
                self._add(ref, at, victim=min(1.0, max(0.0, ref.value)))
            totals: dict[str, float] = {}
            for ref in pods.aggressors:
                totals[ref.resource] = totals.get(ref.resource, 0.0) + max(0.0, ref.value)
            for ref in pods.aggressors:
                total = totals[ref.resource]
                share = max(0.0, ref.value) / total if total > 0 else 1.0 / len(pods.aggressors)
                self._add(ref, at, aggressor=share)
        if len(self._profiles) > self.max_workloads:
            self._trim(at)

    def _add(
        self, ref: PodRef, at: float, aggressor: float | None = None, victim: float | None = None
    ) -> None:
        if not ref.workload or ref.resource not in RESOURCES:
            return
        profile = self._profiles.get(ref.workload)
        if profile is None:
            profile = self._profiles[ref.workload] = _Profile(at, at)
        profile.decay(at, self.half_life)
        profile.seen = max(profile.seen, at)
        sums = profile.sums.get(ref.resource)
        if sums is None:
            sums = profile.sums[ref.resource] = _Sums()
        if aggressor is not None:
            sums.agg += aggressor
            sums.agg_n += 1.0
        if victim is not None:
            sums.vic += victim
            sums.vic_n += 1.0

    def _trim(self, at: float) -> None:
        """Down to nine tenths of the bound: the least observed, then the longest unseen, go."""
        keep = max(1, self.max_workloads * 9 // 10)
        for p in self._profiles.values():
            p.decay(at, self.half_life)
        ranked = sorted(self._profiles.items(), key=lambda kv: (kv[1].count(), kv[1].seen))
        for key, _ in ranked[: len(ranked) - keep]:
            del self._profiles[key]

    def published(self, at: float) -> list[WorkloadProfile]:
        """What ``status.profiles`` holds at ``at``: decayed, rounded, sorted by workload; the
        profiles with next to no evidence left are forgotten."""
        out: list[WorkloadProfile] = []
        for key in sorted(self._profiles):
            p = self._profiles[key]
            p.decay(at, self.half_life)
            if p.count() < FORGET_BELOW:
                del self._profiles[key]
                continue
            resources = {
                r: _resource(s)
                for r, s in sorted(p.sums.items())
                if s.agg_n + s.vic_n >= FORGET_BELOW
            }
            out.append(WorkloadProfile(key, round(p.count(), 2), format_time(p.seen), resources))
        return out

    def seed(self, profiles: Iterable[WorkloadProfile], at: float) -> None:
        """Start from published profiles (a restart, a new leader), so learning goes on from
        what readers already follow; only before anything was observed."""
        if self._profiles:
            return
        for wp in profiles:
            if not wp.workload:
                continue
            sums = {
                r: _Sums(
                    rp.aggressor * rp.aggressor_count,
                    rp.aggressor_count,
                    rp.victim * rp.victim_count,
                    rp.victim_count,
                )
                for r, rp in wp.resources.items()
                if r in RESOURCES
            }
            seen = parse_time(wp.last_seen)
            self._profiles[wp.workload] = _Profile(at, seen if seen <= at else at, sums)
        if len(self._profiles) > self.max_workloads:
            self._trim(at)


def _resource(s: _Sums) -> ResourceProfile:
    """Rounded; a role without samples left out (msgspec omits a default only as the same
    object, so zeros are not passed at all)."""
    fields: dict[str, float] = {}
    if round(s.agg_n, 2) > 0:
        fields |= {"aggressor": _mean(s.agg, s.agg_n), "aggressor_count": round(s.agg_n, 2)}
    if round(s.vic_n, 2) > 0:
        fields |= {"victim": _mean(s.vic, s.vic_n), "victim_count": round(s.vic_n, 2)}
    return ResourceProfile(**fields)


def _mean(total: float, count: float) -> float:
    return round(min(1.0, total / count), _DIGITS) if count > 0 else 0.0
