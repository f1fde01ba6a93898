"""The ``tier-labels`` policy set: MCO's zero-call scoring path (issue 28), no extender at all.

Each second the report's levels (the observer pipeline's view, as every baseline cluster's)
become the node label ``mco.io/interference-tier`` by the reporter's own rule
(``reporter.tiers.TierRule``: thresholds, margin, hold; stale or no level: no label), and the
pods carry the preferred node-affinity term the chart's MutatingAdmissionPolicy gives their
class (``scheduler.tierAffinity.classes`` in the chart's values). kube-scheduler's NodeAffinity
scores it (``kubeframework.node_affinity_scores``). What the reporter's rate limit and the API
round trip add (at most a second or two at 5 patches a second for 20-200 nodes) is left out.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import yaml

from bench.placement.trace import WORKLOAD_CLASS, PodSpec
from reporter.tiers import Tier, TierRule, tier_of_label

VALUES = Path(__file__).resolve().parents[2] / "charts" / "mco" / "values.yaml"
Term = tuple[int, str, frozenset[str]]  # weight, operator (In | NotIn), tiers


@cache
def class_terms() -> dict[str, Term]:
    """The chart's default classes: the term each class's pods get."""
    values: dict[str, Any] = yaml.safe_load(VALUES.read_text())
    classes = values["scheduler"]["tierAffinity"]["classes"]
    return {
        name: (int(c["weight"]), c["operator"], frozenset(c["tiers"]))
        for name, c in classes.items()
    }


def matches(term: Term, tier: str | None) -> bool:
    """A node-selector requirement on the label: ``NotIn`` matches a node without it."""
    _, operator, tiers = term
    return (tier in tiers) if operator == "In" else (tier not in tiers)


class TierLabels:
    """The labels the reporter's tier-label mode would keep, from the views it reads."""

    def __init__(self, rule: TierRule | None = None) -> None:
        self.rule = rule or TierRule()
        self.labels: dict[str, Tier] = {}
        self._below: dict[str, float] = {}
        self.changes = 0  # label writes (set, moved or removed): the API patches it would send

    def update(self, view: dict[str, dict[str, Any]], now: float) -> None:
        """One reporter cycle over the view (node -> the extender's /v1/nodes entry)."""
        want: dict[str, Tier] = {}
        for name, entry in view.items():
            level = entry.get("level")
            if entry.get("stale") or level is None:
                continue
            current = tier_of_label(self.labels.get(name))
            tier, since = self.rule.decide(float(level), current, self._below.get(name), now)
            want[name] = tier
            if since is None or tier != current:
                self._below.pop(name, None)
            else:
                self._below[name] = since
        self.changes += sum(1 for n, t in want.items() if self.labels.get(n) != t)
        self.changes += sum(1 for n in self.labels if n not in want)
        self._below = {n: s for n, s in self._below.items() if n in want}
        self.labels = want

    def raw_scores(self, names: list[str], pod: PodSpec) -> dict[str, int] | None:
        """NodeAffinity's raw score per node (the matching terms' weights), or None when the
        pod's class gets no term."""
        term = class_terms().get(pod.labels.get(WORKLOAD_CLASS, ""))
        if term is None:
            return None
        return {n: term[0] if matches(term, self.labels.get(n)) else 0 for n in names}
