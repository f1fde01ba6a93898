"""promtool on the generated rules: `check rules` with no findings, and hand-computed suites."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from rulegen.catalog import CATALOG
from rulegen.generate import RULES_PATH
from rulegen.model import DetectionRuleConfig, from_spec, load_config
from rulegen.render import render_prometheusrule, render_rules
from tests.docs.markdown import anchor

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


def test_reporter_alerts_on_one_shard_of_a_sharded_prometheus(tmp_path):
    """A shard that scrapes the reporter (the chart's allShards) is quiet while it runs and
    raises MCOReporterAbsent when it is gone; one that does not scrape it cannot be quiet."""
    result = run_suites(
        tmp_path, render_rules(load_config(TEST_CONFIG), generation=7), "sharded.test.yaml"
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


def test_every_alert_links_to_its_own_runbook_section():
    runbook = (ROOT / "docs" / "runbook.md").read_text()
    anchors = {anchor(line.lstrip("#")) for line in runbook.splitlines() if line.startswith("## ")}
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
        target = url.partition("#")[2]
        assert target == rule["alert"].lower(), url
        assert target in anchors, f"{rule['alert']}: no '## {rule['alert']}' in docs/runbook.md"


def test_rules_from_the_longest_durations_pass_promtool_check(tmp_path):
    """8760h everywhere a duration goes (range selectors, interval, `for`) is what Prometheus
    accepts; the model refuses anything longer (tests/rulegen/test_model.py)."""
    config = from_spec(
        {
            "window": "8760h",
            "evaluationInterval": "8760h",
            "report": {"staleAfter": "8760h"},
            "alerts": {"nodeInterferedFor": "8760h"},
        }
    )
    path = tmp_path / "rules.yaml"
    path.write_text(render_rules(config))
    assert "[8760h]" in path.read_text() and "for: 8760h" in path.read_text()
    assert_clean_check(path)


BOUNDS_SPEC = {
    "detections": {
        # Heaviest weights: the level's sums must not overflow (1e308 made it 0).
        "cachePollution": {"weight": 1000, "signals": {"llcMissRatio": {"warn": 0, "critical": 1}}},
        "cpuContention": {
            "weight": 1000,
            "signals": {"runqueueWaitRatio": {"warn": 0, "critical": 1e12}},
        },
        # Lightest weights above 0: weight * index must not underflow.
        "ioCongestion": {"weight": 0.001, "signals": {"psiIOSome": {"warn": 0, "critical": 1}}},
        "memoryPressure": {
            "weight": 0.001,
            "signals": {"psiMemorySome": {"warn": 0, "critical": 1}},
        },
    }
}


def _series(name: str, node: str, values: str, **labels: str) -> dict[str, str]:
    inner = ",".join(f'{k}="{v}"' for k, v in {"node": node, **labels}.items())
    return {"series": f"{name}{{{inner}}}", "values": values}


INDEX = "node:mco_detection_index:ratio"


def test_level_is_right_with_weights_and_thresholds_at_their_bounds(tmp_path):
    # heavy: LLC ratio 25/100 -> index 0.25; run-queue wait 5e11 s/s on 1 CPU against a
    # critical of 1e12 -> 0.5. light: PSI io some 0.25 -> 0.25; memory some 0.5 -> 0.5.
    # Both levels: (w * 0.25 + w * 0.5) / (w + w) = 0.375.
    suite = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1s",
        "tests": [
            {
                "interval": "1s",
                "input_series": [
                    _series("mco_llc_references_total", "heavy", "0+100x30"),
                    _series("mco_llc_misses_total", "heavy", "0+25x30"),
                    _series("mco_runqueue_wait_seconds_total", "heavy", "0+500000000000x30"),
                    _series("mco_cpu_online", "heavy", "1+0x30"),
                    _series("mco_pressure_available", "light", "1+0x30"),
                    _series(
                        "mco_pressure_stalled_seconds_total",
                        "light",
                        "0+0.25x30",
                        resource="io",
                        kind="some",
                    ),
                    _series(
                        "mco_pressure_stalled_seconds_total",
                        "light",
                        "0+0.5x30",
                        resource="memory",
                        kind="some",
                    ),
                ],
                "promql_expr_test": [
                    {
                        "expr": "node:mco_detection_index:ratio",
                        "eval_time": "20s",
                        "exp_samples": [
                            {
                                "labels": f'{INDEX}{{node="{node}",detection="{det}"}}',
                                "value": value,
                            }
                            for node, det, value in (
                                ("heavy", "cache_pollution", 0.25),
                                ("heavy", "cpu_contention", 0.5),
                                ("light", "io_congestion", 0.25),
                                ("light", "memory_pressure", 0.5),
                            )
                        ],
                    },
                    {
                        "expr": "node:mco_interference_level:ratio",
                        "eval_time": "20s",
                        "exp_samples": [
                            {
                                "labels": 'node:mco_interference_level:ratio{node="heavy"}',
                                "value": 0.375,
                            },
                            {
                                "labels": 'node:mco_interference_level:ratio{node="light"}',
                                "value": 0.375,
                            },
                        ],
                    },
                ],
            }
        ],
    }
    (tmp_path / "bounds.test.yaml").write_text(yaml.safe_dump(suite, sort_keys=False))
    config = from_spec(BOUNDS_SPEC)
    (tmp_path / "rules.yaml").write_text(render_rules(config))
    result = promtool("test", "rules", "bounds.test.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr

    # Equal weights cancel: the rules take the plain mean (each node's two indices weigh the
    # same above too, so the expected levels are the same), from one read per sum.
    equal = {k: dataclasses.replace(d, weight=7.0) for k, d in config.detections.items()}
    rules = render_rules(dataclasses.replace(config, detections=equal))
    assert "count by (node)" in rules and "count by (node)" not in render_rules(config)
    (tmp_path / "rules.yaml").write_text(rules)
    result = promtool("test", "rules", "bounds.test.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr

    # Not vacuous: the weights the model now refuses (built here without it) break the level.
    # Unequal, so the weighted sums are evaluated (equal weights give the plain mean).
    for weight in (1e308, 5e-324):
        detections = {
            k: dataclasses.replace(d, weight=weight * (i + 1) if weight < 1 else weight / (i + 1))
            for i, (k, d) in enumerate(config.detections.items())
        }
        (tmp_path / "rules.yaml").write_text(
            render_rules(dataclasses.replace(config, detections=detections))
        )
        result = promtool("test", "rules", "bounds.test.yaml", cwd=tmp_path)
        assert result.returncode != 0, weight
        assert "interference_level" in result.stdout + result.stderr, weight


def test_per_pod_pressure_judges_victims_and_node_psi_stands_in_without_it(tmp_path):
    """A pod stalling in its own memory or I/O limit alone triggers nothing and filters
    nothing; a pod stalling without hitting a limit of its own does; a node without per-pod
    series falls back on node PSI, flagged (pods.test.yaml)."""
    result = run_suites(
        tmp_path, render_rules(load_config(TEST_CONFIG), generation=7), "pods.test.yaml"
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_recorded_series_inlined_over_raw_series_is_valid_promql(tmp_path):
    """``Catalog.inline_expr`` (recommend, the guard) substitutes each ``$key`` with that row's
    own expression: no row may put a label matcher after one (``$key{...}``)."""
    rules = [
        {"record": f"inline:{r.key}", "expr": CATALOG.inline_expr(r, "10s")}
        for r in CATALOG.recorded
    ]
    path = tmp_path / "inline.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "inline", "rules": rules}]}))
    result = promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
