"""The detection model in plain Python, written from DESIGN §2 and docs/detection-model.md.

It shares nothing with the PromQL templates but the DetectionRuleConfig, so agreement between
the two is evidence that the rules compute what the model says. Input: per node, every raw
series over the window, already reduced the way PromQL reduces it (``rate`` of a counter,
``avg_over_time`` of a gauge, the last sample for an instant selector).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from rulegen import series as S
from rulegen.catalog import Signal
from rulegen.model import SIGNALS, DetectionRuleConfig


@dataclass(frozen=True)
class Obs:
    """One raw series of one node over the window."""

    name: str
    labels: Mapping[str, str]
    rate: float | None = None  # counters: rate() over the window
    avg: float | None = None  # gauges: avg_over_time() over the window
    last: float | None = None  # instant selector at the evaluation time

    def key(self, *names: str) -> tuple[str, ...]:
        return tuple(self.labels.get(n, "") for n in names)


@dataclass
class NodeResult:
    signals: dict[str, float] = field(default_factory=dict)  # recorded series name -> value
    signal_index: dict[tuple[str, str], float] = field(default_factory=dict)  # (detection, signal)
    detection_index: dict[str, float] = field(default_factory=dict)
    excess: dict[str, float] = field(default_factory=dict)  # unclamped detection index
    triggered: dict[str, float] = field(default_factory=dict)
    fallback: float = 0.0
    pod_fallback: float = 1.0  # no per-pod pressure series: node PSI stands in for the victims
    pods: dict[str, PodResult] = field(default_factory=dict)  # pod UID -> its values
    victims: dict[tuple[str, str], float] = field(default_factory=dict)  # (resource, kind)
    level: float | None = None
    score: float | None = None
    hard: dict[str, float] = field(default_factory=dict)  # exceeded, by constraint label
    in_node_set: bool = False  # the node set (an intermediate series)


def extrapolated_rate(
    points: Sequence[tuple[float, float]], range_start: float, range_end: float, range_s: float
) -> float | None:
    """Prometheus 2.x ``rate()``: counter resets, extrapolation to the window's edges."""
    if len(points) < 2:
        return None
    result = points[-1][1] - points[0][1]
    last = 0.0
    for _, v in points:
        if v < last:
            result += last
        last = v
    to_start = points[0][0] - range_start
    to_end = range_end - points[-1][0]
    sampled = points[-1][0] - points[0][0]
    average = sampled / (len(points) - 1)
    if result > 0 and points[0][1] >= 0:
        to_zero = sampled * (points[0][1] / result)
        to_start = min(to_start, to_zero)
    threshold = average * 1.1
    interval = sampled
    interval += to_start if to_start < threshold else average / 2
    interval += to_end if to_end < threshold else average / 2
    return result * (interval / sampled) / range_s


def histogram_quantile(q: float, buckets: Iterable[tuple[float, float]]) -> float:
    """Prometheus 2.x ``histogram_quantile`` over (upper bound, cumulative count) pairs."""
    merged: dict[float, float] = defaultdict(float)
    for bound, count in buckets:
        merged[bound] += count
    ordered = sorted(merged.items())
    if len(ordered) < 2 or not math.isinf(ordered[-1][0]):
        return math.nan
    # Counts must not decrease with the bound (they can, a little, from scrape races).
    fixed, high = [], -math.inf
    for bound, count in ordered:
        high = max(high, count)
        fixed.append((bound, high))
    total = fixed[-1][1]
    if total == 0:
        return math.nan
    rank = q * total
    b = next(i for i, (_, c) in enumerate(fixed) if c >= rank)
    if b == len(fixed) - 1:
        return fixed[-2][0]
    if b == 0 and fixed[0][0] <= 0:
        return fixed[0][0]
    start = 0.0 if b == 0 else fixed[b - 1][0]
    end, count = fixed[b]
    if b > 0:
        count -= fixed[b - 1][1]
        rank -= fixed[b - 1][1]
    return start + (end - start) * (rank / count)


def _by(obs: Iterable[Obs], name: str) -> list[Obs]:
    return [o for o in obs if o.name == name]


def _dedup_max(
    values: Iterable[tuple[tuple[str, ...], float | None]],
) -> dict[tuple[str, ...], float]:
    """One value per identity (a node scraped twice counts once: the max of its copies)."""
    out: dict[tuple[str, ...], float] = {}
    for key, value in values:
        if value is not None and not math.isnan(value):
            out[key] = max(out.get(key, -math.inf), value)
    return out


def _one(obs: Iterable[Obs], name: str, attr: str) -> float | None:
    values = [getattr(o, attr) for o in _by(obs, name) if getattr(o, attr) is not None]
    return max(values) if values else None


def latency(obs: Sequence[Obs], q: float) -> float | None:
    if _by(obs, "mco_block_io_latency_seconds_count"):
        per_device: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for o in _by(obs, "mco_block_io_latency_seconds_bucket"):
            if o.rate is not None:
                per_device[o.labels["device"]].append((float(o.labels["le"]), o.rate))
        # Copies from two scrape jobs double every bucket: the quantile does not change.
        quantiles = [histogram_quantile(q, b) for b in per_device.values()]
        valid = [v for v in quantiles if not math.isnan(v)]
        return max(valid) if valid else 0.0
    completed = {
        tuple(sorted(o.labels.items())): o.rate for o in _by(obs, "mco_block_io_completed_total")
    }
    if not any(v is not None for v in completed.values()):
        return None
    means = []
    for o in _by(obs, "mco_block_io_time_seconds_total"):
        c = completed.get(tuple(sorted(o.labels.items())))
        if o.rate is not None and c is not None and c > 0:
            means.append(o.rate / c)
    return max(means) if means else 0.0


def signals(obs: Sequence[Obs]) -> dict[str, float]:
    """Smoothed signals by config key (and context series by their CONTEXT_SERIES key)."""
    out: dict[str, float] = {}
    refs = _one(obs, "mco_llc_references_total", "rate")
    misses = _one(obs, "mco_llc_misses_total", "rate")
    if refs is not None and refs == 0:
        out["llcMissRatio"] = 0.0
    elif refs is not None and misses is not None:
        out["llcMissRatio"] = min(misses / refs, 1.0)
    occupancy = _dedup_max(
        (o.key("domain", "group"), o.avg)
        for o in _by(obs, "mco_llc_occupancy_bytes")
        if o.labels.get("type") == "ctrl_mon"
    )
    if occupancy:
        out["llcOccupancyBytes"] = sum(occupancy.values())
    for key, q in (("blockIOLatencyP95Seconds", 0.95), ("blockIOLatencyP99Seconds", 0.99)):
        value = latency(obs, q)
        if value is not None:
            out[key] = value
    psi = _dedup_max(
        (o.key("resource", "kind"), o.rate) for o in _by(obs, "mco_pressure_stalled_seconds_total")
    )
    for key, rk in {
        "psiCPUSome": ("cpu", "some"),
        "psiIOSome": ("io", "some"),
        "psiIOFull": ("io", "full"),
        "psiMemorySome": ("memory", "some"),
        "psiMemoryFull": ("memory", "full"),
        "psiIRQFull": ("irq", "full"),
    }.items():
        if rk in psi:
            out[key] = min(psi[rk], 1.0)
    available = _one(obs, "mco_memory_available_bytes", "avg")
    total = _one(obs, "mco_memory_total_bytes", "avg")
    if available is not None and total is not None and total > 0:
        out["memoryAvailableRatio"] = available / total
    by_type = _dedup_max(
        (o.key("type"), o.rate) for o in _by(obs, "mco_vmstat_pgscan_by_type_total")
    )
    by_reclaimer = _dedup_max(
        (o.key("reclaimer"), o.rate) for o in _by(obs, "mco_vmstat_pgscan_total")
    )
    if by_type:
        out["pageScanRate"] = sum(by_type.values())
    elif by_reclaimer:
        out["pageScanRate"] = sum(by_reclaimer.values())
    cpus = _one(obs, "mco_cpu_online", "last")
    steal = _one(obs, "mco_cpu_steal_seconds_total", "rate")
    wait = _one(obs, "mco_runqueue_wait_seconds_total", "rate")
    irq = _dedup_max((o.key("kind"), o.rate) for o in _by(obs, "mco_cpu_irq_seconds_total"))
    if cpus is not None and cpus > 0:
        if steal is not None:
            out["cpuStealRatio"] = min(steal / cpus, 1.0)
        if wait is not None:
            out["runqueueWaitRatio"] = wait / cpus
        if irq:  # hard plus soft, each kind counted once however many copies were scraped
            out["irqTimeRatio"] = min(sum(irq.values()) / cpus, 1.0)
    busiest = _one(obs, "mco_cpu_irq_busiest_ratio", "avg")
    if busiest is not None:
        out["irqMaxCPUShare"] = min(busiest, 1.0)
    return out


# The PSI signals the victims' stall replaces where a node has per-pod series.
JUDGED = {
    "psiIOSome": ("io", "some"),
    "psiIOFull": ("io", "full"),
    "psiMemorySome": ("memory", "some"),
    "psiMemoryFull": ("memory", "full"),
}
SELF_LIMIT_SHARE = 0.9
VICTIM_KEYS = {
    ("memory", "some"): "victimMemorySome",
    ("memory", "full"): "victimMemoryFull",
    ("io", "some"): "victimIOSome",
    ("io", "full"): "victimIOFull",
}


@dataclass
class PodResult:
    qos: str
    stall: dict[tuple[str, str], float] = field(default_factory=dict)  # (resource, kind)
    memory_limited: bool = False
    io_limited: bool = False

    @property
    def self_limited(self) -> bool:
        return self.memory_limited or self.io_limited


def per_pod(obs: Sequence[Obs]) -> dict[str, PodResult] | None:
    """Each pod's stall (io, memory) and whether it hit its own memory or I/O limit; None where
    the node has no per-pod pressure series."""
    pods: dict[str, PodResult] = {}
    for o in _by(obs, "mco_pod_pressure_stalled_seconds_total"):
        resource, kind = o.key("resource", "kind")
        if resource in ("io", "memory") and o.rate is not None:
            pod = pods.setdefault(o.labels["pod_uid"], PodResult(o.labels["qos"]))
            pod.stall[(resource, kind)] = max(pod.stall.get((resource, kind), 0.0), min(o.rate, 1))
    if not pods:
        return None

    def gauge(name: str, attr: str, *extra: str) -> dict[tuple[str, ...], float]:
        return _dedup_max((o.key("pod_uid", *extra), getattr(o, attr)) for o in _by(obs, name))

    usage = gauge("mco_pod_memory_usage_bytes", "avg")  # flat gauges: max_over_time = avg
    limit = gauge("mco_pod_memory_limit_bytes", "last")
    events = gauge("mco_pod_memory_events_total", "rate", "event")
    for uid, pod in pods.items():
        hit = any(events.get((uid, e), 0) > 0 for e in ("max", "high", "oom_kill"))
        near = (uid,) in usage and (uid,) in limit
        pod.memory_limited = hit or (near and usage[(uid,)] >= SELF_LIMIT_SHARE * limit[(uid,)])
        for used, cap in (
            ("mco_pod_io_bytes_total", "mco_pod_io_limit_bytes_per_second"),
            ("mco_pod_io_operations_total", "mco_pod_io_limit_operations_per_second"),
        ):
            rates, caps = gauge(used, "rate", "operation"), gauge(cap, "last", "operation")
            for (pod_uid, operation), c in caps.items():
                r = rates.get((pod_uid, operation))
                if pod_uid == uid and r is not None and r >= SELF_LIMIT_SHARE * c:
                    pod.io_limited = True
    return pods


def signal_excess(config: DetectionRuleConfig, spec: Signal, value: float) -> float:
    """(value - warn) / (critical - warn), mirrored when lower is worse: the index unclamped."""
    t = config.threshold(spec.key)
    if spec.lower_is_worse:
        return (t.warn - value) / (t.warn - t.critical)
    return (value - t.warn) / (t.critical - t.warn)


def evaluate(config: DetectionRuleConfig, obs: Sequence[Obs]) -> NodeResult:
    values = signals(obs)
    result = NodeResult(in_node_set=bool(_by(obs, S.NODE_INFO)))
    for key, value in values.items():
        result.signals[S.SIGNAL_SERIES.get(key) or S.CONTEXT_SERIES[key]] = value
    available = [o.last for o in _by(obs, "mco_pressure_available") if o.last is not None]
    pods = per_pod(obs)
    if pods is not None:
        result.pods = pods
        result.pod_fallback = 0.0
        for key, rk in JUDGED.items():
            victims = [p.stall[rk] for p in pods.values() if not p.self_limited and rk in p.stall]
            value = max(victims, default=0.0)
            result.victims[rk] = value
            values[key] = value
            result.signals[S.SIGNAL_SERIES.get(key) or S.CONTEXT_SERIES[key]] = value
    result.fallback = 0.0 if available and max(available) != 0 else 1.0
    triggered: dict[str, bool] = {d: False for d in S.DETECTIONS.values()}
    for spec in SIGNALS:
        detection = S.DETECTIONS[spec.detection]
        if spec.key not in values:
            continue
        if spec.detection == "memoryPressure" and spec.fallback != (result.fallback == 1.0):
            continue  # PSI where the node has it, the fallback signals where it does not
        t, v = config.threshold(spec.key), values[spec.key]
        reached = v <= t.warn if spec.lower_is_worse else v >= t.warn
        excess = signal_excess(config, spec, v)
        index = min(max(excess, 0.0), 1.0)
        result.signal_index[(detection, spec.label)] = index
        result.excess[detection] = max(result.excess.get(detection, -math.inf), excess)
        result.detection_index[detection] = max(result.detection_index.get(detection, 0.0), index)
        triggered[detection] = triggered[detection] or reached
    result.triggered = {d: 1.0 if t else 0.0 for d, t in triggered.items()}
    weighted = [
        (config.weight(key), result.detection_index[label])
        for key, label in S.DETECTIONS.items()
        if config.weight(key) > 0 and label in result.detection_index
    ]
    if weighted:
        level = sum(w * i for w, i in weighted) / sum(w for w, _ in weighted)
        result.level = min(max(level, 0.0), 1.0)
        result.score = 100 * (1 - result.level)
    hard = config.hard_constraints

    def above(key: str, limit: float) -> float:
        """1 above the limit; 0 at or below it, and where the node has no such signal."""
        return 1.0 if key in values and values[key] > limit else 0.0

    result.hard = {
        "psi_memory_full": above("psiMemoryFull", hard["psiMemoryFullMax"]),
        "psi_io_some": above("psiIOSome", hard["psiIOSomeMax"]),
    }
    return result


def recorded(result: NodeResult) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The node's recorded series as (name, extra labels) -> value, to compare with an engine."""
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for name, value in result.signals.items():
        out[(name, ())] = value
    for (detection, signal), value in result.signal_index.items():
        out[(S.SIGNAL_INDEX, (("detection", detection), ("signal", signal)))] = value
    for detection, value in result.detection_index.items():
        out[(S.DETECTION_INDEX, (("detection", detection),))] = value
    for detection, value in result.excess.items():
        out[(S.DETECTION_EXCESS, (("detection", detection),))] = value
    for detection, value in result.triggered.items():
        out[(S.DETECTION_TRIGGERED, (("detection", detection),))] = value
    out[(S.MEMORY_PRESSURE_FALLBACK, ())] = result.fallback
    if result.in_node_set:
        out[(S.POD_PRESSURE_FALLBACK, ())] = result.pod_fallback
    for uid, pod in result.pods.items():
        labels = (("pod_uid", uid), ("qos", pod.qos))
        for (resource, kind), value in pod.stall.items():
            key = tuple(sorted((*labels, ("resource", resource), ("kind", kind))))
            out[(S.POD_PRESSURE, key)] = value
        out[(S.POD_MEMORY_SELF_LIMITED, labels)] = float(pod.memory_limited)
        out[(S.POD_IO_SELF_LIMITED, labels)] = float(pod.io_limited)
    for (resource, kind), value in result.victims.items():
        out[(S.VICTIM_PRESSURE[VICTIM_KEYS[(resource, kind)]], ())] = value
    if result.level is not None and result.score is not None:
        out[(S.INTERFERENCE_LEVEL, ())] = result.level
        out[(S.SCHEDULE_SCORE, ())] = result.score
    for constraint, value in result.hard.items():
        out[(S.HARD_CONSTRAINT_EXCEEDED, (("constraint", constraint),))] = value
        # Held: in a steady state (the same inputs for longer than holdFor and clearAfter, as
        # in the synthetic fleet) violated equals exceeded; ``held`` replays a history.
        out[(S.HARD_CONSTRAINT_VIOLATED, (("constraint", constraint),))] = value
    if result.in_node_set:
        out[(S.NODE_SET, ())] = 1.0
    return out


RECORDED_NAMES = (
    *S.SIGNAL_SERIES.values(),
    *S.CONTEXT_SERIES.values(),
    S.SIGNAL_INDEX,
    S.DETECTION_EXCESS,
    S.DETECTION_INDEX,
    S.DETECTION_TRIGGERED,
    S.MEMORY_PRESSURE_FALLBACK,
    S.POD_PRESSURE_FALLBACK,
    S.POD_PRESSURE,
    S.POD_MEMORY_SELF_LIMITED,
    S.POD_IO_SELF_LIMITED,
    *S.VICTIM_PRESSURE.values(),
    S.INTERFERENCE_LEVEL,
    S.SCHEDULE_SCORE,
    S.HARD_CONSTRAINT_EXCEEDED,
    S.HARD_CONSTRAINT_VIOLATED,
    S.NODE_SET,
)


def held(
    exceeded: Sequence[tuple[float, float]], hold_for: float, clear_after: float
) -> list[tuple[float, float]]:
    """Violated at each evaluation of ``exceeded`` ((time, 0 or 1), in time order), as
    docs/detection-model.md ("Hysteresis") defines it with Prometheus 2.x ranges [t - d, t]:
    1 where exceeded was 1 at every evaluation of the last ``hold_for``; else 1 where it was
    1 at any evaluation of the last ``clear_after`` and violated was 1 at the latest earlier
    evaluation within ``clear_after``; else 0."""
    out: list[tuple[float, float]] = []
    for t, _ in exceeded:
        recent = [v for s, v in exceeded if t - hold_for <= s <= t]
        if all(v == 1 for v in recent):
            out.append((t, 1.0))
            continue
        lately = any(v == 1 for s, v in exceeded if t - clear_after <= s <= t)
        before = [v for s, v in out if t - clear_after <= s < t]
        out.append((t, 1.0 if lately and before and before[-1] == 1 else 0.0))
    return out
