"""The verdict tables must always answer exactly what `decide` answers, however the store and
the clock move."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from extender.config import VerdictConfig
from extender.judge import Judge
from extender.reports import ReportStore
from extender.verdict import NodeFacts, Verdict, decide, pod_facts
from reporter.schema import entry_time
from tests.extender.conftest import cluster_report, entry, per_node_reports

NAMES = ["a", "b"]  # few names: the interesting histories repeat on the same node
T0 = 1_800_000_000.0

operation = st.one_of(
    st.tuples(
        st.just("set"),
        st.sampled_from(NAMES),
        st.sampled_from([None, 0.0, 0.5, 0.9]),  # level
        st.floats(0, 60),  # sampled this long before the clock
        st.booleans(),  # schedulable
        st.booleans(),  # kata ready
        st.booleans(),  # live
    ),
    st.tuples(st.just("remove"), st.sampled_from(NAMES)),
    st.tuples(st.just("tick"), st.floats(0, 40)),
    st.tuples(st.just("beat"), st.floats(0, 60)),  # a heartbeat this long before the clock
    st.tuples(st.just("ask"), st.lists(st.sampled_from([*NAMES, "x"]), min_size=1, max_size=3)),
)


@settings(max_examples=300, deadline=None)
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
            assert judge.names(names, pod, now) == [expected(n) for n in names]


def test_a_new_sample_time_alone_keeps_the_cached_verdict_and_extends_it():
    config = VerdictConfig(stale_after=30)
    store = ReportStore()
    judge = Judge(store, config)
    pod = pod_facts(None, config)
    store.replace_all(per_node_reports({"a": entry(0.5, now=T0)}))
    first = judge.names(["a"], pod, T0 + 1)[0]
    store.replace_all(per_node_reports({"a": entry(0.5, now=T0 + 20)}))
    assert judge.names(["a"], pod, T0 + 40)[0] is first  # same object: no new decision
    assert judge.names(["a"], pod, T0 + 51)[0].reason == "stale"
    store.replace_all(per_node_reports({"a": entry(0.5, now=T0 + 60)}))
    assert judge.names(["a"], pod, T0 + 61)[0].reason == "ok"  # fresh again


def test_live_entries_follow_the_heartbeat():
    config = VerdictConfig(stale_after=30)
    store = ReportStore()
    judge = Judge(store, config)
    pod = pod_facts(None, config)
    live = {"a": entry(0.5, now=T0, live=True)}
    store.replace_all([cluster_report(live, heartbeat=T0)])
    assert judge.names(["a"], pod, T0 + 20)[0].reason == "ok"
    assert judge.names(["a"], pod, T0 + 40)[0].reason == "stale"  # no newer heartbeat
    store.upsert(cluster_report(live, heartbeat=T0 + 35))  # the entry itself is unchanged
    assert judge.names(["a"], pod, T0 + 40)[0].reason == "ok"
    assert judge.names(["a"], pod, T0 + 66)[0].reason == "stale"
