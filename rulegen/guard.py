"""The guard against a DetectionRuleConfig that would empty the cluster.

A spec can be valid and still wrong: a hard limit typed as ``0.001`` instead of ``0.1`` passes
every schema check and makes most nodes unschedulable at once. Before applying a spec whose
rules differ from the ones in force, the rulegen controller asks Prometheus how many nodes its
hard constraints would filter right now (the recorded signals against the new limits, without
the hold) and rejects the spec when that is more than ``max_filtered_share`` of the nodes *and*
more than the rules in force filter now (so a cluster already in trouble can still be tuned).
When Prometheus cannot answer, the guard steps aside: it is a safety net, and blocking every
change while the monitoring is down would be worse. ``mco.io/skip-guard: "true"`` on the
object skips it for an emergency.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Final

import msgspec

from mco.promql import PromQLClient, SourceConfig, SourceError
from rulegen import series
from rulegen.catalog import CATALOG, Catalog
from rulegen.model import DetectionRuleConfig
from rulegen.render import format_number

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


FILTERED_NOW: Final = f"count(max by (node) ({series.HARD_CONSTRAINT_VIOLATED}) == 1) or vector(0)"
NODES: Final = f"count({series.NODE_SET}) or vector(0)"


async def _number(client: PromQLClient, expr: str, at: float) -> float:
    samples, _ = await client.query(expr, at, _Sample)
    return float(samples[0].value[1]) if samples else 0.0


async def check(
    settings: GuardSettings, config: DetectionRuleConfig, catalog: Catalog = CATALOG
) -> Verdict:
    at = time.time()
    try:
        async with PromQLClient(settings.source) as client:
            nodes = await _number(client, NODES, at)
            new = await _number(client, would_filter(config, catalog), at)
            now = await _number(client, FILTERED_NOW, at)
    except (SourceError, ValueError, IndexError) as exc:
        return Verdict(True, f"guard not checked: {exc}", checked=False)
    if nodes <= 0:
        return Verdict(True, "guard not checked: no nodes report to Prometheus", checked=False)
    share = new / nodes
    limit = settings.max_filtered_share
    summary = (
        f"its hard constraints would filter {new:.0f} of {nodes:.0f} nodes now "
        f"({share:.0%}; the rules in force filter {now:.0f})"
    )
    if share > limit and new > now:
        return Verdict(
            False,
            f"{summary}, more than the guard's {limit:.0%} (--guard.max-filtered-share); "
            f'fix the limits, or annotate {SKIP_ANNOTATION}="true" to apply it anyway',
            checked=True,
        )
    return Verdict(True, summary, checked=True)
