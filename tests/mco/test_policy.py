"""Label selectors match as the API server's do, and the first matching policy applies."""

from __future__ import annotations

import msgspec
import pytest

from mco.labelselector import LabelSelector, Requirement, matches, parse_selector
from mco.policy import DEFAULT_POLICIES, NO_POLICY, Policy, parse_policies, policy_for, to_spec

LABELS = {"tier": "web", "team": "ads", "example.com/canary": ""}


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        (None, True),
        (LabelSelector(), True),  # empty: every pod, as in Kubernetes
        (LabelSelector(match_labels={"tier": "web"}), True),
        (LabelSelector(match_labels={"tier": "web", "team": "search"}), False),
        (LabelSelector(match_labels={"absent": ""}), False),
        (LabelSelector(match_labels={"example.com/canary": ""}), True),
        (LabelSelector(match_expressions=[Requirement("tier", "In", ["db", "web"])]), True),
        (LabelSelector(match_expressions=[Requirement("tier", "In", ["db"])]), False),
        (LabelSelector(match_expressions=[Requirement("absent", "In", ["x"])]), False),
        (LabelSelector(match_expressions=[Requirement("tier", "NotIn", ["db"])]), True),
        (LabelSelector(match_expressions=[Requirement("tier", "NotIn", ["web"])]), False),
        (LabelSelector(match_expressions=[Requirement("absent", "NotIn", ["x"])]), True),
        (LabelSelector(match_expressions=[Requirement("team", "Exists")]), True),
        (LabelSelector(match_expressions=[Requirement("absent", "Exists")]), False),
        (LabelSelector(match_expressions=[Requirement("absent", "DoesNotExist")]), True),
        (LabelSelector(match_expressions=[Requirement("team", "DoesNotExist")]), False),
        (
            LabelSelector(
                match_labels={"tier": "web"},
                match_expressions=[Requirement("team", "Exists"), Requirement("x", "Exists")],
            ),
            False,  # every requirement must hold
        ),
    ],
)
def test_matches(selector: LabelSelector | None, expected: bool) -> None:
    assert matches(selector, LABELS) is expected


def test_the_first_matching_policy_applies_and_none_means_today() -> None:
    batch = {"mco.io/workload-class": "batch"}
    assert policy_for(DEFAULT_POLICIES, batch).name == "batch"
    assert policy_for(DEFAULT_POLICIES, {}).name == "default"
    assert policy_for(DEFAULT_POLICIES[:3], {}) is NO_POLICY
    first = Policy("first", LabelSelector(match_expressions=[Requirement("x", "DoesNotExist")]))
    assert policy_for([first, *DEFAULT_POLICIES], batch) is first
    # NO_POLICY is today's behaviour: no limit, hard constraints enforced, weight 1.
    assert (NO_POLICY.max_level, NO_POLICY.hard_constraints, NO_POLICY.score_weight) == (
        None,
        "Enforce",
        1.0,
    )
    catch_all = DEFAULT_POLICIES[-1]
    assert (catch_all.pod_selector, catch_all.max_level, catch_all.hard_constraints) == (
        None,
        None,
        "Enforce",
    )
    assert catch_all.score_weight == 1.0


def test_policies_round_trip_through_the_spec_and_json() -> None:
    problems: list[str] = []
    assert parse_policies(to_spec(DEFAULT_POLICIES), "p", problems) == DEFAULT_POLICIES
    assert problems == []
    wire = msgspec.json.encode(list(DEFAULT_POLICIES))
    assert tuple(msgspec.json.decode(wire, type=list[Policy])) == DEFAULT_POLICIES


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ({"matchLabels": {"a b": "x"}}, "s.matchLabels['a b']: must be a label key"),
        ({"matchLabels": {"a": "x y"}}, "s.matchLabels['a']: must be a label value"),
        ({"matchLabels": ["a"]}, "s.matchLabels: expected a mapping"),
        ({"matchExpressions": [{"key": "a", "operator": "Is"}]}, "operator: must be one of In"),
        ({"matchExpressions": [{"key": "a", "operator": "In"}]}, "In needs at least one value"),
        (
            {"matchExpressions": [{"key": "a", "operator": "DoesNotExist", "values": ["x"]}]},
            "operator DoesNotExist takes no values",
        ),
        ({"matchFields": {}}, "s.matchFields: unknown field"),
        ("tier=web", "s: expected a label selector"),
    ],
)
def test_bad_selectors_are_refused_with_the_path(raw: object, problem: str) -> None:
    problems: list[str] = []
    assert parse_selector(raw, "s", problems) is None
    assert any(problem in p for p in problems), problems
