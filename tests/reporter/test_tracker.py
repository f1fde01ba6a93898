"""The report across cycles: stale-safe on errors, live vs aging entries, removal, conditions."""

from __future__ import annotations

import math

from mco.promql import TIMEOUT, UNREACHABLE, SourceError
from reporter.entries import EntryBuilder, Epsilon
from reporter.query import Kind, Plan
from reporter.schema import entry_time, parse_time
from reporter.tracker import Tracker
from rulegen.model import DetectionRuleConfig
from testkit.answers import T0, quiet_values, snapshot

CONFIG = DetectionRuleConfig.default()
PLAN = Plan(compact=False)


def tracker(**kwargs: float) -> Tracker:
    return Tracker(
        EntryBuilder(PLAN, CONFIG, Epsilon()),
        stale_after=kwargs.get("stale_after", 30.0),
        live_within=kwargs.get("live_within", 5.0),
        refresh_after=kwargs.get("refresh_after", 0.0),
    )


def node(level: float = 0.1) -> dict[tuple[Kind, str], float]:
    values = quiet_values(PLAN)
    values[(Kind.LEVEL, "")] = level
    values[(Kind.SCORE, "")] = 100 * (1 - level)
    return values


def condition(t: Tracker, kind: str) -> tuple[str, str]:
    c = next(c for c in t.view().conditions if c.type == kind)
    return c.status, c.reason


def test_first_sync_builds_live_entries_and_sets_the_heartbeat() -> None:
    t = tracker()
    result = t.apply(
        snapshot(PLAN, {"a": node(), "b": node(0.7)}, T0, {"a": T0 - 1, "b": T0 - 0.5})
    )
    assert result.nodes == 2 and result.changed == 2 and result.stale == 0
    view = t.view()
    assert view.entries["b"].level == 0.7 and view.entries["b"].live
    assert parse_time(view.entries["a"].sample_time) == T0 - 1
    assert view.last_sync_time is not None and parse_time(view.last_sync_time) == T0
    assert view.rule_config_generation == 3
    assert condition(t, "SourceReachable") == ("True", "QuerySucceeded")
    assert condition(t, "Synced") == ("True", "UpToDate")


def test_small_moves_are_not_rewritten_but_the_heartbeat_keeps_entries_fresh() -> None:
    t = tracker()
    t.apply(snapshot(PLAN, {"a": node(0.1)}, T0))
    first = t.entries["a"]
    result = t.apply(snapshot(PLAN, {"a": node(0.104)}, T0 + 60))
    assert result.changed == 0
    assert t.entries["a"] is first  # same object: sinks see no change
    # ...and still current for a reader: the heartbeat moved.
    heartbeat = parse_time(t.view().last_sync_time)
    assert entry_time(first, heartbeat) == T0 + 60
    result = t.apply(snapshot(PLAN, {"a": node(0.2)}, T0 + 61))
    assert result.changed == 1 and t.entries["a"].level == 0.2


def test_drift_below_epsilon_per_cycle_is_still_caught() -> None:
    """The comparison is with what was written, not with the previous cycle."""
    t = tracker()
    t.apply(snapshot(PLAN, {"a": node(0.1)}, T0))
    for i in range(1, 5):
        t.apply(snapshot(PLAN, {"a": node(0.1 + 0.004 * i)}, T0 + i))
    assert t.entries["a"].level == 0.1 + 0.004 * 3  # rewritten once the drift passed 0.01


def test_source_error_changes_no_entry_and_stops_the_heartbeat() -> None:
    t = tracker()
    t.apply(snapshot(PLAN, {"a": node(0.4)}, T0))
    before = dict(t.entries)
    result = t.fail(SourceError(UNREACHABLE, "cannot reach http://prom:9090: refused"), T0 + 10)
    assert t.entries == before and t.entries["a"] is before["a"]
    assert result.changed == 0
    assert t.view().last_sync_time is not None and parse_time(t.view().last_sync_time) == T0
    assert condition(t, "SourceReachable") == ("False", "Unreachable")
    assert condition(t, "Synced") == ("False", "SourceUnavailable")
    msg = next(c for c in t.view().conditions if c.type == "SourceReachable").message
    assert "refused" in msg
    # The entries age: 31 s after the last good sync every node is stale for a reader.
    result = t.fail(SourceError(TIMEOUT, "no answer within 5s"), T0 + 31)
    assert result.stale == 1
    assert condition(t, "SourceReachable") == ("False", "Timeout")
    # Never zeros with a fresh time.
    assert t.entries["a"].level == 0.4


def test_condition_transition_time_moves_only_on_a_status_change() -> None:
    t = tracker()
    t.fail(SourceError(UNREACHABLE, "x"), T0)
    first = next(c for c in t.view().conditions if c.type == "SourceReachable")
    t.fail(SourceError(TIMEOUT, "y"), T0 + 5)
    second = next(c for c in t.view().conditions if c.type == "SourceReachable")
    assert second.reason == "Timeout" and second.last_transition_time == first.last_transition_time
    t.apply(snapshot(PLAN, {}, T0 + 9))
    third = next(c for c in t.view().conditions if c.type == "SourceReachable")
    assert third.status == "True" and parse_time(third.last_transition_time) == T0 + 9


def test_a_node_gone_from_the_answer_ages_from_its_last_sample_then_is_removed() -> None:
    t = tracker()
    t.apply(snapshot(PLAN, {"a": node(), "b": node()}, T0))
    for i in range(1, 20):  # b keeps reporting the same values: never rewritten
        t.apply(
            snapshot(PLAN, {"a": node(), "b": node()}, T0 + i, {"a": T0 + i - 1, "b": T0 + i - 0.5})
        )
    result = t.apply(snapshot(PLAN, {"a": node()}, T0 + 20, {"a": T0 + 19}))
    b = t.entries["b"]
    assert result.changed == 1 and not b.live
    # It holds at its last sample (T0+18.5), not at the heartbeat, and not at its old write.
    assert parse_time(b.sample_time) == T0 + 18.5
    assert entry_time(b, T0 + 20) == T0 + 18.5
    t.apply(snapshot(PLAN, {"a": node()}, T0 + 48, {"a": T0 + 47}))
    assert "b" in t.entries
    result = t.apply(snapshot(PLAN, {"a": node()}, T0 + 49, {"a": T0 + 48}))
    assert "b" not in t.entries and result.removed == 1
    # Back again: a fresh live entry.
    t.apply(snapshot(PLAN, {"a": node(), "b": node()}, T0 + 50))
    assert t.entries["b"].live


def test_a_node_whose_newest_sample_lags_is_not_live() -> None:
    """Old samples (a stuck rule group) must not be refreshed by the heartbeat."""
    t = tracker(live_within=5)
    result = t.apply(snapshot(PLAN, {"a": node()}, T0, {"a": T0 - 12}))
    a = t.entries["a"]
    assert not a.live and result.lagging == 1
    assert entry_time(a, T0) == T0 - 12
    # Its sample time advances (still lagging): the entry follows, so it does not look older.
    t.apply(snapshot(PLAN, {"a": node()}, T0 + 1, {"a": T0 - 8}))
    assert parse_time(t.entries["a"].sample_time) == T0 - 8
    # Older than staleAfter: treated as gone.
    t2 = tracker()
    t2.apply(snapshot(PLAN, {"a": node()}, T0, {"a": T0 - 31}))
    assert "a" not in t2.entries


def test_partial_answer_marks_only_what_is_missing() -> None:
    t = tracker()
    t.apply(snapshot(PLAN, {"a": node(0.3)}, T0))
    partial = node(0.3)
    del partial[(Kind.SIGNAL, "psiIOSome")]
    t.apply(snapshot(PLAN, {"a": partial}, T0 + 1))
    a = t.entries["a"]
    assert a.level == 0.3 and a.missing == ["signals.psiIOSome"]
    assert a.signals is not None and "psiIOSome" not in a.signals


def test_non_finite_values_become_missing() -> None:
    t = tracker()
    values = node(0.3)
    values[(Kind.SIGNAL, "pageScanRate")] = math.inf
    values[(Kind.LEVEL, "")] = -math.inf
    t.apply(snapshot(PLAN, {"a": values}, T0))
    a = t.entries["a"]
    assert a.level is None and "level" in a.missing and "signals.pageScanRate" in a.missing
    # ...and a node that keeps sending them is not rebuilt every cycle.
    first = t.entries["a"]
    t.apply(snapshot(PLAN, {"a": values}, T0 + 1))
    assert t.entries["a"] is first


def test_rules_not_loaded_and_config_mismatch_are_reported() -> None:
    t = tracker()
    t.apply(snapshot(PLAN, {"a": node()}, T0, rules=[]))
    assert condition(t, "Synced") == ("False", "RulesNotLoaded")
    result = t.apply(snapshot(PLAN, {"a": node()}, T0 + 1, rules=[("2", "not-this-hash")]))
    assert result.rule_hash_mismatch
    assert condition(t, "Synced") == ("True", "UpToDate")
    result = t.apply(snapshot(PLAN, {"a": node()}, T0 + 2, rules=[("2", CONFIG.config_hash())]))
    assert not result.rule_hash_mismatch


def test_refresh_after_rewrites_old_live_entries() -> None:
    t = tracker(refresh_after=10)
    t.apply(snapshot(PLAN, {"a": node()}, T0))
    first = t.entries["a"]
    t.apply(snapshot(PLAN, {"a": node()}, T0 + 5))
    assert t.entries["a"] is first
    t.apply(snapshot(PLAN, {"a": node()}, T0 + 12))
    assert t.entries["a"] is not first
    assert parse_time(t.entries["a"].sample_time) == T0 + 11.5


def test_seed_from_written_entries_avoids_rewriting_unchanged_nodes() -> None:
    t = tracker()
    t.apply(snapshot(PLAN, {"a": node(0.25)}, T0))
    written = dict(t.entries)
    fresh = tracker()
    fresh.seed(written)
    result = fresh.apply(snapshot(PLAN, {"a": node(0.252)}, T0 + 3))
    assert result.changed == 0 and fresh.entries["a"] is written["a"]


def test_a_new_rule_config_rebuilds_entries_with_its_limits() -> None:
    from rulegen.model import from_spec

    t = tracker()
    hot = node(0.3)
    hot[(Kind.VIOLATED, "psi_io_some")] = 1.0
    hot[(Kind.SIGNAL, "psiIOSome")] = 0.9
    t.apply(snapshot(PLAN, {"a": hot}, T0))
    assert t.entries["a"].violations[0].limit == CONFIG.hard_constraints["psiIOSomeMax"]
    stricter = from_spec({"hardConstraints": {"psiIOSomeMax": 0.5}, "report": {"staleAfter": "1m"}})
    t.with_builder(EntryBuilder(PLAN, stricter, Epsilon()), 60.0, 5.0)
    t.apply(snapshot(PLAN, {"a": hot}, T0 + 1))
    assert t.entries["a"].violations[0].limit == 0.5
    assert t.stale_after == 60.0


def test_a_seeded_node_that_never_reports_again_ages_and_goes() -> None:
    """Written before a restart, then gone: it must not crash, and must not look live."""
    t = tracker()
    t.apply(snapshot(PLAN, {"a": node(), "b": node()}, T0))
    written = dict(t.entries)
    fresh = Tracker(
        EntryBuilder(Plan(compact=True), CONFIG, Epsilon()), stale_after=30, live_within=5
    )  # another --compact setting: the seeded entries get no basis
    fresh.seed(written)
    fresh.apply(snapshot(Plan(compact=True), {"a": quiet_values(Plan(compact=True))}, T0 + 2))
    assert not fresh.entries["b"].live and fresh.entries["a"].signals is None
    fresh.apply(snapshot(Plan(compact=True), {"a": quiet_values(Plan(compact=True))}, T0 + 31))
    assert "b" not in fresh.entries


def test_summary_follows_the_entries_and_counts_stale_nodes() -> None:
    """The summary is the whole report's: worst level and score, unschedulable nodes, and the
    nodes a reader judges stale (which grows during an outage without any entry changing)."""
    t = tracker(stale_after=30.0)
    hot = node(0.9)
    hot[(Kind.VIOLATED, "psi_io_some")] = 1.0
    t.apply(snapshot(PLAN, {"a": node(0.1), "b": hot, "c": node(0.4)}, T0))
    s = t.view().summary
    assert (s.nodes, s.unschedulable, s.max_level, s.min_score, s.stale) == (
        3,
        1,
        0.9,
        100 * (1 - 0.9),
        0,
    )
    # The hot node calms down: recomputed from the new entries.
    t.apply(snapshot(PLAN, {"a": node(0.1), "b": node(0.3), "c": node(0.4)}, T0 + 1))
    s = t.view().summary
    assert (s.unschedulable, s.max_level) == (0, 0.4)
    # The source goes away: entries stay, and after staleAfter they all count as stale.
    t.fail(SourceError(UNREACHABLE, "down"), T0 + 10)
    assert t.view().summary.stale == 0
    t.fail(SourceError(UNREACHABLE, "down"), T0 + 40)
    s = t.view().summary
    assert (s.nodes, s.stale, s.max_level) == (3, 3, 0.4)
    # A node without a level does not count as 0.
    t2 = tracker()
    t2.apply(snapshot(PLAN, {"x": {(Kind.FALLBACK, ""): 0.0}}, T0))
    s = t2.view().summary
    assert (s.nodes, s.max_level, s.min_score) == (1, None, None)
