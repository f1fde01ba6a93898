"""Imports between MCO's parts run one way only.

exporter and rulegen sit on ``mco`` (the plumbing every process shares, the PromQL client
included); the reporter reads rulegen's model; the extender reads the reporter's report (and
rulegen's defaults, to explain a verdict without a report); kubectl_mco reads both. ``scripts``
and ``bench`` may use any part, and ``testkit`` (builders and stand-ins that tests and
benchmarks share) any part but the two that use it: a benchmark never imports a test module.
Every import is read from the source (``ast``), those inside functions too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUNTIME = {"mco", "exporter", "rulegen", "reporter", "extender", "kubectl_mco"}
TOOLS = RUNTIME | {"scripts", "testkit"}
# The parts each part may import (itself always).
ALLOWED: dict[str, set[str]] = {
    "mco": set(),
    "exporter": {"mco"},
    "rulegen": {"mco"},
    "reporter": {"mco", "rulegen"},
    "extender": {"mco", "reporter", "rulegen"},
    "kubectl_mco": {"mco", "extender", "reporter"},
    "scripts": TOOLS,
    "testkit": TOOLS,
    "bench": TOOLS | {"bench"},
    "tests": TOOLS | {"bench", "tests"},
}


def imported(path: Path, package: str) -> list[tuple[int, str]]:
    """(line, module) of every import in ``path``, relative ones resolved."""
    tree = ast.parse(path.read_text(), str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: within the same part
                found.append((node.lineno, package))
            elif node.module:
                found.append((node.lineno, node.module))
    return found


def violations(root: Path) -> list[str]:
    parts = set(ALLOWED)
    wrong = []
    for part, allowed in ALLOWED.items():
        for path in sorted((root / part).rglob("*.py")):
            for line, module in imported(path, part):
                top = module.partition(".")[0]
                if top in parts and top != part and top not in allowed:
                    wrong.append(f"{path.relative_to(root)}:{line}: {part} imports {module}")
    return wrong


def test_every_package_has_its_place() -> None:
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")}
    assert packages == set(ALLOWED)


def test_imports_run_one_way() -> None:
    assert violations(ROOT) == []


@pytest.mark.parametrize(
    ("part", "source", "wrong"),
    [
        (
            "rulegen",
            "from reporter.promql import PromQLClient\n",
            "rulegen imports reporter.promql",
        ),
        (
            "bench",
            "def f():\n    from tests.extender import bodies\n",
            "bench imports tests.extender",
        ),
        ("mco", "import exporter.paths\n", "mco imports exporter.paths"),
        ("testkit", "from tests.rulegen import fleet\n", "testkit imports tests.rulegen"),
    ],
)
def test_an_upward_import_is_found(tmp_path: Path, part: str, source: str, wrong: str) -> None:
    (tmp_path / part).mkdir()
    (tmp_path / part / "m.py").write_text(source)
    (tmp_path / part / "ok.py").write_text("from . import m\nimport json\n")
    assert [v.partition(": ")[2] for v in violations(tmp_path)] == [wrong]
