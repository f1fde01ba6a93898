"""``GET /v1/nodes``: every known node with the verdict a pod would get there, and why."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from typing import Final

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


class _Judged:
    """What every node's view needs, worked out once per answer."""

    def __init__(self, judge: Judge, now: float) -> None:
        self.judge, self.now = judge, now
        self.unlabelled = judge.policy_for(None)
        config = judge.config
        self.plain = PodFacts(None, False, self.unlabelled)
        self.kata = PodFacts(config.kata_globs[0], True, self.unlabelled)
        self.classes = {p.name: PodFacts(None, False, p) for p in judge.live.policies.policies}

    def node(self, name: str) -> NodeView | None:
        """The node's view; None when the report no longer knows it."""
        judge, now, config, store = self.judge, self.now, self.judge.config, self.judge.store
        known = store.nodes.get(name)
        if known is None:
            return None
        entry = known.entry
        facts = NodeFacts(name)
        held = store.held_until(known)
        age = now - held
        terms = NodeTerms(reserved=judge.terms(name, self.unlabelled, now).reserved)

        def view(pod: PodFacts) -> VerdictView:
            return _view(decide(entry, held, pod, facts, config, now, terms), config)

        return NodeView(
            name=name,
            verdict=view(self.plain),
            kata_verdict=view(self.kata),
            policy_verdicts={policy: view(pod) for policy, pod in self.classes.items()},
            level=entry.level,
            reservation=round(terms.reserved, 6),
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


def _head(judge: Judge, now: float, nodes: list[NodeView]) -> NodesView:
    store, config, live = judge.store, judge.config, judge.live
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


def node_view(judge: Judge, now: float) -> NodesView:
    """The whole view at once (tests, tools); the route streams it: ``node_view_chunks``."""
    judged = _Judged(judge, now)
    views = (judged.node(name) for name in sorted(judge.store.nodes))
    return _head(judge, now, [v for v in views if v is not None])


# Nodes judged per chunk: ~100 us each at 16 policies, so ~10 ms of the event loop idle
# (~50 ms loaded) before the scheduler routes get their turn.
CHUNK: Final = 100


def node_view_chunks(judge: Judge, now: float) -> Iterator[bytes]:
    """``node_view`` encoded as JSON in pieces of at most ``CHUNK`` nodes, so that the route can
    give the event loop back between them (``extender.app``): at 5,000 nodes and 16 policies
    the whole view is 0.5 s of CPU, which held every scheduler call for as long. The pieces
    concatenate to the same document; a node the report drops meanwhile is left out."""
    head = _encode(_head(judge, now, []))
    assert head.endswith(b"[]}")  # nodes is the last field
    yield head[:-2]
    judged = _Judged(judge, now)
    names = sorted(judge.store.nodes)
    first = True
    for at in range(0, len(names), CHUNK):
        views = [v for n in names[at : at + CHUNK] if (v := judged.node(n)) is not None]
        if views:
            piece = _encode(views)[1:-1]
            yield piece if first else b"," + piece
            first = False
    yield b"]}"


_encode = msgspec.json.Encoder().encode
