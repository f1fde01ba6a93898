"""The one decision both schedulers get: may this pod go to this node, and how good is the node.

`decide` is a pure function of the node's report entry (or None) with the time up to which that
entry is known to hold, facts about the pod and the node taken from the request, what the node's
recent history adds (`NodeTerms`), the configuration and the current time. `extender.judge`
applies it to the nodes of one call; the wire formats (`extender.volcano`, `extender.kube`) only
translate its result.
"""

from __future__ import annotations

from typing import Final, NamedTuple

from extender.config import UNSCHEDULABLE_AND_UNRESOLVABLE, VerdictConfig
from mco.policy import NO_POLICY, Policy
from reporter.schema import NodeEntry, Violation


class PodFacts(NamedTuple):
    runtime_class: str | None
    wants_kata: bool
    policy: Policy = NO_POLICY  # the pod's workload-class policy (extender.policy)
    workload: str = ""  # namespace/Kind/name of its controller (mco.workload): its profile


class NodeFacts(NamedTuple):
    name: str
    kata_label: bool | None = None  # the node's Kata label, when the request carried the node


class NodeTerms(NamedTuple):
    """What a node's recent history adds to its verdict, beyond its report entry: the per-node
    adjustments of `extender.judge`, each from its own source. A new per-node term (learned
    workload profiles, say) is a field here, read by `decide`, and a `TermSource` there."""

    reserved: float = 0.0  # level expected from pods placed since the data (extender.reservation)
    avoided: float = 0.0  # x 100 off the score for pods the policy keeps away from (residents)
    # Learned workload profiles (extender.profiles): the level the residents are expected to
    # cause this pod (a floor under the measured level), and the harm this pod is expected to
    # cause the residents (x 100 off the score, like avoided).
    predicted: float = 0.0
    inflicted: float = 0.0
    kept_off: int = 0  # pods there the policy keeps away from, when it filters (avoidFilter)
    gathered: float = 0.0  # x 100 onto the score for pods of the same policy (gatherPerPod)


NO_TERMS: Final = NodeTerms()


class Reason:
    """Why a verdict came out as it did; also the ``reason`` label of the verdict metric.

    Plain strings, not an Enum: batches of thousands of verdicts are tallied by reason, and
    str hashes are cached where Enum hashes run Python code.
    """

    OK: Final = "ok"  # fresh data, scored by its interference level
    NO_LEVEL: Final = "no_level"  # fresh entry but no detection had data: neutral score
    UNKNOWN: Final = "unknown"  # no entry for the node
    STALE: Final = "stale"  # entry older than staleAfter
    KATA_NOT_READY: Final = "kata_not_ready"
    HARD_CONSTRAINT: Final = "hard_constraint"
    MAX_LEVEL: Final = "max_level"  # level + reservation above the pod's policy's maxLevel
    # No fresh data, under a policy with maxLevel, while other nodes of the same call have data
    # (extender.judge: "no data is no proof").
    NO_DATA: Final = "no_data"
    # Rejected by one of the policy's limits (maxLevel, hard constraints, no data), yet passed:
    # no node of the call is within them, and this one is among the least interfered
    # (extender.fallback: a limit never leaves a pod pending while nodes fit it).
    LEAST_INTERFERED: Final = "least_interfered"
    # A pod of the policy's avoidPolicies runs there, and the policy filters (avoidFilter).
    AVOIDED: Final = "avoided"
    ALL: Final = (
        OK, NO_LEVEL, UNKNOWN, STALE, KATA_NOT_READY, HARD_CONSTRAINT, MAX_LEVEL, NO_DATA,
        LEAST_INTERFERED, AVOIDED,
    )  # fmt: skip


class Verdict(NamedTuple):
    passed: bool
    reason: str  # one of Reason
    message: str  # human-readable; shown in pod events when the node is rejected
    score: float  # 0-100 (Volcano scale before its weight)
    kube_score: int  # kube-scheduler's 0-10 integers (it multiplies by weight x 10 itself)
    unresolvable: bool  # a rejection that evicting pods cannot fix
    # Passed without fresh data although the policy has a maxLevel that the neutral level (plus
    # the node's reservation) exceeds: the call rejects it where other nodes have data.
    unproven: bool = False
    # The level the node counts as for the pod (measured or neutral, plus reservation, at least
    # triggeredLevel where triggered): what ranks rejected nodes for the fallback.
    level: float = 0.0

    @property
    def volcano_code(self) -> int:
        """0 when passed; otherwise 2 (preemption may help) or 3 (it cannot)."""
        if self.passed:
            return 0
        return UNSCHEDULABLE_AND_UNRESOLVABLE if self.unresolvable else 2


def _verdict(
    passed: bool,
    reason: str,
    message: str,
    score: float,
    unresolvable: bool,
    unproven: bool = False,
    level: float = 0.0,
) -> Verdict:
    return Verdict(
        passed,
        reason,
        message,
        score,
        min(10, max(0, int(score / 10 + 0.5))),
        unresolvable,
        unproven,
        level,
    )


def pod_facts(
    runtime_class: str | None, config: VerdictConfig, policy: Policy = NO_POLICY
) -> PodFacts:
    wants_kata = bool(runtime_class) and config.kata_pattern.match(runtime_class or "") is not None
    return PodFacts(runtime_class, wants_kata, policy)


def weighted_score(level: float, weight: float, neutral: float) -> float:
    """The score of ``level`` for a policy's ``scoreWeight``: the report's ``100 x (1 - level)``
    moved toward (weight < 1) or away from (weight > 1) the neutral score, within 0-100.
    Weight 1 is the report's score; weight 0 gives every node the neutral score, the same as a
    node without data, so interference does not count at all for such pods."""
    score = 100.0 * (1.0 - level)
    if weight != 1.0:
        score = min(100.0, max(0.0, neutral + weight * (score - neutral)))
    # Rounded: 100 x (1 - 0.9) is 9.999999999999998 in floating point.
    return round(score, 6)


def neutral_level(config: VerdictConfig) -> float:
    """The level whose score is the neutral score: what a node without data counts as."""
    return 1.0 - config.neutral_score / 100.0


def _missing(
    reason: str, message: str, policy: Policy, config: VerdictConfig, terms: NodeTerms
) -> Verdict:
    """No fresh data. Fail-closed: rejected. Fail-open: passed at the neutral level plus the
    node's reservation, and ``unproven`` when that is above the policy's maxLevel."""
    level = max(neutral_level(config), terms.predicted) + terms.reserved
    if config.fail_closed:
        unresolvable = config.reject_code == UNSCHEDULABLE_AND_UNRESOLVABLE
        return _verdict(False, reason, f"{message} (fail-closed)", 0.0, unresolvable, level=level)
    unproven = policy.max_level is not None and level > policy.max_level
    if terms == NO_TERMS:
        message = f"{message}: neutral score"
        return _verdict(True, reason, message, config.neutral_score, False, unproven, level)
    score = weighted_score(min(1.0, level), policy.score_weight, config.neutral_score)
    said = [f"{message}: neutral score"]
    if terms.reserved > 0:
        said.append(f"- reservation {terms.reserved:.4g} (pods placed on it recently)")
    if terms.kept_off > 0:
        return _avoided(policy, config, terms, level)
    if terms.predicted > neutral_level(config):
        said.append(f"raised to {terms.predicted:.4g} predicted from the residents' profiles")
    if terms.avoided > 0:
        score = round(max(0.0, score - 100.0 * terms.avoided), 6)
        said.append(f"- {100 * terms.avoided:.4g} for pods of "
                    f"{', '.join(policy.avoid_policies)} on the node (avoidPolicies)")  # fmt: skip
    if terms.inflicted > 0:
        score = round(max(0.0, score - 100.0 * terms.inflicted), 6)
        said.append(f"- {100 * terms.inflicted:.4g} for the harm predicted to the residents")
    if terms.gathered > 0:
        score = round(min(100.0, score + 100.0 * terms.gathered), 6)
        said.append(f"+ {100 * terms.gathered:.4g} for pods of {policy.name} on the node "
                    "(gatherPerPod)")  # fmt: skip
    return _verdict(True, reason, " ".join(said), score, False, unproven, level)


def _avoided(policy: Policy, config: VerdictConfig, terms: NodeTerms, level: float) -> Verdict:
    """A node running pods the policy keeps off, under ``avoidFilter``: rejected, ranked for the
    fallback by its level plus what the pods there count (extender.fallback)."""
    unresolvable = config.reject_code == UNSCHEDULABLE_AND_UNRESOLVABLE
    message = (
        f"mco: {terms.kept_off} pod(s) of {', '.join(policy.avoid_policies)} run on the node, "
        f"which policy {policy.name} keeps its pods off while other nodes remain (avoidFilter)"
    )
    rank = min(1.0, level) + terms.avoided
    return _verdict(False, Reason.AVOIDED, message, 0.0, unresolvable, level=rank)


def no_data(policy: Policy, config: VerdictConfig) -> Verdict:
    """The rejection of a node without fresh data under ``policy``'s maxLevel where the call holds
    nodes with data (extender.judge)."""
    unresolvable = config.reject_code == UNSCHEDULABLE_AND_UNRESOLVABLE
    message = (
        f"mco: no data: no fresh interference data for the node, so the maxLevel "
        f"{policy.max_level:g} of policy {policy.name} is unproven there while other nodes "
        "have data"
    )
    return _verdict(False, Reason.NO_DATA, message, 0.0, unresolvable)


def _violation_part(v: Violation) -> str:
    """A value already back under its limit is the rules' hysteresis holding the node out until
    it stays under for clearAfter: said so, or the message reads as a contradiction."""
    held = "; held until it stays under for clearAfter" if v.value <= v.limit else ""
    return f"{v.constraint}={v.value:.4g} (limit {v.limit:.4g}{held})"


def _violation_text(name: str, entry: NodeEntry) -> str:
    if entry.violations:
        parts = [_violation_part(v) for v in entry.violations]
        return f"mco: node {name} violates hard constraint {'; '.join(parts)}"
    why = f" ({', '.join(entry.reasons)})" if entry.reasons else ""
    return f"mco: node {name} is marked unschedulable by its interference report{why}"


def is_stale(held_until: float, now: float, config: VerdictConfig) -> bool:
    """Whether data known to hold up to ``held_until`` counts as missing at ``now``: too old,
    or dated too far ahead to be believed (a clock or a writer gone wrong)."""
    return now - held_until > config.stale_after or held_until - now >= config.clock_skew


def decide(
    entry: NodeEntry | None,
    held_until: float,
    pod: PodFacts,
    node: NodeFacts,
    config: VerdictConfig,
    now: float,
    terms: NodeTerms = NO_TERMS,
) -> Verdict:
    """``held_until``: Unix time up to which ``entry``'s values are known to hold
    (``reporter.schema.entry_time``: the heartbeat for live entries, else the sample time).
    ``terms.reserved``: level expected from pods just placed on the node that its data cannot
    show yet; it counts toward the policy's ``maxLevel`` and the score. ``terms.avoided``: for
    the pods on the node that the pod's policy keeps away from (``avoidPolicies``),
    ``100 x avoided`` is taken off the score after the policy's scoreWeight (it protects those
    pods, whatever this pod's own weight), never below 0; it never filters. A node without
    fresh data counts at the neutral level plus its reservation (`_missing`)."""
    reserved, avoided = terms.reserved, terms.avoided
    if pod.wants_kata:
        # Ready when the report or the node's label says so, and only then: fail-open is about
        # interference data, but a Kata pod on a node without Kata cannot even start, so no
        # evidence (unknown node, names-only request) keeps it off as well.
        ready = node.kata_label or (entry is not None and entry.kata_ready)
        if not ready:
            # A node nothing is known about is named by the request, not the message: one
            # shared verdict serves every unknown name (extender.judge).
            known = entry is not None or node.kata_label is not None
            state = (
                f"node {node.name} is not Kata-ready"
                if known
                else "the node is not known to be Kata-ready (no report)"
            )
            return _verdict(
                False,
                Reason.KATA_NOT_READY,
                f"mco: runtimeClassName {pod.runtime_class} needs a Kata-ready node; {state}",
                0.0,
                True,
            )
    policy = pod.policy
    if entry is None:
        message = "mco: no interference report for the node"
        return _missing(Reason.UNKNOWN, message, policy, config, terms)
    if now - held_until > config.stale_after:
        message = (
            f"mco: interference data for node {node.name} is older than {config.stale_after:g}s"
        )
        return _missing(Reason.STALE, message, policy, config, terms)
    if held_until - now >= config.clock_skew:
        message = (
            f"mco: interference data for node {node.name} is dated in the future, "
            f"{config.clock_skew:g}s or more ahead of this clock"
        )
        return _missing(Reason.STALE, message, policy, config, terms)
    note = ""
    if not entry.schedulable:
        if policy.hard_constraints == "Enforce":
            unresolvable = config.reject_code == UNSCHEDULABLE_AND_UNRESOLVABLE
            base = neutral_level(config) if entry.level is None else entry.level
            return _verdict(
                False,
                Reason.HARD_CONSTRAINT,
                _violation_text(node.name, entry),
                0.0,
                unresolvable,
                level=min(1.0, max(0.0, base) + reserved),
            )
        note = f"hard constraints ignored by policy {policy.name}"
    if entry.level is None:
        if terms.kept_off > 0:
            return _avoided(policy, config, terms, neutral_level(config) + reserved)
        message = "mco: no detection had data: neutral score"
        return _verdict(True, Reason.NO_LEVEL, f"{message}; {note}" if note else message,
                        config.neutral_score, False,
                        level=neutral_level(config) + reserved)  # fmt: skip
    measured = min(1.0, max(0.0, entry.level))
    floor = ""
    if policy.triggered_level > measured:
        triggered = sorted(k for k, d in entry.detections.items() if d.triggered)
        if triggered:
            measured = policy.triggered_level
            floor = f" (triggered: {', '.join(triggered)}; triggeredLevel {measured:g})"
    if terms.predicted > measured:  # what the residents' profiles say they do to such pods
        measured = min(1.0, terms.predicted)
        floor += f" (predicted from the residents' profiles: {measured:.3g})"
    level = min(1.0, measured + reserved)
    if policy.max_level is not None and level > policy.max_level:
        unresolvable = config.reject_code == UNSCHEDULABLE_AND_UNRESOLVABLE
        plus = f" + {reserved:.3g} reserved" if reserved else ""
        return _verdict(
            False,
            Reason.MAX_LEVEL,
            f"mco: node {node.name} interference level {measured:.3g}{floor}{plus} is above "
            f"{policy.max_level:g}, the maxLevel of policy {policy.name}",
            0.0,
            unresolvable,
            level=level,
        )
    if terms.kept_off > 0:
        return _avoided(policy, config, terms, level)
    score = weighted_score(level, policy.score_weight, config.neutral_score)
    said = [note] if note else []
    if terms.gathered > 0:  # like avoided, not scaled by this pod's scoreWeight
        score = round(min(100.0, score + 100.0 * terms.gathered), 6)
        said.insert(0, f"score + {100 * terms.gathered:.4g} for pods of {policy.name} on the "
                       "node (gatherPerPod)")  # fmt: skip
    if avoided > 0:  # it protects other pods: not scaled by this pod's scoreWeight
        score = round(max(0.0, score - 100.0 * avoided), 6)
        kept_from = ", ".join(policy.avoid_policies)
        said.insert(0, f"score - {100 * avoided:.4g} for pods of {kept_from} on the node "
                       "(avoidPolicies)")  # fmt: skip
    if terms.inflicted > 0:  # it protects the residents, like avoided
        score = round(max(0.0, score - 100.0 * terms.inflicted), 6)
        said.insert(0, f"score - {100 * terms.inflicted:.4g} for the harm predicted to the "
                       "residents (profiles)")  # fmt: skip
    if reserved > 0:  # shown apart from the measured level
        said.insert(0, f"measured level {measured:.4g} + reservation {reserved:.4g} "
                       f"(pods placed since the data) = {level:.4g}")  # fmt: skip
    if floor:
        said.insert(0, f"level {measured:.4g}{floor}")
    message = f"mco: {'; '.join(said)}" if said else ""
    return _verdict(True, Reason.OK, message, score, False, level=level)
