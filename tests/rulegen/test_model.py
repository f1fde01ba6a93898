"""The DetectionRuleConfig model: loading, defaults, clear errors, a stable hash."""

from __future__ import annotations

from pathlib import Path

import pytest

from rulegen import series
from rulegen.durations import format_duration, parse_duration
from rulegen.model import (
    SIGNALS,
    ConfigError,
    DetectionRuleConfig,
    from_spec,
    load_config,
)

HEADER = "apiVersion: mco.io/v1alpha1\nkind: DetectionRuleConfig\nmetadata: {name: default}\n"


def test_defaults_follow_the_design():
    c = DetectionRuleConfig.default()
    assert (c.window, c.evaluation_interval) == (10, 1)
    assert (c.report.stale_after, c.report.neutral_score) == (30, 50.0)
    assert c.hard_constraints.psi_memory_full_max == 0.0
    assert c.weight("cpuContention") == 0.0
    assert all(c.weight(k) > 0 for k in ("cachePollution", "ioCongestion", "memoryPressure"))
    avail = c.threshold("memoryAvailableRatio")
    assert avail.warn > avail.critical  # lower is worse
    for spec in SIGNALS:
        t = c.threshold(spec.key)
        assert (t.warn > t.critical) if spec.lower_is_worse else (t.warn < t.critical), spec.key


def test_every_signal_has_a_series_and_a_label():
    assert {s.key for s in SIGNALS} == set(series.SIGNAL_SERIES) == set(series.SIGNAL_LABELS)
    assert {s.detection for s in SIGNALS} == set(series.DETECTIONS)


def test_load_from_text_and_from_path(tmp_path):
    text = HEADER + "spec:\n  window: 30s\n  detections:\n    ioCongestion:\n      weight: 2\n"
    from_text = load_config(text)
    path = tmp_path / "drc.yaml"
    path.write_text(text)
    assert load_config(path) == load_config(str(path)) == from_text
    assert from_text.window == 30
    assert from_text.weight("ioCongestion") == 2.0
    # Everything not given keeps its default.
    assert from_text.threshold("psiIOSome") == DetectionRuleConfig.default().threshold("psiIOSome")


def test_errors_name_the_file_and_every_bad_field(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(
        HEADER
        + "spec:\n  window: 1s\n  evaluationInterval: 5s\n  detections:\n"
        + "    ioCongestion:\n      signals:\n        psiIOSome: {warn: 0.5, critical: 0.1}\n"
        + "    cpuContention: {weight: -2}\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    problems = caught.value.problems
    assert isinstance(caught.value, ValueError)
    assert all(p.startswith(f"{path}: spec.") for p in problems), problems
    assert any(
        "spec.window (1s) must be at least spec.evaluationInterval (5s)" in p for p in problems
    )
    assert any(
        "spec.detections.ioCongestion.signals.psiIOSome: warn (0.5) must be below" in p
        for p in problems
    )
    assert any("spec.detections.cpuContention.weight: must be >= 0, got -2" in p for p in problems)
    assert str(caught.value).startswith("invalid DetectionRuleConfig: 3 problems: ")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "expected one DetectionRuleConfig, found no document"),
        (HEADER + "---\n" + HEADER, "found 2 documents"),
        ("spec: [\n", "not valid YAML"),
        ("- 1\n- 2\n", "expected a DetectionRuleConfig object"),
        ("apiVersion: v1\nkind: ConfigMap\n", "apiVersion: expected mco.io/v1alpha1, got 'v1'"),
        (
            "apiVersion: mco.io/v1alpha1\nkind: Other\n",
            "kind: expected DetectionRuleConfig, got 'Other'",
        ),
        (HEADER + "spec: 3\n", "spec: expected a mapping, got 3"),
        (
            HEADER + "spec: {detections: {ioCongestion: {weight: .nan}}}\n",
            "expected a finite number",
        ),
        (HEADER + "spec: {window: 10}\n", "spec.window: expected a string, got 10"),
    ],
)
def test_malformed_documents_are_rejected_clearly(text, message):
    with pytest.raises(ConfigError, match="invalid DetectionRuleConfig") as caught:
        load_config(text)
    assert message in str(caught.value)


def test_missing_file_is_reported_as_such(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        load_config(str(tmp_path / "absent.yaml"))
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "absent.yaml")


def test_hash_is_stable_across_spellings_and_changes_with_content():
    base = DetectionRuleConfig.default()
    same = from_spec({"window": "10s", "detections": {"ioCongestion": {"weight": 1}}})
    assert same.config_hash() == base.config_hash()
    assert from_spec({"window": "60s"}).config_hash() == from_spec({"window": "1m"}).config_hash()
    assert from_spec({"window": "11s"}).config_hash() != base.config_hash()
    changed = from_spec(
        {"detections": {"ioCongestion": {"signals": {"psiIOSome": {"warn": 0.11}}}}}
    )
    assert changed.config_hash() != base.config_hash()
    assert len(base.config_hash()) == 16 and int(base.config_hash(), 16) >= 0


def test_to_spec_round_trips():
    config = from_spec({"window": "1m30s", "detections": {"cachePollution": {"weight": 0.25}}})
    assert from_spec(config.to_spec()) == config
    assert config.to_spec()["window"] == "1m30s"
    assert config.to_object()["metadata"] == {"name": "default"}


@pytest.mark.parametrize(
    ("text", "seconds"), [("1s", 1), ("10s", 10), ("1m30s", 90), ("2h", 7200), ("1h0m5s", 3605)]
)
def test_durations_parse(text, seconds):
    assert parse_duration(text) == seconds
    assert parse_duration(format_duration(seconds)) == seconds


@pytest.mark.parametrize(
    "text", ["", "0s", "10", "1d", "5ms", "1s1m", "10s\n", " 10s", "-1s", "9" * 20 + "s"]
)
def test_bad_durations_are_rejected(text):
    with pytest.raises(ValueError):
        parse_duration(text)


def test_example_config_in_docs_loads(tmp_path: Path):
    """docs/rulegen.md's example edit is a valid config."""
    docs = Path(__file__).resolve().parents[2] / "docs" / "rulegen.md"
    text = docs.read_text()
    start = text.index("```yaml\napiVersion: mco.io/v1alpha1") + len("```yaml\n")
    example = text[start : text.index("```", start)]
    config = load_config(example)
    assert config.weight("cpuContention") > 0
