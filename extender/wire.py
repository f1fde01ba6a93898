"""The few fields of scheduler requests a verdict needs, shared by both wire formats.

msgspec decodes into structs that declare only these fields, so the rest of a Pod or Node is
skipped by its C parser and never becomes Python objects.
"""

from __future__ import annotations

import msgspec

from extender.config import KATA_NODE_LABEL
from extender.verdict import NodeFacts
from mco.workload import workload_key

Body = bytes | bytearray  # request bodies are read into one preallocated buffer


class BadRequest(Exception):
    """The request body is not what the route expects; answered with 400 and the message."""


class KataLabel(msgspec.Struct, gc=False):
    value: str | None = msgspec.field(name=KATA_NODE_LABEL, default=None)


class ObjectMeta(msgspec.Struct, gc=False):
    name: str = ""
    labels: KataLabel | None = None


class Node(msgspec.Struct, gc=False):
    """A v1.Node: its name and Kata label."""

    metadata: ObjectMeta | None = None

    def facts(self, name: str = "") -> NodeFacts:
        meta = self.metadata
        if meta is None:  # no Node object in the request: nothing known about its labels
            return NodeFacts(name)
        # The Node object came with the request: a missing label is evidence too (kata-deploy
        # labels only the nodes it installed Kata on), so it reads as "not Kata-ready".
        label = meta.labels.value if meta.labels is not None else None
        return NodeFacts(name or meta.name, label == "true")


class PodSpec(msgspec.Struct, rename="camel", gc=False):
    runtime_class_name: str | None = None


class OwnerReference(msgspec.Struct, gc=False):
    kind: str = ""
    name: str = ""
    controller: bool = False


class PodMeta(msgspec.Struct, rename="camel", gc=False):
    labels: dict[str, str] | None = None  # they pick the pod's workload-class policy
    name: str = ""  # name and namespace key the decisions ring (extender.decisions)
    namespace: str = ""
    generate_name: str = ""
    # the controller names the pod's workload (extender.profiles)
    owner_references: list[OwnerReference] | None = None

    def workload(self) -> str:
        """The pod's workload key (``mco.workload``), as the reporter names it."""
        name = self.name or self.generate_name
        return owner_workload(self.namespace, self.owner_references, name)


def owner_workload(namespace: str, owners: list[OwnerReference] | None, name: str) -> str:
    """``mco.workload.workload_key`` of a pod with ``owners``: its controller, else its name."""
    for owner in owners or ():
        if owner.controller:
            return workload_key(namespace, owner.kind, owner.name, name)
    return workload_key(namespace, "", "", name)


class Pod(msgspec.Struct, gc=False):
    """A v1.Pod: its runtime class and its labels matter to the verdict."""

    metadata: PodMeta | None = None
    spec: PodSpec | None = None

    @property
    def runtime_class(self) -> str | None:
        return self.spec.runtime_class_name if self.spec is not None else None

    @property
    def labels(self) -> dict[str, str] | None:
        return self.metadata.labels if self.metadata is not None else None


MAX_NAME = 253  # a Kubernetes object name (DNS-1123 subdomain) is at most this long
MAX_NAMESPACE = 63  # a namespace is a DNS-1123 label


def runtime_class(pod: Pod | None) -> str | None:
    """The pod's runtimeClassName; a name Kubernetes would not accept is refused, as it keys a
    verdict table and is repeated in verdict messages."""
    name = pod.runtime_class if pod is not None else None
    if name is not None and len(name) > MAX_NAME:
        raise BadRequest(f"runtimeClassName longer than {MAX_NAME} characters")
    return name


def pod_key(pod: Pod | None) -> str:
    """``namespace/name`` of the pod ("" when the request did not name it). A name or namespace
    longer than Kubernetes allows is refused: the key is held by the decisions ring."""
    meta = pod.metadata if pod is not None else None
    if meta is None or not meta.name:
        return ""
    if len(meta.name) > MAX_NAME:
        raise BadRequest(f"pod metadata.name longer than {MAX_NAME} characters")
    if len(meta.namespace) > MAX_NAMESPACE:
        raise BadRequest(f"pod metadata.namespace longer than {MAX_NAMESPACE} characters")
    return f"{meta.namespace or 'default'}/{meta.name}"


def pod_workload(pod: Pod | None) -> str:
    """The pod's workload key ("" when the request names no pod)."""
    return pod.metadata.workload() if pod is not None and pod.metadata is not None else ""


def pod_labels(pod: Pod | None) -> dict[str, str] | None:
    """The pod's labels (None: no pod, or a pod without labels)."""
    return pod.labels if pod is not None else None


# What msgspec raises on bad input: malformed JSON, wrong types, and nesting too deep to follow.
UNDECODABLE = (msgspec.DecodeError, RecursionError)


def decode_error(exc: Exception, body: Body) -> BadRequest:
    if not body.strip():
        return BadRequest("empty request body: expected a JSON object")
    return BadRequest(f"invalid request body: {exc}")
