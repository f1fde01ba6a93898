"""mco.selfmetrics is the one list of every part's own metric names, and a leaf module."""

from __future__ import annotations

import ast
import io
import re
import tokenize
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


# A self-metric name written out instead of imported from mco.selfmetrics: the dashboards, the
# rule templates and the tools that query the parts must use the constants, so a rename cannot
# leave a silent empty panel or an alert that never fires.
HAND_TYPED = re.compile(r"\bmco_(?:exporter|reporter|extender|rulegen)_[a-z_]+")
SCANNED = ("rulegen/dashboards/*.py", "rulegen/templates/*", "bench/**/*.py", "scripts/**/*.py")


def hand_typed(path: Path) -> list[str]:
    """The self-metric names spelt out in ``path``: in Python, in string literals (f-strings
    included), not in comments or docstrings' prose alike; in a template, anywhere."""
    text = path.read_text()
    if path.suffix != ".py":
        return HAND_TYPED.findall(text)
    tokens = tokenize.generate_tokens(io.StringIO(text).readline)
    return [m for t in tokens if t.type == tokenize.STRING for m in HAND_TYPED.findall(t.string)]


def test_the_scan_finds_a_hand_typed_name(tmp_path: Path) -> None:
    source = tmp_path / "panel.py"
    source.write_text(
        "# mco_reporter_nodes in a comment is prose\n"
        'q = f"count(mco_exporter_collector_success{{{x}}} == 0)"\n'
    )
    assert hand_typed(source) == ["mco_exporter_collector_success"]
    template = tmp_path / "groups.yaml.j2"
    template.write_text("expr: absent(mco_reporter_last_sync_timestamp_seconds)\n")
    assert hand_typed(template) == ["mco_reporter_last_sync_timestamp_seconds"]


def test_no_self_metric_name_is_hand_typed_outside_selfmetrics() -> None:
    files = sorted({p for pattern in SCANNED for p in ROOT.glob(pattern) if p.is_file()})
    assert any(p.suffix == ".j2" for p in files) and any(
        p.parent.name == "dashboards" for p in files
    )
    found = {str(p.relative_to(ROOT)): names for p in files if (names := hand_typed(p))}
    assert found == {}, "use the mco.selfmetrics constants: " + repr(found)
