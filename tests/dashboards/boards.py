"""The generated dashboards as data: panels, their queries, Grafana's variables filled in."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD_DIR = ROOT / "dashboards"


@dataclass(frozen=True)
class Target:
    dashboard: str
    panel: str
    expr: str
    instant: bool

    def promql(self, node: str, rate_interval: str = "30s") -> str:
        """The query Grafana sends for ``node`` ("All" is the regex ``.*``)."""
        return _fill(self.expr, node, rate_interval)

    def data_promql(self, node: str, rate_interval: str = "30s") -> str:
        """:func:`data_query` of the query Grafana sends: it has no zero fallback to hide in."""
        return _fill(data_query(self.expr), node, rate_interval)


def _fill(expr: str, node: str, rate_interval: str) -> str:
    return expr.replace("$node", node).replace("$__rate_interval", rate_interval)


# A stat's "show 0, not No data" tail, and a filter that keeps only some samples
# (``> 0.5``, ``== 1``, ``>= scalar(threshold)``; not ``bool`` comparisons, which keep every
# sample).
_ZERO_FALLBACK = re.compile(r"\s+or\s+vector\(\s*0(?:\.0*)?\s*\)\s*$")
_FILTER = re.compile(
    r"\s*(?:==|!=|>=|<=|>|<)\s*(?:-?[0-9.]+(?:e[+-]?[0-9]+)?|scalar\([^()]*(?:\{[^{}]*\})?\))"
)


def data_query(expr: str) -> str:
    """The part of ``expr`` that must find series for the panel to show real data.

    ``count(x > 0.5) or vector(0)`` returns a sample whatever ``x`` holds; ``count(x)`` returns
    one only when ``x`` exists. So the ``or vector(0)`` tail and the comparison filters go.
    """
    inner = _ZERO_FALLBACK.sub("", expr)
    if inner == expr:
        return expr
    return _FILTER.sub("", inner)


def dashboards() -> dict[str, dict[str, Any]]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(DASHBOARD_DIR.glob("*.json"))}


def panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in board["panels"]:
        yield panel
        yield from panel.get("panels", [])


def targets() -> list[Target]:
    out = []
    for name, board in dashboards().items():
        for panel in panels(board):
            for t in panel.get("targets", []):
                out.append(Target(name, panel["title"], t["expr"], bool(t.get("instant"))))
    return out
