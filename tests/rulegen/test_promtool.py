"""promtool on the generated rules: `check rules` with no findings, and hand-computed suites."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from rulegen.generate import RULES_PATH
from rulegen.model import DetectionRuleConfig, from_spec, load_config
from rulegen.render import render_prometheusrule, render_rules

ROOT = Path(__file__).resolve().parents[2]
SUITES = Path(__file__).with_name("promtool")
TEST_CONFIG = SUITES / "config.yaml"


def promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["promtool", *args], capture_output=True, text=True, cwd=cwd, timeout=120, check=False
    )


def assert_clean_check(path: Path) -> None:
    result = promtool("check", "rules", "--lint=all", "--lint-fatal", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    # No findings: the only lines are the file being checked and its SUCCESS line.
    lines = [line.strip() for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    assert lines[0] == f"Checking {path}"
    assert lines[1].startswith("SUCCESS: ") and lines[1].endswith(" rules found")
    assert len(lines) == 2, lines


def test_checked_in_rule_file_passes_promtool_check_without_findings():
    assert_clean_check(ROOT / RULES_PATH)


@pytest.mark.parametrize("config_path", [None, TEST_CONFIG])
def test_both_formats_pass_promtool_check_without_findings(tmp_path, config_path):
    config = DetectionRuleConfig.default() if config_path is None else load_config(config_path)
    plain = tmp_path / "rules.yaml"
    plain.write_text(render_rules(config, generation=3))
    assert_clean_check(plain)

    rule = yaml.safe_load(
        render_prometheusrule(config, name="mco", namespace="monitoring", generation=3)
    )
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["kind"] == "PrometheusRule"
    groups = tmp_path / "from-prometheusrule.yaml"
    groups.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    assert_clean_check(groups)
    # The same groups in both formats.
    assert rule["spec"]["groups"] == yaml.safe_load(plain.read_text())["groups"]


def run_suites(tmp_path: Path, rules: str, *suites: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "rules.yaml").write_text(rules)
    for suite in suites:
        shutil.copy(SUITES / suite, tmp_path / suite)
    return promtool("test", "rules", *suites, cwd=tmp_path)


def test_recording_rules_match_hand_computed_values(tmp_path):
    result = run_suites(
        tmp_path, render_rules(load_config(TEST_CONFIG), generation=7), "signals.test.yaml"
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_alerts_fire_as_specified(tmp_path):
    result = run_suites(
        tmp_path, render_rules(load_config(TEST_CONFIG), generation=7), "alerts.test.yaml"
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_shipped_defaults_score_idle_and_saturated_nodes(tmp_path):
    suite = (SUITES / "defaults.test.yaml").read_text()
    suite = suite.replace("DEFAULT_HASH", DetectionRuleConfig.default().config_hash())
    (tmp_path / "defaults.test.yaml").write_text(suite)
    shutil.copy(ROOT / RULES_PATH, tmp_path / "rules.yaml")
    result = promtool("test", "rules", "defaults.test.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    "change",
    [
        {"detections": {"cpuContention": {"weight": 1}}},  # weight-0 detection joins the level
        {"detections": {"ioCongestion": {"weight": 1}}},  # weights matter, not just presence
        {"hardConstraints": {"psiIOSomeMax": 0.9375}},  # at the max is not above it
        {"detections": {"memoryPressure": {"fallback": {"pageScanRate": {"warn": 4097}}}}},
    ],
)
def test_suite_catches_a_changed_model(tmp_path, change):
    """The expectations are not vacuous: a different model fails the suite."""
    spec = load_config(TEST_CONFIG).to_spec()

    def merge(base: dict[str, Any], patch: dict[str, Any]) -> None:
        for key, value in patch.items():
            if isinstance(value, dict):
                merge(base[key], value)
            else:
                base[key] = value

    merge(spec, change)
    result = run_suites(tmp_path, render_rules(from_spec(spec), generation=7), "signals.test.yaml")
    assert result.returncode != 0
    assert "FAILED" in result.stdout + result.stderr


def _anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading (lower case, spaces to dashes, punctuation gone)."""
    kept = "".join(c for c in heading.strip().lower() if c.isalnum() or c in " -_")
    return kept.replace(" ", "-")


def test_every_alert_links_to_its_own_runbook_section():
    runbook = (ROOT / "docs" / "runbook.md").read_text()
    anchors = {_anchor(line.lstrip("#")) for line in runbook.splitlines() if line.startswith("## ")}
    config = DetectionRuleConfig.default()
    alerts = [
        rule
        for group in yaml.safe_load(render_rules(config))["groups"]
        for rule in group["rules"]
        if "alert" in rule
    ]
    assert len(alerts) >= 7
    for rule in alerts:
        url = rule["annotations"]["runbook_url"]
        assert url.startswith(config.alerts.runbook_url + "#"), url
        anchor = url.partition("#")[2]
        assert anchor == rule["alert"].lower(), url
        assert anchor in anchors, f"{rule['alert']}: no '## {rule['alert']}' in docs/runbook.md"
