"""mco.selfmetrics is the one list of every part's own metric names, and a leaf module."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from exporter.paths import Paths
from exporter.registry import CollectorConfig
from exporter.scrape import NodeCollector
from extender.metrics import ExtenderMetrics
from extender.reports import ReportStore
from mco import selfmetrics
from reporter.metrics import ReporterMetrics
from rulegen.controller import ControllerMetrics

ROOT = Path(__file__).resolve().parent.parent


def declared(prefix: str) -> set[str]:
    return {value for name, value in vars(selfmetrics).items() if name.startswith(prefix + "_")}


def exposed(registry: CollectorRegistry) -> set[str]:
    """Metric names as a scrape sees them (``# TYPE`` lines), without prometheus_client's
    ``*_created`` companions of counters and histograms."""
    text = generate_latest(registry).decode()
    names = set(re.findall(r"^# TYPE (\S+) ", text, re.MULTILINE))
    return {n for n in names if not n.endswith("_created")}


def test_the_module_is_a_leaf_of_constants() -> None:
    tree = ast.parse((ROOT / "mco" / "selfmetrics.py").read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)} | {
        a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names
    }
    assert imported <= {"__future__", "typing"}, imported
    values = [v for k, v in vars(selfmetrics).items() if k.isupper()]
    assert values and all(isinstance(v, str) for v in values)
    assert len(values) == len(set(values)), "a name is declared twice"


def test_the_reporter_exposes_exactly_the_declared_names() -> None:
    assert exposed(ReporterMetrics().registry) == declared("REPORTER")


def test_the_rulegen_controller_exposes_exactly_the_declared_names() -> None:
    assert exposed(ControllerMetrics().registry) == declared("RULEGEN")


def test_the_extender_exposes_exactly_the_declared_names(monkeypatch) -> None:
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    metrics = ExtenderMetrics(ReportStore(), stale_after=60.0)
    assert exposed(metrics.registry) == declared("EXTENDER")


def test_the_exporter_exposes_exactly_the_declared_names() -> None:
    registry = CollectorRegistry()
    registry.register(NodeCollector([], CollectorConfig(Paths()), node_name="n", kernel="6.1.0"))
    assert exposed(registry) == declared("EXPORTER")
