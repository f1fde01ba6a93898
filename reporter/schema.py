"""The NodeInterferenceReport custom resource (DESIGN §4): the reporter writes it, the extender
reads it. These structs are the single definition of its shape; the CRD is generated from them.

Two layouts share this shape. ``cluster``: one object named ``cluster`` whose ``status.nodes``
holds every node. ``per-node``: one object per node, named after it, whose ``status.nodes`` holds
that node alone. Objects carry the label ``mco.io/layout`` so readers can tell them apart.
JSON has no NaN: writers drop non-finite numbers (they are reported in ``missing``).

Freshness (how old a node's data is): an entry with ``live: true`` is re-checked by the reporter
at every successful sync and rewritten only when a value moves beyond a small epsilon, so its
values hold up to the *heartbeat*, ``status.lastSyncTime`` of the object named ``cluster`` (in
both layouts), and ``sampleTime`` only says when they last changed. An entry without ``live``
(its node had no fresh samples at the last sync) holds only at ``sampleTime``. ``entry_time``
applies this rule; readers must judge staleness with it, not with ``sampleTime`` alone. When
Prometheus cannot be queried, the heartbeat stops, so every entry ages and goes stale.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Annotated, Final, Literal

import msgspec

from mco.policy import MAX_POLICIES, Policy, check_policy_names
from rulegen.durations import parse_duration

GROUP: Final = "mco.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "NodeInterferenceReport"
PLURAL: Final = "nodeinterferencereports"
CLUSTER_REPORT_NAME: Final = "cluster"
LAYOUT_LABEL: Final = "mco.io/layout"
# Seconds a sample time may be ahead of the reader's or writer's clock (clock skew between the
# hosts) and still be believed; a time further ahead is an error, never "fresh until then".
MAX_CLOCK_SKEW: Final = 60.0
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


class PodRef(msgspec.Struct, rename="camel", omit_defaults=True, gc=False):
    """A pod in a node's victims or aggressors (``reporter.culprits``): what it is ranked by
    (``resource``, ``value``) and who it is (namespace and name from kube-state-metrics'
    kube_pod_info; left out where Prometheus has none for the pod)."""

    pod_uid: str
    resource: str  # memory | io (victims); memory | io | llc (aggressors)
    value: float  # victims: share stalled; aggressors: bytes (memory, llc) or bytes/s (io)
    qos: str = ""  # guaranteed | burstable | besteffort
    namespace: str = ""
    name: str = ""
    # namespace/Kind/name of its controller (``mco.workload``), from kube_pod_info's
    # created_by_kind and created_by_name: what workload profiles are kept under.
    workload: str = ""


class ResourceProfile(msgspec.Struct, rename="camel", omit_defaults=True, gc=False):
    """What a workload does to one resource and suffers from it (``reporter.profiles``): each
    a decayed mean of its samples, with the decayed number of samples behind it."""

    aggressor: float = 0.0  # intensity: its share of the pollution named on nodes with victims
    aggressor_count: float = 0.0
    victim: float = 0.0  # sensitivity: its stall share (PSI some) where it was a victim
    victim_count: float = 0.0


class WorkloadProfile(msgspec.Struct, rename="camel", omit_defaults=True, gc=False):
    """One workload's learned interference profile, by resource (llc, io, memory)."""

    workload: str  # namespace/Kind/name (mco.workload)
    observations: float  # decayed samples of every resource: the confidence
    last_seen: str  # RFC 3339: the last cycle it was named
    resources: dict[str, ResourceProfile] = msgspec.field(default_factory=dict)


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
    live: bool = False  # values hold up to the heartbeat (see the module docstring)
    # Node PSI judged memory and I/O: the node has no per-pod pressure series.
    pod_fallback: bool = False
    victims: list[PodRef] = msgspec.field(default_factory=list)  # not in --compact reports
    aggressors: list[PodRef] = msgspec.field(default_factory=list)  # not in --compact reports


class Condition(msgspec.Struct, rename="camel", omit_defaults=True):
    type: str  # SourceReachable | Synced
    status: Literal["True", "False", "Unknown"]
    last_transition_time: str
    reason: str = ""
    message: str = ""


class ReportSummary(msgspec.Struct, rename="camel", omit_defaults=True):
    """What ``kubectl get`` shows (the printer columns), correct whichever node comes first:
    the whole report on the object named ``cluster`` (both layouts), the one node on a per-node
    object. ``stale`` is only on ``cluster``: staleness moves with the heartbeat, not with an
    entry, and writing it into every node object would cost a write per node."""

    nodes: int
    unschedulable: int  # nodes with schedulable=false
    max_level: float | None = None  # None: no node has a level
    min_score: float | None = None
    stale: int | None = None  # nodes a reader judged stale at the last write (cluster only)


class ThresholdConfig(msgspec.Struct, rename="camel"):
    """A signal's thresholds in force (``warn > critical``: lower is worse)."""

    warn: float
    critical: float


class DetectionConfig(msgspec.Struct, rename="camel", omit_defaults=True):
    """A detection's weight and its signals' thresholds in force, signals by report key."""

    weight: float
    signals: dict[str, ThresholdConfig] = msgspec.field(default_factory=dict)
    fallback: dict[str, ThresholdConfig] = msgspec.field(default_factory=dict)  # without PSI


class ConstraintConfig(msgspec.Struct, rename="camel"):
    """A hard constraint's limit in force and the report signal it limits."""

    signal: str
    limit: float


class ReportConfig(msgspec.Struct, rename="camel", omit_defaults=True):
    """What readers of the report follow from the accepted DetectionRuleConfig (the reporter
    copies it; a rejected config never gets here): its ``report`` settings and ``policies``,
    and the thresholds in force that explanations quote (``detections`` keyed by detection
    label and ``hardConstraints`` by constraint label, as in ``status.nodes``; None from an
    older reporter)."""

    stale_after: str  # a DetectionRuleConfig duration, e.g. 30s
    neutral_score: Annotated[float, msgspec.Meta(ge=0, le=100)]
    # At most as many as rulegen accepts, names unique: readers key tables by policy name.
    policies: Annotated[list[Policy], msgspec.Meta(max_length=MAX_POLICIES)] = msgspec.field(
        default_factory=list
    )
    generation: int | None = None  # None: the config came from a file or the defaults
    detections: dict[str, DetectionConfig] | None = None
    hard_constraints: dict[str, ConstraintConfig] | None = None

    def __post_init__(self) -> None:
        check_policy_names(self.policies)  # a ValueError is a decode error (msgspec)

    def stale_after_seconds(self) -> float:
        """``staleAfter`` in seconds; ValueError when it is not a positive duration."""
        return float(parse_duration(self.stale_after))


class ReportStatus(msgspec.Struct, rename="camel", omit_defaults=True):
    nodes: dict[str, NodeEntry] = msgspec.field(default_factory=dict)
    last_sync_time: str | None = None
    rule_config_generation: int | None = None
    config: ReportConfig | None = None  # on the object named cluster
    conditions: list[Condition] = msgspec.field(default_factory=list)
    node_count: int | None = None  # nodes in the whole report (set on the `cluster` object)
    summary: ReportSummary | None = None
    # On the object named cluster: learned workload profiles (reporter.profiles), bounded.
    profiles: list[WorkloadProfile] | None = None


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
    api_version: str = "v1"
    kind: str = "List"


class _Document(msgspec.Struct):
    """Either form a report document takes: one object, or a ``List`` of them."""

    kind: str = ""
    items: list[NodeInterferenceReport] | None = None


_document = msgspec.json.Decoder(_Document)
_report = msgspec.json.Decoder(NodeInterferenceReport)


def decode_report(data: bytes) -> NodeInterferenceReport:
    """One report object; ValueError when ``data`` is not one."""
    try:
        return _report.decode(data)
    except (msgspec.DecodeError, RecursionError) as exc:  # RecursionError: nesting too deep
        raise ValueError(f"not a NodeInterferenceReport: {exc}") from exc


def decode_reports(data: bytes) -> list[NodeInterferenceReport]:
    """The reports in a document of either form (what ``mco-reporter --output`` writes, and
    what ``kubectl get -o json`` prints); ValueError when it is neither."""
    try:
        doc = _document.decode(data)
        if doc.items is not None or doc.kind.endswith("List"):
            return list(doc.items or [])
        return [_report.decode(data)]
    except (msgspec.DecodeError, RecursionError) as exc:  # ValidationError is a DecodeError
        raise ValueError(f"not a NodeInterferenceReport or a List of them: {exc}") from exc


def encode(obj: object) -> bytes:
    return msgspec.json.encode(obj)


def format_time(unix: float) -> str:
    """RFC 3339 in UTC with milliseconds (Prometheus sample times are milliseconds).
    ValueError for what is not a time RFC 3339 can spell (NaN, ±inf, past year 9999)."""
    try:
        moment = datetime.fromtimestamp(unix, UTC)
    except (ValueError, OverflowError, OSError) as exc:
        raise ValueError(f"not a time: {unix!r}") from exc
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_time(text: str | None) -> float:
    """Unix seconds of an RFC 3339 time; -inf (always stale) when absent or unparsable."""
    if not text:
        return -math.inf
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return -math.inf
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def summarize(entries: Iterable[NodeEntry], stale: int | None = None) -> ReportSummary:
    """The summary of ``entries`` (one pass; ``stale`` comes from the caller, who knows the
    heartbeat and ``staleAfter``)."""
    nodes = unschedulable = 0
    max_level: float | None = None
    min_score: float | None = None
    for entry in entries:
        nodes += 1
        if not entry.schedulable:
            unschedulable += 1
        level = entry.level
        if level is not None and (max_level is None or level > max_level):
            max_level = level
        score = entry.score
        if score is not None and (min_score is None or score < min_score):
            min_score = score
    return ReportSummary(nodes, unschedulable, max_level, min_score, stale)


def heartbeat_of(reports: Iterable[NodeInterferenceReport]) -> float:
    """The heartbeat: Unix time of ``status.lastSyncTime`` of the ``cluster`` object, or -inf."""
    for report in reports:
        if report.metadata.name == CLUSTER_REPORT_NAME:
            return parse_time(report.status.last_sync_time)
    return -math.inf


def entry_time(entry: NodeEntry, heartbeat: float) -> float:
    """Unix time up to which ``entry``'s values are known to hold (the freshness rule above)."""
    sampled = parse_time(entry.sample_time)
    return max(sampled, heartbeat) if entry.live else sampled
