"""The dashboards' threshold lines read ``mco:threshold``, which the rules record from the
DetectionRuleConfig in force: promtool evaluates every panel's config query against rules
rendered from a config unlike the default, and gets that config's values."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from rulegen import series
from rulegen.catalog import CATALOG
from rulegen.model import DetectionRuleConfig, Threshold
from rulegen.render import render_rules
from tests.dashboards.boards import dashboards, live_lines, panels
from tests.promtool import assert_promtool_passes

pytestmark = pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")


def _tuned() -> DetectionRuleConfig:
    """Every threshold and setting the dashboards draw, moved off its default."""
    default = DetectionRuleConfig.default()

    def scale(t: Threshold) -> Threshold:
        return Threshold(t.warn * 0.3, t.critical * 0.3)

    detections = {
        key: dataclasses.replace(
            d,
            signals={k: scale(t) for k, t in d.signals.items()},
            fallback={k: scale(t) for k, t in d.fallback.items()},
        )
        for key, d in default.detections.items()
    }
    return dataclasses.replace(
        default,
        detections=detections,
        hard_constraints={k: v / 2 for k, v in default.hard_constraints.items()},
        evaluation_interval=2,
        alerts=dataclasses.replace(default.alerts, node_interfered_level=0.42),
        report=dataclasses.replace(default.report, stale_after=17),
    )


def _expected(config: DetectionRuleConfig) -> dict[str, float]:
    """Each label set of ``mco:threshold`` -> its value under ``config``."""
    out = {}
    for spec in CATALOG.signals:
        t = config.threshold(spec.key)
        out[f'{{bound="warn", signal="{spec.label}"}}'] = t.warn
        out[f'{{bound="critical", signal="{spec.label}"}}'] = t.critical
    for c in CATALOG.constraints:
        out[f'{{bound="limit", constraint="{c.label}"}}'] = config.hard_constraints[c.key]
    out['{bound="limit", setting="nodeInterferedLevel"}'] = config.alerts.node_interfered_level
    out['{bound="limit", setting="evaluationInterval"}'] = config.evaluation_interval
    out['{bound="limit", setting="staleAfter"}'] = config.report.stale_after
    return out


def _config_queries() -> list[tuple[str, str, str]]:
    """(dashboard, panel, PromQL) of every query that sets a threshold line."""
    return [
        (name, panel["title"], expr)
        for name, board in dashboards().items()
        for panel in panels(board)
        for expr, _, _ in live_lines(panel)
    ]


def _canonical(labels: dict[str, str]) -> str:
    return "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def test_every_threshold_line_reads_the_config_in_force(tmp_path: Path) -> None:
    config = _tuned()
    expected = _expected(config)
    rules = yaml.safe_load(render_rules(config, generation=7))
    (group,) = [g for g in rules["groups"] if g["name"] == "mco.thresholds"]
    recorded = {_canonical(r["labels"]) for r in group["rules"]}
    assert recorded == set(expected)  # one series per threshold, nothing else
    assert all(r["record"] == series.THRESHOLD for r in group["rules"])

    queries = _config_queries()
    assert len(queries) >= 2 * len(CATALOG.signals) + len(CATALOG.constraints)
    tests: list[dict[str, Any]] = []
    for dashboard, title, expr in queries:
        selector = expr[expr.index("{") : expr.index("}") + 1]
        labels = _canonical(_labels(selector))
        value = expected[labels]
        if expr.startswith(series.THRESHOLD):
            want = {"labels": f"{series.THRESHOLD}{labels}", "value": value}
        else:  # the score line: 100 × (1 − level)
            assert expr == f"100 * (1 - {series.THRESHOLD}{selector})", (dashboard, title, expr)
            want = {"labels": labels, "value": 100 * (1 - value)}
        tests.append({"expr": expr, "eval_time": "10s", "exp_samples": [want]})
    rule_file = tmp_path / "rules.yaml"
    rule_file.write_text(yaml.safe_dump(rules))
    suite = {
        "rule_files": [rule_file.name],
        "evaluation_interval": "1s",
        "tests": [{"interval": "1s", "input_series": [], "promql_expr_test": tests}],
    }
    assert_promtool_passes(tmp_path, suite)


def _labels(selector: str) -> dict[str, str]:
    """``{a="x", b="y"}`` -> ``{"a": "x", "b": "y"}``."""
    pairs = (p.strip().split("=", 1) for p in selector.strip("{}").split(","))
    return {k: v.strip('"') for k, v in pairs}
