"""Grafana dashboards generated from the detection model (``make generate`` writes them).

Thresholds, weights, signals and series names come from ``rulegen.model`` and
``rulegen.catalog`` (each board's ``build`` takes a ``Catalog``), so a dashboard cannot disagree
with the rules. Each dashboard is written twice with the same bytes: ``dashboards/`` for
importing by hand, and ``charts/mco/dashboards/`` where the chart's ConfigMaps read it (Helm
reads only files inside the chart).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from rulegen.dashboards import node_detail, overview, pipeline
from rulegen.model import DetectionRuleConfig

DASHBOARDS: Final[dict[str, Callable[[DetectionRuleConfig], str]]] = {
    "mco-cluster-overview": overview.build,
    "mco-node-detail": node_detail.build,
    "mco-pipeline-health": pipeline.build,
}
OUTPUT_DIRS: Final = ("dashboards", "charts/mco/dashboards")


def generated_files() -> dict[str, str]:
    config = DetectionRuleConfig.default()
    files: dict[str, str] = {}
    for name, build in DASHBOARDS.items():
        text = build(config)
        for directory in OUTPUT_DIRS:
            files[f"{directory}/{name}.json"] = text
    return files
