"""The generated dashboards: Grafana's structure, variables, and numbers from the model."""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

import pytest

from rulegen import dashboards as generator
from rulegen import series
from rulegen.dashboards import node_detail
from rulegen.model import SIGNALS, DetectionRuleConfig, Threshold
from tests.dashboards.boards import ROOT, dashboards, panels, targets

RECORDED = (
    {
        value
        for value in vars(series).values()
        if isinstance(value, str) and value.startswith(("node:", "mco:"))
    }
    | set(series.SIGNAL_SERIES.values())
    | set(series.CONTEXT_SERIES.values())
)


def test_three_dashboards_in_both_places() -> None:
    assert set(dashboards()) == {"mco-cluster-overview", "mco-node-detail", "mco-pipeline-health"}
    for name in dashboards():
        chart_copy = ROOT / "charts" / "mco" / "dashboards" / f"{name}.json"
        assert chart_copy.read_text() == (ROOT / "dashboards" / f"{name}.json").read_text()


@pytest.mark.parametrize("name", sorted(dashboards()))
def test_grafana_structure(name: str) -> None:
    board = dashboards()[name]
    assert board["uid"] == name and len(board["uid"]) <= 40
    assert board["title"].startswith("MCO / ")
    assert "mco" in board["tags"]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    node = variables["node"]
    assert node["type"] == "query"
    assert node["query"] == f"label_values({series.NODE_INFO}, node)"
    assert node["datasource"]["uid"] == "${datasource}"
    ids = [p["id"] for p in panels(board)]
    assert len(ids) == len(set(ids))
    occupied: set[tuple[int, int]] = set()
    for panel in panels(board):
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24, panel["title"]
        cells = {
            (x, y)
            for x in range(pos["x"], pos["x"] + pos["w"])
            for y in range(pos["y"], pos["y"] + pos["h"])
        }
        assert not cells & occupied, f"{panel['title']} overlaps another panel"
        occupied |= cells
        refs = [t["refId"] for t in panel["targets"]]
        assert refs and len(refs) == len(set(refs)), panel["title"]
        for t in panel["targets"]:
            assert t["datasource"]["uid"] == "${datasource}"
            assert t["expr"].strip()


def test_every_recorded_series_name_comes_from_series_py() -> None:
    used = set()
    for target in targets():
        used |= set(re.findall(r"\b(?:node|mco):[a-z0-9_]+(?::[a-z0-9_]+)?", target.expr))
    assert used, "no recorded series used"
    assert used <= RECORDED, sorted(used - RECORDED)
    # Everything the reporter and the scheduler read is on the dashboards too.
    for name in (
        series.INTERFERENCE_LEVEL,
        series.SCHEDULE_SCORE,
        series.DETECTION_INDEX,
        series.DETECTION_TRIGGERED,
        series.HARD_CONSTRAINT_VIOLATED,
        series.MEMORY_PRESSURE_FALLBACK,
        series.RULE_CONFIG_INFO,
        *series.SIGNAL_SERIES.values(),
    ):
        assert name in used, name


def _signal_panels(board: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out = {}
    for spec in SIGNALS:
        found = [
            p
            for p in panels(board)
            if any(t["expr"].startswith(spec.series + "{") for t in p["targets"])
        ]
        assert len(found) == 1, spec.key
        out[spec.key] = found[0]
    return out


def _steps(panel: dict[str, Any]) -> list[tuple[float | None, str]]:
    steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
    return [(s["value"], s["color"]) for s in steps]


def test_each_signal_panel_draws_the_models_warn_and_critical() -> None:
    config = DetectionRuleConfig.default()
    signal_panels = _signal_panels(dashboards()["mco-node-detail"])
    for spec in SIGNALS:
        panel = signal_panels[spec.key]
        t = config.threshold(spec.key)
        values = [v for v, _ in _steps(panel) if v is not None]
        assert t.warn in values and t.critical in values, spec.key
        colours = dict(_steps(panel))
        # Colours change at the thresholds: orange from warn and red from critical, or for a
        # lower-is-worse signal red below critical, orange up to warn, green above.
        if spec.lower_is_worse:
            assert (colours[None], colours[t.critical], colours[t.warn]) == (
                "red",
                "orange",
                "green",
            )
        else:
            assert (colours[None], colours[t.warn], colours[t.critical]) == (
                "green",
                "orange",
                "red",
            )
        assert panel["fieldConfig"]["defaults"]["custom"]["thresholdsStyle"]["mode"] == "dashed"
        assert f"warn {t.warn:g}, critical {t.critical:g}" in panel["description"]


def test_thresholds_follow_the_model_not_literals() -> None:
    """Move every threshold: every signal panel's lines move with it."""
    default = DetectionRuleConfig.default()

    def scale(t: Threshold) -> Threshold:
        return Threshold(t.warn * 0.5, t.critical * 0.5)

    detections = {}
    for key, d in default.detections.items():
        detections[key] = dataclasses.replace(
            d,
            signals={k: scale(t) for k, t in d.signals.items()},
            fallback={k: scale(t) for k, t in d.fallback.items()},
        )
    moved = dataclasses.replace(default, detections=detections)
    board = json.loads(node_detail.build(moved))
    for spec in SIGNALS:
        values = {v for v, _ in _steps(_signal_panels(board)[spec.key]) if v is not None}
        t = moved.threshold(spec.key)
        assert {t.warn, t.critical} <= values, spec.key
        old = default.threshold(spec.key)
        assert not {old.warn, old.critical} & values, spec.key


def test_generator_output_is_what_is_checked_in() -> None:
    for path, text in generator.generated_files().items():
        assert (ROOT / path).read_text() == text, path
