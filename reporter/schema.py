"""The NodeInterferenceReport custom resource (DESIGN §4): the reporter writes it, the extender
reads it. These structs are the single definition of its shape; the CRD is generated from them.

Two layouts share this shape. ``cluster``: one object named ``cluster`` whose ``status.nodes``
holds every node. ``per-node``: one object per node, named after it, whose ``status.nodes`` holds
that node alone. Objects carry the label ``mco.io/layout`` so readers can tell them apart.
JSON has no NaN: writers drop non-finite numbers (they are reported in ``missing``).
"""

from __future__ import annotations

from typing import Final, Literal

import msgspec

GROUP: Final = "mco.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "NodeInterferenceReport"
PLURAL: Final = "nodeinterferencereports"
CLUSTER_REPORT_NAME: Final = "cluster"
LAYOUT_LABEL: Final = "mco.io/layout"
Layout = Literal["cluster", "per-node"]


class DetectionState(msgspec.Struct, rename="camel", forbid_unknown_fields=False):
    """One detection on one node; present only when the detection had data there."""

    index: float
    triggered: bool


class Violation(msgspec.Struct, rename="camel"):
    """A hard constraint the node breaks: why it is not schedulable."""

    constraint: str  # psi_memory_full | psi_io_some
    value: float
    limit: float


class NodeEntry(msgspec.Struct, rename="camel", omit_defaults=True):
    """Fields without defaults are always written; the others are left out when empty."""

    sample_time: str  # the Prometheus sample time, RFC 3339 (UTC, "Z")
    schedulable: bool  # False when a hard constraint is violated
    fallback: bool  # memory pressure judged without PSI
    kata_ready: bool
    level: float | None = None  # None: no detection had data on this node
    score: float | None = None
    reasons: list[str] = msgspec.field(default_factory=list)
    detections: dict[str, DetectionState] = msgspec.field(default_factory=dict)
    signals: dict[str, float] | None = None  # None in --compact reports
    violations: list[Violation] = msgspec.field(default_factory=list)
    missing: list[str] = msgspec.field(default_factory=list)  # series absent in this sample


class Condition(msgspec.Struct, rename="camel", omit_defaults=True):
    type: str  # SourceReachable | Synced
    status: Literal["True", "False", "Unknown"]
    last_transition_time: str
    reason: str = ""
    message: str = ""


class ReportStatus(msgspec.Struct, rename="camel", omit_defaults=True):
    nodes: dict[str, NodeEntry] = msgspec.field(default_factory=dict)
    last_sync_time: str | None = None
    rule_config_generation: int | None = None
    conditions: list[Condition] = msgspec.field(default_factory=list)


class ObjectMeta(msgspec.Struct, rename="camel", omit_defaults=True):
    name: str
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    resource_version: str | None = None
    generation: int | None = None


class NodeInterferenceReport(msgspec.Struct, rename="camel"):
    metadata: ObjectMeta
    api_version: str = API_VERSION
    kind: str = KIND
    status: ReportStatus = msgspec.field(default_factory=ReportStatus)


class ReportList(msgspec.Struct, rename="camel"):
    """What a list call returns; a reader may hold either layout, or both during a switch."""

    items: list[NodeInterferenceReport]
    metadata: dict[str, object] = msgspec.field(default_factory=dict)


def decode_report(data: bytes | str) -> NodeInterferenceReport:
    return msgspec.json.decode(data, type=NodeInterferenceReport)


def encode(obj: object) -> bytes:
    return msgspec.json.encode(obj)
