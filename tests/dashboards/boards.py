"""The generated dashboards as data: panels, their queries, Grafana's variables filled in."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rulegen import series

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


def recorded_thresholds(rules_text: str) -> dict[frozenset[tuple[str, str]], float]:
    """``mco:threshold`` in a rendered rule file: label set -> value."""
    rules = yaml.safe_load(rules_text)
    out = {}
    for group in rules["groups"]:
        for rule in group["rules"]:
            if rule.get("record") == series.THRESHOLD:
                value = re.fullmatch(r"vector\((.+)\)", rule["expr"])
                assert value, rule
                out[frozenset(rule["labels"].items())] = float(value.group(1))
    return out


_LIVE_QUERY = re.compile(
    rf"(?P<score>100 \* \(1 - )?{re.escape(series.THRESHOLD)}\{{(?P<labels>[^{{}}]*)\}}\)?"
)


def drawn_steps(
    panel: dict[str, Any], thresholds: dict[frozenset[tuple[str, str]], float]
) -> list[tuple[float | None, str]]:
    """The steps Grafana draws on ``panel`` against rules that record ``thresholds``: the
    static ones plus one per "Config from query results" transformation, whose instant query
    is answered from the recorded values; sorted as Grafana sorts them (base first)."""
    config = panel["fieldConfig"]["defaults"].get("thresholds", {"steps": []})
    steps: list[tuple[float | None, str]] = [(s["value"], s["color"]) for s in config["steps"]]
    for expr, colour, _ in live_lines(panel):
        query = _LIVE_QUERY.fullmatch(expr)
        assert query, expr
        labels = frozenset(
            (k.strip(), v.strip().strip('"'))
            for k, v in (pair.split("=", 1) for pair in query["labels"].split(","))
        )
        value = thresholds[labels]
        if query["score"]:
            value = 100 * (1 - value)
        steps.append((value, colour))
    return sorted(steps, key=lambda s: -math.inf if s[0] is None else s[0])


def live_lines(panel: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(config query, colour, its refId) of each threshold line read from the data: a "Config
    from query results" transformation over an instant table, whose number column is "Value"."""
    by_ref = {t["refId"]: t for t in panel.get("targets", [])}
    out = []
    for transformation in panel.get("transformations", []):
        if transformation["id"] != "configFromData":
            continue
        options = transformation["options"]
        target = by_ref[options["configRefId"]]
        assert target["instant"] and target["format"] == "table", panel["title"]
        (mapping,) = options["mappings"]
        assert (mapping["fieldName"], mapping["handlerKey"]) == ("Value", "threshold1")
        colour = mapping["handlerArguments"]["threshold"]["color"]
        out.append((target["expr"], colour, target["refId"]))
    return out


def data_targets(panel: dict[str, Any]) -> list[dict[str, Any]]:
    """The panel's queries of data, without the config queries of its live thresholds."""
    config_refs = {ref for _, _, ref in live_lines(panel)}
    return [t for t in panel.get("targets", []) if t["refId"] not in config_refs]
