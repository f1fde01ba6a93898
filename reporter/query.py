"""The PromQL queries a reporter cycle runs, and the parse of their answers into per-node vectors.

Three instant queries per cycle, whatever the number of nodes, all at the same evaluation time
(so they see one consistent state) and sent together:

1. ``last_over_time({__name__=~"<the recorded series the report needs>"}[<W>s])``: every
   node's signals, detections, level, score, hard constraints and fallback flag, read over a
   window ``W`` of ``staleAfter`` rounded up plus one second (``window``), never more: the
   tracker treats a node whose newest sample is older than ``staleAfter`` as absent, so no
   older value is ever used. A plain selector would make the engine look back its whole lookback
   (5 minutes in Prometheus) and decode every sample in it to find the newest, ~300 per series
   at a 1 s interval (bench/reporter.py measures both). ``last_over_time`` keeps the metric name
   in Prometheus (2.x and 3.x, and so Thanos and Mimir) and VictoriaMetrics, so the answer is
   the plain selector's, and the parse decodes metric names and label values from a closed
   set, so they cost no allocation. A series that ended (a staleness marker) keeps its last
   value in the window, so a node is reported only where the second query has its sample time
   (``parse``), which is read plainly and ends with the series.
2. Each node's sample time and Kata readiness, tagged with a ``k`` label. The sample time is
   ``timestamp()`` of the node's recorded series: an instant query stamps every result with the
   evaluation time, which says nothing about the data's age.
3. ``mco:rule_config:info``: which DetectionRuleConfig the rules encode.

Unless the report is compact, the second query also carries each node's victims and
aggressors (``reporter.culprits``), joined with ``or``: their labels (``role``) never clash
with the tagged series' (``k``).

NaN and ±Inf arrive as such and become absent values (named in the entry's ``missing``).
"""

from __future__ import annotations

import asyncio
import copy
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import groupby
from typing import TYPE_CHECKING, Final, Literal, cast

import msgspec

from mco.promql import BAD_ANSWER, PromQLClient, SourceError
from reporter import culprits as culprit_lists
from reporter.fields import FIELDS, Kind, Per, Query, Tolerance
from rulegen import series
from rulegen.catalog import CATALOG, Catalog
from rulegen.model import DetectionRuleConfig

SLOT_LABEL: Final = "k"
TIME_TAG: Final = "t"
KATA_TAG: Final = "kata"
MISSING: Final = math.inf  # an absent value in a vector (see entries.py)
_NAME: Final = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
DEFAULT_STALE_AFTER: Final = float(DetectionRuleConfig.default().report.stale_after)


def window(stale_after: float) -> int:
    """Seconds of history the recorded query reads: every sample the tracker still uses (not
    older than ``stale_after``), rounded up, and one second more for engines whose ranges are
    open on the left (Prometheus 3, VictoriaMetrics), where a sample exactly ``stale_after``
    old would otherwise fall out."""
    return math.ceil(stale_after) + 1


@dataclass(frozen=True, slots=True)
class Slot:
    """One value of a node's vector: a report field (``reporter.fields``) for one key."""

    kind: Kind
    series: str  # the metric the value comes from
    key: str = ""  # report signal key, detection label or constraint label
    missing: str = ""  # its name in NodeEntry.missing
    tolerance: Tolerance = Tolerance.EXACT
    query: Query = Query.RECORDED
    per: Per = Per.NODE
    is_bool: bool = False
    bounds: tuple[float, float] | None = None  # None: any finite value

    @property
    def labelled(self) -> bool:
        """Selected by its ``detection`` or ``constraint`` label, not by name alone."""
        return self.per in (Per.DETECTION, Per.CONSTRAINT)


class Plan:
    """Which slots a report needs (``compact`` drops the signal snapshot) and the query text,
    derived from the report fields and the detection catalog; the recorded query reads
    ``window(stale_after)`` seconds (``windowed`` follows a new DetectionRuleConfig)."""

    def __init__(
        self,
        *,
        compact: bool,
        catalog: Catalog = CATALOG,
        stale_after: float = DEFAULT_STALE_AFTER,
    ) -> None:
        self.compact = compact
        self.catalog = catalog
        # The recorded series (by catalog key) that each hard constraint compares with its limit.
        self.constraint_signals = {c.label: c.recorded for c in catalog.constraints}
        wanted = set(self.constraint_signals.values())
        keys: dict[Per, list[tuple[str, str]]] = {
            Per.NODE: [("", "")],
            Per.REPORTED: [
                (r.key, r.series) for r in catalog.reported if not compact or r.key in wanted
            ],
            Per.DETECTION: [(d.label, "") for d in catalog.detections],
            Per.CONSTRAINT: [(c.label, "") for c in catalog.constraints],
        }
        slots: list[Slot] = []
        for per, group in groupby(FIELDS, key=lambda f: f.per):
            fields = list(group)
            for key, own in keys[per]:
                slots += [
                    Slot(
                        f.kind,
                        f.series or own,
                        key,
                        f.missing.format(key=key),
                        f.tolerance,
                        f.query,
                        f.per,
                        f.boolean,
                        f.bounds,
                    )
                    for f in fields
                ]
        self.slots: tuple[Slot, ...] = tuple(slots)
        self.time_slot = next(i for i, s in enumerate(slots) if s.kind is Kind.TIME)
        self.kata_slot = next(i for i, s in enumerate(slots) if s.kind is Kind.KATA)
        self.signal_slots = {s.key: i for i, s in enumerate(slots) if s.kind is Kind.SIGNAL}
        # Where each recorded sample goes: by metric name, or by name and label value.
        self.simple: dict[str, int] = {}
        self.labelled: dict[str, dict[str, int]] = {}
        for i, s in enumerate(slots):
            if s.query is not Query.RECORDED:
                continue
            if s.labelled:
                self.labelled.setdefault(s.series, {})[s.key] = i
            else:
                self.simple[s.series] = i
        self.names = frozenset(s.series for s in slots if s.query is Query.RECORDED)
        self.label_values = frozenset(s.key for s in slots if s.labelled)
        self.window = window(stale_after)
        self.recorded_selector, self.extra_expr, self.info_expr = self._exprs()
        self.recorded_expr = self._recorded()
        self.exprs = (self.recorded_expr, self.extra_expr, self.info_expr)

    def windowed(self, stale_after: float) -> Plan:
        """This plan with the recorded query's window for ``stale_after`` (self if the same)."""
        if window(stale_after) == self.window:
            return self
        plan = copy.copy(self)
        plan.window = window(stale_after)
        plan.recorded_expr = plan._recorded()
        plan.exprs = (plan.recorded_expr, plan.extra_expr, plan.info_expr)
        return plan

    def _recorded(self) -> str:
        return f"last_over_time({self.recorded_selector}[{self.window}s])"

    def _exprs(self) -> tuple[str, str, str]:
        names = sorted(self.names)
        for name in names:
            if not _NAME.match(name):
                raise ValueError(f"not a metric name: {name!r}")
        recorded = '{__name__=~"' + "|".join(names) + '"}'
        # timestamp() gives a sample's own time only when applied straight to a selector, and
        # it drops the metric name, so each selector is aggregated by node on its own and the
        # two are combined into their element-wise max, `(a >= b) or b`. Both series exist on
        # every node the rules know (they are recorded `or on (node) mco_node_info`).
        a = f"max by (node) (timestamp({series.MEMORY_PRESSURE_FALLBACK}))"
        b = f"max by (node) (timestamp({series.DETECTION_TRIGGERED}))"
        times = f'label_replace(({a} >= {b}) or {b}, "{SLOT_LABEL}", "{TIME_TAG}", "", "")'
        kata = f"max by (node) ({series.KATA_READY})"
        kata = f'label_replace({kata}, "{SLOT_LABEL}", "{KATA_TAG}", "", "")'
        return recorded, f"{times} or {kata}", series.RULE_CONFIG_INFO


# ---------------------------------------------------------------------------------------------
# The answer


# Metric names and label values the answers can hold. Decoding into Literals returns these very
# string objects (interned, hash cached) instead of allocating one per sample.
_DEFAULT_PLAN: Final = Plan(compact=False)
_RECORDED_NAMES: Final = tuple(sorted(_DEFAULT_PLAN.names))
_LABEL_VALUES: Final = tuple(sorted(_DEFAULT_PLAN.label_values))
if TYPE_CHECKING:
    RecordedName = str
    LabelValue = str
else:
    RecordedName = Literal[_RECORDED_NAMES]
    LabelValue = Literal[_LABEL_VALUES]


class Point(msgspec.Struct, array_like=True, gc=False):
    """``[time, "value"]``; a struct the garbage collector does not track (a tuple would be, and
    there are nodes x series of them per cycle)."""

    time: float
    value: float


class RecordedLabels(msgspec.Struct, gc=False):
    name: RecordedName = msgspec.field(name="__name__")
    node: str = ""
    detection: LabelValue | None = None
    constraint: LabelValue | None = None


class RecordedSample(msgspec.Struct, gc=False):
    metric: RecordedLabels
    value: Point


class LooseLabels(msgspec.Struct, gc=False):
    """Any names and label values (rules newer than this reporter): unknown ones are skipped."""

    name: str = msgspec.field(name="__name__", default="")
    node: str = ""
    detection: str | None = None
    constraint: str | None = None


class LooseSample(msgspec.Struct, gc=False):
    metric: LooseLabels
    value: Point


class TaggedLabels(msgspec.Struct, gc=False):
    k: str = ""
    node: str = ""
    # A pod of the victims and aggressors query (``reporter.culprits``), sent along with the
    # tagged series when the report holds them.
    role: str = ""
    pod_uid: str = ""
    qos: str = ""
    resource: str = ""
    namespace: str = ""
    pod: str = ""
    created_by_kind: str = ""
    created_by_name: str = ""


class TaggedSample(msgspec.Struct, gc=False):
    metric: TaggedLabels
    value: Point


class InfoLabels(msgspec.Struct, gc=False):
    generation: str = ""
    hash: str = ""


class InfoSample(msgspec.Struct, gc=False):
    metric: InfoLabels
    value: Point


@dataclass(frozen=True, slots=True)
class RuleInfo:
    generation: int | None
    hash: str


@dataclass(slots=True)
class Snapshot:
    """What the source said at ``at``: one vector per node (slot order of the plan; MISSING
    where the node has no finite value) and the rule-config info series."""

    at: float
    vectors: dict[str, list[float]]
    rules: list[RuleInfo]
    answer_bytes: int
    # Per node with any: its victims and aggressors (none where the query was not run).
    culprits: dict[str, culprit_lists.Culprits] = field(default_factory=dict)


async def fetch(
    client: PromQLClient, plan: Plan, at: float, culprits: str | None = None
) -> Snapshot:
    """Run the plan's three queries at ``at`` and parse the answers. Raises SourceError.
    ``culprits`` (``reporter.culprits.query``): the victims and aggressors query, sent with
    the second one."""
    strict = plan.names <= _DEFAULT_PLAN.names and plan.label_values <= _DEFAULT_PLAN.label_values
    sample: type[RecordedSample] | type[LooseSample] = RecordedSample if strict else LooseSample
    first = asyncio.ensure_future(client.query(plan.recorded_expr, at, sample, LooseSample))
    extra_expr = plan.extra_expr if culprits is None else f"{plan.extra_expr} or ({culprits})"
    second = asyncio.ensure_future(client.query(extra_expr, at, TaggedSample))
    third = asyncio.ensure_future(client.query(plan.info_expr, at, InfoSample))
    try:
        recorded, a = await first
        extra, b = await second
        info, c = await third
    except BaseException:
        for task in (first, second, third):
            task.cancel()
        await asyncio.gather(first, second, third, return_exceptions=True)
        raise
    samples = cast(list[RecordedSample] | list[LooseSample], recorded)
    return parse(plan, samples, extra, info, at, a + b + c)


def parse(
    plan: Plan,
    recorded: Sequence[RecordedSample] | Sequence[LooseSample],
    extra: Sequence[TaggedSample],
    info: Sequence[InfoSample],
    at: float,
    size: int = 0,
) -> Snapshot:
    """Group the answers by node; a node without a sample time is left out. The first loop runs
    once per sample (nodes x series), so it is kept to dict lookups and a list store."""
    simple = plan.simple
    labelled = plan.labelled
    template = [MISSING] * len(plan.slots)
    vectors: dict[str, list[float]] = {}
    for s in recorded:
        m = s.metric
        v = vectors.get(m.node)
        if v is None:
            if not m.node:
                raise SourceError(BAD_ANSWER, f"a {m.name} sample without a node label")
            v = vectors[m.node] = template.copy()
        label = m.detection or m.constraint
        if label is None:
            i = simple.get(m.name)
        else:
            by_label = labelled.get(m.name)
            i = by_label.get(label) if by_label is not None else None
        if i is not None:
            x = s.value.value
            v[i] = x if x == x else MISSING  # NaN
    time_slot, kata_slot = plan.time_slot, plan.kata_slot
    pods: list[TaggedLabels] = []
    values: list[float] = []
    for t in extra:
        if t.metric.role:
            pods.append(t.metric)
            values.append(t.value.value)
            continue
        v = vectors.get(t.metric.node)
        if v is None:
            continue  # no recorded series for this node: nothing to report
        x = t.value.value
        if t.metric.k == TIME_TAG:
            v[time_slot] = x
        elif t.metric.k == KATA_TAG and x == x:
            v[kata_slot] = x
    # The recorded query is windowed, so a node whose series ended (staleness markers: its
    # exporter is gone) keeps its last values there for up to the window; the sample time is
    # read plainly and ends with them. Without one the node is absent, as it always was.
    for node in [node for node, v in vectors.items() if v[time_slot] == MISSING]:
        del vectors[node]
    rules = [RuleInfo(_int_or_none(i.metric.generation), i.metric.hash) for i in info]
    return Snapshot(at, vectors, rules, size, culprit_lists.parse(pods, values))


def _int_or_none(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


__all__ = [
    "DEFAULT_STALE_AFTER",
    "KATA_TAG",
    "MISSING",
    "SLOT_LABEL",
    "TIME_TAG",
    "InfoLabels",
    "InfoSample",
    "Kind",  # re-exported: the readers of a plan's slots need it
    "LooseLabels",
    "LooseSample",
    "Plan",
    "Point",
    "RecordedLabels",
    "RecordedSample",
    "RuleInfo",
    "Slot",
    "Snapshot",
    "TaggedLabels",
    "TaggedSample",
    "fetch",
    "parse",
    "window",
]
