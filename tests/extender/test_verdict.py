"""The verdict function on its own: every rule of DESIGN §5, with both schedulers' scales."""

from __future__ import annotations

import math
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from extender.config import VerdictConfig
from extender.reports import KnownNode
from extender.verdict import NodeFacts, Reason, decide, pod_facts
from reporter.schema import Violation, entry_time, parse_time
from tests.extender.conftest import entry

NOW = 1_800_000_000.0


def known(**kwargs) -> KnownNode:
    e = entry(now=NOW, **kwargs)
    return KnownNode(e, parse_time(e.sample_time))


def judge(k: KnownNode | None, *, runtime_class=None, label=None, heartbeat=-math.inf, **config):
    cfg = VerdictConfig(**config)
    pod, node = pod_facts(runtime_class, cfg), NodeFacts("n1", label)
    if k is None:
        return decide(None, -math.inf, pod, node, cfg, NOW)
    return decide(k.entry, k.held_until(heartbeat), pod, node, cfg, NOW)


@pytest.mark.parametrize(
    ("level", "volcano", "kube"),
    [
        (0.0, 100.0, 10),
        (0.3, 70.0, 7),
        (0.25, 75.0, 8),
        (0.95, 5.0, 1),
        (0.96, 4.0, 0),
        (1.0, 0.0, 0),
    ],
)
def test_score_is_100_times_one_minus_level(level, volcano, kube):
    v = judge(known(level=level))
    assert v.passed and v.reason == Reason.OK and v.message == ""
    assert v.score == pytest.approx(volcano)
    assert v.kube_score == kube and isinstance(v.kube_score, int)


def test_out_of_range_levels_are_clamped():
    assert judge(known(level=1.7)).score == 0.0
    assert judge(known(level=-0.5)).score == 100.0


def test_unknown_node_passes_with_the_neutral_score():
    v = judge(None)
    assert v.passed and v.reason == Reason.UNKNOWN
    assert (v.score, v.kube_score) == (50.0, 5)
    assert judge(None, neutral_score=30).kube_score == 3


def test_stale_entry_passes_neutral_even_when_it_said_unschedulable():
    v = judge(known(level=0.9, age=31, schedulable=False))
    assert v.passed and v.reason == Reason.STALE and v.score == 50.0
    assert judge(known(level=0.9, age=29)).reason == Reason.OK
    assert judge(known(level=0.9, age=31), stale_after=60).reason == Reason.OK


def test_fail_closed_rejects_missing_and_stale_data():
    v = judge(None, fail_closed=True)
    assert not v.passed and v.reason == Reason.UNKNOWN and "fail-closed" in v.message
    assert v.unresolvable and v.volcano_code == 3
    v = judge(known(age=100), fail_closed=True, reject_code=2)
    assert not v.passed and v.reason == Reason.STALE and v.volcano_code == 2
    assert "older than 30s" in v.message


def test_unparseable_sample_time_counts_as_stale():
    e = entry(now=NOW)
    e.sample_time = "yesterday"
    v = judge(KnownNode(e, parse_time(e.sample_time)))
    assert v.reason == Reason.STALE and v.passed


def test_live_entries_hold_until_the_heartbeat():
    old_live, old = known(level=0.3, age=600, live=True), known(level=0.3, age=600)
    assert judge(old_live, heartbeat=NOW - 2).reason == Reason.OK  # re-checked 2 s ago
    assert judge(old_live, heartbeat=NOW - 40).reason == Reason.STALE  # the reporter stopped
    assert judge(old_live).reason == Reason.STALE  # no heartbeat at all
    assert judge(old, heartbeat=NOW - 2).reason == Reason.STALE  # not live: its own time


@given(
    age=st.floats(-10, 100),
    beat=st.one_of(st.just(-math.inf), st.floats(-10, 100)),
    live=st.booleans(),
)
def test_held_until_is_the_reporters_entry_time(age, beat, live):
    k = known(age=age, live=live)
    heartbeat = NOW - beat
    assert k.held_until(heartbeat) == entry_time(k.entry, heartbeat)


def test_hard_constraint_names_constraint_and_value():
    k = known(
        level=0.1,
        schedulable=False,
        violations=[Violation("psi_memory_full", 0.0312, 0.0)],
        reasons=["psi_memory_full"],
    )
    v = judge(k)
    assert not v.passed and v.reason == Reason.HARD_CONSTRAINT
    assert v.message == "mco: node n1 violates hard constraint psi_memory_full=0.0312 (limit 0)"
    assert v.volcano_code == 3 and v.unresolvable and v.score == 0.0
    v2 = judge(k, reject_code=2)
    assert v2.volcano_code == 2 and not v2.unresolvable


def test_a_violation_held_under_its_limit_says_it_is_held():
    k = known(
        level=0.1,
        schedulable=False,
        violations=[Violation("psi_io_some", 0.31, 0.6), Violation("psi_memory_full", 0.02, 0.005)],
        reasons=["psi_io_some", "psi_memory_full"],
    )
    assert judge(k).message == (
        "mco: node n1 violates hard constraint psi_io_some=0.31 (limit 0.6; held until it stays "
        "under for clearAfter); psi_memory_full=0.02 (limit 0.005)"
    )


def test_unschedulable_without_violations_still_explains_itself():
    v = judge(known(schedulable=False, reasons=["psi_io_some"]))
    assert (
        v.message == "mco: node n1 is marked unschedulable by its interference report (psi_io_some)"
    )


def test_no_level_is_neutral_but_fresh():
    v = judge(known(level=None))
    assert v.passed and v.reason == Reason.NO_LEVEL and v.kube_score == 5


@pytest.mark.parametrize(
    ("runtime_class", "globs", "wants"),
    [
        ("kata-qemu", ("kata-*",), True),
        ("kata-clh", ("kata-*",), True),
        ("kata", ("kata-*",), False),
        ("runc", ("kata-*",), False),
        (None, ("kata-*",), False),
        ("", ("kata-*",), False),
        ("secure-vm", ("kata-*", "secure-*"), True),
        ("KATA-QEMU", ("kata-*",), False),  # runtime class names are case-sensitive
        ("gvisor", ("*",), True),
    ],
)
def test_kata_glob(runtime_class, globs, wants):
    assert pod_facts(runtime_class, VerdictConfig(kata_globs=globs)).wants_kata is wants


def test_kata_pod_only_on_kata_ready_nodes():
    ready, not_ready = known(kata=True), known(kata=False)
    assert judge(ready, runtime_class="kata-qemu").passed
    v = judge(not_ready, runtime_class="kata-qemu")
    assert not v.passed and v.reason == Reason.KATA_NOT_READY and v.volcano_code == 3
    assert "runtimeClassName kata-qemu" in v.message and "n1" in v.message
    assert judge(not_ready, runtime_class="runc").passed  # other pods don't care


def test_kata_label_from_the_request_counts():
    not_ready = known(kata=False)
    assert judge(not_ready, runtime_class="kata-qemu", label=True).passed
    assert not judge(None, runtime_class="kata-qemu", label=False).passed
    # Unknown node and no label: no evidence of Kata, rejected even when failing open.
    for fail_closed in (False, True):
        v = judge(None, runtime_class="kata-qemu", fail_closed=fail_closed)
        assert not v.passed and v.reason == Reason.KATA_NOT_READY and v.unresolvable
        assert "not known to be Kata-ready" in v.message


def test_kata_readiness_from_a_stale_report_still_rejects():
    v = judge(known(kata=False, age=600), runtime_class="kata-qemu")
    assert not v.passed and v.reason == Reason.KATA_NOT_READY


@given(
    level=st.one_of(st.none(), st.floats(-1, 2, allow_nan=False)),
    age=st.floats(-5, 120),
    schedulable=st.booleans(),
    kata=st.booleans(),
    label=st.sampled_from([None, True, False]),
    runtime_class=st.sampled_from([None, "runc", "kata-qemu"]),
    fail_closed=st.booleans(),
    known_node=st.booleans(),
)
def test_verdict_invariants(
    level, age, schedulable, kata, label, runtime_class, fail_closed, known_node
):
    k = known(level=level, age=age, schedulable=schedulable, kata=kata) if known_node else None
    v = judge(k, runtime_class=runtime_class, label=label, fail_closed=fail_closed)
    assert 0 <= v.score <= 100 and 0 <= v.kube_score <= 10
    assert v.kube_score == min(10, int(v.score / 10 + 0.5))
    if v.passed:  # a passing verdict explains itself only when it is neutral
        assert (v.message == "") == (v.reason == Reason.OK)
    else:
        assert v.score == 0 and v.message.startswith("mco: ") and v.volcano_code in (2, 3)
    assert (v.volcano_code == 0) == v.passed
    fresh = known_node and age <= 30
    if fresh and not schedulable and not (runtime_class == "kata-qemu" and not (kata or label)):
        assert v.reason == Reason.HARD_CONSTRAINT
    if not fail_closed and runtime_class != "kata-qemu" and not (fresh and not schedulable):
        assert v.passed  # fail-open: only hard constraints and Kata ever reject


def test_decide_is_pure():
    k = known(level=0.4)
    before = time.time()
    assert judge(k) == judge(k)
    assert k.entry.level == 0.4 and time.time() >= before


@pytest.mark.parametrize("live", [False, True])
@pytest.mark.parametrize("ahead", [61.0, 3600.0, parse_time("9999-12-31T23:59:59Z") - NOW])
def test_data_dated_in_the_future_is_stale_and_says_so(ahead, live):
    k = known(level=0.1, age=-ahead, live=live)
    v = judge(k, heartbeat=NOW)
    assert v.passed and v.reason == Reason.STALE and v.score == 50.0
    assert "dated in the future" in v.message and "60s" in v.message
    closed = judge(k, heartbeat=NOW, fail_closed=True)
    assert not closed.passed and "dated in the future" in closed.message


def test_a_little_clock_skew_is_allowed():
    for ahead in (1.0, 30.0, 59.0):
        assert judge(known(level=0.1, age=-ahead)).reason == Reason.OK
    assert judge(known(level=0.1, age=-10.0), clock_skew=5.0).reason == Reason.STALE


def test_a_heartbeat_in_the_future_makes_live_entries_stale():
    live = known(level=0.1, age=5, live=True)
    assert judge(live, heartbeat=NOW).reason == Reason.OK
    for beat in (NOW + 3600, parse_time("9999-01-01T00:00:00Z")):
        v = judge(live, heartbeat=beat)
        assert v.reason == Reason.STALE and "dated in the future" in v.message
    assert judge(known(level=0.1, age=5), heartbeat=NOW + 3600).reason == Reason.OK  # not live
