"""The generated dashboards type-check against Grafana's own schema (``@grafana/schema``) of
every Grafana version the docs claim, and the check catches what it is there to catch.

One ``tsc`` run per version checks the three dashboards and, beside them, copies with one
mistake each: each copy must fail in exactly the versions it names, at the line of its mistake.
"""

from __future__ import annotations

import copy
import re
import shutil
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rulegen.dashboards import compat
from tests.dashboards import grafana_schema
from tests.dashboards.boards import ROOT, dashboards

pytestmark = pytest.mark.slow

VERSIONS = grafana_schema.versions()
Board = dict[str, Any]


def _panel(board: Board, kind: str) -> dict[str, Any]:
    return next(p for p in board["panels"] if p["type"] == kind)


def _variable(board: Board) -> dict[str, Any]:
    variable: dict[str, Any] = board["templating"]["list"][0]
    return variable


@dataclass(frozen=True)
class Mistake:
    name: str
    make: Callable[[Board], None]
    line: str  # what the line tsc points at must contain
    fails_in: frozenset[str] = frozenset(VERSIONS)


def _set(path: Callable[[Board], dict[str, Any]], key: str, value: Any) -> Callable[[Board], None]:
    def make(board: Board) -> None:
        path(board)[key] = value

    return make


MISTAKES = [
    # The top level: a wrong type and a misspelt key.
    Mistake("refresh-is-a-number", _set(lambda b: b, "refresh", 5), '"refresh": 5'),
    Mistake("top-level-typo", _set(lambda b: b, "refersh", "10s"), '"refersh"'),
    # A panel's own fields.
    Mistake(
        "gridpos-h-is-a-string",
        _set(lambda b: _panel(b, "stat")["gridPos"], "h", "4"),
        '"h": "4"',
    ),
    Mistake(
        "target-refid-is-a-number",
        _set(lambda b: _panel(b, "stat")["targets"][0], "refId", 1),
        '"refId": 1',
    ),
    Mistake(
        "threshold-value-is-a-string",
        _set(
            lambda b: _panel(b, "stat")["fieldConfig"]["defaults"]["thresholds"]["steps"][0],
            "value",
            "0",
        ),
        '"value": "0"',
    ),
    # Each plugin's options and custom field config, checked exactly.
    Mistake(
        "stat-option-typo",
        _set(lambda b: _panel(b, "stat")["options"], "colourMode", "background"),
        '"colourMode"',
    ),
    Mistake(
        "stat-option-not-in-enum",
        _set(lambda b: _panel(b, "stat")["options"], "graphMode", "sparkline"),
        '"graphMode": "sparkline"',
    ),
    Mistake(
        "stat-has-no-custom-field-config",
        _set(lambda b: _panel(b, "stat")["fieldConfig"]["defaults"], "custom", {"lineWidth": 1}),
        '"custom"',
    ),
    Mistake(
        "timeseries-custom-is-a-string",
        _set(
            lambda b: _panel(b, "timeseries")["fieldConfig"]["defaults"]["custom"], "lineWidth", "2"
        ),
        '"lineWidth": "2"',
    ),
    Mistake(
        # legend is a type from the schema's common module: it must resolve, not turn into any.
        "timeseries-legend-placement-not-in-enum",
        _set(lambda b: _panel(b, "timeseries")["options"]["legend"], "placement", "middle"),
        '"placement": "middle"',
    ),
    Mistake(
        "table-option-typo",
        _set(lambda b: _panel(b, "table")["options"], "showHeaders", True),
        '"showHeaders"',
    ),
    Mistake(
        "bargauge-option-wrong-type",
        _set(lambda b: _panel(b, "bargauge")["options"], "showUnfilled", "yes"),
        '"showUnfilled": "yes"',
    ),
    Mistake(
        "variable-typo",
        _set(_variable, "refreshh", 1),
        '"refreshh"',
    ),
    # What rulegen.dashboards.compat leaves out, put back: each is unknown to some versions.
    Mistake(
        "stat-percent-change-colour-mode",
        _set(lambda b: _panel(b, "stat")["options"], "percentChangeColorMode", "standard"),
        '"percentChangeColorMode"',
        frozenset({"11.0"}),
    ),
    Mistake(
        "table-footer",
        _set(
            lambda b: _panel(b, "table")["options"],
            "footer",
            compat.PANEL_OPTION_DEFAULTS["table"]["footer"],
        ),
        '"footer"',
        frozenset({"12.4", "13.2"}),
    ),
    Mistake(
        "variable-allow-custom-value",
        _set(_variable, "allowCustomValue", True),
        '"allowCustomValue"',
        frozenset({"11.0"}),
    ),
    Mistake(
        "variable-auto",
        _set(_variable, "auto", False),
        '"auto"',
    ),
]


def _sample() -> Board:
    """The overview with its first panel of each type: every typed plugin, a small file."""
    board = copy.deepcopy(dashboards()["mco-cluster-overview"])
    first: dict[str, dict[str, Any]] = {}
    for panel in board["panels"]:
        first.setdefault(panel["type"], panel)
    assert set(first) == set(grafana_schema.PANELS)
    board["panels"] = list(first.values())
    return board


def _bad(mistake: Mistake) -> Board:
    board = _sample()
    mistake.make(board)
    return board


@pytest.fixture(scope="module")
def node_modules() -> Path:
    try:
        return grafana_schema.install()
    except grafana_schema.RegistryUnreachable as e:
        pytest.skip(str(e))


@pytest.fixture(scope="module", params=VERSIONS)
def checked(
    request: pytest.FixtureRequest, node_modules: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, list[grafana_schema.Diagnostic]]]:
    """(version, tsc's errors) for the dashboards and every mistake, in one run."""
    version: str = request.param
    boards = {**dashboards(), **{f"bad-{m.name}": _bad(m) for m in MISTAKES}}
    workdir = tmp_path_factory.mktemp("grafana-schema")
    yield version, grafana_schema.typecheck(node_modules, version, boards, workdir)


def test_the_pinned_schema_is_the_version_it_is_named_for(node_modules: Path) -> None:
    for version in VERSIONS:
        assert grafana_schema.exact_version(node_modules, version).startswith(f"{version}.")


def test_dashboards_match_grafana_schema(
    checked: tuple[str, list[grafana_schema.Diagnostic]],
) -> None:
    version, diagnostics = checked
    found = [d for d in diagnostics if not d.file.startswith("bad-")]
    assert not found, f"Grafana {version}:\n" + "\n".join(
        f"{d.file}.json line {d.line}: {d.text}\n  {d.message}" for d in found
    )


@pytest.mark.parametrize("mistake", MISTAKES, ids=[m.name for m in MISTAKES])
def test_the_check_catches(
    mistake: Mistake, checked: tuple[str, list[grafana_schema.Diagnostic]]
) -> None:
    version, diagnostics = checked
    found = [d for d in diagnostics if d.file == f"bad-{mistake.name}"]
    if version not in mistake.fails_in:
        assert not found, f"Grafana {version} knows this: {found}"
        return
    assert any(mistake.line in d.text for d in found), (
        f"Grafana {version}: no error at {mistake.line!r}; tsc said {found}"
    )


def test_a_panel_type_without_schema_types_is_refused(node_modules: Path, tmp_path: Path) -> None:
    board = _sample()
    board["panels"][0]["type"] = "piechart"
    with pytest.raises(ValueError, match="piechart"):
        grafana_schema.typecheck(node_modules, VERSIONS[-1], {"board": board}, tmp_path)


def _install_from(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lock: str) -> None:
    """install() of the pinned project with ``lock`` as its lock file, a registry that refuses
    connections, and empty caches (ours and npm's)."""
    project = tmp_path / "project"
    project.mkdir(parents=True)
    shutil.copy(grafana_schema.PROJECT / "package.json", project / "package.json")
    (project / "package-lock.json").write_text(lock)
    monkeypatch.setattr(grafana_schema, "PROJECT", project)
    monkeypatch.setattr(grafana_schema, "CACHE", tmp_path / "cache")
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    monkeypatch.setenv("npm_config_registry", f"http://127.0.0.1:{port}/")
    monkeypatch.setenv("npm_config_cache", str(tmp_path / "npm-cache"))
    monkeypatch.setenv("npm_config_fetch_retries", "0")
    grafana_schema.install()


def test_no_registry_is_the_one_reason_to_skip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock = (grafana_schema.PROJECT / "package-lock.json").read_text()
    with pytest.raises(grafana_schema.RegistryUnreachable, match="ECONNREFUSED"):
        _install_from(tmp_path, monkeypatch, lock)
    assert [p.name for p in (tmp_path / "cache").iterdir()] == []  # nothing half-installed kept
    # Any other npm failure (here a broken lock file) fails the test instead.
    with pytest.raises(RuntimeError, match="npm ci failed"):
        _install_from(tmp_path / "broken", monkeypatch, '{"lockfileVersion": 3, "packages": {')


def test_compat_keeps_a_value_that_is_not_the_default() -> None:
    board: Board = {
        "panels": [{"type": "stat", "options": {"percentChangeColorMode": "inverted"}}],
        "templating": {"list": [{"allowCustomValue": False, "auto": False}]},
    }
    compat.portable(board)
    assert board["panels"][0]["options"] == {"percentChangeColorMode": "inverted"}
    assert board["templating"]["list"] == [{"allowCustomValue": False}]


def test_docs_name_every_checked_version(node_modules: Path) -> None:
    docs = (ROOT / "docs" / "dashboards.md").read_text()
    for version in VERSIONS:
        exact = grafana_schema.exact_version(node_modules, version)
        assert re.search(rf"\b{re.escape(exact)}\b", docs), f"docs/dashboards.md omits {exact}"
