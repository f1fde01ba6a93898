"""The query plan and the parse of its answers (no engine here; see test_prometheus.py)."""

from __future__ import annotations

import math
import random

import msgspec
import pytest

from mco.promql import Answer, SourceError
from reporter.query import (
    DEFAULT_STALE_AFTER,
    MISSING,
    InfoSample,
    Kind,
    LooseSample,
    Plan,
    RecordedSample,
    TaggedSample,
    parse,
    window,
)
from rulegen import series
from testkit.answers import T0, answers, decode, ok, quiet_values, slot_of


def test_three_queries_cover_every_value_the_report_needs() -> None:
    plan = Plan(compact=False)
    assert len(plan.exprs) == 3
    for name in (
        *series.SIGNAL_SERIES.values(),
        *series.CONTEXT_SERIES.values(),
        series.INTERFERENCE_LEVEL,
        series.SCHEDULE_SCORE,
        series.MEMORY_PRESSURE_FALLBACK,
        series.DETECTION_INDEX,
        series.DETECTION_TRIGGERED,
        series.HARD_CONSTRAINT_VIOLATED,
    ):
        assert name in plan.recorded_expr
    # Read over staleAfter (the default config's 30s), rounded up, plus a second: not the
    # engine's whole lookback.
    assert plan.recorded_expr == f"last_over_time({plan.recorded_selector}[31s])"
    assert plan.recorded_selector.startswith('{__name__=~"')
    assert plan.recorded_selector.endswith('"}')
    assert series.KATA_READY in plan.extra_expr and "timestamp(" in plan.extra_expr
    assert plan.info_expr == series.RULE_CONFIG_INFO
    # The signal-index series are not fetched: nothing in the report uses them.
    assert series.SIGNAL_INDEX not in " ".join(plan.exprs)


def test_the_recorded_window_follows_stale_after_and_nothing_else() -> None:
    plan = Plan(compact=False)
    assert plan.window == window(DEFAULT_STALE_AFTER) == 31
    assert plan.windowed(DEFAULT_STALE_AFTER) is plan
    longer = plan.windowed(90.5)
    assert longer.window == window(90.5) == 92  # rounded up, one second more
    assert longer.recorded_expr == f"last_over_time({plan.recorded_selector}[92s])"
    assert longer.exprs == (longer.recorded_expr, plan.extra_expr, plan.info_expr)
    assert longer.slots is plan.slots and longer.simple is plan.simple
    assert plan.recorded_expr.endswith("[31s])")  # the original is left as it was
    assert Plan(compact=True, stale_after=90.5).recorded_expr == (
        Plan(compact=True).windowed(90.5).recorded_expr
    )


def test_compact_plan_fetches_only_the_signals_hard_constraints_need() -> None:
    compact, full = Plan(compact=True), Plan(compact=False)
    assert set(compact.signal_slots) == {"psiMemoryFull", "psiIOSome"}
    assert series.SIGNAL_SERIES["llcMissRatio"] not in compact.recorded_expr
    assert len(compact.recorded_expr) < len(full.recorded_expr)


def test_parse_groups_values_by_node() -> None:
    plan = Plan(compact=False)
    values = quiet_values(plan)
    values[(Kind.INDEX, "io_congestion")] = 0.25
    values[(Kind.VIOLATED, "psi_io_some")] = 1.0
    recorded, extra, info = answers(
        plan,
        {"a": values, "b": {(Kind.LEVEL, ""): 0.5}},
        {"a": T0 - 1, "b": T0 - 2, "ghost": T0},
        rules=[("3", "abc"), ("4", "def")],
    )
    snap = parse(
        plan,
        decode(recorded, RecordedSample),
        decode(extra, TaggedSample),
        decode(info, InfoSample),
        T0,
    )
    assert set(snap.vectors) == {"a", "b"}  # a time alone (no recorded series) is no node
    a = snap.vectors["a"]
    assert a[plan.time_slot] == T0 - 1
    assert a[slot_of(plan, Kind.LEVEL)] == 0.1
    assert a[slot_of(plan, Kind.INDEX, "io_congestion")] == 0.25
    assert a[slot_of(plan, Kind.VIOLATED, "psi_io_some")] == 1.0
    assert a[plan.kata_slot] == 1.0
    b = snap.vectors["b"]
    assert b[slot_of(plan, Kind.LEVEL)] == 0.5
    assert sum(x != MISSING for x in b) == 2  # level and time
    assert sorted((r.generation, r.hash) for r in snap.rules) == [(3, "abc"), (4, "def")]


def test_a_node_whose_values_have_no_sample_time_is_absent() -> None:
    """The windowed recorded query still holds a node whose series ended within the window
    (staleness markers); the plainly read sample time does not, and the node is left out as
    the plain selector left it."""
    plan = Plan(compact=False)
    recorded, extra, info = answers(
        plan, {"gone": quiet_values(plan), "here": quiet_values(plan)}, {"here": T0 - 1}
    )
    snap = parse(
        plan,
        decode(recorded, RecordedSample),
        decode(extra, TaggedSample),
        decode(info, InfoSample),
        T0,
    )
    assert set(snap.vectors) == {"here"}
    # An unusable time (NaN) is kept: the tracker names that fault.
    recorded, extra, info = answers(plan, {"odd": quiet_values(plan)}, {"odd": math.nan})
    snap = parse(
        plan,
        decode(recorded, RecordedSample),
        decode(extra, TaggedSample),
        decode(info, InfoSample),
        T0,
    )
    assert math.isnan(snap.vectors["odd"][plan.time_slot])


def test_nan_and_infinities_are_read() -> None:
    plan = Plan(compact=False)
    values = {
        (Kind.LEVEL, ""): math.nan,
        (Kind.SIGNAL, "pageScanRate"): math.inf,
        (Kind.SCORE, ""): -math.inf,
    }
    recorded, extra, info = answers(plan, {"a": values}, {"a": T0})
    snap = parse(
        plan,
        decode(recorded, RecordedSample),
        decode(extra, TaggedSample),
        decode(info, InfoSample),
        T0,
    )
    v = snap.vectors["a"]
    assert v[slot_of(plan, Kind.LEVEL)] == MISSING  # NaN is absent right away
    assert v[slot_of(plan, Kind.SIGNAL, "pageScanRate")] == math.inf  # the tracker drops it
    assert v[slot_of(plan, Kind.SCORE)] == -math.inf


def test_strict_decoding_refuses_unknown_names_and_the_loose_one_skips_them() -> None:
    """Rules newer than the reporter (a new detection) must not break the reporter."""
    plan = Plan(compact=False)
    result = [
        {
            "metric": {"__name__": series.DETECTION_INDEX, "detection": "new_one", "node": "a"},
            "value": [T0, "0.5"],
        },
        {"metric": {"__name__": series.INTERFERENCE_LEVEL, "node": "a"}, "value": [T0, "0.25"]},
    ]
    with pytest.raises(msgspec.ValidationError):
        decode(result, RecordedSample)
    time = decode([{"metric": {"k": "t", "node": "a"}, "value": [T0, str(T0)]}], TaggedSample)
    snap = parse(plan, decode(result, LooseSample), time, [], T0)
    assert snap.vectors["a"][slot_of(plan, Kind.LEVEL)] == 0.25


def test_a_sample_without_a_node_is_a_bad_answer() -> None:
    plan = Plan(compact=False)
    result = [{"metric": {"__name__": series.INTERFERENCE_LEVEL}, "value": [T0, "0.25"]}]
    with pytest.raises(SourceError, match="without a node"):
        parse(plan, decode(result, RecordedSample), [], [], T0)


def test_string_values_decode_to_the_exact_floats() -> None:
    """Values arrive as Go-formatted strings; strict=False decoding must be exact."""
    rng = random.Random(1)
    xs = [rng.random() * 10 ** rng.randint(-12, 12) for _ in range(2000)] + [0.0, 1e-300, 5e-324]
    result = [
        {"metric": {"k": "t", "node": f"n{i}"}, "value": [T0, repr(x)]} for i, x in enumerate(xs)
    ]
    body = msgspec.json.encode(ok(result))
    decoded = msgspec.json.Decoder(Answer[TaggedSample], strict=False).decode(body)
    assert decoded.data is not None
    assert [s.value.value for s in decoded.data.result] == xs
