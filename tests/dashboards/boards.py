"""The generated dashboards as data: panels, their queries, Grafana's variables filled in."""

from __future__ import annotations

import json
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
        return self.expr.replace("$node", node).replace("$__rate_interval", rate_interval)


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
