"""``mco-rulegen recommend``: thresholds proposed from the engine's history, and a replay of
what the current and the proposed configurations would have done over the same history.

Each signal is computed from the raw exporter series (``Catalog.inline_expr``), so the history
can predate the rules. The proposal assumes what MCO is for: interference is the exception, so
most node-time is quiet. ``warn`` sits six robust standard deviations above the median of all
node-time (1.4826 × the median absolute deviation: a few episodes barely move it, unlike a mean
or a high percentile); ``critical`` is the median of the node-time beyond ``warn``, the typical
level of the episodes, when there are enough of them to say. Signals where lower is worse are
mirrored. The replay runs in the engine (``sum_over_time`` and ``changes`` over subqueries), so
it costs one answer per node whatever the range; it counts, per detection, the node-time at or
beyond warn and at or beyond critical, so every threshold a proposal moves shows in it.

A proposal needs history: the median and spread of a few minutes say nothing about a day's
load. ``check_history`` measures how long each node's exporter was seen in the range and how
long any was; below the minimums (a day in all, six hours per node by default) the command
refuses, and nodes seen for less than their minimum are left out of the proposal.
"""

from __future__ import annotations

import math
import random
import statistics
from array import array
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Final

import msgspec

from mco import selfmetrics
from mco.promql import BAD_ANSWER, PromQLClient, SourceError
from rulegen.catalog import CATALOG, Catalog, Signal
from rulegen.durations import format_duration
from rulegen.model import DetectionRuleConfig, Threshold, from_spec
from rulegen.render import format_number

NODE_INFO: Final = selfmetrics.EXPORTER_NODE_INFO
PRESSURE_AVAILABLE: Final = "mco_pressure_available"
SIGMAS: Final = 6.0  # warn = median + SIGMAS robust standard deviations
MAD_TO_SIGMA: Final = 1.4826  # the MAD of a normal distribution is 0.6745 sigma
MIN_EPISODE_SHARE: Final = 0.001  # beyond warn, at least this share of node-time ...
MIN_EPISODE_SAMPLES: Final = 10  # ... and this many samples to place critical from them
# The history a proposal needs (--min-history, --min-node-history). A day covers one daily cycle
# of load, night batch and day peaks alike: a shorter range takes the normal half of the day
# for an episode or never sees it. Six hours per node (360 one-minute steps) keep an episode of
# tens of minutes a small minority of that node's time, which the median and MAD assume;
# nodes newer than that are left out rather than blocking every run on a growing cluster.
MIN_HISTORY: Final = 86400.0
MIN_NODE_HISTORY: Final = 6 * 3600.0
RESERVOIR: Final = 200_000  # samples kept per signal (uniformly chosen beyond that)
POINTS_PER_QUERY: Final = 100_000  # nodes x steps asked for in one range query


class _Series(msgspec.Struct, gc=False):
    metric: dict[str, str]
    values: list[tuple[float, str]]


class _Sample(msgspec.Struct, gc=False):
    metric: dict[str, str]
    value: tuple[float, str]


@dataclass
class Reservoir:
    """A uniform sample of at most ``size`` values of a stream (Vitter's algorithm R),
    seeded so the same history gives the same proposal."""

    size: int = RESERVOIR
    seen: int = 0
    values: array[float] = field(default_factory=lambda: array("d"))
    # Not for secrets: a fixed seed makes the sample, and so the proposal, repeatable.
    rng: random.Random = field(default_factory=lambda: random.Random(0))  # noqa: S311

    def add(self, value: float) -> None:
        self.seen += 1
        if len(self.values) < self.size:
            self.values.append(value)
            return
        slot = self.rng.randrange(self.seen)
        if slot < self.size:
            self.values[slot] = value


@dataclass(frozen=True, slots=True)
class Proposal:
    signal: Signal
    current: Threshold
    proposed: Threshold | None  # None: nothing could be computed (see ``reasons``)
    reasons: tuple[str, ...]
    samples: int


def _round(value: float) -> float:
    """Three significant digits: thresholds are judgements, not measurements."""
    if value == 0 or not math.isfinite(value):
        return value
    return float(f"{value:.3g}")


def _quantile(ordered: Sequence[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def propose(
    signal: Signal, current: Threshold, values: Sequence[float], min_samples: int = 0
) -> Proposal:
    """``warn`` and ``critical`` for ``signal`` from its history ``values`` (all nodes, all
    times), each with the reason it is where it is; none from fewer than ``min_samples``."""
    clean = sorted(v for v in values if math.isfinite(v))
    if not clean:
        return Proposal(signal, current, None, ("no history: kept the current thresholds",), 0)
    if len(clean) < min_samples:
        reason = (
            f"only {len(clean)} samples, fewer than one node's minimum history "
            f"({min_samples}, --min-node-history): kept the current thresholds"
        )
        return Proposal(signal, current, None, (reason,), len(clean))
    sign = -1.0 if signal.lower_is_worse else 1.0
    oriented = sorted(sign * v for v in clean)  # larger is worse from here on
    median = statistics.median(oriented)
    mad = statistics.median(abs(v - median) for v in oriented)
    sigma = MAD_TO_SIGMA * mad
    spread = f"1.4826 × MAD {format_number(_round(sigma))}"
    if sigma == 0:
        # More than half the node-time at one value (an idle signal): the spread of the
        # quieter 99 % stands in.
        sigma = (_quantile(oriented, 0.99) - median) / 2.326
        spread = f"(P99 − median) / 2.326 = {format_number(_round(sigma))}, the MAD being 0"
    if sigma <= 0:
        return Proposal(
            signal,
            current,
            None,
            (
                f"the signal never moved (always {format_number(_round(sign * median))}): "
                "kept the current thresholds",
            ),
            len(clean),
        )
    warn = median + SIGMAS * sigma
    above = [v for v in oriented if v > warn]
    share = len(above) / len(oriented)
    reasons = [
        f"warn: median {format_number(_round(sign * median))} "
        f"{'−' if sign < 0 else '+'} {SIGMAS:g} robust σ ({spread}); "
        f"{share:.2%} of node-time beyond it"
    ]
    pw = sign * warn  # back in the signal's own direction
    if len(above) >= MIN_EPISODE_SAMPLES and share >= MIN_EPISODE_SHARE:
        pc = sign * max(statistics.median(above), warn + SIGMAS * sigma / 2)
        reasons.append(
            f"critical: median of the node-time beyond warn (the episodes, {len(above)} "
            "samples), at least 3 σ beyond warn"
        )
    else:
        ratio = current.critical / current.warn if current.warn > 0 else 2.0
        pc = pw * ratio
        reasons.append(
            f"critical: too few samples beyond warn ({len(above)}) to place it from them: "
            f"warn × the current critical/warn ratio {format_number(_round(ratio))}"
        )
    lo, hi = 0.0, signal.maximum if signal.maximum is not None else 1e12
    pw, pc = min(max(pw, lo), hi), min(max(pc, lo), hi)
    pw, pc = _round(pw), _round(pc)
    if (pw >= pc) != signal.lower_is_worse or pw == pc:
        return Proposal(
            signal,
            current,
            None,
            (
                *reasons,
                "the proposal collapses at the signal's bounds: kept the current thresholds",
            ),
            len(clean),
        )
    return Proposal(signal, current, Threshold(pw, pc), tuple(reasons), len(clean))


def _where(signal: Signal, catalog: Catalog) -> tuple[str, str]:
    """``(detection key, "signals"|"fallback")``: where the signal's thresholds live."""
    return signal.detection, "fallback" if signal.fallback else "signals"


def _query_name(expr: str, limit: int = 120) -> str:
    """A query on one line, cut: enough to find it in the catalog, short enough for an error."""
    flat = " ".join(expr.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _number(text: str, where: str, what: str) -> float:
    """A sample value as a float; SourceError (a bad answer, one line) when it is not one."""
    what = _query_name(what)
    try:
        return float(text)
    except ValueError:
        raise SourceError(
            BAD_ANSWER, f"{where} answered a value that is not a number for {what}: {text[:40]!r}"
        ) from None


def _finite(text: str, where: str, what: str) -> float:
    """A sample value that must be a finite number (a count, seconds): NaN or ±Inf are a bad
    answer here, not something to compute with."""
    value = _number(text, where, what)
    if not math.isfinite(value):
        raise SourceError(BAD_ANSWER, f"{where} answered {text[:40]} for {_query_name(what)}")
    return value


async def node_count(client: PromQLClient, at: float) -> int:
    expr = f"count(count by (node) ({NODE_INFO}))"
    samples, _ = await client.query(expr, at, _Sample)
    if not samples:
        return 0
    count = _finite(samples[0].value[1], client.where, f"the node count ({expr})")
    if count < 0:
        raise SourceError(BAD_ANSWER, f"{client.where} answered a node count of {count:g}")
    return int(count)


class HistoryTooShort(Exception):
    """The engine holds less history than a proposal needs (the message says how much)."""


@dataclass(frozen=True, slots=True)
class Coverage:
    """How much of [start, end] the engine saw the exporters in, at the replay's step."""

    total: float  # seconds at which at least one node reported
    per_node: dict[str, float]  # seconds at which each node reported

    def nodes_with(self, seconds: float) -> set[str]:
        return {n for n, covered in self.per_node.items() if covered >= seconds}


async def coverage(client: PromQLClient, *, start: float, end: float, step: float) -> Coverage:
    span = f"{int(end - start)}s:{format_number(step)}s"
    seen = f"count_over_time((max by (node) ({NODE_INFO}))[{span}]) * {step:g}"
    per_node = await _per_node(client, seen, end)
    anyone = f"count_over_time((count({NODE_INFO}))[{span}]) * {step:g}"
    total = await _per_node(client, anyone, end)
    return Coverage(sum(total.values()), per_node)


def check_history(
    seen: Coverage, *, range_seconds: float, min_history: float, min_node_history: float
) -> set[str]:
    """The nodes with enough history to count; raises ``HistoryTooShort`` when the engine's
    history is below ``min_history`` in all or no node reaches ``min_node_history``."""
    kept = seen.nodes_with(min_node_history)
    longest = max(seen.per_node.items(), key=lambda item: item[1], default=("", 0.0))
    problems = []
    if seen.total < min_history:
        problems.append(
            f"the exporters were seen for {format_duration(int(seen.total))} of the last "
            f"{format_duration(int(range_seconds))} (--min-history "
            f"{format_duration(int(min_history))})"
        )
    if not kept:
        problems.append(
            f"no node for {format_duration(int(min_node_history))} (--min-node-history; "
            + (
                f"the longest, {longest[0]}, for {format_duration(int(longest[1]))})"
                if longest[0]
                else "none reported)"
            )
        )
    if problems:
        raise HistoryTooShort(
            "too little history to propose thresholds from: "
            + "; ".join(problems)
            + ". Let the exporters run longer, or lower the minimums."
        )
    return kept


async def history(
    client: PromQLClient,
    expr: str,
    start: float,
    end: float,
    step: float,
    nodes: int,
    only: Collection[str] | None = None,
) -> Reservoir:
    """Every (node, time) value of ``expr`` in [start, end] (of the nodes ``only`` names, all
    without it), in range queries small enough to answer, folded into one bounded sample."""
    reservoir = Reservoir()
    span = max(10, POINTS_PER_QUERY // max(1, nodes)) * step
    t = start
    while t <= end:
        chunk_end = min(end, t + span - step)
        series, _ = await client.query_range(expr, t, chunk_end, step, _Series)
        for s in series:
            if only is not None and s.metric.get("node", "") not in only:
                continue
            for _, text in s.values:
                value = _number(text, client.where, expr)  # NaN: no value at that step
                if math.isfinite(value):
                    reservoir.add(value)
        t = chunk_end + step
    return reservoir


async def recommend(
    client: PromQLClient,
    config: DetectionRuleConfig,
    *,
    start: float,
    end: float,
    step: float,
    window: int,
    only: Collection[str] | None = None,
    min_samples: int = 0,
    catalog: Catalog = CATALOG,
) -> list[Proposal]:
    """A proposal per signal from the history of the nodes ``only`` names (all without it);
    a signal with fewer than ``min_samples`` values keeps its thresholds."""
    nodes = await node_count(client, end)
    proposals = []
    for signal in catalog.signals:
        expr = catalog.inline_expr(signal, format_duration(window))
        values = await history(client, expr, start, end, step, nodes, only)
        current = config.threshold(signal.key)
        proposals.append(propose(signal, current, values.values, min_samples))
    return proposals


def proposed_config(
    config: DetectionRuleConfig, proposals: Sequence[Proposal], catalog: Catalog = CATALOG
) -> DetectionRuleConfig:
    """``config`` with every proposal in; raises ``ConfigError`` when the model refuses it."""
    spec = config.to_spec()
    for p in proposals:
        if p.proposed is not None:
            detection, kind = _where(p.signal, catalog)
            spec["detections"][detection][kind][p.signal.key] = {
                "warn": p.proposed.warn,
                "critical": p.proposed.critical,
            }
    return from_spec(spec, catalog)


def patch_yaml(
    proposals: Sequence[Proposal], header: Sequence[str], catalog: Catalog = CATALOG
) -> str:
    """The proposals as a DetectionRuleConfig (``kubectl apply`` merges it as a patch of
    ``spec.detections``), each with its reasons as comments."""
    lines = [f"# {h}" for h in header]
    lines += [
        "apiVersion: mco.io/v1alpha1",
        "kind: DetectionRuleConfig",
        "metadata:",
        "  name: default",
        "spec:",
        "  detections:",
    ]
    by_place: dict[tuple[str, str], list[Proposal]] = {}
    for p in proposals:
        by_place.setdefault(_where(p.signal, catalog), []).append(p)
    skipped = []
    for detection in (d.key for d in catalog.detections):
        entries = [(kind, p) for (d, kind), ps in by_place.items() if d == detection for p in ps]
        chosen = [(kind, p) for kind, p in entries if p.proposed is not None]
        skipped += [p for _, p in entries if p.proposed is None]
        if not chosen:
            continue
        lines.append(f"    {detection}:")
        for kind in ("signals", "fallback"):
            group = [p for k, p in chosen if k == kind]
            if not group:
                continue
            lines.append(f"      {kind}:")
            for p in group:
                assert p.proposed is not None
                lines += [f"        # {r}" for r in p.reasons]
                lines.append(
                    f"        {p.signal.key}: {{warn: {format_number(p.proposed.warn)}, "
                    f"critical: {format_number(p.proposed.critical)}}}  "
                    f"# was {format_number(p.current.warn)}, {format_number(p.current.critical)}"
                    f"; {p.samples} samples"
                )
    for p in skipped:
        lines.append(f"# {p.signal.key}: not proposed: {'; '.join(p.reasons)}")
    return "\n".join(lines) + "\n"


# --- replay ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeReplay:
    filtered_seconds: float  # node-seconds a hard constraint was exceeded
    flips: int  # changes of the filtered state
    triggered_seconds: dict[str, float]  # per detection label: a signal at or beyond warn
    critical_seconds: dict[str, float] = field(default_factory=dict)  # ... beyond critical


def _gate(signal: Signal, catalog: Catalog) -> str:
    """Where a signal counts, as in the rules, over the raw ``mco_pressure_available``."""
    if not catalog.detection(signal.detection).psi_fallback:
        return ""
    return f" and on (node) (max by (node) ({PRESSURE_AVAILABLE}) == {0 if signal.fallback else 1})"


def filtered_expr(config: DetectionRuleConfig, window: str, catalog: Catalog = CATALOG) -> str:
    """1 while any hard constraint is exceeded on a node (0 otherwise), from raw series."""
    parts = [
        f"label_replace(({catalog.inline_expr(catalog.by_key(c.recorded), window)}) "
        f"{c.operator} bool {format_number(config.hard_constraints[c.key])}, "
        f'"constraint", "{c.label}", "", "")'
        for c in catalog.constraints
    ]
    return "max by (node) (" + " or ".join(parts) + ")"


def triggered_expr(
    config: DetectionRuleConfig,
    detection: str,
    window: str,
    catalog: Catalog = CATALOG,
    bound: str = "warn",
) -> str:
    """1 while any of the detection's signals is at or beyond its ``bound`` (``warn``, where
    the detection triggers, or ``critical``, where its index is 1) on a node."""
    parts = []
    for s in catalog.signals:
        if s.detection != detection:
            continue
        op = "<=" if s.lower_is_worse else ">="
        value = format_number(getattr(config.threshold(s.key), bound))
        condition = f"(({catalog.inline_expr(s, window)}) {op} bool {value}){_gate(s, catalog)}"
        parts.append(f'label_replace({condition}, "signal", "{s.label}", "", "")')
    return "max by (node) (" + " or ".join(parts) + ")"


async def _per_node(client: PromQLClient, expr: str, at: float) -> dict[str, float]:
    """Each node's value of ``expr``: seconds or counts, so anything but a finite number is a
    bad answer (``changes()`` of NaN would otherwise be ``int(nan)``)."""
    samples, _ = await client.query(expr, at, _Sample)
    return {s.metric.get("node", ""): _finite(s.value[1], client.where, expr) for s in samples}


async def replay(
    client: PromQLClient,
    config: DetectionRuleConfig,
    *,
    start: float,
    end: float,
    step: float,
    window: int,
    catalog: Catalog = CATALOG,
) -> dict[str, NodeReplay]:
    """What ``config`` would have done over [start, end] at ``step``, per node."""
    w = format_duration(window)
    span = f"{int(end - start)}s:{format_number(step)}s"
    filtered = filtered_expr(config, w, catalog)
    seconds = await _per_node(client, f"sum_over_time(({filtered})[{span}]) * {step:g}", end)
    flips = await _per_node(client, f"changes(({filtered})[{span}])", end)
    at: dict[str, dict[str, dict[str, float]]] = {"warn": {}, "critical": {}}
    for bound, by_detection in at.items():
        for d in catalog.detections:
            condition = triggered_expr(config, d.key, w, catalog, bound)
            expr = f"sum_over_time(({condition})[{span}]) * {step:g}"
            by_detection[d.label] = await _per_node(client, expr, end)
    nodes = sorted(set(seconds) | {n for b in at.values() for t in b.values() for n in t})
    return {
        n: NodeReplay(
            seconds.get(n, 0.0),
            int(flips.get(n, 0.0)),
            {d: t.get(n, 0.0) for d, t in at["warn"].items()},
            {d: t.get(n, 0.0) for d, t in at["critical"].items()},
        )
        for n in nodes
    }


def replay_table(current: dict[str, NodeReplay], proposed: dict[str, NodeReplay]) -> list[str]:
    """Per node: filtered node-seconds, flips, and per detection the seconds at warn and at
    critical, current → proposed."""
    detections = sorted(
        {d for r in (*current.values(), *proposed.values()) for d in r.triggered_seconds}
    )
    head = [
        "node",
        "filtered s",
        "flips",
        *[f"{d} {b} s" for d in detections for b in ("warn", "critical")],
    ]
    rows = [head]
    empty = NodeReplay(0.0, 0, {})
    for node in sorted(set(current) | set(proposed)):
        c, p = current.get(node, empty), proposed.get(node, empty)
        rows.append(
            [
                node,
                f"{c.filtered_seconds:g} → {p.filtered_seconds:g}",
                f"{c.flips} → {p.flips}",
                *[
                    f"{getattr(c, f).get(d, 0):g} → {getattr(p, f).get(d, 0):g}"
                    for d in detections
                    for f in ("triggered_seconds", "critical_seconds")
                ],
            ]
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows
    ]
