"""Workload-class policies (DetectionRuleConfig ``spec.policies``): how MCO treats a kind of pod.

One type crosses three parts: rulegen checks the DetectionRuleConfig's list, the reporter copies
the accepted list into the report's ``status.config``, the extender applies the first policy
whose ``podSelector`` matches a pod (``policy_for``). Kata placement is no policy: it always
applies. docs/user-guide.md ("Policies for online and batch pods") explains the shipped values.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Final, Literal, get_args

import msgspec

from mco.labelselector import LabelSelector, matches, parse_selector

HardConstraints = Literal["Enforce", "Ignore"]
HARD_CONSTRAINTS: Final[tuple[str, ...]] = get_args(HardConstraints)
WORKLOAD_CLASS_LABEL: Final = "mco.io/workload-class"
MAX_POLICIES: Final = 16
MAX_NAME: Final = 63
NAME_PATTERN: Final = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"  # a DNS label, as Kubernetes names go
MAX_SCORE_WEIGHT: Final = 100.0
# What one pod placed on a node is expected to add to its level until the node's data shows it
# (extender reservation), when a policy does not say.
DEFAULT_RESERVATION: Final = 0.05
# What one latency-sensitive pod on a node takes off its score for batch and best-effort pods,
# over 100 (docs/benchmarks.md, "placement", for how it was chosen).
AVOID_PER_POD: Final = 0.05
# For batch pods, a node with a triggered detection counts as at least this level (its signal
# just past warn barely moves the level), and each batch pod placed reserves this much: the
# second keeps a burst from crowding onto the nodes the first leaves (docs/benchmarks.md,
# "placement", for how both were chosen).
BATCH_TRIGGERED_LEVEL: Final = 0.3
BATCH_RESERVATION: Final = 0.2
_NAME: Final = re.compile(NAME_PATTERN)

Fraction = Annotated[float, msgspec.Meta(ge=0, le=1)]


class Policy(msgspec.Struct, rename="camel", omit_defaults=True):
    """One entry of ``spec.policies``; absent fields take the defaults below."""

    name: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_NAME, pattern=NAME_PATTERN)]
    pod_selector: LabelSelector | None = None  # None: every pod
    max_level: Fraction | None = None  # filter nodes whose level + reservation is above it
    hard_constraints: HardConstraints = "Enforce"
    score_weight: Annotated[float, msgspec.Meta(ge=0, le=MAX_SCORE_WEIGHT)] = 1.0
    reservation_per_pod: Fraction = DEFAULT_RESERVATION
    # Keep these pods away from pods of other policies: each pod of ``avoid_policies`` running
    # on a node takes ``100 x avoid_per_pod`` off that node's score for these pods, whatever
    # their scoreWeight (never in maxLevel: it steers, it does not filter).
    avoid_policies: tuple[str, ...] = ()
    avoid_per_pod: Fraction = 0.0
    # A node where a detection is triggered counts, for these pods, as if its level were at
    # least this (for maxLevel and the score): a signal just past warn has index 0 and barely
    # moves the level, yet the detection says the node interferes.
    triggered_level: Fraction = 0.0
    # Dynamic segregation. ``avoid_filter``: nodes running a pod of ``avoid_policies`` are
    # filtered for these pods while nodes without one remain in the call (where none remains,
    # the least interfered pass: extender.fallback), so online pods keep a pool of nodes to
    # themselves that follows where they run, without labels on nodes or starving these pods.
    # ``gather_per_pod``: each pod of this same policy on a node adds ``100 x gather_per_pod``
    # to the node's score for these pods (at most 100): online pods gather on the nodes that
    # already hold online pods, so the pool stays small and batch keeps the other nodes.
    avoid_filter: bool = False
    gather_per_pod: Fraction = 0.0


def _class(value: str) -> LabelSelector:
    return LabelSelector(match_labels={WORKLOAD_CLASS_LABEL: value})


# The shipped list, first match wins; the last one, without a selector, is today's behaviour.
# Dynamic segregation is on (docs/benchmarks.md, "placement", seed 13 of the tuning seeds):
# batch, best-effort and unlabelled pods are filtered off nodes running latency-sensitive pods
# while other nodes remain (avoidFilter, with the least-interfered fallback), and online pods
# gather where online pods run (GATHER_PER_POD).
GATHER_PER_POD: Final = 0.1
DEFAULT_POLICIES: Final[tuple[Policy, ...]] = (
    Policy("latency-sensitive", _class("latency-sensitive"), max_level=0.3,
           reservation_per_pod=0.02, gather_per_pod=GATHER_PER_POD),
    Policy("batch", _class("batch"), hard_constraints="Ignore", score_weight=0.5,
           reservation_per_pod=BATCH_RESERVATION, avoid_policies=("latency-sensitive",),
           avoid_per_pod=AVOID_PER_POD, triggered_level=BATCH_TRIGGERED_LEVEL,
           avoid_filter=True),
    Policy("best-effort", _class("best-effort"), score_weight=0.0, reservation_per_pod=0.02,
           avoid_policies=("latency-sensitive",), avoid_per_pod=AVOID_PER_POD,
           avoid_filter=True),
    Policy("default", avoid_policies=("latency-sensitive",), avoid_per_pod=AVOID_PER_POD,
           avoid_filter=True),
)  # fmt: skip

# What a pod gets when no policy of the list matches it (a list without a catch-all): today's
# behaviour. Its name cannot be a policy's name (names are DNS labels), so it keys apart.
NO_POLICY: Final = Policy("(none)")  # msgspec checks the name pattern on decode only


def policy_for(policies: Sequence[Policy], labels: Mapping[str, str]) -> Policy:
    """The first policy whose selector matches ``labels``; ``NO_POLICY`` when none does."""
    for policy in policies:
        if matches(policy.pod_selector, labels):
            return policy
    return NO_POLICY


def to_spec(policies: Sequence[Policy]) -> list[dict[str, Any]]:
    """The list as the CR spells it, every field written (the canonical form rulegen hashes)."""
    out = []
    for p in policies:
        entry: dict[str, Any] = {"name": p.name}
        if p.pod_selector is not None:
            entry["podSelector"] = msgspec.to_builtins(p.pod_selector)
        if p.max_level is not None:
            entry["maxLevel"] = p.max_level
        entry["hardConstraints"] = p.hard_constraints
        entry["scoreWeight"] = p.score_weight
        entry["reservationPerPod"] = p.reservation_per_pod
        entry["avoidPolicies"] = list(p.avoid_policies)
        entry["avoidPerPod"] = p.avoid_per_pod
        entry["triggeredLevel"] = p.triggered_level
        entry["avoidFilter"] = p.avoid_filter
        entry["gatherPerPod"] = p.gather_per_pod
        out.append(entry)
    return out


_FIELDS: Final = ("name", "podSelector", "maxLevel", "hardConstraints", "scoreWeight",
                  "reservationPerPod", "avoidPolicies", "avoidPerPod",
                  "triggeredLevel", "avoidFilter", "gatherPerPod")  # fmt: skip


def _number(raw: Mapping[str, Any], key: str, path: str, top: float, problems: list[str]) -> None:
    value = raw.get(key)
    if key not in raw or (value is None and key == "maxLevel"):
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        problems.append(f"{path}.{key}: expected a number, got {str(value)[:80]!r}")
    elif not (math.isfinite(float(value)) and 0 <= value <= top):
        problems.append(f"{path}.{key}: must be within [0, {top:g}], got {float(value):g}")


def _avoid_names(raw: Mapping[str, Any], path: str, problems: list[str]) -> None:
    names = raw.get("avoidPolicies")
    if names is None:
        return
    if not isinstance(names, list) or len(names) > MAX_POLICIES:
        problems.append(f"{path}.avoidPolicies: expected a list of at most {MAX_POLICIES} "
                        "policy names")  # fmt: skip
        return
    for name in names:
        if not isinstance(name, str) or len(name) > MAX_NAME or not _NAME.match(name):
            problems.append(f"{path}.avoidPolicies: {str(name)[:80]!r} is not a policy name")


def check_policy_names(policies: Sequence[Policy]) -> None:
    """ValueError unless the names are unique and there are at most ``MAX_POLICIES``: readers
    key their tables by policy name, so two alike would judge one pod by the other's policy."""
    if len(policies) > MAX_POLICIES:
        raise ValueError(f"at most {MAX_POLICIES} policies, got {len(policies)}")
    names = [p.name for p in policies]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"policy names must be unique: {', '.join(twice)[:200]} used twice")


def parse_policies(raw: Any, path: str, problems: list[str]) -> tuple[Policy, ...]:
    """``raw`` (as read from YAML or JSON) as policies; each problem appended with its path,
    the same rules as the CRD's schema and CEL (``rulegen.crd``)."""
    if not isinstance(raw, list):
        problems.append(f"{path}: expected a list of policies")
        return ()
    if len(raw) > MAX_POLICIES:
        problems.append(f"{path}: at most {MAX_POLICIES} policies, got {len(raw)}")
        return ()
    before = len(problems)
    seen: set[str] = set()
    for i, item in enumerate(raw):
        where = f"{path}[{i}]"
        if not isinstance(item, Mapping):
            problems.append(f"{where}: expected a policy (a mapping with a name)")
            continue
        for key in item:
            if key not in _FIELDS:
                problems.append(f"{where}.{str(key)[:80]}: unknown field (known: "
                                f"{', '.join(_FIELDS)})")  # fmt: skip
        name = item.get("name")
        if not isinstance(name, str) or len(name) > MAX_NAME or not _NAME.match(name):
            problems.append(
                f"{where}.name: required, a DNS label (a-z 0-9 -, at most {MAX_NAME} characters)"
            )
        elif name in seen:
            problems.append(f"{where}.name: {name!r} is used by an earlier policy")
        else:
            seen.add(name)
        if item.get("podSelector") is not None:
            parse_selector(item["podSelector"], f"{where}.podSelector", problems)
        _number(item, "maxLevel", where, 1.0, problems)
        _number(item, "scoreWeight", where, MAX_SCORE_WEIGHT, problems)
        _number(item, "reservationPerPod", where, 1.0, problems)
        _number(item, "avoidPerPod", where, 1.0, problems)
        _number(item, "triggeredLevel", where, 1.0, problems)
        _number(item, "gatherPerPod", where, 1.0, problems)
        if "avoidFilter" in item and not isinstance(item["avoidFilter"], bool):
            problems.append(f"{where}.avoidFilter: expected true or false, got "
                            f"{str(item['avoidFilter'])[:80]!r}")  # fmt: skip
        _avoid_names(item, where, problems)
        mode = item.get("hardConstraints", "Enforce")
        if mode not in HARD_CONSTRAINTS:
            problems.append(
                f"{where}.hardConstraints: must be Enforce or Ignore, got {str(mode)[:80]!r}"
            )
    for i, item in enumerate(raw):
        names = item.get("avoidPolicies") if isinstance(item, Mapping) else None
        for name in names if isinstance(names, list) else ():
            if isinstance(name, str) and _NAME.match(name) and name not in seen:
                problems.append(f"{path}[{i}].avoidPolicies: no policy is named {name!r}")
    if len(problems) > before:
        return ()
    cleaned = [{k: v for k, v in item.items() if v is not None} for item in raw]
    return tuple(msgspec.convert(cleaned, list[Policy]))
