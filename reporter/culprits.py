"""Each node's victims and aggressors: who suffers, and who causes it (docs/reporter.md).

A query sent with the reporter's second one (``reporter.query``; left out with ``--compact``,
so a cycle stays three queries), built from the rule config's window and warn thresholds, answers
at most ``TOP`` pods per node and ranking, whatever the number of pods: the ranking
(``topk by (node)``) and the name resolution (a join with kube-state-metrics' ``kube_pod_info``)
run in the engine. Each ranking is one row of ``RANKINGS``:

* victims: pods whose stall (per-pod PSI some, ``node_pod:mco_pressure_ratio:smoothed``) reaches
  the warn of the signal it feeds (``psiMemorySome``, ``psiIOSome``) while they hit neither their
  memory nor their I/O limit in the window (``node_pod:mco_*_self_limited:bool``) and are not
  the node's largest user of that resource; worst first, ``TOP`` over both resources;
* aggressors, per resource, only on a node with a victim of that resource and never one of
  those victims: memory by usage (bytes held), io by bytes read and written per second; largest
  first, ``TOP`` per resource;
* and by LLC occupancy (``llc``) where resctrl monitoring groups are named after pods
  (``…/pod<uid>``, as the kubelet names pod cgroups), only on a node whose cache_pollution
  detection is triggered (there is no per-pod cache victim to wait for).

An entry is rewritten for them only when a pod enters or leaves a list, or a value moves beyond
the signal epsilon (``same``); the order within a list is the value's, ties by UID.

A pod is never both victim and aggressor of one resource. A pod pressing on the node stalls
too (its own allocations reclaim, its own writes queue), and a victim holds memory or does
I/O of its own, so each would otherwise be listed on both sides. The rule that separates them:
the node's largest user of a resource is never its victim (nothing on the node takes more of
it than it does: its stall is its own doing), and a victim is never an aggressor of what it
suffers from. A victim that is itself the largest user (a big cache squeezed by a small, fast
allocator) is therefore not named; usage is what the aggressor ranking reads, and it cannot
tell that case apart.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal, Protocol

from mco.workload import workload_key
from reporter.schema import PodRef
from rulegen import series
from rulegen.durations import format_duration
from rulegen.model import DetectionRuleConfig
from rulegen.render import format_number

TOP: Final = 3
ROLE_LABEL: Final = "role"
Role = Literal["victims", "aggressors"]
_POD: Final = "node, pod_uid, qos"
_OWNER: Final = "created_by_kind, created_by_name"
CACHE_POLLUTION: Final = series.DETECTIONS["cachePollution"]
_SELF_LIMITED: Final = (
    f"({series.POD_MEMORY_SELF_LIMITED} == 1 or {series.POD_IO_SELF_LIMITED} == 1)"
)


@dataclass(frozen=True, slots=True)
class Ranking:
    role: Role
    resource: str  # memory | io: the ``resource`` label of the pods it lists
    # PromQL (string.Template) of the pods' values, labels node, pod_uid, qos (and resource for
    # victims): $w the window, $victims_<resource> the victims of a resource
    expr: str
    scale: float  # a change smaller than epsilon x max(|value|, scale) is no change
    signal: str = ""  # victims: the signal whose warn a pod's stall must reach


# Each pod's use of a resource, what its aggressors are ranked by: memory held, bytes of I/O
# read and written per second. $w the window.
USAGE: Final[dict[str, str]] = {
    "memory": f"max by ({_POD}) ({series.POD_MEMORY_USAGE})",
    "io": f"sum by ({_POD}) (max by ({_POD}, operation) (rate({series.POD_IO_BYTES}[$w]))) > 0",
}


def _victims(resource: str) -> str:
    """Pods stalling at warn at no limit of their own, less the node's largest user of the
    resource (its stall is its own doing)."""
    usage = f"($usage_{resource})"
    largest = f"{usage} == on (node) group_left () max by (node) {usage}"
    return (
        f'({series.POD_PRESSURE}{{resource="{resource}",kind="some"}} >= $warn_{resource})'
        f" unless on (node, pod_uid) {_SELF_LIMITED}"
        f" unless on (node, pod_uid) ({largest})"
    )


def _aggressors(resource: str) -> str:
    """The pods using ``resource`` on a node with a victim of it, the victims left out."""
    return (
        f"$usage_{resource} and on (node) ($victims_{resource})"
        f" unless on (node, pod_uid) ($victims_{resource})"
    )


RANKINGS: Final[tuple[Ranking, ...]] = (
    Ranking("victims", "memory", "$victims_memory", 0.01, "psiMemorySome"),
    Ranking("victims", "io", "$victims_io", 0.1, "psiIOSome"),
    Ranking("aggressors", "memory", _aggressors("memory"), float(1 << 20)),
    Ranking("aggressors", "io", _aggressors("io"), float(1 << 20)),
    Ranking(
        "aggressors",
        "llc",
        # A pod's resctrl groups (``/pod<uid>``, ``/<ctrl>/mon_groups/pod<uid>``) summed over
        # the L3 domains; qos from the pod's own series (a pod the cgroup collector sees).
        "sum by (node, pod_uid) (label_replace(max by (node, group, domain) "
        f'({series.LLC_OCCUPANCY}{{group=~"{series.POD_LLC_GROUP}"}}), "pod_uid", "$$1", '
        f'"group", "{series.POD_LLC_GROUP}"))'
        f" * on (node, pod_uid) group_left (qos) group by ({_POD}) ({series.POD_PRESSURE})"
        f' and on (node) ({series.DETECTION_TRIGGERED}{{detection="{CACHE_POLLUTION}"}} == 1)',
        float(1 << 20),
    ),
)


def query(config: DetectionRuleConfig, rankings: Sequence[Ranking] = RANKINGS) -> str:
    """The one query: every ranking's top pods per node, tagged ``role`` and ``resource``, with
    ``namespace``, ``pod`` and the pod's controller (``created_by_kind``, ``created_by_name``)
    joined from kube_pod_info where it has the pod."""
    names = {
        "w": format_duration(config.window),
        **{
            f"warn_{r.resource}": format_number(config.threshold(r.signal).warn)
            for r in rankings
            if r.signal
        },
    }
    names |= {
        f"usage_{resource}": string.Template(expr).substitute(names)
        for resource, expr in USAGE.items()
    }
    names |= {
        f"victims_{r.resource}": string.Template(_victims(r.resource)).substitute(names)
        for r in rankings
        if r.role == "victims"
    }
    parts: list[str] = []
    victims = [string.Template(r.expr).substitute(names) for r in rankings if r.role == "victims"]
    if victims:
        union = "\n  or\n  ".join(f"({v})" for v in victims)
        tagged = f'label_replace(\n  {union},\n  "{ROLE_LABEL}", "victims", "", ""\n)'
        parts.append(f"topk by (node) ({TOP}, {tagged})")
    for r in rankings:
        if r.role != "aggressors":
            continue
        inner = string.Template(r.expr).substitute(names)
        parts.append(
            f'topk by (node) ({TOP}, label_replace(label_replace(\n  {inner},\n  "{ROLE_LABEL}", '
            f'"aggressors", "", ""), "resource", "{r.resource}", "", ""))'
        )
    ranked = "(\n" + "\nor\n".join(parts) + "\n)"
    return (
        f"{ranked}\n* on (pod_uid) group_left (namespace, pod, {_OWNER}) {series.POD_OWNERS}\n"
        f"or on (node, pod_uid, {ROLE_LABEL}, resource)\n{ranked}"
    )


class Pod(Protocol):
    """The labels of one pod of the answer (``reporter.query.TaggedLabels``)."""

    node: str
    pod_uid: str
    qos: str
    role: str
    resource: str
    namespace: str
    pod: str
    created_by_kind: str
    created_by_name: str


@dataclass(frozen=True, slots=True)
class Culprits:
    victims: tuple[PodRef, ...] = ()
    aggressors: tuple[PodRef, ...] = ()


NONE: Final = Culprits()
_RESOURCES: Final = {r.resource: i for i, r in enumerate(RANKINGS) if r.role == "aggressors"}


def parse(pods: Sequence[Pod], values: Sequence[float]) -> dict[str, Culprits]:
    """Per node, its lists in a stable order (value, then UID), bounded as documented. Samples
    that are not a ranked pod (another engine's answer, NaN) are skipped."""
    victims: dict[str, list[PodRef]] = {}
    aggressors: dict[str, list[PodRef]] = {}
    for m, x in zip(pods, values, strict=True):
        if not m.node or not m.pod_uid or not m.resource or x != x:
            continue
        workload = (
            workload_key(m.namespace, m.created_by_kind, m.created_by_name, m.pod)
            if m.namespace
            else ""
        )
        ref = PodRef(m.pod_uid, m.resource, x, m.qos, m.namespace, m.pod, workload)
        if m.role == "victims":
            victims.setdefault(m.node, []).append(ref)
        elif m.role == "aggressors" and m.resource in _RESOURCES:
            aggressors.setdefault(m.node, []).append(ref)
    out: dict[str, Culprits] = {}
    for node in victims.keys() | aggressors.keys():
        v = sorted(victims.get(node, ()), key=lambda p: (-p.value, p.pod_uid, p.resource))[:TOP]
        ranked = sorted(
            aggressors.get(node, ()), key=lambda p: (_RESOURCES[p.resource], -p.value, p.pod_uid)
        )
        a: list[PodRef] = []
        for resource in _RESOURCES:
            a += [p for p in ranked if p.resource == resource][:TOP]
        out[node] = Culprits(tuple(v), tuple(a))
    return out


_SCALE: Final = {(r.role, r.resource): r.scale for r in RANKINGS}


def same(old: Sequence[PodRef], new: Sequence[PodRef], role: Role, relative: float) -> bool:
    """The same pods (and resources), each value within the tolerance of the written one."""
    if len(old) != len(new):
        return False
    written = {(p.pod_uid, p.resource): p for p in old}
    for p in new:
        o = written.get((p.pod_uid, p.resource))
        if o is None or (o.namespace, o.name, o.qos, o.workload) != (
            p.namespace,
            p.name,
            p.qos,
            p.workload,
        ):
            return False
        tol = relative * max(abs(o.value), _SCALE.get((role, p.resource), 1.0))
        if abs(p.value - o.value) > tol:
            return False
    return True
