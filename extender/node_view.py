"""``GET /v1/nodes``: every known node with the verdict a pod would get there, and why."""

from __future__ import annotations

import math
import time

import msgspec

from extender.config import VerdictConfig
from extender.judge import Judge
from extender.verdict import NodeFacts, NodeTerms, PodFacts, Verdict, decide, is_stale
from mco.policy import Policy
from reporter.schema import DetectionState, Violation, format_time


class VerdictView(msgspec.Struct, rename="camel"):
    passed: bool
    reason: str
    message: str
    volcano_score: float  # what /volcano/prioritize answers (weight applied)
    kube_score: int  # what /scheduler/prioritize answers
    volcano_code: int  # what /volcano/predicate answers


class NodeView(msgspec.Struct, rename="camel"):
    name: str
    verdict: VerdictView  # for a pod without labels and without a Kata runtime class
    kata_verdict: VerdictView  # for such a pod whose runtimeClassName matches the Kata globs
    policy_verdicts: dict[str, VerdictView]  # for a pod of each policy in force, by name
    level: float | None  # measured, as the report says
    reservation: float  # added for pods placed since the data (capped at 1); in the verdicts
    schedulable: bool
    kata_ready: bool
    fallback: bool
    stale: bool
    age_seconds: float | None  # since the data was last known to hold; None: unknown
    live: bool  # re-checked every sync: holds up to the heartbeat
    sample_time: str
    reasons: list[str]
    detections: dict[str, DetectionState]
    violations: list[Violation]
    missing: list[str]


class NodesView(msgspec.Struct, rename="camel"):
    generated_at: str
    ready: bool
    stale_after_seconds: float
    fail_closed: bool
    neutral_score: float
    kata_runtime_classes: list[str]
    config_source: str  # "flags" until a report carries status.config, then "report"
    config_generation: int | None  # the DetectionRuleConfig's, when the report says
    policies: list[Policy]  # in force, first match wins
    layouts: dict[str, int]
    heartbeat: str | None  # lastSyncTime of the `cluster` report object
    nodes: list[NodeView]


def _view(verdict: Verdict, config: VerdictConfig) -> VerdictView:
    return VerdictView(
        verdict.passed,
        verdict.reason,
        verdict.message,
        verdict.score * config.volcano_weight,
        verdict.kube_score,
        verdict.volcano_code,
    )


def node_view(judge: Judge, now: float) -> NodesView:
    store, config, live = judge.store, judge.config, judge.live
    unlabelled = judge.policy_for(None)
    plain = PodFacts(None, False, unlabelled)
    kata = PodFacts(config.kata_globs[0], True, unlabelled)
    classes = {p.name: PodFacts(None, False, p) for p in live.policies.policies}
    nodes = []
    for name in sorted(store.nodes):
        known = store.nodes[name]
        entry = known.entry
        facts = NodeFacts(name)
        held = store.held_until(known)
        age = now - held
        terms = NodeTerms(reserved=judge.terms(name, unlabelled, now).reserved)
        reserved = terms.reserved
        nodes.append(
            NodeView(
                name=name,
                verdict=_view(decide(entry, held, plain, facts, config, now, terms), config),
                kata_verdict=_view(decide(entry, held, kata, facts, config, now, terms), config),
                policy_verdicts={
                    name: _view(decide(entry, held, pod, facts, config, now, terms), config)
                    for name, pod in classes.items()
                },
                level=entry.level,
                reservation=round(reserved, 6),
                schedulable=entry.schedulable,
                kata_ready=entry.kata_ready,
                fallback=entry.fallback,
                stale=is_stale(held, now, config),
                live=entry.live,
                age_seconds=round(age, 3) if math.isfinite(age) else None,
                sample_time=entry.sample_time,
                reasons=entry.reasons,
                detections=entry.detections,
                violations=entry.violations,
                missing=entry.missing,
            )
        )
    return NodesView(
        generated_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
        ready=store.loaded,
        stale_after_seconds=config.stale_after,
        fail_closed=config.fail_closed,
        neutral_score=config.neutral_score,
        kata_runtime_classes=list(config.kata_globs),
        config_source=live.source,
        config_generation=live.generation,
        policies=list(live.policies.policies),
        layouts=store.layouts(),
        heartbeat=format_time(store.heartbeat) if math.isfinite(store.heartbeat) else None,
        nodes=nodes,
    )
