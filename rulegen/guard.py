"""The guard against a DetectionRuleConfig that would empty the cluster.

A spec can be valid and still wrong: a hard limit typed as ``0.001`` instead of ``0.1`` passes
every schema check and makes most nodes unschedulable at once; a detection's warn moved into
the normal range (``memoryAvailableRatio`` warn 0.855) raises every node's level, which the
policies' ``maxLevel`` turn into filtering. Before applying a spec whose rules differ from the
ones in force, the rulegen controller asks Prometheus, for every threshold the spec holds, how
many nodes it would catch right now (the recorded signals against the new values, without the
hold): the nodes its hard constraints filter, the nodes with a signal at or beyond its warn,
and those at or beyond its critical. It rejects the spec when one of these is more than
``max_filtered_share`` of the nodes *and* more than the rules in force catch now (so a cluster
already in trouble can still be tuned).
When Prometheus cannot answer, the guard steps aside: it is a safety net, and blocking every
change while the monitoring is down would be worse. ``mco.io/skip-guard: "true"`` on the
object skips it for an emergency.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Final

import msgspec

from mco.promql import PromQLClient, SourceConfig, SourceError
from rulegen import series
from rulegen.catalog import CATALOG, Catalog
from rulegen.model import DetectionRuleConfig
from rulegen.render import format_number, signal_gate

SKIP_ANNOTATION: Final = "mco.io/skip-guard"
DEFAULT_MAX_SHARE: Final = 0.5


class _Sample(msgspec.Struct, gc=False):
    value: tuple[float, str]


@dataclass(frozen=True, slots=True)
class GuardSettings:
    source: SourceConfig
    max_filtered_share: float = DEFAULT_MAX_SHARE


@dataclass(frozen=True, slots=True)
class Verdict:
    allowed: bool
    message: str  # why, for the log and status.conditions
    checked: bool  # False: Prometheus did not answer, the guard stepped aside


def would_filter(config: DetectionRuleConfig, catalog: Catalog = CATALOG) -> str:
    """PromQL: the number of nodes ``config``'s hard constraints filter at this instant."""
    parts = [
        f"({catalog.by_key(c.recorded).series} {c.operator} "
        f"{format_number(config.hard_constraints[c.key])})"
        for c in catalog.constraints
    ]
    return f"count(group by (node) ({' or '.join(parts)})) or vector(0)"


def at_bound(config: DetectionRuleConfig, bound: str, catalog: Catalog = CATALOG) -> str:
    """PromQL: the number of nodes with a signal at or beyond ``config``'s ``bound`` (``warn``
    or ``critical``) at this instant, each signal where the rules count it (its PSI gate)."""
    parts = []
    for s in catalog.signals:
        value = getattr(config.threshold(s.key), bound)
        condition = f"({s.series} {'<=' if s.lower_is_worse else '>='} {format_number(value)})"
        gate = signal_gate(s, catalog.detection(s.detection))
        parts.append(f"({condition} and on (node) ({gate}))" if gate else condition)
    return f"count(group by (node) ({' or '.join(parts)})) or vector(0)"


FILTERED_NOW: Final = f"count(max by (node) ({series.HARD_CONSTRAINT_VIOLATED}) == 1) or vector(0)"
# The same two counts under the rules in force: a detection is triggered at warn, and its index
# is 1 at critical.
AT_WARN_NOW: Final = f"count(max by (node) ({series.DETECTION_TRIGGERED}) == 1) or vector(0)"
AT_CRITICAL_NOW: Final = f"count(max by (node) ({series.DETECTION_INDEX}) >= 1) or vector(0)"
NODES: Final = f"count({series.NODE_SET}) or vector(0)"


async def _number(client: PromQLClient, expr: str, at: float) -> float:
    """A count; ValueError (the guard is then not checked) for anything but a finite number,
    so a NaN answer never passes as "no node over the share"."""
    samples, _ = await client.query(expr, at, _Sample)
    value = float(samples[0].value[1]) if samples else 0.0
    if not math.isfinite(value):
        raise ValueError(f"{client.where} answered {value} for {expr}")
    return value


async def check(
    settings: GuardSettings, config: DetectionRuleConfig, catalog: Catalog = CATALOG
) -> Verdict:
    at = time.time()
    try:
        async with PromQLClient(settings.source) as client:
            nodes = await _number(client, NODES, at)
            new = await _number(client, would_filter(config, catalog), at)
            now = await _number(client, FILTERED_NOW, at)
            warn = await _number(client, at_bound(config, "warn", catalog), at)
            warn_now = await _number(client, AT_WARN_NOW, at)
            critical = await _number(client, at_bound(config, "critical", catalog), at)
            critical_now = await _number(client, AT_CRITICAL_NOW, at)
    except (SourceError, ValueError, IndexError) as exc:
        return Verdict(True, f"guard not checked: {exc}", checked=False)
    if nodes <= 0:
        return Verdict(True, "guard not checked: no nodes report to Prometheus", checked=False)
    limit = settings.max_filtered_share
    counts = (
        (new, now, "its hard constraints would filter", "the rules in force filter"),
        (warn, warn_now, "its warn thresholds would trigger on", "the rules in force trigger on"),
        (critical, critical_now, "its critical thresholds would reach", "the rules in force reach"),
    )
    parts, over = [], []
    for count, in_force, what, what_now in counts:
        part = (
            f"{what} {count:.0f} of {nodes:.0f} nodes now "
            f"({count / nodes:.0%}; {what_now} {in_force:.0f})"
        )
        parts.append(part)
        if count / nodes > limit and count > in_force:
            over.append(part)
    if over:
        return Verdict(
            False,
            f"{'; '.join(over)}: more than the guard's {limit:.0%} (--guard.max-filtered-share); "
            f'fix the thresholds, or annotate {SKIP_ANNOTATION}="true" to apply it anyway',
            checked=True,
        )
    return Verdict(True, "; ".join(parts), checked=True)
