"""Vector -> NodeEntry: PromQL's numbers as they are, gaps named, never zero-filled."""

from __future__ import annotations

import math

import hypothesis.strategies as st
from hypothesis import given, settings

from reporter.entries import EntryBuilder, Epsilon
from reporter.query import MISSING, Kind, Plan
from reporter.schema import Violation
from rulegen.model import DetectionRuleConfig
from testkit.answers import T0, quiet_values, slot_of, vector

CONFIG = DetectionRuleConfig.default()


def builder(compact: bool = False) -> EntryBuilder:
    return EntryBuilder(Plan(compact=compact), CONFIG, Epsilon())


def test_a_quiet_node_keeps_promqls_numbers() -> None:
    b = builder()
    values = quiet_values(b.plan)
    values[(Kind.LEVEL, "")] = 0.123456789012345
    values[(Kind.SCORE, "")] = 100 * (1 - 0.123456789012345)
    values[(Kind.INDEX, "io_congestion")] = 0.3
    entry = b.build(vector(b.plan, values, T0), "2027-01-15T08:00:00.000Z", live=True)
    assert entry.level == 0.123456789012345
    assert entry.score == 100 * (1 - 0.123456789012345)
    assert entry.detections["io_congestion"].index == 0.3
    assert entry.detections["io_congestion"].triggered is False
    assert entry.schedulable and entry.kata_ready and not entry.fallback
    assert entry.missing == [] and entry.reasons == [] and entry.violations == []
    assert entry.signals is not None and entry.signals["psiIOSome"] == 0.01
    assert entry.live


def test_missing_values_are_named_and_never_zero() -> None:
    b = builder()
    values = quiet_values(b.plan)
    for key in list(values):
        if key[0] in (Kind.LEVEL, Kind.SCORE, Kind.KATA) or key == (Kind.SIGNAL, "llcMissRatio"):
            del values[key]
        if key == (Kind.INDEX, "cache_pollution"):
            del values[key]
    entry = b.build(vector(b.plan, values, T0), "t", live=True)
    assert entry.level is None and entry.score is None
    assert entry.kata_ready is False
    assert {
        "level",
        "score",
        "kataReady",
        "signals.llcMissRatio",
        "detections.cache_pollution",
    } <= set(entry.missing)
    assert "cache_pollution" not in entry.detections
    assert entry.signals is not None and "llcMissRatio" not in entry.signals


def test_nothing_at_all_is_all_missing() -> None:
    b = builder()
    entry = b.build([MISSING] * len(b.plan.slots), "t", live=False)
    assert entry.level is None and entry.detections == {} and entry.signals == {}
    assert entry.schedulable  # no evidence of a violation: the reader fails open on missing data
    assert "level" in entry.missing and "violations.psi_io_some" in entry.missing


def test_violations_carry_the_value_and_the_configured_limit() -> None:
    b = builder()
    values = quiet_values(b.plan)
    values[(Kind.VIOLATED, "psi_io_some")] = 1.0
    values[(Kind.SIGNAL, "psiIOSome")] = 0.93
    values[(Kind.TRIGGERED, "io_congestion")] = 1.0
    values[(Kind.FALLBACK, "")] = 1.0
    entry = b.build(vector(b.plan, values, T0), "t", live=True)
    assert not entry.schedulable
    assert entry.violations == [
        Violation("psi_io_some", 0.93, CONFIG.hard_constraints["psiIOSomeMax"])
    ]
    assert entry.reasons == [
        "triggered:io_congestion",
        "violated:psi_io_some",
        "fallback:memory_pressure",
    ]
    assert entry.detections["io_congestion"].triggered


def test_compact_entries_have_no_signal_snapshot_but_keep_violation_values() -> None:
    b = builder(compact=True)
    values = quiet_values(b.plan)
    values[(Kind.VIOLATED, "psi_memory_full")] = 1.0
    values[(Kind.SIGNAL, "psiMemoryFull")] = 0.02
    entry = b.build(vector(b.plan, values, T0), "t", live=True)
    assert entry.signals is None
    assert entry.violations[0].value == 0.02
    assert not any(m.startswith("signals.") for m in entry.missing)


def within(b: EntryBuilder, old: list[float], new: list[float]) -> bool:
    lo, hi = b.bounds(old)
    return all(a <= x <= c for a, x, c in zip(lo, new, hi, strict=True))


def test_epsilon_decides_what_is_a_change() -> None:
    b = builder()
    base = vector(b.plan, quiet_values(b.plan), T0)
    level = slot_of(b.plan, Kind.LEVEL)
    psi = slot_of(b.plan, Kind.SIGNAL, "psiIOSome")
    trig = slot_of(b.plan, Kind.TRIGGERED, "io_congestion")
    moved = list(base)
    moved[b.plan.time_slot] += 100  # time alone is never a change
    moved[level] += 0.005
    moved[psi] *= 1.03  # 3 % of a small signal: below 5 % of its warn threshold
    assert within(b, base, moved)
    moved[level] = base[level] + 0.02
    assert not within(b, base, moved)
    flipped = list(base)
    flipped[trig] = 1.0
    assert not within(b, base, flipped)  # booleans are exact
    gone = list(base)
    gone[psi] = MISSING
    assert not within(b, base, gone)  # present -> absent is a change
    assert within(b, gone, list(gone))  # absent -> absent is not


finite = st.floats(min_value=0, max_value=1, allow_nan=False)


@settings(max_examples=150, deadline=None)
@given(
    level=st.one_of(st.none(), finite),
    indices=st.lists(st.one_of(st.none(), finite), min_size=4, max_size=4),
    flags=st.lists(st.sampled_from([None, 0.0, 1.0]), min_size=9, max_size=9),
    signals=st.lists(
        st.one_of(st.none(), st.floats(0, 1e6, allow_nan=False)), min_size=13, max_size=13
    ),
)
def test_vector_of_inverts_build(level, indices, flags, signals) -> None:
    """A restarted reporter recovers the vector behind a written entry, so it does not rewrite
    unchanged nodes."""
    b = builder()
    plan = b.plan
    v = [MISSING] * len(plan.slots)
    v[plan.time_slot] = T0
    v[slot_of(plan, Kind.LEVEL)] = MISSING if level is None else level
    v[slot_of(plan, Kind.SCORE)] = MISSING if level is None else 100 * (1 - level)
    labels = list(plan.signal_slots)
    for key, x in zip(labels, signals, strict=False):
        v[plan.signal_slots[key]] = MISSING if x is None else x
    detections = [s.key for s in plan.slots if s.kind is Kind.INDEX]
    for label, x in zip(detections, indices, strict=True):
        v[slot_of(plan, Kind.INDEX, label)] = MISSING if x is None else x
    bools = [
        (Kind.FALLBACK, ""),
        (Kind.KATA, ""),
        *((Kind.TRIGGERED, d) for d in detections),
        *((s.kind, s.key) for s in plan.slots if s.kind is Kind.VIOLATED),
    ]
    for (kind, key), x in zip(bools, flags, strict=False):
        v[slot_of(plan, kind, key)] = MISSING if x is None else x
    # A triggered detection always has an index (the rules record both from one signal).
    for label in detections:
        if (
            v[slot_of(plan, Kind.INDEX, label)] == MISSING
            and v[slot_of(plan, Kind.TRIGGERED, label)] == 1.0
        ):
            v[slot_of(plan, Kind.TRIGGERED, label)] = 0.0
    entry = b.build(list(v), "2027-01-15T08:00:00.000Z", live=True)
    back = b.vector_of(entry)
    for i, slot in enumerate(plan.slots):
        if slot.kind is Kind.TIME:
            continue
        if slot.kind is Kind.TRIGGERED and v[slot_of(plan, Kind.INDEX, slot.key)] == MISSING:
            continue  # not recorded without an index; 0 and absent read the same
        assert back[i] == v[i] or (math.isnan(back[i]) and math.isnan(v[i])), slot
