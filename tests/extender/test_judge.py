"""The verdict tables must always answer exactly what `decide` answers, however the store and
the clock move."""

from __future__ import annotations

import gc
import math
import tracemalloc
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.config import VerdictConfig
from extender.fallback import least_interfered
from extender.judge import Judge, settle
from extender.reports import ReportStore
from extender.reservation import POD_WATCH, Placement, Reservations
from extender.tables import MAX_TABLE_ENTRIES
from extender.verdict import NodeFacts, Verdict, decide, pod_facts
from mco.policy import DEFAULT_POLICIES, Policy
from reporter.schema import ReportConfig, entry_time
from tests.extender.conftest import cluster_report, entry, per_node_reports

NAMES = ["a", "b"]  # few names: the interesting histories repeat on the same node
T0 = 1_800_000_000.0

operation = st.one_of(
    st.tuples(
        st.just("set"),
        st.sampled_from(NAMES),
        st.sampled_from([None, 0.0, 0.5, 0.9]),  # level
        st.floats(-200, 60),  # sampled this long before the clock (negative: ahead of it)
        st.booleans(),  # schedulable
        st.booleans(),  # kata ready
        st.booleans(),  # live
    ),
    st.tuples(st.just("remove"), st.sampled_from(NAMES)),
    st.tuples(st.just("tick"), st.floats(0, 40)),
    st.tuples(st.just("beat"), st.floats(-200, 60)),  # a heartbeat this long before the clock
    st.tuples(st.just("ask"), st.lists(st.sampled_from([*NAMES, "x"]), min_size=1, max_size=3)),
)


@settings(max_examples=500, deadline=None)
@given(
    ops=st.lists(operation, max_size=30),
    runtime_class=st.sampled_from([None, "kata-qemu"]),
    fail_closed=st.booleans(),
)
def test_tables_agree_with_decide(ops, runtime_class, fail_closed):
    config = VerdictConfig(fail_closed=fail_closed)
    store = ReportStore()
    judge = Judge(store, config)
    pod = pod_facts(runtime_class, config)
    now = T0
    current: dict[str, Any] = {}
    heartbeat: float | None = None

    def publish() -> None:
        store.replace_all([cluster_report(dict(current), heartbeat=heartbeat)])

    def expected(name: str) -> Verdict:
        known = store.get(name)
        if known is None:
            return decide(None, -math.inf, pod, NodeFacts(name), config, now)
        held = entry_time(known.entry, store.heartbeat)  # the reporter's own rule
        return decide(known.entry, held, pod, NodeFacts(name), config, now)

    for op in ops:
        if op[0] == "set":
            _, name, level, age, schedulable, kata, live = op
            current[name] = entry(
                level, age=age, schedulable=schedulable, kata=kata, now=now, live=live
            )
            publish()
        elif op[0] == "remove":
            current.pop(op[1], None)
            publish()
        elif op[0] == "tick":
            now += op[1]
        elif op[0] == "beat":
            heartbeat = now - op[1]
            publish()
        else:
            names = op[1]
            decided = least_interfered([expected(n) for n in names], pod.policy, config)
            assert judge.verdicts(names, pod, now) == decided


def test_a_new_sample_time_alone_keeps_the_cached_verdict_and_extends_it():
    config = VerdictConfig(stale_after=30)
    store = ReportStore()
    judge = Judge(store, config)
    pod = pod_facts(None, config)
    store.replace_all(per_node_reports({"a": entry(0.5, now=T0)}))
    first = judge.verdicts(["a"], pod, T0 + 1)[0]
    store.replace_all(per_node_reports({"a": entry(0.5, now=T0 + 20)}))
    assert judge.verdicts(["a"], pod, T0 + 40)[0] is first  # same object: no new decision
    assert judge.verdicts(["a"], pod, T0 + 51)[0].reason == "stale"
    store.replace_all(per_node_reports({"a": entry(0.5, now=T0 + 60)}))
    assert judge.verdicts(["a"], pod, T0 + 61)[0].reason == "ok"  # fresh again


def test_live_entries_follow_the_heartbeat():
    config = VerdictConfig(stale_after=30)
    store = ReportStore()
    judge = Judge(store, config)
    pod = pod_facts(None, config)
    live = {"a": entry(0.5, now=T0, live=True)}
    store.replace_all([cluster_report(live, heartbeat=T0)])
    assert judge.verdicts(["a"], pod, T0 + 20)[0].reason == "ok"
    assert judge.verdicts(["a"], pod, T0 + 40)[0].reason == "stale"  # no newer heartbeat
    store.upsert(cluster_report(live, heartbeat=T0 + 35))  # the entry itself is unchanged
    assert judge.verdicts(["a"], pod, T0 + 40)[0].reason == "ok"
    assert judge.verdicts(["a"], pod, T0 + 66)[0].reason == "stale"


def test_data_dated_ahead_is_stale_until_the_clock_catches_up():
    config = VerdictConfig(stale_after=30, clock_skew=60)
    store = ReportStore()
    judge = Judge(store, config)
    pod = pod_facts(None, config)
    store.replace_all(per_node_reports({"a": entry(0.5, now=T0 + 3600)}))
    assert judge.verdicts(["a"], pod, T0)[0].reason == "stale"
    assert judge.verdicts(["a"], pod, T0 + 3540)[0].reason == "stale"  # exactly 60 s ahead
    assert judge.verdicts(["a"], pod, T0 + 3541)[0].reason == "ok"
    assert judge.verdicts(["a"], pod, T0 + 3631)[0].reason == "stale"  # and then old
    live = {"b": entry(0.5, now=T0, live=True)}
    store.replace_all([cluster_report(live, heartbeat=T0)])
    assert judge.verdicts(["b"], pod, T0 + 1)[0].reason == "ok"
    store.replace_all([cluster_report(live, heartbeat=T0 + 3600)])  # a heartbeat an hour ahead
    assert judge.verdicts(["b"], pod, T0 + 2)[0].reason == "stale"
    store.replace_all([cluster_report(live, heartbeat=T0 + 3)])
    assert judge.verdicts(["b"], pod, T0 + 4)[0].reason == "ok"


def _held_by(work: Any) -> int:
    """Bytes still allocated after ``work()`` returns (and its garbage is collected)."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        work()
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("fail_closed", [False, True])
def test_names_no_report_mentions_are_never_stored(fail_closed):
    """Eight Kata runtime classes and one plain pod, 200,000 names nobody reports each: the
    answers are the documented ones, and the tables keep nothing for those names."""
    config = VerdictConfig(fail_closed=fail_closed)
    store = ReportStore()
    store.replace_all(
        [cluster_report({"k0": entry(0.2, now=T0, kata=True), "k1": entry(0.2, now=T0)})]
    )
    judge = Judge(store, config)
    unknown = [f"node-{i:06d}" for i in range(200_000)]
    names = [*unknown, "k0", "k1"]

    def ask() -> None:
        for runtime_class in [None, *(f"kata-{i}" for i in range(8))]:
            pod = pod_facts(runtime_class, config)
            verdicts = judge.verdicts(names, pod, T0 + 1)
            first = decide(None, -math.inf, pod, NodeFacts(unknown[0]), config, T0 + 1)
            assert all(v == first for v in verdicts[:-2])
            if runtime_class is None:
                assert first.reason == "unknown" and first.passed is not fail_closed
            else:
                assert first.reason == "kata_not_ready" and not first.passed
                assert "not known to be Kata-ready (no report)" in first.message
                assert verdicts[-2].passed and not verdicts[-1].passed  # k0 has Kata, k1 not
            assert verdicts[-1].reason == ("ok" if runtime_class is None else "kata_not_ready")

    held = _held_by(ask)
    assert held < 1 << 20, f"{held >> 20} MiB kept for names no report mentions"
    assert judge.table_entries() == 9 * 2


def test_all_tables_together_are_bounded_by_entries():
    """Forty Kata runtime classes over 2,000 reported nodes would be 82,000 verdicts: the
    least recently used tables go, and every answer is still `decide`'s."""
    config = VerdictConfig()
    store = ReportStore()
    nodes = {f"n{i:04d}": entry(0.1 * (i % 10), now=T0, kata=i % 3 == 0) for i in range(2000)}
    store.replace_all([cluster_report(nodes)])
    judge = Judge(store, config, max_entries=10_000)
    plain = pod_facts(None, config)
    names = list(nodes)
    for i in range(40):
        for pod in (pod_facts(f"kata-{i}", config), plain):
            verdicts = judge.verdicts(names, pod, T0 + 1)
            assert judge.table_entries() <= 10_000
            for name in names[::97]:
                expected = decide(nodes[name], T0, pod, NodeFacts(name), config, T0 + 1)
                assert verdicts[names.index(name)] == expected
    assert judge.table_entries() >= 4_000  # the plain pods' table, used all along, stayed


@pytest.mark.parametrize("report", ["none yet", "zero nodes"])
def test_tables_over_an_empty_store_are_bounded(report):
    """Before the first report loads, or with a report of no nodes, no table ever gains a
    verdict: 6,000 distinct Kata runtime classes (three times the ~2,000 empty tables the
    bound allows) must still not keep 6,000 tables."""
    config = VerdictConfig()
    store = ReportStore()
    if report == "zero nodes":
        store.replace_all([cluster_report({})])
    judge = Judge(store, config)
    names = ["n1", "n2"]

    def ask() -> None:
        for i in range(6_000):
            pod = pod_facts(f"kata-{i}", config)
            verdicts = judge.verdicts(names, pod, T0)
            assert [v.reason for v in verdicts] == ["kata_not_ready"] * 2
            assert judge.table_cost() <= MAX_TABLE_ENTRIES

    held = _held_by(ask)
    # At most MAX_TABLE_ENTRIES / _TABLE_COST empty tables stay: ~2,000, a few MiB.
    assert held < 8 << 20, f"{held >> 20} MiB kept by tables over an empty store"
    assert judge.table_entries() == 0


def test_one_table_per_policy_and_a_new_report_config_drops_them() -> None:
    """The same names for pods of different policies get each policy's verdicts (the tables
    are keyed by policy), and a report's status.config replaces config and policies."""
    config = VerdictConfig()
    store = ReportStore()
    nodes = {
        "a": entry(0.1, now=T0),
        "b": entry(0.5, now=T0),
        "c": entry(0.2, now=T0, schedulable=False),
    }
    store.replace_all([cluster_report(nodes)])
    judge = Judge(store, config)
    names = [*nodes, "unknown"]
    strict = Policy("strict", max_level=0.05, hard_constraints="Ignore", score_weight=3)
    for policy in (*DEFAULT_POLICIES, strict, DEFAULT_POLICIES[0]):
        pod = pod_facts(None, config, policy)
        for _ in range(2):  # built, then served from the table
            verdicts = judge.verdicts(names, pod, T0 + 1)
            decided = [
                decide(
                    nodes.get(n), T0 if n in nodes else -math.inf, pod, NodeFacts(n), config, T0 + 1
                )
                for n in names
            ]
            # The call's rules for nodes without data, then for a call where none passes.
            expected = least_interfered(settle(decided, policy, config), policy, config)
            assert [v[:5] for v in verdicts] == [v[:5] for v in expected], policy.name
    # Every known node over strict's 0.05, and the node without data rejected (no data is no
    # proof while other nodes have data): the least interfered passes (extender.fallback), a at
    # 0.1; c (0.2, its hard constraint ignored), b (0.5) and the unknown node (neutral 0.4) stay
    # rejected, more than the margin above it.
    strict_verdicts = judge.verdicts(names, pod_facts(None, config, strict), T0 + 1)
    assert [(v.passed, v.reason) for v in strict_verdicts] == [
        (True, "least_interfered"),
        (False, "max_level"),
        (False, "max_level"),
        (False, "no_data"),
    ]
    assert strict_verdicts[0].level == pytest.approx(0.1)
    assert "above 0.05, the maxLevel of policy strict" in strict_verdicts[0].message
    assert judge.table_entries() == 3 * 5  # one table per distinct policy
    report = cluster_report(nodes)
    report.status.config = ReportConfig("5s", 70.0, [Policy("only", max_level=0.2)], 9)
    store.replace_all([report])
    assert judge.table_entries() == 0
    assert (judge.config.stale_after, judge.config.neutral_score) == (5.0, 70.0)
    assert judge.live.generation == 9 and judge.policy_for({"any": "pod"}).name == "only"
    pod = pod_facts(None, judge.config, judge.policy_for({}))
    # Neutral 70 is level 0.3, above the policy's 0.2: no data is no proof while "a" passes.
    assert [v.reason for v in judge.verdicts(names, pod, T0 + 1)] == [
        "ok",
        "max_level",
        "hard_constraint",
        "no_data",
    ]
    assert judge.verdicts(["unknown"], pod, T0 + 1)[0].score == 70.0  # alone: the fallback


def test_a_node_without_data_counts_at_the_neutral_level_plus_its_own_reservation() -> None:
    """Placements on a node no report knows count as on a known node: they lower its score
    (a burst spreads over such nodes) and, past the policy's maxLevel, reject it while another
    node of the call has data; in a call with no data at all it still passes."""
    config = VerdictConfig()  # neutral 50: level 0.5
    store = ReportStore()
    store.replace_all([cluster_report({"quiet": entry(0.1, now=T0)})])
    reservations = Reservations(span=30, keep_for=60)
    judge = Judge(store, config, reservations=reservations)
    lenient = pod_facts(None, config, Policy("lenient", max_level=0.6))
    assert [v.reason for v in judge.verdicts(["quiet", "new"], lenient, T0)] == ["ok", "unknown"]
    reservations.place("p1", Placement("new", 0.05, T0 - 1, POD_WATCH))
    [_quiet, new] = judge.verdicts(["quiet", "new"], lenient, T0)
    assert new.passed and new.score == 45.0  # 100 x (1 - 0.55)
    reservations.place("p2", Placement("new", 0.2, T0 - 1, POD_WATCH))  # 0.75 > 0.6
    assert [v.reason for v in judge.verdicts(["quiet", "new"], lenient, T0)] == ["ok", "no_data"]
    [alone] = judge.verdicts(["new"], lenient, T0)
    assert alone.passed and alone.reason == "unknown" and alone.score == 25.0
    assert judge.verdicts(["new"], lenient, T0 + 61)[0].score == 50.0  # forgotten
