"""One node's vector of PromQL values -> its NodeEntry, and the epsilon test that decides whether
a new vector is worth a write.

The entry holds PromQL's numbers as they are (no rounding): ``level`` and ``score`` are the
recorded ``node:mco_interference_level:ratio`` and ``node:mco_schedule_score``; a detection
appears only where its index exists; anything absent, non-finite or outside the CRD's range
(``normalize``) is named in ``missing``, never written as zero and never clamped.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from reporter.fields import Tolerance
from reporter.query import MISSING, Kind, Plan
from reporter.schema import DetectionState, NodeEntry, PodRef, Violation, parse_time
from rulegen.catalog import Catalog, Context, Signal
from rulegen.model import DetectionRuleConfig

# What a value may be and still be written (``normalize``): the bounds of its report field
# (``reporter.fields``: the CRD's for the level, the score and detection indices), 0 or 1 for
# the flags, any finite number otherwise. A value outside is an engine fault and is marked
# missing, not clamped: a level of -5 clamped to 0, or a score of 600 clamped to 100, would read
# as a quiet node.
_FINITE: Final = (-sys.float_info.max, sys.float_info.max)
# Where the node has no per-pod pressure series, node PSI judges memory and I/O.
POD_FALLBACK_REASON: Final = "fallback:pod_pressure"


@dataclass(frozen=True, slots=True)
class Epsilon:
    """``level`` and detection indices: absolute (``score`` × 100); signals: relative to the
    larger of the value and the signal's scale (its warn threshold)."""

    level: float = 0.01
    signal: float = 0.05


class EntryBuilder:
    """Builds entries and their tolerance bounds for one plan and one rule config."""

    def __init__(self, plan: Plan, config: DetectionRuleConfig, epsilon: Epsilon) -> None:
        self.plan = plan
        self.config = config
        self.epsilon = epsilon
        catalog = plan.catalog
        self.limits = {c.label: float(config.hard_constraints[c.key]) for c in catalog.constraints}
        # While PSI is unavailable, each detection that has fallback signals is judged by them.
        self._fallback_reasons = [
            f"fallback:{d.label}" for d in catalog.detections if d.psi_fallback
        ]
        # (absolute, relative) per slot
        self._tolerance: list[tuple[float, float]] = [
            _tolerance(slot.tolerance, slot.key, epsilon, config, catalog) for slot in plan.slots
        ]
        self._ranges = [slot.bounds or _FINITE for slot in plan.slots]
        self._flags = [i for i, slot in enumerate(plan.slots) if slot.is_bool]
        self._signal_slots = [(i, s.key) for i, s in enumerate(plan.slots) if s.kind is Kind.SIGNAL]
        self._slots = list(enumerate(plan.slots))

    def bounds(self, vector: list[float]) -> tuple[list[float], list[float]]:
        """(lo, hi) such that a later vector within them is not a change. MISSING matches only
        MISSING; the time slot matches anything."""
        lo: list[float] = []
        hi: list[float] = []
        for x, (absolute, relative) in zip(vector, self._tolerance, strict=True):
            if x == MISSING:
                lo.append(MISSING)
                hi.append(MISSING)
            elif absolute == math.inf:
                lo.append(-math.inf)
                hi.append(math.inf)
            else:
                tol = max(absolute, relative * abs(x))
                lo.append(x - tol)
                hi.append(x + tol)
        return lo, hi

    def normalize(self, vector: list[float]) -> None:
        """Values that cannot be written become MISSING: non-finite ones (an engine that ignored
        the query's filter) and those outside their slot's bounds (``Slot.bounds``). ``build``
        expects a normalized vector."""
        for i, (lo, hi) in enumerate(self._ranges):
            x = vector[i]
            if x != MISSING and not lo <= x <= hi:  # NaN fails the comparison too
                vector[i] = MISSING
        for i in self._flags:
            x = vector[i]
            if x != 0.0 and x != 1.0:
                vector[i] = MISSING

    def build(
        self,
        vector: list[float],
        sample_time: str,
        *,
        live: bool,
        victims: Sequence[PodRef] = (),
        aggressors: Sequence[PodRef] = (),
    ) -> NodeEntry:
        missing: list[str] = []
        level = score = None
        fallback = kata = pod_fallback = False
        detections: dict[str, DetectionState] = {}
        triggered: dict[str, bool] = {}
        violated: list[str] = []
        for i, slot in self._slots:
            x = vector[i]
            kind = slot.kind
            if kind is Kind.TIME or kind is Kind.SIGNAL:
                continue
            if x == MISSING:
                missing.append(slot.missing)
                continue
            if kind is Kind.LEVEL:
                level = x
            elif kind is Kind.SCORE:
                score = x
            elif kind is Kind.FALLBACK:
                fallback = x == 1
            elif kind is Kind.POD_FALLBACK:
                pod_fallback = x == 1
            elif kind is Kind.KATA:
                kata = x == 1
            elif kind is Kind.INDEX:
                detections[slot.key] = DetectionState(index=x, triggered=False)
            elif kind is Kind.TRIGGERED:
                triggered[slot.key] = x == 1
            elif x == 1:  # VIOLATED
                violated.append(slot.key)
        for label, state in detections.items():
            state.triggered = triggered.get(label, False)
        signals: dict[str, float] = {}
        for i, key in self._signal_slots:
            x = vector[i]
            if x == MISSING:
                if not self.plan.compact:
                    missing.append(self.plan.slots[i].missing)
            elif not self.plan.compact:
                signals[key] = x
        violations: list[Violation] = []
        for label in violated:
            value = vector[self.plan.signal_slots[self.plan.constraint_signals[label]]]
            if value != MISSING:
                violations.append(Violation(label, value, self.limits[label]))
        reasons = [f"triggered:{label}" for label, state in detections.items() if state.triggered]
        reasons += [f"violated:{label}" for label in violated]
        if fallback:
            reasons += self._fallback_reasons
        if pod_fallback:
            reasons.append(POD_FALLBACK_REASON)
        return NodeEntry(
            sample_time=sample_time,
            schedulable=not violated,
            fallback=fallback,
            kata_ready=kata,
            level=level,
            score=score,
            reasons=reasons,
            detections=detections,
            signals=None if self.plan.compact else signals,
            violations=violations,
            missing=missing,
            live=live,
            pod_fallback=pod_fallback,
            victims=[] if self.plan.compact else list(victims),
            aggressors=[] if self.plan.compact else list(aggressors),
        )

    def vector_of(self, entry: NodeEntry) -> list[float]:
        """The vector an entry was built from, as far as the entry tells (the inverse of
        ``build``): lets a restarted reporter compare new answers with what is written."""
        missing = set(entry.missing)
        violated = {v.constraint: v.value for v in entry.violations}
        violated_reasons = {
            r.removeprefix("violated:") for r in entry.reasons if r.startswith("violated:")
        }
        signals = entry.signals or {}
        vector: list[float] = []
        for slot in self.plan.slots:
            kind, key = slot.kind, slot.key
            x = MISSING
            if kind is Kind.TIME:
                x = parse_time(entry.sample_time)
            elif kind is Kind.SIGNAL:
                x = signals.get(key, MISSING)
                if x == MISSING:
                    for label, signal in self.plan.constraint_signals.items():
                        if signal == key and label in violated:
                            x = violated[label]
            elif kind is Kind.LEVEL:
                x = MISSING if entry.level is None else entry.level
            elif kind is Kind.SCORE:
                x = MISSING if entry.score is None else entry.score
            elif kind is Kind.FALLBACK:
                x = MISSING if slot.missing in missing else float(entry.fallback)
            elif kind is Kind.POD_FALLBACK:
                x = MISSING if slot.missing in missing else float(entry.pod_fallback)
            elif kind is Kind.KATA:
                x = MISSING if slot.missing in missing else float(entry.kata_ready)
            elif kind is Kind.INDEX:
                state = entry.detections.get(key)
                x = MISSING if state is None else state.index
            elif kind is Kind.TRIGGERED:
                state = entry.detections.get(key)
                if slot.missing not in missing:
                    x = float(state.triggered) if state is not None else 0.0
            elif slot.missing not in missing:  # VIOLATED
                x = float(key in violated or key in violated_reasons)
            vector.append(x)
        return vector


def _tolerance(
    tolerance: Tolerance,
    key: str,
    epsilon: Epsilon,
    config: DetectionRuleConfig,
    catalog: Catalog,
) -> tuple[float, float]:
    """(absolute, relative) change that a slot's value may make without being a change."""
    if tolerance is Tolerance.ANY:
        return math.inf, 0.0
    if tolerance is Tolerance.EXACT:
        return 0.0, 0.0
    if tolerance is Tolerance.LEVEL:
        return epsilon.level, 0.0
    if tolerance is Tolerance.SCORE:
        return epsilon.level * 100, 0.0
    return epsilon.signal * _scale(key, config, catalog), epsilon.signal


def _scale(key: str, config: DetectionRuleConfig, catalog: Catalog) -> float:
    """A signal's scale is its warn threshold; a context series' is declared in the catalog."""
    recorded = catalog.by_key(key)
    if isinstance(recorded, Signal):
        return abs(config.threshold(key).warn) or 1.0
    return recorded.scale if isinstance(recorded, Context) else 1.0
