"""``POST /v1/explain``: the long form of a verdict, node by node, for a person asking why.

The scheduler-facing messages stay short; this answer spells out what made each verdict: each
detection's index and whether it is triggered, each signal's value beside the ``warn`` and
``critical`` in force (the report's ``status.config``; the built-in defaults while the report
carries none, which the answer says), the weights and the level arithmetic, each hard
constraint's value and limit and whether it is held (violated in the report while the value
is back under its limit: the rules' hysteresis), the data's age and staleness, the paths taken
when data is missing (fail-open or fail-closed) or PSI is absent (fallback signals), the
reservation and policy that applied, and the Kata evidence. The verdicts themselves are the ones
a scheduler gets for a names-only request of the same nodes (``Judge.verdicts``, one pass over
all of them: whether a node without data is rejected depends on the others), so the two cannot
disagree.
"""

from __future__ import annotations

import math
import time
from typing import Annotated, Final

import msgspec

from extender.config import VerdictConfig
from extender.judge import Judge
from extender.profiles import ProfileTerm
from extender.reports import KnownNode
from extender.verdict import NodeTerms, PodFacts, Reason, Verdict, is_stale
from extender.wire import (
    MAX_NAME,
    UNDECODABLE,
    BadRequest,
    Body,
    Pod,
    decode_error,
    pod_key,
)
from mco.policy import Policy
from reporter.schema import (
    ConstraintConfig,
    DetectionConfig,
    NodeEntry,
    ThresholdConfig,
    format_time,
)
from reporter.thresholds import constraint_configs, detection_configs
from rulegen.model import DetectionRuleConfig

MAX_NODES: Final = 1000  # explained per request; a longer list is refused, "all" is cut
MAX_PLACED: Final = 16  # placements listed per node
MAX_PARTS: Final = 16  # resident workloads' profile parts listed per node

_DEFAULT = DetectionRuleConfig.default()
_DEFAULT_DETECTIONS: Final = detection_configs(_DEFAULT)
_DEFAULT_CONSTRAINTS: Final = constraint_configs(_DEFAULT)


class ExplainArgs(msgspec.Struct, forbid_unknown_fields=False):
    pod: Pod | None = None
    nodes: list[Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_NAME)]] | None = None


_args = msgspec.json.Decoder(ExplainArgs)


class SignalView(msgspec.Struct, rename="camel"):
    value: float | None  # the smoothed value in the report; None: absent (or --compact)
    warn: float
    critical: float
    index: float | None  # clamp((v - warn) / (critical - warn), 0, 1); lower-is-worse mirrored
    beyond_warn: bool  # the value is at or beyond warn (what triggers the detection)


class DetectionView(msgspec.Struct, rename="camel"):
    index: float | None  # the report's (max of its signals' indices); None: no data here
    triggered: bool
    weight: float
    counted: bool  # in the level: a positive weight and an index on this node
    judged_by: str  # "signals", or "fallback" while PSI is unavailable (memory pressure)
    signals: dict[str, SignalView]


class Term(msgspec.Struct, rename="camel"):
    detection: str
    weight: float
    index: float
    product: float


class LevelView(msgspec.Struct, rename="camel"):
    formula: str
    terms: list[Term]  # the counted detections
    weight_sum: float
    weighted_sum: float
    computed: float | None  # Σ w·index / Σ w, clamped to [0, 1], from the report's indices
    reported: float | None  # the level the report carries (what the verdict uses)
    reserved: float  # added for pods placed since the data (extender reservation)
    triggered_level: float | None  # the policy's floor, where a detection is triggered
    used: float | None  # min(1, max(0, reported, triggered_level, predicted) + reserved)
    avoided: float  # x 100 taken off the score, for pods on the node the policy keeps away from
    kept_off: int = 0  # those pods, where the policy filters them (avoidFilter)
    gathered: float = 0.0  # x 100 added to the score, for pods of its own policy (gatherPerPod)


class ScoreView(msgspec.Struct, rename="camel"):
    formula: str
    neutral: float
    policy_weight: float  # the policy's scoreWeight
    score: float  # 0-100, before Volcano's weight
    volcano_score: float  # what /volcano/prioritize answers
    kube_score: int  # what /scheduler/prioritize answers (0-10)


class ConstraintView(msgspec.Struct, rename="camel"):
    signal: str
    value: float | None  # the report's value now (None: absent)
    limit: float
    exceeded: bool  # value above limit now
    violated: bool  # the report marks the node unschedulable for it
    held: bool  # violated while the value is back under its limit (the rules' hysteresis)
    enforced: bool  # the pod's policy enforces hard constraints


class DataView(msgspec.Struct, rename="camel"):
    sample_time: str
    live: bool  # values hold up to the heartbeat
    heartbeat: str | None
    held_until: str | None  # what staleness is judged from
    age_seconds: float | None
    stale_after_seconds: float
    clock_skew_seconds: float
    stale: bool
    missing: list[str]  # series absent in the sample


class PathView(msgspec.Struct, rename="camel"):
    psi_fallback: bool  # memory pressure judged by the fallback signals (no PSI on the node)
    missing_data: str  # what a node without fresh data gets: fail-open or fail-closed
    taken: str  # the path this verdict took


class Placed(msgspec.Struct, rename="camel"):
    pod: str  # the placement's key (the pod's UID, or namespace/name)
    amount: float
    placed_at: str
    source: str  # volcano_verbs | volcano_tasks | pod_watch


class ReservationView(msgspec.Struct, rename="camel"):
    reserved: float  # level added to this node for pods placed since its data (capped at 1)
    per_pod: float  # what one pod of this policy would reserve once placed
    tracked: bool  # whether this extender tracks placements at all
    span_seconds: float | None  # how long after a placement the data can show it
    pods: list[Placed]  # the placements counted (at most MAX_PLACED, latest first)


class KataView(msgspec.Struct, rename="camel"):
    wanted: bool  # the pod's runtimeClassName matches the Kata globs
    runtime_class: str | None
    report_ready: bool | None  # the report's kataReady (None: no report for the node)
    node_label: bool | None  # the node's Kata label (None: not known to explain)
    ready: bool


class ProfilePart(msgspec.Struct, rename="camel"):
    workload: str  # a resident workload with a profile
    pods: int  # its pods on the node
    resource: str  # llc | io | memory
    role: str  # aggressor: it harms the pod; victim: the pod harms it
    value: float  # its confidence-weighted intensity (aggressor) or sensitivity (victim)
    product: float  # with the pod's own sensitivity or intensity on that resource


class ProfileView(msgspec.Struct, rename="camel"):
    workload: str  # the pod's (mco.workload); "" when the request does not say
    known: bool  # the report has a profile for it
    weight: float  # --profile-weight (0: off)
    predicted: float  # level floor: what the residents are expected to do to the pod
    inflicted: float  # x 100 off the score: what the pod is expected to do to them
    parts: list[ProfilePart]  # the resident workloads behind both


class Explanation(msgspec.Struct, rename="camel"):
    detections: dict[str, DetectionView]
    level: LevelView
    score: ScoreView
    hard_constraints: dict[str, ConstraintView]
    schedulable: bool  # the report's
    data: DataView
    path: PathView
    reservation: ReservationView
    kata: KataView
    reasons: list[str]  # the report's short reasons
    profile: ProfileView  # learned workload profiles (extender.profiles)


class NodeAnswer(msgspec.Struct, rename="camel"):
    name: str
    known: bool  # the report has an entry for the node; False: the "unknown" entry
    passed: bool
    reason: str
    message: str
    score: float
    volcano_code: int
    explanation: Explanation | None  # None for an unknown node


class PodView(msgspec.Struct, rename="camel"):
    pod: str  # namespace/name ("" when the body did not name it)
    runtime_class: str | None
    policy: Policy  # the first policy of the config in force whose podSelector matches


class ConfigView(msgspec.Struct, rename="camel"):
    source: str  # "flags" or "report"
    generation: int | None
    thresholds_source: str  # "report" (status.config) or "defaults" (built-in)
    stale_after_seconds: float
    neutral_score: float
    fail_closed: bool


class ExplainAnswer(msgspec.Struct, rename="camel"):
    generated_at: str
    ready: bool  # a report was loaded
    pod: PodView
    config: ConfigView
    nodes: list[NodeAnswer]
    truncated: bool = False  # more nodes are known than one answer explains


def decode(body: Body) -> ExplainArgs:
    try:
        args = _args.decode(body)
    except UNDECODABLE as exc:
        raise decode_error(exc, body) from None
    if args.pod is None:
        raise BadRequest('explain needs {"pod": <v1.Pod>, "nodes": [<names>] (optional)}')
    if args.nodes is not None and len(args.nodes) > MAX_NODES:
        raise BadRequest(f"at most {MAX_NODES} nodes per request, got {len(args.nodes)}")
    return args


def _signal(value: float | None, t: ThresholdConfig) -> SignalView:
    if value is None or not math.isfinite(value):
        return SignalView(None, t.warn, t.critical, None, False)
    span = t.critical - t.warn  # negative when lower is worse
    index = min(1.0, max(0.0, (value - t.warn) / span)) if span else float(value >= t.warn)
    beyond = value <= t.warn if span < 0 else value >= t.warn
    return SignalView(value, t.warn, t.critical, round(index, 6), beyond)


def _detections(
    entry: NodeEntry, configs: dict[str, DetectionConfig]
) -> tuple[dict[str, DetectionView], list[Term]]:
    signals = entry.signals or {}
    views: dict[str, DetectionView] = {}
    terms: list[Term] = []
    for label, cfg in configs.items():
        state = entry.detections.get(label)
        fallback = entry.fallback and bool(cfg.fallback)
        thresholds = cfg.fallback if fallback else cfg.signals
        index = state.index if state is not None else None
        counted = cfg.weight > 0 and index is not None
        if counted and index is not None:
            terms.append(Term(label, cfg.weight, index, cfg.weight * index))
        views[label] = DetectionView(
            index=index,
            triggered=state.triggered if state is not None else False,
            weight=cfg.weight,
            counted=counted,
            judged_by="fallback" if fallback else "signals",
            signals={key: _signal(signals.get(key), t) for key, t in thresholds.items()},
        )
    return views, terms


def _level(
    entry: NodeEntry, terms: list[Term], reserved: float, policy: Policy, node: NodeTerms
) -> LevelView:
    weights = sum(t.weight for t in terms)
    weighted = sum(t.product for t in terms)
    computed = min(1.0, max(0.0, weighted / weights)) if weights > 0 else None
    triggered = any(d.triggered for d in entry.detections.values())
    floor = policy.triggered_level if triggered and policy.triggered_level > 0 else None
    used = None
    if entry.level is not None:
        used = min(1.0, max(0.0, entry.level, floor or 0.0, node.predicted) + reserved)
    return LevelView(
        formula="level = Σ weight·index / Σ weight over detections with a positive weight and "
        "an index on the node, clamped to [0, 1]; used = min(1, max(level, the policy's "
        "triggeredLevel where a detection is triggered, the level predicted from the "
        "residents' profiles) + reserved); 100·avoided (avoidPolicies) and 100·inflicted "
        "(profiles) are taken off the score, 100·gathered (gatherPerPod) added; keptOff: "
        "pods of avoidPolicies there, which avoidFilter rejects the node for",
        terms=terms,
        weight_sum=weights,
        weighted_sum=round(weighted, 9),
        computed=round(computed, 6) if computed is not None else None,
        reported=entry.level,
        reserved=reserved,
        triggered_level=floor,
        used=round(used, 6) if used is not None else None,
        avoided=node.avoided,
        kept_off=node.kept_off,
        gathered=node.gathered,
    )


def _constraints(
    entry: NodeEntry, configs: dict[str, ConstraintConfig], policy: Policy
) -> dict[str, ConstraintView]:
    signals = entry.signals or {}
    violated = {v.constraint: v for v in entry.violations}
    views = {}
    for label, cfg in configs.items():
        found = violated.get(label)
        value = signals.get(cfg.signal)
        if value is None and found is not None:
            value = found.value  # a --compact report still carries the violation's value
        limit = found.limit if found is not None else cfg.limit
        exceeded = value is not None and value > limit
        views[label] = ConstraintView(
            signal=cfg.signal,
            value=value,
            limit=limit,
            exceeded=exceeded,
            violated=found is not None,
            held=found is not None and value is not None and not exceeded,
            enforced=policy.hard_constraints == "Enforce",
        )
    return views


def _taken(verdict: Verdict, config: VerdictConfig) -> str:
    reason = verdict.reason
    if reason == Reason.NO_DATA:
        return "no data: rejected, other nodes of the call have data"
    if reason in (Reason.UNKNOWN, Reason.STALE):
        return "fail-closed: rejected" if config.fail_closed else "fail-open: neutral score"
    if reason == Reason.NO_LEVEL:
        return "no level: neutral score"
    if reason == Reason.KATA_NOT_READY:
        return "Kata: not ready, rejected"
    if reason == Reason.HARD_CONSTRAINT:
        return "hard constraint: rejected"
    if reason == Reason.MAX_LEVEL:
        return "policy maxLevel: rejected"
    if reason == Reason.AVOIDED:
        return "avoidFilter: rejected, pods it keeps off run there"
    if reason == Reason.LEAST_INTERFERED:
        return "least interfered: passed, no node of the call is within the policy's limits"
    return "scored by level"


def _reservation(
    judge: Judge, name: str, held: float, now: float, policy: Policy
) -> tuple[float, ReservationView]:
    """The reservation on the node (what ``Judge.verdicts`` added to the verdict's level) and the
    placements it counts (``extender.reservation``: placed after ``held - span``, not yet
    forgotten)."""
    reservations = judge.reservations
    reserved = judge.terms(name, policy, now).reserved
    per_pod = policy.reservation_per_pod
    if reservations is None:
        return reserved, ReservationView(reserved, per_pod, False, None, [])
    since, oldest = held - reservations.span, now - reservations.keep_for
    counted = [
        (key, p)
        for key, p in reservations.active(now).get(name, {}).items()
        if p.at > since and p.at >= oldest
    ]
    counted.sort(key=lambda kp: kp[1].at, reverse=True)
    pods = [Placed(key, p.amount, format_time(p.at), p.source) for key, p in counted[:MAX_PLACED]]
    return reserved, ReservationView(reserved, per_pod, True, reservations.span, pods)


def _explanation(
    judge: Judge,
    known: KnownNode,
    name: str,
    pod: PodFacts,
    verdict: Verdict,
    now: float,
    thresholds: tuple[dict[str, DetectionConfig], dict[str, ConstraintConfig]],
) -> Explanation:
    config, store = judge.config, judge.store
    entry = known.entry
    held = store.held_until(known)
    reserved, reservation = _reservation(judge, name, held, now, pod.policy)
    node_terms = judge.terms(name, pod.policy, now, pod)
    detections, terms = _detections(entry, thresholds[0])
    age = now - held
    weight = pod.policy.score_weight
    return Explanation(
        detections=detections,
        level=_level(entry, terms, reserved, pod.policy, node_terms),
        score=ScoreView(
            formula="score = 100·(1 − used), moved toward the neutral score by the policy's "
            "scoreWeight: clamp(neutral + scoreWeight·(score − neutral), 0, 100), then "
            "max(0, score − 100·avoided), min(100, score + 100·gathered); the neutral score "
            "when data is missing or no "
            "detection had data",
            neutral=config.neutral_score,
            policy_weight=weight,
            score=verdict.score,
            volcano_score=verdict.score * config.volcano_weight,
            kube_score=verdict.kube_score,
        ),
        hard_constraints=_constraints(entry, thresholds[1], pod.policy),
        schedulable=entry.schedulable,
        data=DataView(
            sample_time=entry.sample_time,
            live=entry.live,
            heartbeat=_time(store.heartbeat),
            held_until=_time(held),
            age_seconds=round(age, 3) if math.isfinite(age) else None,
            stale_after_seconds=config.stale_after,
            clock_skew_seconds=config.clock_skew,
            stale=is_stale(held, now, config),
            missing=entry.missing,
        ),
        path=PathView(
            psi_fallback=entry.fallback,
            missing_data="fail-closed" if config.fail_closed else "fail-open",
            taken=_taken(verdict, config),
        ),
        reservation=reservation,
        kata=KataView(
            wanted=pod.wants_kata,
            runtime_class=pod.runtime_class,
            report_ready=entry.kata_ready,
            node_label=None,
            ready=entry.kata_ready,
        ),
        reasons=entry.reasons,
        profile=_profile(judge, name, pod),
    )


def _profile(judge: Judge, name: str, pod: PodFacts) -> ProfileView:
    """The profile terms of node ``name`` for ``pod``, with the resident workloads behind them."""
    profiles = judge.profiles
    if profiles is None or judge.residents is None:
        return ProfileView(pod.workload, False, 0.0, 0.0, 0.0, [])
    policies = {p.name: p for p in judge.policies.policies}
    predicted, inflicted, parts = ProfileTerm(profiles, judge.residents, pod, policies).judge(name)
    return ProfileView(
        workload=pod.workload,
        known=profiles.get(pod.workload) is not None,
        weight=profiles.weight,
        predicted=predicted,
        inflicted=inflicted,
        parts=[ProfilePart(*p) for p in parts[:MAX_PARTS]],
    )


def _time(unix: float) -> str | None:
    return format_time(unix) if math.isfinite(unix) else None


def explain(args: ExplainArgs, judge: Judge, now: float) -> ExplainAnswer:
    """The answer for ``args`` (decoded by `decode`) at ``now``."""
    store, config, live = judge.store, judge.config, judge.live
    wire_pod = args.pod
    facts = judge.pod(wire_pod)
    report = store.config
    if report is not None and report.detections is not None:
        thresholds = (report.detections, report.hard_constraints or {})
        source = "report"
    else:
        thresholds, source = (_DEFAULT_DETECTIONS, _DEFAULT_CONSTRAINTS), "defaults"
    truncated = False
    if args.nodes is None:
        names = sorted(store.nodes)
        truncated = len(names) > MAX_NODES
        names = names[:MAX_NODES]
    else:
        names = list(dict.fromkeys(args.nodes))  # each once, in the order asked
    answers = []
    for name, verdict in zip(names, judge.verdicts(names, facts, now), strict=True):
        known = store.get(name)
        why = None
        if known is not None:
            why = _explanation(judge, known, name, facts, verdict, now, thresholds)
        answers.append(
            NodeAnswer(
                name=name,
                known=known is not None,
                passed=verdict.passed,
                reason=verdict.reason,
                message=verdict.message,
                score=verdict.score,
                volcano_code=verdict.volcano_code,
                explanation=why,
            )
        )
    return ExplainAnswer(
        generated_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
        ready=store.loaded,
        pod=PodView(pod_key(wire_pod), facts.runtime_class, facts.policy),
        config=ConfigView(
            source=live.source,
            generation=live.generation,
            thresholds_source=source,
            stale_after_seconds=config.stale_after,
            neutral_score=config.neutral_score,
            fail_closed=config.fail_closed,
        ),
        nodes=answers,
        truncated=truncated,
    )
