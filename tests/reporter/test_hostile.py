"""Hostile numbers from the engine (issue 19, items 5-7): whatever values and sample times an
answer holds, the reporter survives, writes nothing its own CRD rejects, never writes an
out-of-range number, and never lets a time ahead of its clock look live."""

from __future__ import annotations

import json
import math
from typing import Any

import hypothesis.strategies as st
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings

from reporter.cli import parse_settings, run
from reporter.entries import EntryBuilder, Epsilon
from reporter.layout import whole_objects
from reporter.query import Kind, Plan
from reporter.schema import MAX_CLOCK_SKEW, NodeEntry, format_time, parse_time
from reporter.tracker import Tracker
from rulegen.model import DetectionRuleConfig
from testkit.answers import T0, quiet_values, snapshot
from testkit.fakeprom import fake_prometheus
from tests.reporter.conftest import validate_object

CONFIG = DetectionRuleConfig.default()
PLAN = Plan(compact=False)
# The CRD's ranges (reporter/crd.py): what must never be written outside them.
RANGES = {Kind.LEVEL: (0.0, 1.0), Kind.SCORE: (0.0, 100.0), Kind.INDEX: (0.0, 1.0)}


def tracker(plan: Plan = PLAN) -> Tracker:
    return Tracker(EntryBuilder(plan, CONFIG, Epsilon()), stale_after=30.0, live_within=5.0)


def written(t: Tracker, layout: str = "cluster") -> list[dict[str, Any]]:
    """The objects a sink would write now, as JSON builtins; each validated against the CRD."""
    objects = [msgspec.to_builtins(o) for o in whole_objects(t.view(), layout)]
    for obj in objects:
        validate_object(obj)
    return objects


def entry_of(t: Tracker, name: str) -> dict[str, Any]:
    nodes: dict[str, Any] = written(t)[0]["status"]["nodes"]
    return dict(nodes[name])


HOSTILE = [-5.0, -1e-9, 1.0000001, 600.0, 1e300, -1e300, math.nan, math.inf, -math.inf]


@pytest.mark.parametrize("x", HOSTILE)
def test_out_of_range_level_score_and_index_are_missing_never_written(x: float) -> None:
    """Marked missing, not clamped: a level of -5 clamped to 0 would read as a quiet node."""
    values = quiet_values(PLAN)
    values[(Kind.LEVEL, "")] = x
    values[(Kind.SCORE, "")] = x * 100 if math.isfinite(x) else x
    values[(Kind.INDEX, "io_congestion")] = x
    t = tracker()
    t.apply(snapshot(PLAN, {"a": values}, T0))
    entry = entry_of(t, "a")
    assert "level" not in entry and "score" not in entry
    assert "io_congestion" not in entry["detections"]
    assert {"level", "score", "detections.io_congestion"} <= set(entry["missing"])
    assert entry["live"] is True  # the node itself is fine; only these values are not


@pytest.mark.parametrize("x", [-1.0, 0.5, 2.0, 1e300, math.nan])
def test_booleans_that_are_neither_0_nor_1_are_missing(x: float) -> None:
    values = quiet_values(PLAN)
    values[(Kind.FALLBACK, "")] = x
    values[(Kind.KATA, "")] = x
    values[(Kind.TRIGGERED, "io_congestion")] = x
    values[(Kind.VIOLATED, "psi_io_some")] = x
    t = tracker()
    t.apply(snapshot(PLAN, {"a": values}, T0))
    entry = entry_of(t, "a")
    assert {
        "fallback",
        "kataReady",
        "detections.io_congestion.triggered",
        "violations.psi_io_some",
    } <= set(entry["missing"])
    assert entry["schedulable"] is True and entry.get("violations", []) == []


def test_a_moving_value_that_leaves_the_range_is_rewritten_as_missing() -> None:
    t = tracker()
    t.apply(snapshot(PLAN, {"a": quiet_values(PLAN)}, T0))
    assert entry_of(t, "a")["level"] == 0.1
    values = quiet_values(PLAN)
    values[(Kind.LEVEL, "")] = -5.0
    t.apply(snapshot(PLAN, {"a": values}, T0 + 1))
    entry = entry_of(t, "a")
    assert "level" not in entry and "level" in entry["missing"]
    assert written(t)[0]["status"]["summary"].get("maxLevel") is None


@pytest.mark.parametrize(
    "ts,why",
    [
        (math.nan, "not a number"),
        (1e300, "in the future"),
        (T0 + 3600, "in the future"),
        (253402300800.0, "in the future"),  # year 10000: past datetime's range
        (T0 + 2 + MAX_CLOCK_SKEW + 0.5, "in the future"),  # just past the allowance
    ],
)
def test_unusable_sample_times_are_survived_and_never_live(ts: float, why: str) -> None:
    t = tracker()
    t.apply(snapshot(PLAN, {"a": quiet_values(PLAN), "b": quiet_values(PLAN)}, T0))
    assert entry_of(t, "a")["live"] is True
    # "a" now answers with an unusable time, "c" is new with one; "b" stays fine.
    nodes = {"a": quiet_values(PLAN), "b": quiet_values(PLAN), "c": quiet_values(PLAN)}
    t.apply(snapshot(PLAN, nodes, T0 + 1, {"a": ts, "b": T0 + 0.5, "c": ts}))
    status = written(t)[0]["status"]
    a = status["nodes"]["a"]
    assert a.get("live", False) is False  # no longer live: it ages from its last good sample
    assert parse_time(a["sampleTime"]) == T0 - 0.5
    assert "c" not in status["nodes"]  # nothing to vouch for it
    assert status["nodes"]["b"]["live"] is True
    synced = next(c for c in status["conditions"] if c["type"] == "Synced")
    assert synced["status"] == "True"
    assert f"a ({why}" in synced["message"] and f"c ({why}" in synced["message"]
    assert "b (" not in synced["message"]
    # The message is stable while the fault lasts (no write per cycle), and goes when it ends.
    t.apply(snapshot(PLAN, nodes, T0 + 2, {"a": ts, "b": T0 + 1.5, "c": ts}))
    assert next(c for c in t.view().conditions if c.type == "Synced").message == synced["message"]
    t.apply(snapshot(PLAN, nodes, T0 + 3, {"a": T0 + 2.5, "b": T0 + 2.5, "c": T0 + 2.5}))
    status = written(t)[0]["status"]
    synced = next(c for c in status["conditions"] if c["type"] == "Synced")
    assert "unusable" not in synced["message"]
    assert status["nodes"]["a"]["live"] is True and status["nodes"]["c"]["live"] is True


def test_a_small_clock_skew_is_allowed() -> None:
    t = tracker()
    ahead = T0 + MAX_CLOCK_SKEW - 1
    t.apply(snapshot(PLAN, {"a": quiet_values(PLAN)}, T0, {"a": ahead}))
    entry = entry_of(t, "a")
    assert entry["live"] is True and parse_time(entry["sampleTime"]) == ahead


def test_a_seeded_entry_from_the_future_is_not_kept() -> None:
    """A report written by a host whose clock ran ahead (or edited by hand) must not make a
    node look fresh for years after a restart."""
    source = tracker()
    source.apply(snapshot(PLAN, {"a": quiet_values(PLAN), "b": quiet_values(PLAN)}, T0))
    entries = dict(source.entries)
    entries["a"] = msgspec.structs.replace(entries["a"], sample_time="9999-12-31T23:59:59.000Z")
    entries["b"] = msgspec.structs.replace(entries["b"], sample_time=format_time(T0))
    fresh = tracker()
    fresh.seed(entries)
    fresh.apply(snapshot(PLAN, {"b": quiet_values(PLAN)}, T0 + 1))
    assert set(fresh.entries) == {"b"}
    assert [n for n, _ in _objects_nodes(fresh)] == ["b"]


def _objects_nodes(t: Tracker) -> list[tuple[str, Any]]:
    return list(written(t)[0]["status"]["nodes"].items())


def test_format_time_refuses_what_is_not_a_time_with_a_value_error() -> None:
    for x in (math.nan, math.inf, -math.inf, 1e300, -1e300, 253402300800.0):
        with pytest.raises(ValueError, match="not a time"):
            format_time(x)
    assert format_time(T0) == "2027-01-15T08:00:00.000Z"


# Any value, any time, through the real path: answer JSON -> decode -> parse -> tracker ->
# entries -> the objects a sink writes, validated against the CRD. Nothing raises, nothing
# out of range is written, nothing ahead of the clock is live.
_values = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, 1.0, 0.5, -5.0, 600.0, 1e300, -1e300, 5e-324]),
)
_times = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=T0 - 100, max_value=T0 + 100),
    st.sampled_from([T0 - 0.5, T0 + 3600, 253402300800.0, 1e300, -1.0, 0.0]),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    times=st.lists(_times, min_size=3, max_size=3),
    compact=st.booleans(),
)
def test_any_sample_values_and_times_are_survived(
    data: st.DataObject, times: list[float], compact: bool
) -> None:
    plan = Plan(compact=compact)
    t = tracker(plan)
    keys = [(s.kind, s.key) for s in plan.slots if s.kind is not Kind.TIME]
    for cycle, ts in enumerate(times):
        at = T0 + cycle
        values: dict[tuple[Kind, str], float] = {k: data.draw(_values) for k in keys}
        t.apply(snapshot(plan, {"a": values, "b": quiet_values(plan)}, at, {"a": ts, "b": at}))
        for layout in ("cluster", "per-node"):
            for obj in written(t, layout):
                for entry in obj["status"].get("nodes", {}).values():
                    _check(entry, at)
        for entry in t.entries.values():
            _check(msgspec.to_builtins(entry), at)
            assert isinstance(entry, NodeEntry)


def _check(entry: dict[str, Any], at: float) -> None:
    for kind, name in ((Kind.LEVEL, "level"), (Kind.SCORE, "score")):
        if name in entry:
            lo, hi = RANGES[kind]
            assert lo <= entry[name] <= hi
    for state in entry.get("detections", {}).values():
        assert 0.0 <= state["index"] <= 1.0
    for x in (entry.get("signals") or {}).values():
        assert math.isfinite(x)
    sampled = parse_time(entry["sampleTime"])
    assert sampled <= at + MAX_CLOCK_SKEW


async def test_a_report_file_with_out_of_range_values_is_not_written_back(tmp_path) -> None:
    """A hand-edited or corrupted --output file read at start: its out-of-range values are
    dropped (named in missing) even when the source never answers, so what is written again
    validates."""
    out = tmp_path / "report.json"
    async with fake_prometheus() as prom:
        prom.nodes = {"a": quiet_values(PLAN)}
        assert (
            await run(parse_settings(["--once", f"--prometheus-url={prom.url}", f"--output={out}"]))
            == 0
        )
        doc = json.loads(out.read_text())
        a = doc["status"]["nodes"]["a"]
        a.update(level=-5, score=600, kataReady=True)
        a["detections"]["io_congestion"]["index"] = 2.5
        out.write_text(json.dumps(doc))
        prom.down = True
        assert (
            await run(parse_settings(["--once", f"--prometheus-url={prom.url}", f"--output={out}"]))
            == 1
        )
    doc = json.loads(out.read_text())
    validate_object(doc)
    a = doc["status"]["nodes"]["a"]
    assert "level" not in a and "score" not in a and "io_congestion" not in a["detections"]
    assert {"level", "score", "detections.io_congestion"} <= set(a["missing"])
    assert a["kataReady"] is True
