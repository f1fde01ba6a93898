"""kube-scheduler's HTTP extender v1 protocol: filter and prioritize (capitalised Go field names).

``ExtenderArgs`` carries the full Pod and either ``NodeNames`` (``nodeCacheCapable: true``) or
``Nodes`` (a NodeList of full objects); the other key is null. The filter answer mirrors the
request: names when names came in, the very node objects (echoed byte for byte) when nodes came
in. Prioritize answers a JSON array of ``{"Host", "Score"}`` with integer scores 0-10.
"""

from __future__ import annotations

from collections.abc import Iterator
from operator import itemgetter

import msgspec

from extender.decisions import note
from extender.judge import Judge
from extender.verdict import NodeFacts, Verdict
from extender.wire import (
    UNDECODABLE,
    BadRequest,
    Body,
    Node,
    Pod,
    decode_error,
    pod_key,
)


class _RawNodeList(msgspec.Struct, gc=False):
    items: list[msgspec.Raw] | None = None


class _NodeList(msgspec.Struct, gc=False):
    items: list[Node] | None = None


class FilterArgs(msgspec.Struct, rename="pascal", gc=False):
    pod: Pod | None = None
    nodes: _RawNodeList | None = None
    node_names: list[str] | None = None


class PrioritizeArgs(msgspec.Struct, rename="pascal", gc=False):
    pod: Pod | None = None
    nodes: _NodeList | None = None
    node_names: list[str] | None = None


class NodeListOut(msgspec.Struct, gc=False):
    metadata: dict[str, str]
    items: list[msgspec.Raw]


class FilterResult(msgspec.Struct, rename="pascal", gc=False):
    nodes: NodeListOut | None
    node_names: list[str] | None
    failed_nodes: dict[str, str]
    failed_and_unresolvable_nodes: dict[str, str]
    error: str = ""


class HostPriority(msgspec.Struct, rename="pascal", gc=False):
    host: str
    score: int


_filter = msgspec.json.Decoder(FilterArgs)
_prioritize = msgspec.json.Decoder(PrioritizeArgs)
_node = msgspec.json.Decoder(Node)


def decode_filter(body: Body) -> FilterArgs:
    try:
        return _filter.decode(body)
    except UNDECODABLE as exc:
        raise decode_error(exc, body) from None


def decode_prioritize(body: Body) -> PrioritizeArgs:
    try:
        return _prioritize.decode(body)
    except UNDECODABLE as exc:
        raise decode_error(exc, body) from None


def _raw_nodes(items: list[msgspec.Raw]) -> Iterator[tuple[NodeFacts, msgspec.Raw]]:
    for raw in items:
        try:
            node = _node.decode(raw)
        except UNDECODABLE as exc:
            raise BadRequest(f"invalid node in Nodes.items: {exc}") from None
        facts = node.facts()
        if not facts.name:
            raise BadRequest("a node in Nodes.items has no metadata.name")
        yield facts, raw


def filter_nodes(args: FilterArgs, judge: Judge, now: float) -> tuple[FilterResult, list[Verdict]]:
    pod = judge.pod(args.pod)
    nodes = list(_raw_nodes(args.nodes.items or [])) if args.nodes is not None else []
    if args.node_names is None and args.nodes is not None:
        names = [facts.name for facts, _raw in nodes]
        verdicts = judge.verdicts(names, pod, now, [facts for facts, _raw in nodes])
        kept = [raw for (_facts, raw), v in zip(nodes, verdicts, strict=True) if v.passed]
        out = FilterResult(NodeListOut({}, kept), None, {}, {})
    else:
        names = args.node_names or []
        verdicts = judge.verdicts(names, pod, now)
        passed = [n for n, v in zip(names, verdicts, strict=True) if v.passed]
        out = FilterResult(None, passed, {}, {})
    for name, verdict in zip(names, verdicts, strict=True):
        if not verdict.passed:
            failed = out.failed_and_unresolvable_nodes if verdict.unresolvable else out.failed_nodes
            failed[name] = verdict.message
    note(pod_key(args.pod), pod, names, verdicts)
    return out, verdicts


_KUBE_SCORE = itemgetter(4)  # Verdict.kube_score, read at C speed


def prioritize(
    args: PrioritizeArgs, judge: Judge, now: float
) -> tuple[list[HostPriority], list[Verdict]]:
    pod = judge.pod(args.pod)
    facts = [node.facts() for node in args.nodes.items or ()] if args.nodes is not None else []
    if not all(f.name for f in facts):
        raise BadRequest("a node in Nodes.items has no metadata.name")
    if args.node_names is None and args.nodes is not None:
        names = [f.name for f in facts]
        verdicts = judge.verdicts(names, pod, now, facts)
    else:
        names = args.node_names or []
        verdicts = judge.verdicts(names, pod, now)
    note(pod_key(args.pod), pod, names, verdicts)
    # map() over C callables: no Python frame per node (5,000 per call is normal).
    return list(map(HostPriority, names, map(_KUBE_SCORE, verdicts))), verdicts
