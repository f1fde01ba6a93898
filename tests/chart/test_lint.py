"""helm lint --strict and yamllint on the chart, its scenarios and what it renders."""

from __future__ import annotations

import helm_python as helm
import pytest
from yamllint import linter  # type: ignore[import-untyped]
from yamllint.config import YamlLintConfig  # type: ignore[import-untyped]

from tests.chart.helm import CHART, ROOT, SCENARIOS, chart, render_files, scenario_values

SOURCE_RULES = YamlLintConfig(
    """
extends: default
rules:
  line-length: {max: 100}
  document-start: disable
  comments: {min-spaces-from-content: 1}
  truthy: {allowed-values: ["true", "false"], check-keys: false}
"""
)
# Rendered manifests embed dashboards' JSON and PromQL: long lines are expected there.
RENDERED_RULES = YamlLintConfig(
    """
extends: default
rules:
  line-length: disable
  document-start: disable
  comments: {min-spaces-from-content: 1}
  comments-indentation: disable
  indentation: {spaces: consistent, indent-sequences: whatever}
  truthy: {allowed-values: ["true", "false"], check-keys: false}
"""
)


def _problems(text: str, config: YamlLintConfig) -> list[str]:
    return [f"{p.line}:{p.column} {p.rule}: {p.message}" for p in linter.run(text, config)]


@pytest.mark.parametrize("scenario", [None, *SCENARIOS])
def test_helm_lint_strict(scenario: str | None) -> None:
    values = scenario_values(scenario) if scenario else None
    for kube_version in ("v1.25.0", None):
        report = helm.lint(CHART, values, strict=True, kube_version=kube_version)
        # No finding of any severity, information included.
        assert report["errors"] == [], report
        assert report["messages"] == [], report


def test_the_chart_icon_is_in_the_repository() -> None:
    icon = chart().metadata["icon"]
    prefix = chart().metadata["home"].replace("github.com", "raw.githubusercontent.com") + "/main/"
    assert icon.startswith(prefix), icon
    path = ROOT / icon.removeprefix(prefix)
    assert path.suffix == ".svg" and "<svg" in path.read_text()


def test_helm_lint_catches_a_bad_value() -> None:
    report = helm.lint(CHART, {"reporter": {"layout": "sharded"}}, strict=True)
    found = [m["error"] for m in report["messages"] if m["severity"] >= 2] + report["errors"]
    assert any("layout" in text for text in found), report


@pytest.mark.parametrize(
    "path",
    ["Chart.yaml", "values.yaml", *(f"scenarios/{s}.yaml" for s in SCENARIOS)],
)
def test_yamllint_sources(path: str) -> None:
    assert _problems((CHART / path).read_text(), SOURCE_RULES) == []


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_yamllint_rendered(scenario: str) -> None:
    for template, text in render_files(scenario_values(scenario)).items():
        if template.endswith("NOTES.txt") or not text.strip():
            continue
        # Helm prints each template after a "# Source:" line; the blank line a template's
        # leading {{- if }} leaves is part of every chart's output, not of the YAML.
        assert _problems(text.lstrip("\n"), RENDERED_RULES) == [], template
