"""Volcano's ``extender`` plugin protocol: predicate and prioritize (keys exactly as Volcano sends).

Volcano serialises its scheduler types with Go field names in declaration order. A predicate
body is ``{"task": TaskInfo, "node": NodeInfo}``, where NodeInfo is ``{"Name", "Node", "State",
..., "Tasks", ...}``: the verdict needs the task's Pod and the node's Name and Node, all of which
come before ``State``, while ``Tasks`` (every pod on the node, most of a 100-300 KB body) comes
after it. The fast path therefore decodes only the prefix that ends where the node's ``State``
key begins, closed with the brackets it needs. A prefix closed that way only decodes when the cut
lies at the right depth, and the result is checked (task with its Pod, node with Name and Node);
anything unexpected falls back to a full decode of the body, which is the reference behaviour.
"""

from __future__ import annotations

import re

import msgspec

from extender.config import VerdictConfig
from extender.decisions import note
from extender.fallback import Rounds
from extender.judge import Judge
from extender.verdict import Verdict, pod_facts
from extender.wire import (
    MAX_NAME,
    UNDECODABLE,
    BadRequest,
    Body,
    Node,
    Pod,
    decode_error,
    pod_key,
)

FAST_PATH_MIN_BYTES = 32 << 10  # smaller bodies decode fully: cheap, and strictly validated
_MAX_CUTS = 4  # candidate cut points tried before falling back to the full decode
_STATE = b',"State":{"Phase":'  # NodeInfo.State is a NodeState{Phase, Reason}
_NODE_START = b'{"Name":"'
_NEXT_NODE = b"}," + _NODE_START


def _ends_with(body: Body, suffix: bytes) -> bool:
    """Whether the body ends with ``suffix`` after trailing whitespace (without copying it)."""
    end = len(body)
    while end and body[end - 1] in b" \t\r\n":
        end -= 1
    return body[max(0, end - len(suffix)) : end] == suffix


class TaskInfo(msgspec.Struct, rename="pascal", gc=False):
    pod: Pod | None = None


class NodeInfo(msgspec.Struct, rename="pascal", gc=False):
    name: str = ""
    node: Node | None = None


class PredicateArgs(msgspec.Struct, gc=False):
    task: TaskInfo | None = None
    node: NodeInfo | None = None


class PrioritizeArgs(msgspec.Struct, gc=False):
    task: TaskInfo | None = None
    nodes: list[NodeInfo] | None = None


class PredicateResult(msgspec.Struct, gc=False):
    status: str  # empty: the node passes, whatever the code
    code: int


class PrioritizeResult(msgspec.Struct, rename="camel", gc=False):
    node_score: dict[str, float]  # never null: Volcano treats null as an error
    error_message: str = ""


_predicate = msgspec.json.Decoder(PredicateArgs)
_prioritize = msgspec.json.Decoder(PrioritizeArgs)
_node_info = msgspec.json.Decoder(NodeInfo)


def _complete(task: TaskInfo | None) -> bool:
    return task is not None and task.pod is not None


def _fast_predicate(body: Body) -> PredicateArgs | None:
    if not _ends_with(body, b"}}"):  # the node object and the document both close
        return None
    pos = 0  # TaskInfo has no State key; the first candidate is normally the node's
    for _ in range(_MAX_CUTS):
        cut = body.find(_STATE, pos)
        if pos < 0 or cut < 0:
            return None
        try:
            args = _predicate.decode(body[:cut] + b"}}")
        except UNDECODABLE:
            pos = cut + 1
            continue
        node = args.node
        if node is None or not node.name or node.node is None or not _complete(args.task):
            return None
        return args
    return None


def decode_predicate(body: Body) -> PredicateArgs:
    if len(body) >= FAST_PATH_MIN_BYTES and (args := _fast_predicate(body)) is not None:
        return args
    try:
        args = _predicate.decode(body)
    except UNDECODABLE as exc:
        raise decode_error(exc, body) from None
    if args.node is None or not args.node.name:
        raise BadRequest("predicate needs a node with a Name")
    return args


def _fast_node(body: Body, pos: int) -> tuple[NodeInfo, int] | None:
    """The NodeInfo head (Name and the full Node) at ``pos``, and where its ``State`` begins."""
    cut = pos
    for _ in range(_MAX_CUTS):
        cut = body.find(_STATE, cut + 1)
        if cut < 0:
            return None
        try:
            info = _node_info.decode(body[pos:cut] + b"}")
        except UNDECODABLE:
            continue
        if not info.name or info.node is None:
            return None
        return info, cut
    return None


def _fast_name(body: Body, pos: int) -> tuple[NodeInfo, int] | None:
    """Just the Name of the NodeInfo at ``pos``; enough for pods that do not ask for Kata."""
    end = _name_end(body, pos)
    if end < 0:
        return None
    raw = bytes(body[pos + len(_NODE_START) : end])
    if not raw or b"\\" in raw:
        return None  # node names are DNS-1123 subdomains; anything escaped takes the full decode
    try:
        return NodeInfo(raw.decode()), end
    except UnicodeDecodeError:
        return None  # not UTF-8: the full decode rejects the body with a 400


def _name_end(body: Body, pos: int) -> int:
    """Where the Name value of a NodeInfo-shaped object at ``pos`` ends, or -1."""
    end = body.find(b'"', pos + len(_NODE_START))
    return end if end >= 0 and body.startswith(b',"Node":', end + 1) else -1


def _fast_prioritize(body: Body, config: VerdictConfig) -> PrioritizeArgs | None:
    if not _ends_with(body, b"}]}"):  # the last NodeInfo, the list and the document close
        return None
    marker = b',"nodes":['
    pos = 0
    task: TaskInfo | None = None
    for _ in range(_MAX_CUTS):
        pos = body.find(marker, pos + 1)
        if pos < 0:
            return None
        try:
            task = _prioritize.decode(body[: pos + len(marker)] + b"]}").task
        except UNDECODABLE:
            continue
        break
    if task is None or task.pod is None:
        return None
    # Pods without Kata need only node names; Kata pods also read each node's labels.
    head = _fast_node if pod_facts(task.pod.runtime_class, config).wants_kata else _fast_name
    pos += len(marker)
    if not body.startswith(_NODE_START, pos):
        return None
    nodes: list[NodeInfo] = []
    while True:
        found = head(body, pos)
        if found is None:
            return None
        info, after = found
        nodes.append(info)
        # The next element is the next NodeInfo-shaped object after this one's head.
        while True:
            following = body.find(_NEXT_NODE, after)
            if following < 0:
                return PrioritizeArgs(task, nodes)
            pos = following + 2
            if _name_end(body, pos) >= 0:
                break
            after = pos


def decode_prioritize(body: Body, config: VerdictConfig) -> PrioritizeArgs:
    if len(body) >= FAST_PATH_MIN_BYTES and (args := _fast_prioritize(body, config)) is not None:
        return args
    try:
        args = _prioritize.decode(body)
    except UNDECODABLE as exc:
        raise decode_error(exc, body) from None
    if not all(info.name for info in args.nodes or ()):
        raise BadRequest("prioritize needs every node with a Name")
    return args


# -- placements: allocate/deallocate calls, and the placed tasks inside NodeInfos -------------

# TaskInfo.Status bits of a task placed on a node that its node's data may not show yet:
# Allocated, Pipelined, Binding, Bound (Running and later are on the node already).
PLACED_STATUSES = frozenset({2, 4, 8, 16})


class PodMeta(msgspec.Struct, gc=False):
    labels: dict[str, str] | None = None


class PlacedPod(msgspec.Struct, gc=False):
    metadata: PodMeta | None = None


class PlacedTask(msgspec.Struct, rename="pascal", gc=False):
    """A TaskInfo's placement: which pod (UID, labels for its policy), where, in what state."""

    uid: str = msgspec.field(name="UID", default="")
    node_name: str = ""
    status: int = 0
    pod: PlacedPod | None = None

    @property
    def key(self) -> str:
        """The pod's UID (TaskInfo.UID is the pod's): every source records a pod under it."""
        return self.uid

    @property
    def labels(self) -> dict[str, str]:
        meta = self.pod.metadata if self.pod is not None else None
        return (meta.labels if meta is not None else None) or {}


class TaskEvent(msgspec.Struct, gc=False):
    task: PlacedTask | None = None


class EventResult(msgspec.Struct, rename="camel", gc=False):
    error_message: str = ""


_task_event = msgspec.json.Decoder(TaskEvent)
_placed_task = msgspec.json.Decoder(PlacedTask)


def decode_task_event(body: Body, *, needs_node: bool) -> PlacedTask:
    """``{"task": TaskInfo}`` of an allocate (``needs_node``) or deallocate call."""
    try:
        event = _task_event.decode(body)
    except UNDECODABLE as exc:
        raise decode_error(exc, body) from None
    task = event.task
    if task is None:
        raise BadRequest("the call needs a task")
    if not task.key:
        raise BadRequest("the task needs a UID")
    if needs_node and not task.node_name:
        raise BadRequest("an allocated task needs its NodeName")
    if len(task.key) > MAX_NAME or len(task.node_name) > MAX_NAME:
        raise BadRequest(f"a UID or NodeName longer than {MAX_NAME} characters")
    return task


# A TaskInfo's Status key, where it is one of PLACED_STATUSES, as Go writes it: between
# JobAllocatedHyperNode and LastTransaction (LastTransaction's own Status ends its object).
_PLACED = re.compile(rb',"Status":(?:2|4|8|16),"LastTransaction":')
_TASK_START = b'{"UID":"'
_TASK_ENDS = (b',"PodAnnotations":', b',"CustomBindErrHandlerSucceeded":')  # after Pod


def placed_tasks(body: Body) -> list[PlacedTask]:
    """The tasks in ``body`` placed on a node and not running yet, wherever they appear.

    One search over the raw body finds their Status keys (a body without any costs only the
    search, ~35-80 us for 220 KB here); each one found is decoded from the start of its
    TaskInfo to the key after its Pod, closed with ``}``, as the predicate's fast path does.
    A task whose cut does not decode is skipped: a missed task only misses its reservation.
    """
    return _tasks(body, _PLACED, PLACED_STATUSES)


# Tasks that are on their node: placed (above), Running or Releasing (still running there).
RESIDENT_STATUSES = PLACED_STATUSES | {32, 64}
_RESIDENT = re.compile(rb',"Status":(?:2|4|8|16|32|64),"LastTransaction":')


def resident_tasks(body: Body) -> list[PlacedTask]:
    """The tasks in ``body`` on a node, placed or running (what ``avoidPolicies`` counts); read
    as ``placed_tasks`` reads its own."""
    return _tasks(body, _RESIDENT, RESIDENT_STATUSES)


def _tasks(body: Body, pattern: re.Pattern[bytes], statuses: frozenset[int]) -> list[PlacedTask]:
    tasks: list[PlacedTask] = []
    for match in pattern.finditer(body):
        start = body.rfind(_TASK_START, 0, match.start())
        ends = [e for m in _TASK_ENDS if (e := body.find(m, match.end())) >= 0]
        if start < 0 or not ends:
            continue
        try:
            task = _placed_task.decode(body[start : min(ends)] + b"}")
        except UNDECODABLE:
            continue
        if task.status in statuses and task.node_name and task.key:
            tasks.append(task)
    return tasks


def predicate(
    args: PredicateArgs, judge: Judge, now: float, rounds: Rounds | None = None
) -> tuple[PredicateResult, Verdict]:
    """One node's verdict; with ``rounds``, a task whose previous round failed on every node
    passes on the least interfered of them (``extender.fallback``)."""
    assert args.node is not None  # checked by decode_predicate
    info = args.node
    facts = (info.node or Node()).facts(info.name)
    pod = judge.pod(args.task.pod if args.task is not None else None)
    key = pod_key(args.task.pod if args.task else None)
    verdict = judge.node(facts, pod, now)
    if rounds is not None and key:
        verdict = rounds.predicate(key, facts.name, verdict, pod.policy, judge.config, now)
    note(key, pod, (facts.name,), (verdict,))
    if verdict.passed:
        return PredicateResult("", 0), verdict
    return PredicateResult(verdict.message, verdict.volcano_code), verdict


def prioritize(
    args: PrioritizeArgs, judge: Judge, now: float
) -> tuple[PrioritizeResult, list[Verdict]]:
    pod = judge.pod(args.task.pod if args.task is not None else None)
    infos = args.nodes or []
    names = [info.name for info in infos]
    nodes = [(i.node or Node()).facts(i.name) for i in infos] if pod.wants_kata else None
    verdicts = judge.verdicts(names, pod, now, nodes)
    note(pod_key(args.task.pod if args.task else None), pod, names, verdicts)
    weight = judge.config.volcano_weight
    scores = {name: v.score * weight for name, v in zip(names, verdicts, strict=True)}
    return PrioritizeResult(scores), verdicts
