"""The detection model's parts, each declared once: recorded series, detections, hard constraints.

Everything else is derived from these tables: the recording rules (``rulegen.render`` and its
template loop over them), the DetectionRuleConfig defaults and validation (``rulegen.model``),
its CRD (``rulegen.crd``), the names in ``rulegen.series``, the reporter's query plan and report
fields (``reporter.query``, ``reporter.fields``) and the dashboards. Adding a signal is adding one
``Signal`` row to ``RECORDED`` (docs/architecture.md, "How to add a signal"). Every function
that derives something takes a ``Catalog`` (default: ``CATALOG``), so a test can derive the
whole pipeline from a copy with a signal added, without touching this one.

The PromQL of a recorded series is a ``string.Template``: ``$w`` is the window, and ``$<key>``
the name of the recorded series declared under that key above it (so an expression can read
an intermediate series, or fall back on another signal).
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True, slots=True, kw_only=True)
class Recorded:
    """A per-node series the rules record, smoothed over the window, before any threshold."""

    key: str  # camelCase key: the report's ``signals`` key, the config key of a signal
    series: str  # the recorded series' name
    expr: str  # PromQL as a string.Template ($w: window, $<key>: another row's series)
    comment: str = ""  # lines written above the rule in the rule file
    unit: str = ""  # ratio | seconds | pages/s | bytes (the dashboards map it to Grafana's)
    help: str = ""  # one line: what the value is
    maximum: float | None = None  # natural upper bound of the value (1 for ratios)


@dataclass(frozen=True, slots=True, kw_only=True)
class Intermediate(Recorded):
    """Recorded only so later rules read it instead of the raw series (not reported)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Context(Recorded):
    """Recorded and reported for reading (dashboards, hard constraints), never thresholded."""

    title: str  # its node-dashboard panel, e.g. "PSI io full"
    scale: float = 1.0  # a change of epsilon × scale is worth a report write


@dataclass(frozen=True, slots=True, kw_only=True)
class Signal(Recorded):
    """A thresholded signal: it feeds the index of one detection."""

    detection: str  # the detection's config key
    label: str  # the ``signal`` label value on per-signal series
    warn: float  # default thresholds (the CR's defaults)
    critical: float
    lower_is_worse: bool = False  # then warn > critical, and the index is mirrored
    fallback: bool = False  # counts only where the detection's fallback is in force (no PSI)


@dataclass(frozen=True, slots=True, kw_only=True)
class Detection:
    key: str  # config key, e.g. "ioCongestion"
    label: str  # the ``detection`` label value
    weight: float  # default weight
    psi_fallback: bool = False  # signals split by PSI availability (primary vs fallback)


@dataclass(frozen=True, slots=True, kw_only=True)
class HardConstraint:
    """A limit on one recorded series that makes a node unschedulable while exceeded."""

    key: str  # config key under spec.hardConstraints
    label: str  # the ``constraint`` label value
    recorded: str  # key of the recorded series (signal or context) it limits
    default: float
    title: str  # short human name, e.g. "PSI io some"
    help: str
    maximum: float | None = 1  # upper bound of the limit (None: rulegen.limits' bound); >= 0
    lower_is_worse: bool = False  # violated below the limit instead of above it

    @property
    def operator(self) -> str:
        """PromQL comparison that holds while the constraint is violated."""
        return "<" if self.lower_is_worse else ">"

    @property
    def relation(self) -> str:
        return "below" if self.lower_is_worse else "above"


def _psi(resource: str, kind: str) -> str:
    return (
        "clamp_max(max by (node) (rate(mco_pressure_stalled_seconds_total"
        f'{{resource="{resource}",kind="{kind}"}}[$w])), 1)'
    )


# A pod "hit its own limit" in the window when its memory usage came within this share of its
# memory limit, or its I/O rate within this share of its io.max/blkio throttle limit
# (docs/detection-model.md, "Victims, not self-inflicted stalls").
SELF_LIMIT_SHARE: Final = 0.9
_POD: Final = "node, pod_uid, qos"


def _victims(resource: str, kind: str) -> str:
    """The worst stall among the node's pods that hit no limit of their own; 0 where the node
    has per-pod data but no such pod stalls; absent where it has no per-pod data."""
    # The raw series, not $podPressure{...}: a label matcher cannot follow an expression, and
    # Catalog.inline_expr (mco-rulegen recommend, the guard) inlines $podPressure as one.
    return f"""\
max by (node) (
  clamp_max(
    max by ({_POD}) (
      rate(mco_pod_pressure_stalled_seconds_total{{resource="{resource}",kind="{kind}"}}[$w])
    ),
    1
  )
  unless on (node, pod_uid)
  ($podMemorySelfLimited == 1 or $podIOSelfLimited == 1)
)
or
max by (node) ($podPressure) * 0"""


def _judged(victims_key: str, resource: str, kind: str) -> str:
    """The victims' stall where the node has per-pod data, else the node's PSI."""
    return f"${victims_key}\nor\n{_psi(resource, kind)}"


_JUDGED_COMMENT: Final = """\
The victims' stall where the node has per-pod data, else the node's PSI (which counts a pod
stalling in its own limit too; node:mco_pod_pressure_fallback:bool says which)."""


_BLOCK_IO_LATENCY_HELP: Final = (
    "th percentile block request latency of the node's worst device (eBPF histogram; "
    "the diskstats mean latency where the node has no histogram)."
)

# Per (node, device, le): the bucket rates over the window, summed over operations where the
# exporter splits them. Read raw by each quantile, not recorded once for both: with one
# histogram per device, a recorded copy would cost as many writes and reads as it saves.
_LATENCY_BUCKET_RATES: Final = (
    "sum by (node, device, le) (rate(mco_block_io_latency_seconds_bucket[$w]))"
)

# In rule-file order: rules run in order within the group, each seeing the ones above.
RECORDED: Final[tuple[Recorded, ...]] = (
    Signal(
        key="llcMissRatio",
        series="node:mco_llc_miss_ratio:smoothed",
        label="llc_miss_ratio",
        detection="cachePollution",
        unit="ratio",
        help="Last-level-cache misses per LLC reference, all CPUs.",
        maximum=1.0,
        warn=0.5,
        critical=0.8,
        expr="""\
clamp_max(
    (max by (node) (rate(mco_llc_references_total[$w])) == 0)
  or
      max by (node) (rate(mco_llc_misses_total[$w]))
    / max by (node) (rate(mco_llc_references_total[$w])),
  1
)""",
    ),
    Context(
        key="llcOccupancyBytes",
        title="LLC occupancy",
        series="node:mco_llc_occupancy_bytes:smoothed",
        unit="bytes",
        help="resctrl LLC occupancy summed over the node's control groups.",
        scale=1 << 20,
        expr="""\
sum by (node) (
  max by (node, domain, group) (avg_over_time(mco_llc_occupancy_bytes{type="ctrl_mon"}[$w]))
)""",
    ),
    Signal(
        key="blockIOLatencyP95Seconds",
        series="node:mco_block_io_latency_p95_seconds:smoothed",
        label="block_io_latency_p95_seconds",
        detection="ioCongestion",
        unit="seconds",
        help="95" + _BLOCK_IO_LATENCY_HELP,
        warn=0.025,
        critical=0.1,
        comment="""\
The node's worst device: eBPF histogram where the node has one (0 when no device did
I/O in the window), else the diskstats mean latency. The exporter sums a device's
operations by default (a pod waits for its flushes as much as for its reads); the sum by
device here does the same with its --collector.biolatency.by-operation.""",
        expr=f"""\
max by (node) (histogram_quantile(0.95, {_LATENCY_BUCKET_RATES}) >= 0)
or
max by (node) (mco_block_io_latency_seconds_count) * 0
or
max by (node) (
  rate(mco_block_io_time_seconds_total[$w]) / (rate(mco_block_io_completed_total[$w]) > 0)
)
or
max by (node) (rate(mco_block_io_completed_total[$w])) * 0""",
    ),
    Signal(
        key="blockIOLatencyP99Seconds",
        series="node:mco_block_io_latency_p99_seconds:smoothed",
        label="block_io_latency_p99_seconds",
        detection="ioCongestion",
        unit="seconds",
        help="99" + _BLOCK_IO_LATENCY_HELP,
        warn=0.05,
        critical=0.25,
        comment="""\
histogram_quantile is NaN on a device for every q in (0, 1) or for none (no request in
the window, no +Inf bucket: nothing that depends on q), and never negative with the
exporter's positive bounds. So a node without a 0.99 quantile has no 0.95 one either,
and its P95 above holds exactly the fallback value P99 needs: the histogram-count and
diskstats branches are evaluated once, not twice.""",
        expr=f"""\
max by (node) (histogram_quantile(0.99, {_LATENCY_BUCKET_RATES}) >= 0)
or
$blockIOLatencyP95Seconds""",
    ),
    Intermediate(
        key="podPressure",
        series="node_pod:mco_pressure_ratio:smoothed",
        comment="""\
Per pod (labels pod_uid, qos, resource, kind): seconds stalled per second, at most 1.
cpu is left out: no limit of a pod's own (CFS quota) is exported to tell throttling apart.""",
        expr=f"""\
clamp_max(
  max by ({_POD}, resource, kind) (
    rate(mco_pod_pressure_stalled_seconds_total{{resource=~"io|memory"}}[$w])
  ),
  1
)""",
    ),
    Intermediate(
        key="podMemorySelfLimited",
        series="node_pod:mco_memory_self_limited:bool",
        comment=f"""\
Per pod: 1 where it hit its own memory limit in the window (a max, high or oom_kill event,
or usage within {SELF_LIMIT_SHARE:g} of its limit), else 0.""",
        expr=f"""\
group by ({_POD}) (
    max by ({_POD}) (
      increase(mco_pod_memory_events_total{{event=~"max|high|oom_kill"}}[$w])
    ) > 0
  or
      max by ({_POD}) (max_over_time(mco_pod_memory_usage_bytes[$w]))
    >= {SELF_LIMIT_SHARE:g} * max by ({_POD}) (mco_pod_memory_limit_bytes)
)
or
max by ({_POD}) ($podPressure) * 0""",
    ),
    Intermediate(
        key="podIOSelfLimited",
        series="node_pod:mco_io_self_limited:bool",
        comment=f"""\
Per pod: 1 where its bytes or operations per second reached {SELF_LIMIT_SHARE:g} of its own I/O
limit (io.max, blkio throttle) for an operation in the window, else 0.""",
        expr=f"""\
group by ({_POD}) (
    max by ({_POD}, operation) (rate(mco_pod_io_bytes_total[$w]))
    >= {SELF_LIMIT_SHARE:g} * max by ({_POD}, operation) (mco_pod_io_limit_bytes_per_second)
  or
    max by ({_POD}, operation) (rate(mco_pod_io_operations_total[$w]))
    >= {SELF_LIMIT_SHARE:g} * max by ({_POD}, operation) (mco_pod_io_limit_operations_per_second)
)
or
max by ({_POD}) ($podPressure) * 0""",
    ),
    Intermediate(
        key="victimMemorySome",
        series="node:mco_victim_pressure_memory_some:ratio",
        comment="""\
Victims: pods that hit neither their memory nor their I/O limit in the window (a pod
thrashing in its own memory limit stalls on I/O too). The worst one's stall: a ratio like
the node's PSI, so the same thresholds apply; 0 where no pod is a victim.""",
        expr=_victims("memory", "some"),
    ),
    Intermediate(
        key="victimMemoryFull",
        series="node:mco_victim_pressure_memory_full:ratio",
        expr=_victims("memory", "full"),
    ),
    Intermediate(
        key="victimIOSome",
        series="node:mco_victim_pressure_io_some:ratio",
        expr=_victims("io", "some"),
    ),
    Intermediate(
        key="victimIOFull",
        series="node:mco_victim_pressure_io_full:ratio",
        expr=_victims("io", "full"),
    ),
    Context(
        key="psiCPUSome",
        title="PSI cpu some",
        series="node:mco_psi_cpu_some_ratio:smoothed",
        unit="ratio",
        help="Share of wall time some task waited for a CPU (PSI cpu some).",
        maximum=1.0,
        scale=0.1,
        expr=_psi("cpu", "some"),
    ),
    Signal(
        key="psiIOSome",
        series="node:mco_psi_io_some_ratio:smoothed",
        label="psi_io_some",
        detection="ioCongestion",
        unit="ratio",
        help="Share of wall time some task was stalled on I/O (PSI io some): the worst victim "
        "pod's (no own limit hit), the node's where it has no per-pod data.",
        maximum=1.0,
        warn=0.1,
        critical=0.4,
        comment=_JUDGED_COMMENT,
        expr=_judged("victimIOSome", "io", "some"),
    ),
    Context(
        key="psiIOFull",
        title="PSI io full",
        series="node:mco_psi_io_full_ratio:smoothed",
        unit="ratio",
        help="Share of wall time all non-idle tasks were stalled on I/O (PSI io full): the worst "
        "victim pod's, the node's where it has no per-pod data.",
        maximum=1.0,
        scale=0.1,
        comment=_JUDGED_COMMENT,
        expr=_judged("victimIOFull", "io", "full"),
    ),
    Signal(
        key="psiMemorySome",
        series="node:mco_psi_memory_some_ratio:smoothed",
        label="psi_memory_some",
        detection="memoryPressure",
        unit="ratio",
        help="Share of wall time some task was stalled on memory (PSI memory some): the worst "
        "victim pod's, the node's where it has no per-pod data.",
        maximum=1.0,
        warn=0.01,
        critical=0.1,
        comment=_JUDGED_COMMENT,
        expr=_judged("victimMemorySome", "memory", "some"),
    ),
    Context(
        key="psiMemoryFull",
        title="PSI memory full",
        series="node:mco_psi_memory_full_ratio:smoothed",
        unit="ratio",
        help="Share of wall time all non-idle tasks were stalled on memory (PSI memory full): "
        "the worst victim pod's, the node's where it has no per-pod data.",
        maximum=1.0,
        scale=0.1,
        comment=_JUDGED_COMMENT,
        expr=_judged("victimMemoryFull", "memory", "full"),
    ),
    Signal(
        key="memoryAvailableRatio",
        series="node:mco_memory_available_ratio:smoothed",
        label="memory_available_ratio",
        detection="memoryPressure",
        unit="ratio",
        help="MemAvailable / MemTotal; lower is worse. Used only where PSI is not available.",
        maximum=1.0,
        lower_is_worse=True,
        fallback=True,
        warn=0.15,
        critical=0.05,
        expr="""\
max by (node) (avg_over_time(mco_memory_available_bytes[$w]))
/ (max by (node) (avg_over_time(mco_memory_total_bytes[$w])) > 0)""",
    ),
    Signal(
        key="pageScanRate",
        series="node:mco_pgscan_rate:smoothed",
        label="pgscan_rate",
        detection="memoryPressure",
        unit="pages/s",
        help="Pages scanned by reclaim per second. Used only where PSI is not available.",
        fallback=True,
        warn=10000.0,
        critical=100000.0,
        comment="""\
By page type where the kernel has it (5.8+; includes memory-cgroup reclaim), else by
reclaimer: both count the same pages, so never their sum.""",
        expr="""\
sum by (node) (max by (node, type) (rate(mco_vmstat_pgscan_by_type_total[$w])))
or
sum by (node) (max by (node, reclaimer) (rate(mco_vmstat_pgscan_total[$w])))""",
    ),
    Signal(
        key="cpuStealRatio",
        series="node:mco_cpu_steal_ratio:smoothed",
        label="cpu_steal_ratio",
        detection="cpuContention",
        unit="ratio",
        help="Share of CPU time stolen by the hypervisor, per online CPU.",
        maximum=1.0,
        warn=0.05,
        critical=0.2,
        expr="""\
clamp_max(
    max by (node) (rate(mco_cpu_steal_seconds_total[$w]))
  / on (node) (max by (node) (mco_cpu_online) > 0),
  1
)""",
    ),
    Signal(
        key="runqueueWaitRatio",
        series="node:mco_runqueue_wait_ratio:smoothed",
        label="runqueue_wait_ratio",
        detection="cpuContention",
        unit="ratio",
        help="Seconds runnable tasks waited for a CPU per second per online CPU (can exceed 1).",
        warn=0.25,
        critical=1.0,
        expr="""\
max by (node) (rate(mco_runqueue_wait_seconds_total[$w]))
/ on (node) (max by (node) (mco_cpu_online) > 0)""",
    ),
    Signal(
        key="irqTimeRatio",
        series="node:mco_irq_time_ratio:smoothed",
        label="irq_time_ratio",
        detection="cpuContention",
        unit="ratio",
        help="Share of CPU time spent in hard and soft interrupts, per online CPU.",
        maximum=1.0,
        warn=0.1,
        critical=0.3,
        comment="""\
Each kind deduplicated over copies (two jobs scraping one exporter) before the sum.""",
        expr="""\
clamp_max(
    sum by (node) (max by (node, kind) (rate(mco_cpu_irq_seconds_total[$w])))
  / on (node) (max by (node) (mco_cpu_online) > 0),
  1
)""",
    ),
    Signal(
        key="irqMaxCPUShare",
        series="node:mco_irq_max_cpu_share:smoothed",
        label="irq_max_cpu_share",
        detection="cpuContention",
        unit="ratio",
        help="The busiest CPU's share of time in hard and soft interrupts, which a node "
        "average hides.",
        maximum=1.0,
        warn=0.25,
        critical=0.5,
        comment="""\
The exporter's gauge is the busiest CPU's share between two scrapes; averaged over the
window, it is the share of whichever CPU was busiest in each interval.""",
        expr="clamp_max(max by (node) (avg_over_time(mco_cpu_irq_busiest_ratio[$w])), 1)",
    ),
    Context(
        key="psiIRQFull",
        title="PSI irq full",
        series="node:mco_psi_irq_full_ratio:smoothed",
        unit="ratio",
        help="Share of wall time a CPU's tasks were stalled by IRQ work (PSI irq full; "
        "kernels 6.1+ with IRQ time accounting only).",
        maximum=1.0,
        scale=0.1,
        expr=_psi("irq", "full"),
    ),
)

DETECTIONS: Final[tuple[Detection, ...]] = (
    Detection(key="cachePollution", label="cache_pollution", weight=1.0),
    Detection(key="ioCongestion", label="io_congestion", weight=1.0),
    Detection(key="memoryPressure", label="memory_pressure", weight=1.0, psi_fallback=True),
    Detection(key="cpuContention", label="cpu_contention", weight=0.0),
)

HARD_CONSTRAINTS: Final[tuple[HardConstraint, ...]] = (
    HardConstraint(
        key="psiMemoryFullMax",
        label="psi_memory_full",
        recorded="psiMemoryFull",
        default=0.005,
        title="PSI memory full",
        help="Max share of time all tasks may stall on memory (PSI memory full); "
        "0: any full stall in the window counts.",
    ),
    HardConstraint(
        key="psiIOSomeMax",
        label="psi_io_some",
        recorded="psiIOSome",
        default=0.6,
        title="PSI io some",
        help="Max share of time some task may stall on I/O (PSI io some); 1 disables.",
    ),
)


@dataclass(frozen=True, slots=True)
class Catalog:
    """The three tables together, checked for consistency; everything derives from one."""

    recorded: tuple[Recorded, ...] = RECORDED
    detections: tuple[Detection, ...] = DETECTIONS
    constraints: tuple[HardConstraint, ...] = HARD_CONSTRAINTS

    def __post_init__(self) -> None:
        _check(self)

    @property
    def signals(self) -> tuple[Signal, ...]:
        return tuple(r for r in self.recorded if isinstance(r, Signal))

    @property
    def context(self) -> tuple[Context, ...]:
        return tuple(r for r in self.recorded if isinstance(r, Context))

    @property
    def reported(self) -> tuple[Signal | Context, ...]:
        """The report's signal snapshot, in its order: the signals, then the context series."""
        return (*self.signals, *self.context)

    @property
    def explanatory(self) -> frozenset[str]:
        """Keys of the rows no decision reads: context series no hard constraint compares, and
        intermediates only they read. The explanation group records them every window."""
        dependents: dict[str, set[str]] = {r.key: set() for r in self.recorded}
        for r in self.recorded:
            for key in string.Template(r.expr).get_identifiers():
                if key != "w":
                    dependents[key].add(r.key)
        out: set[str] = set()
        for r in reversed(self.recorded):  # a row's dependents come after it
            unread = isinstance(r, Context) and not self.constraints_on(r.key)
            only_for_those = isinstance(r, Intermediate) and bool(dependents[r.key])
            if unread or (only_for_those and dependents[r.key] <= out):
                out.add(r.key)
        return frozenset(out)

    def by_key(self, key: str) -> Recorded:
        for r in self.recorded:
            if r.key == key:
                return r
        raise KeyError(key)

    def signal(self, key: str) -> Signal:
        r = self.by_key(key)
        if not isinstance(r, Signal):
            raise KeyError(f"{key} is not a signal")
        return r

    def detection(self, key: str) -> Detection:
        for d in self.detections:
            if d.key == key:
                return d
        raise KeyError(key)

    def signals_of(self, detection: str, *, fallback: bool = False) -> tuple[Signal, ...]:
        return tuple(s for s in self.signals if s.detection == detection and s.fallback == fallback)

    def constraints_on(self, recorded_key: str) -> tuple[HardConstraint, ...]:
        return tuple(c for c in self.constraints if c.recorded == recorded_key)

    def expr(self, recorded: Recorded, window: str) -> str:
        """The PromQL of ``recorded`` for ``window`` (``$<key>`` resolved to series names)."""
        names = {r.key: r.series for r in self.recorded}
        return string.Template(recorded.expr).substitute(names, w=window)

    def inline_expr(self, recorded: Recorded, window: str) -> str:
        """The PromQL of ``recorded`` over the raw series alone: each ``$<key>`` is that
        series' own expression, so history recorded before the rules existed can be judged
        (``mco-rulegen recommend``)."""
        template = string.Template(recorded.expr)
        names = {
            key: f"({self.inline_expr(self.by_key(key), window)})"
            for key in template.get_identifiers()
            if key != "w"
        }
        return template.substitute(names, w=window)


def _check(catalog: Catalog) -> None:
    problems: list[str] = []
    keys = [r.key for r in catalog.recorded]
    for what, values in (
        ("recorded key", keys),
        ("series", [r.series for r in catalog.recorded]),
        ("signal label", [s.label for s in catalog.signals]),
        ("detection key", [d.key for d in catalog.detections]),
        ("detection label", [d.label for d in catalog.detections]),
        ("constraint key", [c.key for c in catalog.constraints]),
        ("constraint label", [c.label for c in catalog.constraints]),
    ):
        duplicates = sorted({v for v in values if values.count(v) > 1})
        if duplicates:
            problems.append(f"duplicate {what}: {', '.join(duplicates)}")
    detections = {d.key: d for d in catalog.detections}
    for i, r in enumerate(catalog.recorded):
        above = {k: "" for k in keys[:i]}
        try:
            string.Template(r.expr).substitute(above, w="")
        except (KeyError, ValueError) as exc:
            problems.append(f"{r.key}: expr refers to {exc} (not a series recorded above it)")
        if isinstance(r, Signal):
            detection = detections.get(r.detection)
            if detection is None:
                problems.append(f"{r.key}: unknown detection {r.detection}")
            elif r.fallback and not detection.psi_fallback:
                problems.append(f"{r.key}: detection {r.detection} has no fallback")
            if not (r.warn > r.critical if r.lower_is_worse else r.warn < r.critical):
                problems.append(f"{r.key}: default warn and critical in the wrong order")
    for c in catalog.constraints:
        if c.recorded not in keys or isinstance(catalog.by_key(c.recorded), Intermediate):
            problems.append(f"{c.key}: limits {c.recorded}, not a reported recorded series")
    if problems:
        raise ValueError("inconsistent detection catalog: " + "; ".join(problems))


CATALOG: Final = Catalog()
